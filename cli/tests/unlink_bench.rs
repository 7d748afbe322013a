//! `dbaio unlink-bench` (issue 13), small: every mode finalises its GC cycles, reclaims what
//! it wrote, leaves nothing behind, prints JSON per run and per mode, and draws its SVG;
//! `bench --plot` draws the methods' latency distributions; bad numbers are refused.

use std::process::{Command, Output};

fn dbaio(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dbaio"))
        .env("DBAIO_LOG", "warn")
        .args(args)
        .output()
        .unwrap()
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dbaio-unlink")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

#[test]
fn every_mode_reclaims_and_leaves_nothing() {
    let d = dir();
    let svg = d.path().join("gc.svg");
    let o = dbaio(&[
        "unlink-bench",
        "--dir",
        d.path().to_str().unwrap(),
        "--chunks",
        "2",
        "--chunk-size",
        "4m",
        "--gc-cycles",
        "2",
        "--check-every",
        "10",
        "--rounds",
        "1",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    assert_eq!(rows.len(), 6, "three runs and three medians: {out}");
    for r in &rows {
        assert_eq!(r["gc_cycles"], 2, "{r}");
        assert_eq!(r["bytes_reclaimed"], 2 * 2 * (4 << 20), "{r}");
        assert_eq!(r["left_behind_bytes"], 0, "{r}");
        assert_eq!(r["unlink_errors"], 0, "{r}");
        for k in ["p50", "p99", "p999", "max"] {
            assert!(r["fg_lat_us"][k].as_f64().unwrap() >= 1.0, "{r}");
        }
        assert!(r["fg_ops_per_s"].as_f64().unwrap() > 0.0);
    }
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    for m in ["sync", "worker-wait", "dont-wait"] {
        assert_eq!(modes.iter().filter(|x| **x == m).count(), 2, "{modes:?}");
    }
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.starts_with("<svg") && drawn.contains("dont-wait"),
        "an SVG with a legend"
    );
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("gc.svg")],
        "only the plot remains"
    );
}

#[test]
fn bench_plot_draws_every_method() {
    let d = dir();
    let svg = d.path().join("lat.svg");
    let o = dbaio(&[
        "bench",
        "--size",
        "8m",
        "--runtime",
        "0.3",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    for m in ["sync", "worker"] {
        assert!(drawn.contains(m), "{m} in the legend");
    }
}

#[test]
fn bad_numbers_are_refused() {
    let d = dir();
    for (args, says) in [
        (vec!["--chunk-size", "1"], "chunk-size"),
        (vec!["--chunks", "0"], "chunks"),
        (vec!["--gc-cycles", "0"], "gc-cycles"),
        (vec!["--rounds", "1000"], "rounds"),
        (vec!["--mode", "later"], "later"),
    ] {
        let mut all = vec!["unlink-bench", "--dir", d.path().to_str().unwrap()];
        all.extend(args.iter());
        let o = dbaio(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && o.status.code() != Some(101) && err.contains(says),
            "{args:?}: {err}"
        );
    }
    let o = dbaio(&["unlink-bench", "--dir", "/nonexistent/dir", "--rounds", "1"]);
    assert!(!o.status.success() && o.status.code() != Some(101));
}

/// Ctrl-C and SIGTERM mid-run: exit 128 + the signal's number (130, 143), and the chunk
/// files, the live file and the run's directory are gone (a GC benchmark writes gigabytes;
/// leaving them would fill the disk).
#[test]
fn a_signal_mid_run_leaves_nothing() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = dir();
        let mut child = Command::new(env!("CARGO_BIN_EXE_dbaio"))
            .env("DBAIO_LOG", "warn")
            .args([
                "unlink-bench",
                "--dir",
                d.path().to_str().unwrap(),
                "--chunk-size",
                "16m",
                "--gc-cycles",
                "1000",
                "--rounds",
                "1",
                "--mode",
                "sync",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the run is writing its chunks.
        let t0 = std::time::Instant::now();
        while std::fs::read_dir(d.path()).unwrap().count() == 0 {
            assert!(t0.elapsed().as_secs() < 20, "the run never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: kill with a valid pid and signal number.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + sig), "signal {sig}");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert!(left.is_empty(), "signal {sig}: left {left:?}");
    }
}
