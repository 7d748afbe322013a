//! The `dbaio` command, run as a user would run it (issue 10): it never destroys data it did
//! not create, checks space before laying a file out and removes what it leaves half-made or
//! temporary (also on Ctrl-C and SIGTERM), never panics on bad input — every refusal is an
//! error in words and a non-zero exit — fails a run whose I/Os fail, and with `--json` always
//! prints JSON on stdout, errors included, in one shape.

#[path = "../../tests/common/skips.rs"]
mod skips;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{dbaio, exited, file_with, text, walk};

fn dir() -> tempfile::TempDir {
    common::scratch("dbaio-cmd")
}

fn run(args: &[&str]) -> Output {
    dbaio().args(args).output().unwrap()
}

/// A refusal: a non-zero exit that is not a panic (101), words on stderr, no backtrace.
fn refused(o: &Output, what: &str) -> String {
    let (_, err) = text(o);
    let code = o.status.code();
    assert!(
        code.is_some() && code != Some(0) && code != Some(101),
        "{what}: exit {code:?}\n{err}"
    );
    assert!(!err.contains("panicked"), "{what} panicked:\n{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("dbaio: ") || l.starts_with("error: ")),
        "{what}: {err}"
    );
    err
}

#[test]
fn a_read_benchmark_never_writes_an_existing_file() {
    let d = dir();
    let f = d.path().join("existing");
    let data = file_with(&f, 1 << 20);
    let p = f.to_str().unwrap();
    for m in ["sync", "worker"] {
        let o = run(&[
            "bench",
            "--filename",
            p,
            "--size",
            "8m",
            "--rw",
            "randread",
            "--io-method",
            m,
            "--runtime",
            "0.2",
        ]);
        let (_, err) = text(&o);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("reads the 1 MiB it holds"), "{err}");
        assert_eq!(
            std::fs::read(&f).unwrap(),
            data,
            "the file is untouched ({m})"
        );
    }
}

#[test]
fn a_write_benchmark_asks_before_overwriting() {
    let d = dir();
    let f = d.path().join("existing");
    let data = file_with(&f, 1 << 20);
    let p = f.to_str().unwrap();
    for rw in ["randwrite", "write"] {
        let o = run(&[
            "bench",
            "--filename",
            p,
            "--rw",
            rw,
            "--io-method",
            "sync",
            "--runtime",
            "0.2",
        ]);
        let err = refused(&o, rw);
        assert!(
            err.contains(p) && err.contains("--allow-overwrite"),
            "{err}"
        );
        assert_eq!(std::fs::read(&f).unwrap(), data, "refused, and untouched");
    }
    let o = run(&[
        "bench",
        "--filename",
        p,
        "--rw",
        "randwrite",
        "--io-method",
        "sync",
        "--runtime",
        "0.2",
        "--allow-overwrite",
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
}

#[test]
fn a_missing_file_is_created_and_said() {
    let d = dir();
    let f = d.path().join("new");
    let o = run(&[
        "bench",
        "--filename",
        f.to_str().unwrap(),
        "--size",
        "4m",
        "--io-method",
        "sync",
        "--runtime",
        "0.2",
    ]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("creating") && err.contains("4 MiB"), "{err}");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 4 << 20);
}

/// A layout the file system has no room for was started and filled the disk: it is refused
/// first, status 1, saying the 64 MiB it keeps free (the same words as the scan's and
/// pool-hit's refusals, hostile.rs); a layout that fails half-way is removed.
#[test]
fn space_is_checked_and_a_failed_layout_is_removed() {
    let d = dir();
    let f = d.path().join("huge");
    let o = run(&[
        "bench",
        "--filename",
        f.to_str().unwrap(),
        "--size",
        "500t",
        "--io-method",
        "sync",
    ]);
    let err = exited(&o, 1, "--size 500t");
    assert!(
        err.contains(&format!(
            "dbaio: not enough free space for a 500 TiB data file at \"{}\": it needs 500 TiB, plus 64 MiB kept free for the file system",
            f.display()
        )),
        "{err}"
    );
    assert!(!f.exists(), "nothing was written");

    // A layout that fails half-way (the file size limit stands in for a full disk).
    let f = d.path().join("half");
    let mut c = dbaio();
    c.args([
        "bench",
        "--filename",
        f.to_str().unwrap(),
        "--size",
        "8m",
        "--io-method",
        "sync",
    ]);
    // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, signal).
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let o = c.output().unwrap();
    let err = refused(&o, "a layout past the size limit");
    assert!(err.contains("could not lay out"), "{err}");
    assert!(!f.exists(), "the half-made file was removed");
}

/// Runs the method comparison with its temporary file in `tmp`, sends `sig` once the file
/// exists, and returns the output.
fn interrupted(tmp: &Path, sig: i32) -> Output {
    let mut child = dbaio()
        .args([
            "bench",
            "--size",
            "64m",
            "--runtime",
            "30",
            "--io-method",
            "sync",
        ])
        .env("TMPDIR", tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let has_file = |d: &Path| {
        walk(d)
            .iter()
            .any(|p| p.file_name().is_some_and(|n| n == "dbaio-bench.dat"))
    };
    while !has_file(tmp) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no temporary file appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill with a valid pid and signal number.
    unsafe { libc::kill(child.id() as i32, sig) };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    Output {
        status,
        stdout: Vec::new(),
        stderr: err.into_bytes(),
    }
}

#[test]
fn ctrl_c_and_sigterm_remove_the_temporary_file() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = dir();
        let o = interrupted(d.path(), sig);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "interrupted is not success: {err}");
        assert!(err.contains("interrupted"), "{err}");
        assert!(
            walk(d.path()).is_empty(),
            "left behind: {:?}",
            walk(d.path())
        );
    }
}

#[test]
fn bad_input_is_refused_not_panicked_on() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 1 << 20);
    let p = f.to_str().unwrap();
    let pg = d.path().to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--filename", p, "--runtime", "-1"], "--runtime"),
        (&["bench", "--filename", p, "--runtime", "inf"], "--runtime"),
        (
            &["bench", "--filename", p, "--runtime", "1e300"],
            "--runtime",
        ),
        (&["bench", "--filename", p, "--runtime", "0"], "--runtime"),
        (
            &["bench", "--filename", p, "--io-workers", "33"],
            "io_workers",
        ),
        (
            &["bench", "--filename", p, "--io-workers", "100000"],
            "io_workers",
        ),
        (&["verify", "-D", pg, "--io-workers", "33"], "io_workers"),
        (
            &["bench", "--workload", "pool-hit", "--issuers", "100000"],
            "--issuers",
        ),
        (
            &["bench", "--workload", "pool-hit", "--issuers", "0"],
            "--issuers",
        ),
        (&["bench", "--filename", p, "--iodepth", "0"], "--iodepth"),
        (
            &[
                "bench",
                "--filename",
                p,
                "--iodepth",
                "100000",
                "--io-method",
                "io_uring",
            ],
            "--iodepth",
        ),
        (&["bench", "--filename", p, "--bs", "0"], "--bs"),
        (&["bench", "--filename", p, "--size", "0"], "--size"),
        (
            &["bench", "--filename", p, "--io-method", "uring"],
            "io_method",
        ),
        (
            &[
                "bench",
                "--filename",
                p,
                "--io-method",
                "worker",
                "-c",
                "io_method=sync",
            ],
            "io_method",
        ),
        (&["bench", "--filename", p, "-c", "nonsense"], "-c"),
        (&["prewarm", p, "--buffer-pool", "0"], "buffer_pool_size"),
        (&["prewarm", p, "--buffered", "--direct"], "--direct"),
        (&["bench", "--workload", "nope"], "--workload"),
    ];
    for (args, word) in cases {
        let o = run(args);
        let err = refused(&o, &args.join(" "));
        assert!(err.contains(word), "{}: {err}", args.join(" "));
    }
}

#[test]
fn failing_ios_fail_the_run() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 1 << 20);
    let o = run(&[
        "bench",
        "--filename",
        f.to_str().unwrap(),
        "--bs",
        "3000",
        "--direct",
        "--io-method",
        "sync",
        "--runtime",
        "0.2",
    ]);
    let err = refused(&o, "--bs 3000 --direct");
    assert!(err.contains("O_DIRECT") && err.contains("3000"), "{err}");
}

#[test]
fn the_sync_depth_is_said() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 1 << 20);
    let o = run(&[
        "bench",
        "--filename",
        f.to_str().unwrap(),
        "--io-method",
        "sync",
        "--runtime",
        "0.1",
    ]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("one I/O at a time"), "{err}");
}

/// A self-sizing worker pool that stops at its maximum below the depth asked is said: the
/// table compares methods at one depth, and fewer workers than reads in flight keep fewer
/// on the device. A pool sized for the depth says nothing.
#[test]
fn a_worker_pool_capped_below_the_depth_is_said() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 1 << 20);
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--filename",
            f.to_str().unwrap(),
            "--io-method",
            "worker",
            "--iodepth",
            "8",
            "--runtime",
            "0.5",
        ];
        args.extend_from_slice(extra);
        let o = run(&args);
        let (_, err) = text(&o);
        assert!(o.status.success(), "{err}");
        err
    };
    // O_DIRECT, so that the reads reach the workers (a cached read runs at submit).
    let capped = bench(&[
        "--direct",
        "--io-workers",
        "0",
        "-c",
        "io_max_workers=2",
        "-c",
        "io_worker_launch_interval=0",
    ]);
    assert!(
        capped.contains("(threads) ran its most workers, 2 (io_max_workers), for iodepth 8"),
        "{capped}"
    );
    let fixed = bench(&["--io-workers", "8"]);
    assert!(!fixed.contains("io_max_workers"), "{fixed}");
}

/// `--seed` picks the random offsets; 0 and the largest value are taken too (xorshift never
/// starts from 0), and the run still reads every offset inside the file.
#[test]
fn any_seed_is_taken() {
    let d = dir();
    let f = d.path().join("f");
    let before = file_with(&f, 1 << 20);
    for seed in ["0", "1", "18446744073709551615"] {
        let o = run(&[
            "bench",
            "--filename",
            f.to_str().unwrap(),
            "--io-method",
            "sync",
            "--runtime",
            "0.1",
            "--seed",
            seed,
            "--json",
        ]);
        let (_, err) = text(&o);
        assert!(o.status.success(), "seed {seed}: {err}");
        let j = &json_lines(&o)[0];
        assert_eq!(j["errors"], 0, "seed {seed}: {j}");
    }
    assert_eq!(
        std::fs::read(&f).unwrap(),
        before,
        "a read benchmark wrote nothing"
    );
    let o = run(&["bench", "--filename", f.to_str().unwrap(), "--seed", "-1"]);
    assert!(!o.status.success());
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    let (out, err) = text(o);
    assert!(!out.trim().is_empty(), "stdout is empty; stderr: {err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

#[test]
fn json_is_always_json_in_one_shape() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 1 << 20);
    let p = f.to_str().unwrap();
    // Errors are JSON too, with the same words as on stderr.
    for args in [
        &["bench", "--json", "--filename", p, "--runtime", "inf"][..],
        &["bench", "--json", "--filename", p, "--rw", "write"][..],
        &["prewarm", "--json", "/nonexistent/16403"][..],
        &["verify", "--json", "-D", "/nonexistent"][..],
        &["aios", "--json", "--socket", "/nonexistent.sock"][..],
        &["stat", "--json", "--socket", "/nonexistent.sock"][..],
    ] {
        let o = run(args);
        assert!(!o.status.success());
        let v = json_lines(&o);
        assert_eq!(v.len(), 1, "{args:?}");
        let msg = v[0]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{args:?}: {}", v[0]));
        assert!(text(&o).1.contains(msg.lines().next().unwrap()), "{args:?}");
    }
    // One run or a comparison: one object per run, each line the same shape.
    let one = json_lines(&run(&[
        "bench",
        "--json",
        "--filename",
        p,
        "--io-method",
        "worker",
        "--runtime",
        "0.2",
    ]));
    let tmp = dir();
    let all = json_lines(
        &dbaio()
            .args(["bench", "--json", "--size", "8m", "--runtime", "0.2"])
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap(),
    );
    assert_eq!(one.len(), 1);
    assert!(all.len() >= 2, "a comparison: {all:?}");
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    for v in &all {
        assert_eq!(keys(v), keys(&one[0]), "one shape");
    }
    for k in [
        "direct",
        "size",
        "filename",
        "iodepth",
        "iodepth_asked",
        "iops",
        "lat_us",
        "errors",
    ] {
        assert!(one[0].get(k).is_some(), "{k} is recorded: {}", one[0]);
    }
    assert_eq!(one[0]["iodepth_asked"], 32);
    assert_eq!(one[0]["filename"], p);
    assert_eq!(one[0]["size"], 1 << 20);
}

#[test]
fn the_live_screen_without_a_terminal_prints_rows() {
    let d = dir();
    let sock = d.path().join("aio.sock");
    let _aio = dbaio::Aio::start(dbaio::Settings {
        io_method: dbaio::IoMethodKind::Sync,
        max_issuers: 4,
        introspection_socket: Some(sock.clone()),
        ..dbaio::Settings::default()
    })
    .unwrap();
    let o = run(&[
        "aios",
        "--socket",
        sock.to_str().unwrap(),
        "--watch",
        "0.1",
        "--count",
        "2",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.matches("issuers").count(), 2, "two refreshes: {out}");
}

#[test]
fn socket_clients_say_what_is_wrong() {
    let d = dir();
    let file = d.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let stale = d.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    for (path, words) in [
        (d.path().join("missing.sock"), "no introspection socket"),
        (file, "regular file"),
        (d.path().to_path_buf(), "directory"),
        (stale, "nothing is listening"),
    ] {
        let o = run(&["aios", "--socket", path.to_str().unwrap()]);
        let err = refused(&o, words);
        assert!(err.contains(words), "{err}");
    }
}

#[test]
fn a_refused_user_is_told_so() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: a_refused_user_is_told_so needs root to run the client as another uid");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = dir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = d.path().join("aio.sock");
    let _aio = dbaio::Aio::start(dbaio::Settings {
        io_method: dbaio::IoMethodKind::Sync,
        max_issuers: 4,
        introspection_socket: Some(sock.clone()),
        ..dbaio::Settings::default()
    })
    .unwrap();
    // Let any user connect, so that the embedder itself is the one that refuses.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = match dbaio()
        .args(["aios", "--socket", sock.to_str().unwrap()])
        .uid(65534)
        .gid(65534)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            println!(
                "skipped: a_refused_user_is_told_so could not run the client as uid 65534: {e}"
            );
            return;
        }
    };
    let err = refused(&o, "another uid");
    assert!(
        err.contains("refused this user (uid 65534)"),
        "the embedder's reason, not a broken pipe: {err}"
    );
}

/// Guards the wake protocol between worker processes and an issuer waiting for their
/// results (`workers/src/process/wake.rs`): the pool counts every wait that slept to its
/// 100 ms safety limit although an awaited I/O had completed meanwhile. Before the fix
/// this very run (page-cache reads at depth 8, three worker processes, 2 s) counted 15: a
/// result the completer thread drained completed the issuer's I/O without waking it.
#[test]
fn waiting_on_worker_processes_misses_no_wake_up() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 4 << 20);
    let o = run(&[
        "bench",
        "--filename",
        f.to_str().unwrap(),
        "--size",
        "4M",
        "--iodepth",
        "8",
        "--io-method",
        "worker",
        "--io-workers",
        "3",
        "--runtime",
        "2",
        "--json",
        "-c",
        "io_worker_kind=process",
        // The reads must reach the processes: the file is cached.
        "-c",
        "io_worker_try_cached=off",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let j = &json_lines(&o)[0];
    assert_eq!(j["errors"], 0, "{out}");
    assert_eq!(j["missed_wakes"], 0, "{out}");
}

/// A process pool's requeued and missed-wake counts reach `--prometheus` (the second is the
/// one to alert on).
#[test]
fn process_pool_counters_reach_prometheus() {
    let all: dbaio_cli::screens::All = serde_json::from_value(serde_json::json!({
        "pid": 1, "io_method": "worker", "uptime_s": 2.0, "aios": [], "waits": [], "stats": [],
        "worker_pool": {
            "min": 1, "max": 4, "queued": 0, "grown": 0, "retired": 0, "replaced": 2,
            "kind": "process", "ran_locally": 0, "requeued": 3, "missed_wakes": 1,
            "workers": [{"worker": 0, "tid": 99, "state": "idle", "ios_done": 5}]
        }
    }))
    .unwrap();
    let p = dbaio_cli::screens::prometheus(&all);
    assert!(p.contains("\ndbaio_worker_requeued_total 3\n"), "{p}");
    assert!(p.contains("\ndbaio_worker_missed_wakes_total 1\n"), "{p}");
    assert!(
        dbaio_cli::screens::stats_table(&all).contains("missed wakes 1"),
        "{}",
        dbaio_cli::screens::stats_table(&all)
    );
}

/// `-c io_worker_kind=process` works on every command that does I/O: the reads and writes go
/// to worker processes (`ran_locally` 0 where the command reports the pool), and nothing is
/// left behind.
#[test]
fn every_command_runs_on_worker_processes() {
    let d = dir();
    let f = d.path().join("f");
    let data = file_with(&f, 8 << 20);
    let path = f.to_str().unwrap();
    for rw in ["randread", "randwrite"] {
        let o = run(&[
            "bench",
            "--filename",
            path,
            "--rw",
            rw,
            "--io-method",
            "worker",
            "--runtime",
            "0.3",
            "--allow-overwrite",
            "--json",
            "-c",
            "io_worker_kind=process",
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "bench {rw}: {err}");
        let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert!(v["iops"].as_f64().unwrap() > 0.0, "{out}");
        assert_eq!(v["errors"], 0, "{out}");
    }
    std::fs::write(&f, &data).unwrap();
    let o = run(&[
        "prewarm",
        path,
        "--io-method",
        "worker",
        "--json",
        "-c",
        "io_worker_kind=process",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "prewarm: {err}");
    assert!(
        out.contains(&(8u64 << 20).to_string()),
        "prewarm read every byte: {out}"
    );
    let o = run(&[
        "unlink-bench",
        "--dir",
        d.path().to_str().unwrap(),
        "--chunks",
        "2",
        "--chunk-size",
        "64k",
        "--gc-cycles",
        "1",
        "--rounds",
        "1",
        "--mode",
        "worker-wait",
        "-c",
        "io_worker_kind=process",
    ]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "unlink-bench: {err}");
    // A bad value is a PostgreSQL-style refusal.
    let o = run(&["bench", "--filename", path, "-c", "io_worker_kind=fork"]);
    let err = refused(&o, "io_worker_kind=fork");
    assert!(
        err.contains("invalid value for parameter \"io_worker_kind\""),
        "{err}"
    );
}

/// `dbaio bench` says how many of the worker method's reads the issuer served itself: a
/// cached file's 4 KiB reads are page-cache hits run at submit (`io_worker_try_cached`,
/// default on); with it off, none are.
#[test]
fn bench_reports_reads_served_at_submit() {
    let d = dir();
    let f = d.path().join("f");
    file_with(&f, 4 << 20);
    let path = f.to_str().unwrap();
    let probe = std::fs::File::open(&f).unwrap();
    let mut b = [0u8; 4096];
    let iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    };
    // SAFETY: `iov` names `b`, alive and unused elsewhere during the call.
    let r = unsafe {
        libc::preadv2(
            std::os::fd::AsRawFd::as_raw_fd(&probe),
            &iov,
            1,
            0,
            libc::RWF_NOWAIT,
        )
    };
    if r < 0 {
        eprintln!(
            "SKIPPED bench_reports_reads_served_at_submit: non-blocking reads refused here ({})",
            std::io::Error::last_os_error()
        );
        return;
    }
    for (setting, served) in [("on", true), ("off", false)] {
        let o = run(&[
            "bench",
            "--filename",
            path,
            "--size",
            "4M",
            "--io-method",
            "worker",
            "--runtime",
            "0.3",
            "--json",
            "-c",
            &format!("io_worker_try_cached={setting}"),
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        let j = &json_lines(&o)[0];
        assert_eq!(j["errors"], 0, "{out}");
        let n = j["ran_in_issuer"].as_u64().unwrap();
        assert_eq!(n > 0, served, "io_worker_try_cached={setting}: {out}");
    }
}

/// `prewarm` and `verify` take their method from `-c io_method` as from `--io-method` (the
/// default once claimed a flag no one gave: "conflicting values for io_method: --io-method
/// io_uring but -c io_method=sync"), and `-c io_worker_kind` alone asks for the worker method,
/// whose workers it names (it used to leave the run on io_uring, silently).
#[test]
fn the_tools_take_their_method_from_dash_c() {
    let d = dir();
    let f = d.path().join("rel");
    file_with(&f, 1 << 20);
    let path = f.to_str().unwrap();
    let prewarm = |extra: &[&str]| {
        let mut args = vec!["prewarm", path, "--json"];
        args.extend_from_slice(extra);
        let o = run(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "prewarm {extra:?}: {err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    for m in ["sync", "worker", "io_uring"] {
        let setting = format!("io_method={m}");
        let v = prewarm(&["-c", &setting]);
        if m != "io_uring" || skips::io_uring_column("prewarm -c io_method=io_uring") {
            assert_eq!(v["io_method"], m, "{v}");
        }
        assert_eq!(v["bytes"], 1 << 20, "{v}");
    }
    let v = prewarm(&["-c", "io_worker_kind=process"]);
    assert_eq!(v["io_method"], "worker", "{v}");
    assert!(v["workers"].as_u64().unwrap() >= 1, "{v}");
    // The flag and -c still have to agree.
    let o = run(&[
        "prewarm",
        path,
        "--io-method",
        "sync",
        "-c",
        "io_method=worker",
    ]);
    let err = refused(&o, "--io-method sync with -c io_method=worker");
    assert!(err.contains("conflicting values for io_method"), "{err}");
    let o = run(&["verify", "-D", "/nonexistent", "-c", "io_method=sync"]);
    let (_, err) = text(&o);
    assert!(!err.contains("conflicting"), "{err}");
}

#[test]
fn bench_runs_on_sim_and_its_writes_stay_in_the_simulated_disk() {
    let d = dir();
    let f = d.path().join("existing");
    let data = file_with(&f, 1 << 20);
    let p = f.to_str().unwrap();
    for rw in ["randread", "randwrite"] {
        let o = run(&[
            "bench",
            "--filename",
            p,
            "--rw",
            rw,
            "--io-method",
            "sim",
            "--runtime",
            "0.2",
            "--allow-overwrite",
            "--json",
        ]);
        assert!(o.status.success(), "{}", text(&o).1);
        let rows = json_lines(&o);
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(r["io_method"], "sim", "{r}");
        assert!(r["ios"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["avg_device_queue"].is_null(), "no device under sim: {r}");
        assert_eq!(
            std::fs::read(&f).unwrap(),
            data,
            "{rw}: the real file is untouched"
        );
    }
}
