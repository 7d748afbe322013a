//! `dbaio bench --workload scan` (issue 11): it makes its 16 data files once and only reads
//! them afterwards, refuses a data file of another size instead of writing over it, reports
//! the advice its streams gave (none with `--advice off`, runs left to the kernel with
//! `--pattern seq`), refuses bad flags in words; and `dbaio stat` shows the advice counters
//! and budgets as a table, JSON-ready rows and Prometheus text.

use std::path::Path;
use std::process::{Command, Output};

fn dbaio() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dbaio"));
    c.env("DBAIO_LOG", "warn");
    c
}

fn scan(dir: &Path, extra: &[&str]) -> Output {
    dbaio()
        .args([
            "bench",
            "--workload",
            "scan",
            "--size",
            "32m",
            "--io-method",
            "sync",
            "--effective-io-concurrency",
            "64",
            "--json",
            "--dir",
        ])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap()
}

fn report(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn the_scan_reads_its_own_files_and_reports_advice() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let r = report(&scan(
        d.path(),
        &[
            "--clients",
            "2",
            "--pattern",
            "sorted-random",
            "--advice",
            "throttled",
        ],
    ));
    assert_eq!(r["workload"], "scan");
    assert_eq!(r["clients"], 2);
    assert!(r["blocks"].as_u64().unwrap() > 0, "{r}");
    assert!(r["advice_blocks"]["issued"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["cold"], true, "{r}");
    let files: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert_eq!(files.len(), 16);
    let stamp = |i: u32| {
        std::fs::metadata(d.path().join(format!("scan-{i}.dat")))
            .unwrap()
            .modified()
            .unwrap()
    };
    let before = stamp(3);

    let off = report(&scan(
        d.path(),
        &["--pattern", "sorted-random", "--advice", "off"],
    ));
    assert_eq!(off["advice_blocks"]["issued"], 0, "{off}");
    assert_eq!(
        off["blocks"], r["blocks"],
        "the same blocks, whoever reads them"
    );
    let seq = report(&scan(d.path(), &["--pattern", "seq", "--clients", "4"]));
    assert!(
        seq["advice_blocks"]["suppressed_sequential"]
            .as_u64()
            .unwrap()
            > 0,
        "{seq}"
    );
    assert_eq!(seq["blocks"], 16 * (32 << 20) / 16 / 8192);
    assert_eq!(stamp(3), before, "the data files are only read once made");
}

#[test]
fn a_data_file_of_another_size_is_refused_not_written() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mine = d.path().join("scan-0.dat");
    std::fs::write(&mine, b"someone else's").unwrap();
    let o = scan(d.path(), &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("exists with 14 bytes"), "{err}");
    assert_eq!(std::fs::read(&mine).unwrap(), b"someone else's");
    for bad in [
        &["--clients", "0"][..],
        &["--clients", "100"],
        &["--advice", "sometimes"],
        &["--pattern", "zigzag"],
        &["--effective-io-concurrency", "5000"],
    ] {
        let o = scan(d.path(), bad);
        assert!(!o.status.success(), "{bad:?} was accepted");
        assert_ne!(o.status.code(), Some(101), "{bad:?} panicked");
    }
}

#[test]
fn stat_shows_advice_counters_and_budgets() {
    let all: dbaio_cli::screens::All = serde_json::from_value(serde_json::json!({
        "pid": 1, "io_method": "sync", "uptime_s": 2.0, "aios": [], "waits": [],
        "stats": [{
            "slot": 0, "issuer": "scan-0", "tid": 7, "since_s": 2.0, "ops": [], "executors": [],
            "advice": {"issued": 40, "suppressed_sequential": 5, "refused_by_budget": 3,
                       "useful": 9, "wasted": 1}
        }],
        "advice_budget": [{"device": "254:0", "in_use": 12, "peak": 64, "limit": 1024}]
    }))
    .unwrap();
    let t = dbaio_cli::screens::stats_table(&all);
    assert!(t.contains("scan-0"), "{t}");
    assert!(
        t.contains("issued=40 suppressed_sequential=5 refused_by_budget=3 useful=9 wasted=1"),
        "{t}"
    );
    assert!(t.contains("advice budget 254:0 12/1024 (peak 64)"), "{t}");
    let p = dbaio_cli::screens::prometheus(&all);
    assert!(
        p.contains("dbaio_advice_blocks_total{issuer=\"scan-0\",slot=\"0\",outcome=\"refused_by_budget\"} 3"),
        "{p}"
    );
    assert!(
        p.contains("dbaio_advice_budget_blocks{device=\"254:0\"} 12"),
        "{p}"
    );
    assert!(
        p.contains("dbaio_advice_budget_limit_blocks{device=\"254:0\"} 1024"),
        "{p}"
    );
    // An older embedder's reply (no advice fields) still reads.
    let old: dbaio_cli::screens::All = serde_json::from_value(serde_json::json!({
        "pid": 1, "io_method": "sync", "uptime_s": 2.0, "aios": [], "waits": [],
        "stats": [{"slot": 0, "issuer": "x", "tid": 7, "since_s": 2.0, "ops": [], "executors": []}]
    }))
    .unwrap();
    assert!(!dbaio_cli::screens::stats_table(&old).contains("advice"));
}
