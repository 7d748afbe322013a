//! The harness every adversarial scenario runs in: a subsystem on one column (method and
//! pool kind), named threads that each loop until told to stop and publish what they are
//! doing, and a watchdog. When the run ends, every thread must come back within the
//! watchdog's deadline; one that does not is a hang, and the test fails after printing each
//! thread's last step, what the kernel says it sleeps in, and the aios view. A run that ends
//! also asserts that no wait was ended by a safety-net timeout and, for worker processes,
//! that no wake-up was missed.
//! Guards against: a hang passing for a slow test, a missed wake-up rescued in silence by a
//! safety-net timeout, and an io_uring column skipped in silence (`SKIPPED`, or a failure
//! under `DBAIO_REQUIRE_IO_URING`).

use dbaio::{Aio, IoMethodKind, IoWorkerKind, Settings};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// One column of the suite: a method, and for `worker` the kind and sizing of its pool.
#[derive(Clone, Copy, Debug)]
pub enum Column {
    Sync,
    WorkerThreads,
    WorkerThreadsSized,
    WorkerProcesses,
    WorkerProcessesSized,
    IoUring,
    Sim,
}

impl Column {
    pub fn name(self) -> &'static str {
        match self {
            Column::Sync => "sync",
            Column::WorkerThreads => "worker threads",
            Column::WorkerThreadsSized => "self-sizing worker threads",
            Column::WorkerProcesses => "worker processes",
            Column::WorkerProcessesSized => "self-sizing worker processes",
            Column::IoUring => "io_uring",
            Column::Sim => "sim",
        }
    }

    pub fn method(self) -> IoMethodKind {
        match self {
            Column::Sync => IoMethodKind::Sync,
            Column::IoUring => IoMethodKind::IoUring,
            Column::Sim => IoMethodKind::Sim,
            _ => IoMethodKind::Worker,
        }
    }

    pub fn processes(self) -> bool {
        matches!(self, Column::WorkerProcesses | Column::WorkerProcessesSized)
    }

    pub fn settings(self) -> Settings {
        let mut s = Settings {
            io_method: self.method(),
            max_issuers: 24,
            max_files: 64,
            io_max_concurrency: 32,
            ..Settings::default()
        };
        if self.processes() {
            s.io_worker_kind = IoWorkerKind::Process;
        }
        match self {
            Column::WorkerThreadsSized | Column::WorkerProcessesSized => {
                s.set("io_workers", "0").unwrap();
                s.set("io_min_workers", "1").unwrap();
                s.set("io_max_workers", "6").unwrap();
                s.set("io_worker_idle_timeout", "20ms").unwrap();
                s.set("io_worker_launch_interval", "1ms").unwrap();
            }
            Column::WorkerThreads | Column::WorkerProcesses => {
                s.set("io_workers", "3").unwrap();
            }
            _ => {}
        }
        s
    }
}

/// Expands to one `#[test]` per column, each calling `scenario(column)` for the short pass,
/// and one `#[ignore]`d `long_…` test per column for the long pass (see [`run_time`]).
#[macro_export]
macro_rules! every_column {
    ($scenario:ident) => {
        $crate::every_column!(@one $scenario, sync, long_sync, Sync);
        $crate::every_column!(@one $scenario, worker_threads, long_worker_threads, WorkerThreads);
        $crate::every_column!(
            @one $scenario, worker_threads_sized, long_worker_threads_sized, WorkerThreadsSized
        );
        $crate::every_column!(
            @one $scenario, worker_processes, long_worker_processes, WorkerProcesses
        );
        $crate::every_column!(
            @one $scenario,
            worker_processes_sized,
            long_worker_processes_sized,
            WorkerProcessesSized
        );
        $crate::every_column!(@one $scenario, io_uring, long_io_uring, IoUring);
        $crate::every_column!(@one $scenario, sim, long_sim, Sim);
    };
    (@one $scenario:ident, $short:ident, $long:ident, $column:ident) => {
        #[test]
        fn $short() {
            $crate::harness::run_column(
                module_path!(),
                $crate::harness::Column::$column,
                $scenario,
                false,
            );
        }
        #[test]
        #[ignore = "the long pass: cargo test --release --test adversarial -- --ignored"]
        fn $long() {
            $crate::harness::run_column(
                module_path!(),
                $crate::harness::Column::$column,
                $scenario,
                true,
            );
        }
    };
}

thread_local! {
    /// Set while a long-pass test runs on this thread.
    static LONG: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `scenario` on `column`, or says loudly why it cannot run here (`SKIPPED {name} on
/// io_uring: <why>`, past the output capture); where io_uring works (CI sets
/// `DBAIO_REQUIRE_IO_URING`), its absence is a failure, not a skip.
pub fn run_column(name: &str, column: Column, scenario: fn(Column), long: bool) {
    if column.method() == IoMethodKind::IoUring && !crate::skips::io_uring_column(name) {
        return;
    }
    LONG.with(|l| l.set(long));
    scenario(column);
    eprintln!("adversarial {name} on {}: ok", column.name());
}

/// How long each thread loops: a second in the default suite; in the long pass
/// (`cargo test --release --test adversarial -- --ignored`) two minutes per scenario and
/// column. `DBAIO_ATTACK_SECS` sets either; `DBAIO_ATTACK_DIR` where the files go.
pub fn run_time() -> Duration {
    let default = if LONG.with(|l| l.get()) { 120.0 } else { 1.0 };
    let secs = std::env::var("DBAIO_ATTACK_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(default);
    Duration::from_secs_f64(secs)
}

/// How long the threads have to come back after the run ends before it is called a hang.
const WATCHDOG: Duration = Duration::from_secs(30);

/// A small seeded generator (xorshift64*): scenarios need choices, not quality.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// What one thread is doing, for the watchdog's report.
pub struct Probe {
    pub name: String,
    tid: AtomicI32,
    step: Mutex<&'static str>,
    steps: AtomicU64,
}

/// What a scenario thread gets: the subsystem, its probe, a generator, the stop flag.
pub struct Ctx {
    pub aio: Aio,
    pub rng: Rng,
    pub probe: Arc<Probe>,
    stop: Arc<AtomicBool>,
    pub counts: Arc<Counts>,
}

/// What the threads did, for the closing line.
#[derive(Default)]
pub struct Counts {
    pub waits: AtomicU64,
    pub completions: AtomicU64,
    pub foreign_waits: AtomicU64,
    /// Foreign waits that found their I/O not yet complete.
    pub foreign_blocked: AtomicU64,
    /// Waits that took over 50 ms (reported, not asserted: the machines are noisy).
    pub long_waits: AtomicU64,
    pub max_wait_us: AtomicU64,
}

impl Ctx {
    /// True until the run ends.
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
    /// Records that this thread is now doing `what`.
    pub fn at(&self, what: &'static str) {
        *self.probe.step.lock().unwrap() = what;
        self.probe.steps.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count_wait(&self) {
        self.counts.waits.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count_completions(&self, n: u64) {
        self.counts.completions.fetch_add(n, Ordering::Relaxed);
    }
    /// Runs `f`, a wait, and records how long it took.
    pub fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let v = f();
        let us = t.elapsed().as_micros() as u64;
        if us > 50_000 {
            self.counts.long_waits.fetch_add(1, Ordering::Relaxed);
        }
        self.counts.max_wait_us.fetch_max(us, Ordering::Relaxed);
        v
    }
    pub fn count_foreign_wait(&self) {
        self.counts.foreign_waits.fetch_add(1, Ordering::Relaxed);
        self.counts.waits.fetch_add(1, Ordering::Relaxed);
    }
    /// `Aio::wait` on another thread's I/O, timed and counted (and counted as blocked if
    /// the I/O was not complete when the wait began).
    pub fn foreign_wait(&self, w: dbaio::WaitRef) {
        if !self.aio.is_done(w) {
            self.counts.foreign_blocked.fetch_add(1, Ordering::Relaxed);
        }
        self.timed(|| self.aio.wait(w)).unwrap();
        self.count_foreign_wait();
    }
}

/// One attack: a subsystem, its data, and the threads to run against it.
pub struct Attack {
    pub column: Column,
    pub aio: Aio,
    pub dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    probes: Vec<Arc<Probe>>,
    threads: Vec<(Arc<Probe>, std::thread::JoinHandle<()>)>,
    seed: u64,
}

impl Attack {
    /// A subsystem on `column`, its settings adjusted by `tweak`.
    pub fn new(column: Column, tweak: impl FnOnce(&mut Settings)) -> Attack {
        let mut s = column.settings();
        tweak(&mut s);
        let aio = Aio::start(s).expect("start");
        assert_eq!(aio.io_method(), column.method(), "no silent fallback");
        let seed = std::env::var("DBAIO_ATTACK_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        Attack {
            column,
            aio,
            dir: tempfile::Builder::new()
                .prefix("dbaio-attack")
                // DBAIO_ATTACK_DIR: another file system (a tmpfs, or one on a loop device).
                .tempdir_in(
                    std::env::var_os("DBAIO_ATTACK_DIR")
                        .unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into()),
                )
                .expect("temp dir"),
            stop: Arc::new(AtomicBool::new(false)),
            counts: Arc::new(Counts::default()),
            probes: Vec::new(),
            threads: Vec::new(),
            seed,
        }
    }

    /// A data file of `len` bytes in the attack's directory (each 4 KiB page filled with its
    /// page number, so a read can be checked).
    pub fn data_file(&self, name: &str, len: u64) -> PathBuf {
        let p = self.dir.path().join(name);
        let mut data = vec![0u8; len as usize];
        for (k, page) in data.chunks_mut(4096).enumerate() {
            page.fill(page_byte(k as u64 * 4096));
        }
        std::fs::write(&p, data).expect("data file");
        p
    }

    /// Starts a thread named `name` running `f` (it should loop while `ctx.running()`).
    pub fn spawn(&mut self, name: &str, f: impl FnOnce(Ctx) + Send + 'static) {
        let probe = Arc::new(Probe {
            name: name.to_string(),
            tid: AtomicI32::new(0),
            step: Mutex::new("starting"),
            steps: AtomicU64::new(0),
        });
        let ctx = Ctx {
            aio: self.aio.clone(),
            rng: Rng::new(self.seed ^ (self.probes.len() as u64 + 1).wrapping_mul(0x51)),
            probe: Arc::clone(&probe),
            stop: Arc::clone(&self.stop),
            counts: Arc::clone(&self.counts),
        };
        let p = Arc::clone(&probe);
        let t = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                p.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
                f(ctx);
                *p.step.lock().unwrap() = "done";
            })
            .expect("spawn");
        self.probes.push(Arc::clone(&probe));
        self.threads.push((probe, t));
    }

    /// Lets the threads run for [`run_time`], stops them, and waits for each under the
    /// watchdog; then checks the safety-net counters. Returns the counts for the report.
    pub fn run(self, name: &str) {
        let start = Instant::now();
        std::thread::sleep(run_time());
        self.stop.store(true, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        let n = self.threads.len();
        for (probe, t) in self.threads {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let r = t.join();
                let _ = tx.send((probe.name.clone(), r.is_ok()));
            });
        }
        let deadline = Instant::now() + WATCHDOG;
        let mut panicked = Vec::new();
        for _ in 0..n {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((who, true)) => drop(who),
                Ok((who, false)) => panicked.push(who),
                Err(_) => {
                    report_hang(&self.aio, &self.probes);
                    panic!(
                        "{name} on {}: a thread did not come back within {WATCHDOG:?} of the \
                         end of the run (a hang; seed {}, DBAIO_ATTACK_SEED replays the choices)",
                        self.column.name(),
                        self.seed
                    );
                }
            }
        }
        assert!(
            panicked.is_empty(),
            "{name} on {}: threads panicked: {panicked:?} (seed {})",
            self.column.name(),
            self.seed
        );
        let c = &self.counts;
        eprintln!(
            "adversarial {name} on {}: {:.1} s, {} waits ({} foreign, {} of them on an I/O \
             not yet complete), {} completions checked, {} waits over 50 ms, longest {} us, \
             {} ended by the safety net{}",
            self.column.name(),
            start.elapsed().as_secs_f64(),
            c.waits.load(Ordering::Relaxed),
            c.foreign_waits.load(Ordering::Relaxed),
            c.foreign_blocked.load(Ordering::Relaxed),
            c.completions.load(Ordering::Relaxed),
            c.long_waits.load(Ordering::Relaxed),
            c.max_wait_us.load(Ordering::Relaxed),
            self.aio.long_waits(),
            self.aio.worker_pool().map_or(String::new(), |p| format!(
                "; pool: grown {}, retired {}, replaced {}, requeued {}",
                p.grown, p.retired, p.replaced, p.requeued
            )),
        );
        check_safety_nets(&self.aio, name, self.column);
    }
}

/// The byte every position of the 4 KiB page at `offset` holds in a data file.
pub fn page_byte(offset: u64) -> u8 {
    ((offset / 4096).wrapping_mul(37) % 251) as u8 + 1
}

/// Checks that `buf`, read at `offset` (page aligned), holds the data file's bytes.
pub fn check_pages(buf: &[u8], offset: u64) {
    for (k, page) in buf.chunks(4096).enumerate() {
        let want = page_byte(offset + k as u64 * 4096);
        assert!(
            page.iter().all(|&b| b == want),
            "wrong data in the page at offset {}",
            offset + k as u64 * 4096
        );
    }
}

/// Asserts that nothing was woken by a safety-net timeout, and that worker processes missed
/// no wake-up.
pub fn check_safety_nets(aio: &Aio, name: &str, column: Column) {
    let backstop = aio.backstop_wakes();
    assert_eq!(
        backstop,
        0,
        "{name} on {}: {backstop} waits were ended by a safety-net timeout",
        column.name()
    );
    if let Some(p) = aio.worker_pool() {
        assert_eq!(
            p.missed_wakes,
            0,
            "{name} on {}: worker processes missed {} wake-ups",
            column.name(),
            p.missed_wakes
        );
    }
}

/// The watchdog's report: each thread's last step and where the kernel has it, the waits,
/// and the aios view.
fn report_hang(aio: &Aio, probes: &[Arc<Probe>]) {
    eprintln!("==== watchdog: threads ====");
    for p in probes {
        let tid = p.tid.load(Ordering::Relaxed);
        eprintln!(
            "  {:<24} tid {tid:<7} step {:<40} ({} steps) kernel: {}",
            p.name,
            p.step.lock().map(|s| *s).unwrap_or("?"),
            p.steps.load(Ordering::Relaxed),
            kernel_place(tid)
        );
    }
    eprintln!("==== every thread of the process ====");
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().into_owned();
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            eprintln!(
                "  {tid:<7} {:<20} {}",
                comm.trim(),
                kernel_place(tid.parse().unwrap_or(0))
            );
        }
    }
    eprintln!("==== waits ====");
    for w in aio.waits() {
        eprintln!("  {w:?}");
    }
    eprintln!("==== aios ====");
    for r in aio.aios() {
        eprintln!("  {r:?}");
    }
    if let Some(p) = aio.worker_pool() {
        eprintln!("==== worker pool ====\n  {p:?}");
    }
}

/// Where thread `tid` sleeps: its kernel wait channel and system call.
fn kernel_place(tid: i32) -> String {
    let base = Path::new("/proc/self/task").join(tid.to_string());
    let wchan = std::fs::read_to_string(base.join("wchan")).unwrap_or_default();
    let syscall = std::fs::read_to_string(base.join("syscall")).unwrap_or_default();
    let nr = syscall.split_whitespace().next().unwrap_or("-").to_string();
    let name = match nr.as_str() {
        "202" => "futex",
        "426" => "io_uring_enter",
        "17" => "pread64",
        "18" => "pwrite64",
        "295" => "preadv",
        "296" => "pwritev",
        "7" => "poll",
        "232" => "epoll_wait",
        "-1" => "(running)",
        "running" => "(running)",
        other => other,
    };
    format!("wchan {} syscall {name}", wchan.trim())
}
