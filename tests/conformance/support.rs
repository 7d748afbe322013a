//! Shared helpers: run a scenario on every method column, start a subsystem on a method, make
//! data files, capture warnings. Goal: every scenario runs on each column or says loudly why
//! not. Guards against a column that passes without running: an io_uring column skipped in
//! silence (or at all where `DBAIO_REQUIRE_IO_URING` says io_uring works).

use dbaio::{Aio, IoMethodKind, Settings};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// How skips are said (shared with the other test binaries).
#[path = "../common/skips.rs"]
pub mod skips;
pub use skips::io_uring_column;

/// Expands to one `#[test]` per method, each calling `scenario(method)`.
///
/// `for_every_method!(scenario)` makes the tests `sync`, `worker`, `worker_process`,
/// `io_uring` and `sim` in the calling module (a file with one scenario).
/// `for_every_method!(a, b, c)` makes a module per scenario, named after it, with those five
/// tests in each (a file with several scenarios: `read_stream::a::io_uring`).
#[macro_export]
macro_rules! for_every_method {
    ($scenario:ident) => {
        $crate::for_every_method!(@columns $scenario);
    };
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                $crate::for_every_method!(@columns super::$scenario);
            }
        )+
    };
    (@columns $scenario:path) => {
        #[test]
        fn sync() {
            $crate::support::run(module_path!(), dbaio::IoMethodKind::Sync, $scenario);
        }
        #[test]
        fn worker() {
            $crate::support::run(module_path!(), dbaio::IoMethodKind::Worker, $scenario);
        }
        #[test]
        fn worker_process() {
            $crate::support::run_on_processes(module_path!(), $scenario);
        }
        #[test]
        fn io_uring() {
            $crate::support::run(module_path!(), dbaio::IoMethodKind::IoUring, $scenario);
        }
        #[test]
        fn sim() {
            $crate::support::run(module_path!(), dbaio::IoMethodKind::Sim, $scenario);
        }
    };
}

/// Runs `scenario` on `method`. On io_uring where the kernel refuses it: prints `SKIPPED
/// {name} on io_uring: {why}` past the output capture, or fails if `DBAIO_REQUIRE_IO_URING`
/// is set.
pub fn run(name: &str, method: IoMethodKind, scenario: fn(IoMethodKind)) {
    if method == IoMethodKind::IoUring && !io_uring_column(name) {
        return;
    }
    if method == IoMethodKind::Sim
        && let Some((_, why)) = NOT_ON_SIM.iter().find(|(m, _)| name.ends_with(m))
    {
        skips::skipped(&format!("{name} on sim"), format!("does not apply: {why}"));
        return;
    }
    scenario(method);
    eprintln!("conformance {name} on {method}: ok");
}

/// The scenarios that do not apply to the `sim` column, and why (matched against the end of
/// the test's module path).
const NOT_ON_SIM: &[(&str, &str)] = &[
    (
        "direct_slice_races",
        "it changes the file through the real file system beside dbaio (another descriptor, \
         std::fs), which the simulated disk does not see; and sim promises determinism on \
         one thread, not these races",
    ),
    (
        "cross_method_data",
        "it writes with one method and reads with every other, through the real file \
     system; the simulated disk's files live only in it (the sim column's own data paths \
     are checked by every other scenario)",
    ),
    (
        "the_last_reference_can_go_on_the_thread_completing_an_io",
        "a simulated I/O completes only on a thread that waits for or polls it, and here \
         none may: the ticket's waker is to drop the last reference on the thread completing \
         it",
    ),
];

thread_local! {
    /// Set while a scenario runs in the worker-process column: `settings(Worker)` then asks
    /// for worker processes.
    static PROCESSES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `scenario` on the worker method with `io_worker_kind = process` (the fourth column).
pub fn run_on_processes(name: &str, scenario: fn(IoMethodKind)) {
    PROCESSES.with(|p| p.set(true));
    scenario(IoMethodKind::Worker);
    PROCESSES.with(|p| p.set(false));
    eprintln!("conformance {name} on worker processes: ok");
}

/// True inside the worker-process column.
pub fn on_processes() -> bool {
    PROCESSES.with(|p| p.get())
}

/// Settings for `method` with small, test-friendly sizes.
pub fn settings(method: IoMethodKind) -> Settings {
    Settings {
        io_method: method,
        io_worker_kind: if method == IoMethodKind::Worker && on_processes() {
            dbaio::IoWorkerKind::Process
        } else {
            dbaio::IoWorkerKind::Thread
        },
        max_issuers: 16,
        max_files: 64,
        ..Settings::default()
    }
}

/// Starts a subsystem on `method`, after `tweak` adjusts the settings.
pub fn start_with(method: IoMethodKind, tweak: impl FnOnce(&mut Settings)) -> Aio {
    let mut s = settings(method);
    tweak(&mut s);
    let aio = Aio::start(s).expect("start");
    assert_eq!(aio.io_method(), method, "no silent fallback in tests");
    aio
}

/// Starts a subsystem on `method` with the test defaults.
pub fn start(method: IoMethodKind) -> Aio {
    start_with(method, |_| {})
}

/// A fresh directory on the build's file system (ext4 here, so O_DIRECT works).
pub fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dbaio-test")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir")
}

/// The byte a data file holds at `offset` (distinct per 4 KiB page and position).
pub fn pattern_byte(offset: u64) -> u8 {
    ((offset / 4096).wrapping_mul(31) ^ (offset % 251)) as u8
}

/// Writes a file of `len` pattern bytes and returns its path.
pub fn data_file(dir: &tempfile::TempDir, name: &str, len: u64) -> PathBuf {
    let p = dir.path().join(name);
    let data: Vec<u8> = (0..len).map(pattern_byte).collect();
    std::fs::write(&p, data).expect("write data file");
    p
}

/// What file `path` holds, as the subsystem's storage has it: the real file, or on `sim` the
/// simulated disk's (where writes through the subsystem went).
pub fn contents(aio: &Aio, path: impl AsRef<std::path::Path>) -> Vec<u8> {
    let path = path.as_ref();
    match aio.sim_disk() {
        Some(disk) => disk
            .contents(path)
            .unwrap_or_else(|| panic!("{} is not on the simulated disk", path.display())),
        None => std::fs::read(path).unwrap(),
    }
}

/// Whether file `path` exists in the subsystem's storage (see [`contents`]).
pub fn exists(aio: &Aio, path: impl AsRef<std::path::Path>) -> bool {
    match aio.sim_disk() {
        Some(disk) => disk.contents(path).is_some(),
        None => path.as_ref().exists(),
    }
}

/// Asserts `buf` holds the pattern for a read at `offset`.
pub fn assert_pattern(buf: &[u8], offset: u64) {
    for (i, b) in buf.iter().enumerate() {
        assert_eq!(
            *b,
            pattern_byte(offset + i as u64),
            "byte {} of a read at offset {offset}",
            i
        );
    }
}

/// Starts a read at offset 0 that a fault rule holds mid-completion, and waits until the
/// worker running it is held by it (with `io_workers = 1`, the only worker: the queue is then
/// the waiters' alone). Worker threads only: a worker process's completion runs in the
/// embedder, so a hold there does not keep the worker busy (stop it instead,
/// [`stop_worker_process`]).
pub fn hold_the_worker<'a>(
    aio: &Aio,
    me: &'a dbaio::Issuer,
    f: &dbaio::File,
) -> dbaio::InFlight<'a> {
    aio.inject_fault(
        dbaio::FaultRule::new(dbaio::FaultAction::Hold)
            .offsets(0..1)
            .times(1),
    );
    let busy = me.acquire().unwrap().read(f, 0, dbaio::IoBuf::new(4096));
    let id = busy.wait_ref().io_id();
    eventually(60, "the worker held", || {
        aio.aios()
            .iter()
            .any(|r| r.io_id == id && r.state == "COMPLETED_IO")
    });
    busy
}

/// Lets the thread stopped at test point `.1` go on when dropped, so a failed check cannot
/// leave it stopped (and the test hung).
pub struct ReleaseHoldOnDrop<'a>(pub &'a Aio, pub dbaio::TestPoint);

impl Drop for ReleaseHoldOnDrop<'_> {
    fn drop(&mut self) {
        self.0.release_hold(self.1);
    }
}

/// Lets completions parked by a `FaultAction::Hold` rule go on when dropped, so a failing
/// assertion cannot leave the subsystem unable to shut down.
pub struct ReleaseHeldOnDrop(pub Aio);

impl Drop for ReleaseHeldOnDrop {
    fn drop(&mut self) {
        self.0.release_held();
    }
}

/// Captures `tracing` output (warnings the subsystem logs) while `f` runs.
pub fn capture_logs(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(sub, f);
    let out = buf.0.lock().unwrap().clone();
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `f` on its own thread and fails the test if it has not returned within `secs`
/// seconds: a hang becomes a failure that names `what`, not a CI time-out. (The stuck
/// thread is left behind; the test process ends anyway.)
pub fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(v) => {
            t.join().expect("watched thread");
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the thread sent nothing and did not panic"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: {what} did not finish within {secs} s (a hang)")
        }
    }
}

/// Everything logged on any thread since the first call, by a process-wide subscriber (for
/// warnings logged on the thread that completes an I/O — a worker, the notifier — which
/// [`capture_logs`] cannot see). Tests pick out their own lines by a unique path.
pub fn global_logs() -> String {
    static BUF: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    let buf = BUF.get_or_init(|| {
        #[derive(Clone)]
        struct W(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = W(Arc::clone(&buf));
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        let _ = tracing::subscriber::set_global_default(sub);
        buf
    });
    String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
}

/// Polls `cond` until it holds, failing the test after `secs` seconds.
pub fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Stops worker process `pid` (SIGSTOP) until the returned guard is dropped (SIGCONT): the
/// process column's way to keep a worker from taking requests, as a held completion keeps a
/// worker thread busy in the thread column.
pub fn stop_worker_process(pid: i32) -> StoppedWorker {
    assert!(pid > 0, "a worker process has a pid");
    // SAFETY: kill takes integers; the pid is a worker process of this test's subsystem.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    eventually(10, "the worker process stopped", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('T'))
            })
            .unwrap_or(true)
    });
    StoppedWorker(pid)
}

/// A worker process stopped by [`stop_worker_process`]; continued when dropped.
pub struct StoppedWorker(pub i32);

impl Drop for StoppedWorker {
    fn drop(&mut self) {
        // SAFETY: kill takes integers.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// I/Os of issuer `issuer` that `executor` ran (`waiter`, `worker 0`, …), from the stats.
pub fn executed_by(aio: &Aio, issuer: &str, executor: &str) -> u64 {
    aio.stats()
        .into_iter()
        .filter(|r| r.issuer == issuer)
        .flat_map(|r| r.executors)
        .filter(|e| e.executor == executor)
        .map(|e| e.ios)
        .sum()
}

/// Checks the view's row of a read its issuer runs itself (the inline or the direct path)
/// while it runs: SUBMITTED, `readv` of `len` bytes at a multiple of `len`, flagged
/// SYNCHRONOUS, no result yet.
pub fn assert_running_own_read(r: &dbaio::AioRow, len: u64) {
    assert_eq!(r.state, "SUBMITTED", "{r:?}");
    assert_eq!(r.operation.as_deref(), Some("readv"), "{r:?}");
    assert_eq!(r.length, Some(len), "{r:?}");
    assert_eq!(r.off.unwrap() % len, 0, "{r:?}");
    assert_eq!(r.f_sync, Some(true), "{r:?}");
    assert_eq!(r.raw_result, None, "{r:?}");
}

/// Sets its flag when dropped, so that a thread looping on the flag stops even when the test
/// fails: a panic in a `std::thread::scope` would otherwise leave the scope waiting for that
/// thread for ever, and the failure would be a hang with its message never printed.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether issuer `issuer` is waiting on `event` in the view's waits.
pub fn waits_on(aio: &Aio, issuer: &str, event: &str) -> bool {
    aio.waits()
        .iter()
        .any(|w| w.issuer == issuer && w.wait_event == event)
}
