//! `dbaio bench`: a fio-like load generator over the handle API, and the method comparison
//! that is the README's main command. It keeps `iodepth` I/Os in flight from one issuer,
//! refilling in batch mode, and records per-I/O latency in an HDR histogram. See
//! `docs/benchmarks.md`.

use dbaio::{
    Aio, AioError, File, InFlight, IoBuf, IoMethodKind, IoWorkerKind, Issuer, OpenOptions, Settings,
};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Random reads.
    Randread,
    /// Sequential reads.
    Read,
    /// Random writes.
    Randwrite,
    /// Sequential writes.
    Write,
}

impl Rw {
    fn is_write(self) -> bool {
        matches!(self, Rw::Randwrite | Rw::Write)
    }
    fn is_random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite)
    }
    /// fio's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Randread => "randread",
            Rw::Read => "read",
            Rw::Randwrite => "randwrite",
            Rw::Write => "write",
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The data file (created and filled if missing or too short).
    pub filename: PathBuf,
    /// Bytes of the file the I/Os cover.
    pub size: u64,
    /// Access pattern.
    pub rw: Rw,
    /// Block size in bytes.
    pub bs: u32,
    /// I/Os kept in flight.
    pub iodepth: u32,
    /// How long to run.
    pub runtime: Duration,
    /// O_DIRECT.
    pub direct: bool,
    /// Submit refills in groups of at most this many I/Os (one system call each under
    /// io_uring). Small groups get the first I/Os to the device sooner.
    pub batch: u32,
    /// Wake for completions in groups of at least this many.
    pub complete_min: u32,
    /// Seed of the random offsets: the same seed reads the same offsets in the same order
    /// every run (as fio's default `randrepeat=1`).
    pub seed: u64,
    /// Show a progress bar.
    pub progress: bool,
    /// Serve the aios view on this socket while running.
    pub socket: Option<PathBuf>,
    /// The settings to start from (`-c name=value`); the run sets the method, the depth
    /// (`io_max_concurrency`) and its issuer slots (`max_issuers`) over them, unless kept.
    pub settings: Settings,
    /// `io_max_concurrency` was given with `-c`: the run keeps it (else: the depth).
    pub keep_io_max_concurrency: bool,
    /// `max_issuers` was given with `-c`: the run keeps it (else: 4).
    pub keep_max_issuers: bool,
    /// Set by a signal: the run stops starting I/Os, finishes those in flight and returns.
    pub stop: Arc<AtomicBool>,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// One run's figures (the JSON contract of `dbaio bench --json`: one such object per run,
/// one per line, whatever the method or the number of runs).
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Method used.
    pub io_method: String,
    /// `thread` or `process` for the worker method (`io_worker_kind`), else null.
    pub io_worker_kind: Option<String>,
    /// Access pattern.
    pub rw: Rw,
    /// Block size.
    pub bs: u32,
    /// The depth the run kept (1 for sync, which runs one I/O at a time).
    pub iodepth: u32,
    /// The depth asked for (`--iodepth`).
    pub iodepth_asked: u32,
    /// The depth the device actually saw: I/Os in flight at the block device, averaged over
    /// the run's time (the kernel's weighted time in queue, as `iostat`'s `aqu-sz`; it counts
    /// whatever else uses the device meanwhile). None when the file is not on a block device
    /// the kernel keeps statistics for (tmpfs, an overlay).
    pub avg_device_queue: Option<f64>,
    /// O_DIRECT.
    pub direct: bool,
    /// The data file (bytes of its name that are not UTF-8 replaced).
    #[serde(serialize_with = "crate::output::lossy_path")]
    pub filename: PathBuf,
    /// Bytes of it the I/Os covered.
    pub size: u64,
    /// I/Os completed.
    pub ios: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// I/Os per second.
    pub iops: f64,
    /// Bandwidth.
    pub bw_bytes_per_sec: f64,
    /// Latency from start to completion.
    pub lat_us: Latency,
    /// CPU time of the whole process (issuer, workers, rings' helpers in this process) over
    /// the run, user + system, from `getrusage(RUSAGE_SELF)`; kernel threads (io_uring's
    /// io-wq) are not in it.
    pub cpu_seconds: f64,
    /// `cpu_seconds` per I/O, in microseconds.
    pub cpu_us_per_io: f64,
    /// Worker threads running at the end of the run (worker method only; a self-sizing pool
    /// shows how far it grew).
    pub workers: Option<u32>,
    /// Worker processes only: waits that slept to their 100 ms safety limit although an
    /// awaited I/O had completed (missed wake-ups; 0 unless there is a bug).
    pub missed_wakes: Option<u64>,
    /// Worker method: I/Os the issuer ran itself instead of a worker — page-cache hits
    /// served at submit (`io_worker_try_cached`), the overflow of a full queue, memory a
    /// worker process cannot reach, queued ones it ran while waiting rather than sleep
    /// (executors `issuer` and `waiter`).
    pub ran_in_issuer: Option<u64>,
    /// Failed I/Os (and short ones).
    pub errors: u64,
    /// The first failure, in words (None: none failed).
    pub first_error: Option<String>,
    /// Issuer slots the run had (`max_issuers`: 4, or what `-c` named).
    pub max_issuers: u32,
    /// Handles per issuer the run had (`io_max_concurrency` resolved: the depth, or what `-c`
    /// named).
    pub io_max_concurrency: u32,
    /// The latency distribution as (nines, microseconds) points, for `--plot`.
    #[serde(skip)]
    pub lat_curve: Vec<(f64, f64)>,
}

/// Parses fio-style sizes: `4096`, `4k`, `128K`, `1m`, `4G` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let m = match t[i..]
                .to_ascii_lowercase()
                .trim_end_matches("ib")
                .trim_end_matches('b')
            {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => {
                    return Err(format!(
                        "invalid size \"{s}\" (use a number with k, m, g or t)"
                    ));
                }
            };
            (&t[..i], m)
        }
    };
    let n: u64 = num.parse().map_err(|_| format!("invalid size \"{s}\""))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size \"{s}\" is too large"))
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The offsets a run's I/Os go to: random blocks from the seed, or every block in order.
struct Offsets {
    rng: Rng,
    seq: u64,
    blocks: u64,
    bs: u64,
    random: bool,
}

impl Offsets {
    /// The offsets of `opts`' access pattern over the blocks its size holds.
    fn new(opts: &BenchOptions) -> Offsets {
        Offsets {
            rng: Rng(opts.seed.max(1)), // xorshift never leaves 0
            seq: 0,
            blocks: (opts.size / u64::from(opts.bs)).max(1),
            bs: u64::from(opts.bs),
            random: opts.rw.is_random(),
        }
    }

    /// The byte offset of the next I/O.
    fn next(&mut self) -> u64 {
        let b = if self.random {
            self.rng.next() % self.blocks
        } else {
            let b = self.seq % self.blocks;
            self.seq += 1;
            b
        };
        b * self.bs
    }
}

/// What a run's finished I/Os came to: latencies, counts, and the first failure.
struct Tally {
    latency_us: Histogram<u64>,
    ios: u64,
    bytes: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    /// An empty tally.
    fn new() -> Tally {
        Tally {
            latency_us: Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
                .expect("histogram bounds are valid"),
            ios: 0,
            bytes: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// Counts completion `c` of an I/O started at `t0` and hands back its buffer.
    fn account(&mut self, c: dbaio::Completion, t0: Instant) -> IoBuf {
        self.latency_us
            .saturating_record((t0.elapsed().as_nanos() as u64 / 1000).max(1));
        if let Err(e) = c.check() {
            // A failure, or a short transfer (a benchmark does not finish those).
            self.errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
        } else {
            self.ios += 1;
            self.bytes += c.bytes() as u64;
        }
        c.into_buf()
    }
}

/// The progress bar of a run (when asked for), moved on at most every 250 ms.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    start: Instant,
    last_tick: Instant,
}

impl Progress {
    /// A bar over `opts.runtime` seconds for `method` if `opts.progress`; the clock starts
    /// with `begin`.
    fn new(opts: &BenchOptions, method: IoMethodKind) -> Progress {
        let bar = opts.progress.then(|| {
            let b = indicatif::ProgressBar::new(opts.runtime.as_secs());
            b.set_style(
                indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len}s {msg}")
                    .expect("valid template"),
            );
            b.set_prefix(format!("{method:>8}"));
            b
        });
        let now = Instant::now();
        Progress {
            bar,
            start: now,
            last_tick: now,
        }
    }

    /// Starts the run's clock; returns the start.
    fn begin(&mut self) -> Instant {
        self.start = Instant::now();
        self.last_tick = self.start;
        self.start
    }

    /// Shows the seconds run so far, if the last update is 250 ms old.
    fn tick(&mut self) {
        if let Some(b) = &self.bar {
            if self.last_tick.elapsed() >= Duration::from_millis(250) {
                self.last_tick = Instant::now();
                b.set_position(self.start.elapsed().as_secs());
            }
        }
    }

    /// Removes the bar.
    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// The I/Os of a run: free buffers, I/Os in flight, those started since the last wait, and
/// the tally of the finished ones.
struct Pipeline<'a> {
    opts: &'a BenchOptions,
    issuer: &'a Issuer,
    file: &'a File,
    offsets: Offsets,
    free: Vec<IoBuf>,
    pending: Vec<(InFlight<'a>, Instant)>,
    fresh: Vec<(InFlight<'a>, Instant)>,
    /// Starts not yet submitted (submitted every `opts.batch`).
    staged: u32,
    tally: Tally,
}

impl<'a> Pipeline<'a> {
    /// A pipeline of `depth` buffers for `opts`' I/Os on `file`.
    fn new(opts: &'a BenchOptions, issuer: &'a Issuer, file: &'a File, depth: usize) -> Self {
        Pipeline {
            opts,
            issuer,
            file,
            offsets: Offsets::new(opts),
            free: (0..depth)
                .map(|_| IoBuf::from_slice(&vec![0x5a; opts.bs as usize]))
                .collect(),
            pending: Vec::with_capacity(depth),
            fresh: Vec::with_capacity(depth),
            staged: 0,
            tally: Tally::new(),
        }
    }

    /// Keeps every buffer in flight until `deadline` or a stop, then waits for the last I/Os;
    /// `progress` moves on after each wait.
    fn drive(&mut self, deadline: Instant, progress: &mut Progress) -> Result<(), AioError> {
        // Batch mode throughout: starts are submitted every `batch`, and the last partial
        // group goes to the kernel with the wait for completions (one system call under
        // io_uring).
        self.issuer.begin_batch()?;
        loop {
            let running = Instant::now() < deadline && !self.opts.stop.load(Ordering::Relaxed);
            self.staged = 0;
            self.redeem_finished(running)?;
            while running && !self.free.is_empty() {
                let buf = self.free.pop().expect("checked non-empty");
                self.restart(buf)?;
            }
            self.pending.append(&mut self.fresh);
            if self.pending.is_empty() {
                break;
            }
            self.issuer.wait_for_completions(self.opts.complete_min);
            progress.tick();
        }
        self.issuer.end_batch();
        Ok(())
    }

    /// Redeems each finished I/O and, while `running`, at once starts the next one with its
    /// buffer, so the device gets work back as early as possible.
    fn redeem_finished(&mut self, running: bool) -> Result<(), AioError> {
        let mut k = 0;
        while k < self.pending.len() {
            if !self.pending[k].0.is_done() {
                k += 1;
                continue;
            }
            let (io, t0) = self.pending.swap_remove(k);
            let buf = self.tally.account(self.issuer.wait(io), t0);
            self.free.push(buf);
            if running {
                let buf = self.free.pop().expect("a buffer was just returned");
                self.restart(buf)?;
            }
        }
        Ok(())
    }

    /// Starts the next I/O with `buf`, submitting every `batch` starts.
    fn restart(&mut self, buf: IoBuf) -> Result<(), AioError> {
        let h = self.issuer.acquire()?;
        let off = self.offsets.next();
        let t0 = Instant::now();
        let io = if self.opts.rw.is_write() {
            h.write(self.file, off, buf)
        } else {
            h.read(self.file, off, buf)
        };
        self.fresh.push((io, t0));
        self.staged += 1;
        if self.staged == self.opts.batch {
            self.issuer.submit_staged();
            self.staged = 0;
        }
        Ok(())
    }

    /// The tally, once no I/O is left in flight.
    fn into_tally(self) -> Tally {
        self.tally
    }
}

/// What a run measured besides its I/Os: time, CPU, the device's queue, the worker pool.
struct Measured {
    seconds: f64,
    cpu_seconds: f64,
    avg_device_queue: Option<f64>,
    workers: Option<u32>,
    missed_wakes: Option<u64>,
    ran_in_issuer: Option<u64>,
}

/// The settings of one run: `opts.settings` with the method, its workers, and the depth and
/// issuer slots unless `-c` named them.
fn run_settings(opts: &BenchOptions, method: IoMethodKind, kind: IoWorkerKind) -> Settings {
    Settings {
        io_method: method,
        io_worker_kind: kind,
        io_max_concurrency: if opts.keep_io_max_concurrency {
            opts.settings.io_max_concurrency
        } else {
            opts.iodepth.max(1) as i32
        },
        max_issuers: if opts.keep_max_issuers {
            opts.settings.max_issuers
        } else {
            4
        },
        introspection_socket: opts.socket.clone(),
        ..opts.settings.clone()
    }
}

/// I/Os the bench issuer ran itself (executors `issuer` and `waiter`), for the worker method.
fn ran_in_issuer(aio: &Aio) -> Option<u64> {
    (aio.io_method() == IoMethodKind::Worker).then(|| {
        aio.stats()
            .into_iter()
            .filter(|r| r.issuer == "bench")
            .flat_map(|r| r.executors)
            .filter(|e| e.executor == "issuer" || e.executor == "waiter")
            .map(|e| e.ios)
            .sum()
    })
}

/// Runs one benchmark with `method` (and, for the worker method, workers of `kind`).
pub fn run(
    opts: &BenchOptions,
    method: IoMethodKind,
    kind: IoWorkerKind,
) -> Result<BenchReport, AioError> {
    let aio = Aio::start(run_settings(opts, method, kind))?;
    let issuer = aio.register_issuer("bench")?;
    let opts_file = OpenOptions {
        write: opts.rw.is_write(),
        direct: Some(opts.direct),
        ..OpenOptions::default()
    };
    let file = aio.open(&opts.filename, &opts_file)?;
    // The sync method runs each I/O inside `start`, so its real depth is 1 (as fio's psync).
    let depth = if aio.io_method() == IoMethodKind::Sync {
        1
    } else {
        opts.iodepth.max(1) as usize
    };
    let mut pipeline = Pipeline::new(opts, &issuer, &file, depth);
    // On sim the I/Os never reach the file's device: no device queue to report.
    let on_device = aio.io_method() != IoMethodKind::Sim;
    let queue_ms_before = device_queue_ms(&opts.filename).filter(|_| on_device);
    let mut progress = Progress::new(opts, method);
    let cpu_before = process_cpu_seconds(&aio);
    let start = progress.begin();
    pipeline.drive(start + opts.runtime, &mut progress)?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds(&aio) - cpu_before;
    let pool = aio.worker_pool();
    let measured = Measured {
        seconds,
        cpu_seconds,
        workers: pool.as_ref().map(|p| p.workers.len() as u32),
        missed_wakes: pool.filter(|p| p.kind == "process").map(|p| p.missed_wakes),
        ran_in_issuer: ran_in_issuer(&aio),
        avg_device_queue: queue_ms_before
            .zip(device_queue_ms(&opts.filename))
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1000.0 / seconds),
    };
    progress.finish();
    let tally = pipeline.into_tally();
    issuer.close(file);
    Ok(report(opts, &aio, kind, depth, tally, measured))
}

/// The report of a run of `opts` on `aio` at `depth`, from its tally and measures.
fn report(
    opts: &BenchOptions,
    aio: &Aio,
    kind: IoWorkerKind,
    depth: usize,
    tally: Tally,
    m: Measured,
) -> BenchReport {
    let hist = &tally.latency_us;
    let us = |q: f64| hist.value_at_quantile(q) as f64;
    BenchReport {
        io_method: aio.io_method().name().to_string(),
        io_worker_kind: (aio.io_method() == IoMethodKind::Worker).then(|| {
            match kind {
                IoWorkerKind::Thread => "thread",
                IoWorkerKind::Process => "process",
            }
            .to_string()
        }),
        rw: opts.rw,
        bs: opts.bs,
        iodepth: depth as u32,
        iodepth_asked: opts.iodepth,
        avg_device_queue: m.avg_device_queue,
        direct: opts.direct,
        filename: opts.filename.clone(),
        size: opts.size,
        ios: tally.ios,
        bytes: tally.bytes,
        seconds: m.seconds,
        iops: tally.ios as f64 / m.seconds,
        bw_bytes_per_sec: tally.bytes as f64 / m.seconds,
        cpu_seconds: m.cpu_seconds,
        cpu_us_per_io: m.cpu_seconds * 1e6 / tally.ios.max(1) as f64,
        workers: m.workers,
        missed_wakes: m.missed_wakes,
        ran_in_issuer: m.ran_in_issuer,
        lat_us: Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
            max: hist.max() as f64,
        },
        errors: tally.errors,
        lat_curve: crate::plot::curve(hist),
        first_error: tally.first_error,
        max_issuers: aio.settings().max_issuers,
        io_max_concurrency: aio.handles_per_issuer(),
    }
}

/// The block device's weighted time in queue so far, in milliseconds (field 11 of
/// `/sys/dev/block/MAJ:MIN/stat`, the device holding `path`); None if there is none.
fn device_queue_ms(path: &Path) -> Option<u64> {
    stat_field(&device_stat(path)?, 10)
}

/// The kernel's statistics file of the block device holding `path`
/// (`/sys/dev/block/MAJ:MIN/stat`); None when there is none (tmpfs, an overlay).
pub fn device_stat(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let p = PathBuf::from(format!(
        "/sys/dev/block/{}:{}/stat",
        libc::major(dev),
        libc::minor(dev)
    ));
    p.exists().then_some(p)
}

/// Field `n` (0-based) of a block device's statistics file.
pub fn stat_field(stat: &Path, n: usize) -> Option<u64> {
    std::fs::read_to_string(stat)
        .ok()?
        .split_whitespace()
        .nth(n)?
        .parse()
        .ok()
}

/// User + system CPU time this process has used, in seconds, with that of its worker
/// processes: the running ones (from `/proc/<pid>/stat`) and those that have exited and been
/// reaped (`RUSAGE_CHILDREN`).
fn process_cpu_seconds(aio: &dbaio::Aio) -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    let usage = |who| getrusage(who).map_or(0.0, |u| t(u.user_time()) + t(u.system_time()));
    let mut total = usage(UsageWho::RUSAGE_SELF);
    if let Some(pool) = aio.worker_pool().filter(|p| p.kind == "process") {
        total += usage(UsageWho::RUSAGE_CHILDREN);
        total += pool
            .workers
            .iter()
            .map(|w| pid_cpu_seconds(w.tid))
            .sum::<f64>();
    }
    total
}

/// User + system CPU time of process `pid` so far (0 if it is gone).
fn pid_cpu_seconds(pid: i32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Formats reports as the comparison table.
pub fn table(reports: &[BenchReport]) -> String {
    let mut s = format!(
        "{:<9} {:<9} {:>6} {:>7} {:>9} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>6}\n",
        "method",
        "rw",
        "bs",
        "iodepth",
        "dev queue",
        "IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "CPU us/IO",
        "errors"
    );
    for r in reports {
        // Worker processes show as `worker-p`.
        let method = match r.io_worker_kind.as_deref() {
            Some("process") => format!("{}-p", r.io_method),
            _ => r.io_method.clone(),
        };
        s += &format!(
            "{:<9} {:<9} {:>6} {:>7} {:>9} {:>10.0} {:>9.1} {:>8.0} {:>8.0} {:>9.0} {:>9.0} {:>9.1} {:>6}\n",
            method,
            r.rw.name(),
            r.bs,
            r.iodepth,
            r.avg_device_queue
                .map_or_else(|| "-".to_string(), |q| format!("{q:.1}")),
            r.iops,
            r.bw_bytes_per_sec / 1e6,
            r.lat_us.p50,
            r.lat_us.p99,
            r.lat_us.p999,
            r.lat_us.max,
            r.cpu_us_per_io,
            r.errors
        );
    }
    s
}

/// Figures of a buffer-pool hit run.
#[derive(Clone, Debug, Serialize)]
pub struct PoolHitReport {
    /// Issuer threads.
    pub issuers: u32,
    /// Distinct blocks read (all resident).
    pub blocks: u32,
    /// Pins and unpins done (each a hit).
    pub hits: u64,
    /// Wall time.
    pub seconds: f64,
    /// Hits per second, all issuers together.
    pub hits_per_sec: f64,
    /// Whether each hit read its whole page.
    pub touch_page: bool,
}

/// What each thread of the buffer-pool hit workload does, and for how long.
#[derive(Clone, Copy)]
struct HitLoad<'a> {
    /// Resident blocks, 0 .. `blocks`.
    blocks: u32,
    /// When the threads started.
    start: Instant,
    runtime: Duration,
    touch_page: bool,
    streams: bool,
    /// Set by a signal: stop now.
    stop: &'a AtomicBool,
}

impl HitLoad<'_> {
    /// Whether the run goes on: time left and no signal.
    fn going(&self) -> bool {
        self.start.elapsed() < self.runtime && !self.stop.load(Ordering::Relaxed)
    }

    /// Thread `t`'s hits on `file` until the run's time is up: how many.
    fn run(self, aio: &Aio, file: &File, t: u32) -> Result<u64, AioError> {
        let me = aio.register_issuer(&format!("hit{t}"))?;
        let mut rng =
            Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(t) + 1).wrapping_mul(0xff51_afd7_ed55_8ccd));
        if self.streams {
            self.stream_hits(&me, file, &mut rng)
        } else {
            self.pin_hits(&me, file, &mut rng)
        }
    }

    /// Read streams over runs of 64 resident blocks from random starts: blocks read.
    fn stream_hits(self, me: &Issuer, file: &File, rng: &mut Rng) -> Result<u64, AioError> {
        let (mut n, mut sum) = (0u64, 0u64);
        let rel = dbaio::Relation::from_file(file.clone())?;
        while self.going() {
            for _ in 0..16 {
                let first = (rng.next() % u64::from(self.blocks - 64)) as u32;
                let opts = dbaio::ReadStreamOptions::default();
                for b in dbaio::ReadStream::new(me, &rel, first..first + 64, opts) {
                    let b = b.map_err(|e| e.error)?;
                    sum = sum.wrapping_add(u64::from(b.page()[100]));
                    n += 1;
                }
            }
        }
        std::hint::black_box(sum);
        Ok(n)
    }

    /// Pins and unpins of random resident blocks, reading one byte of each page (or all of
    /// it with `touch_page`): hits.
    fn pin_hits(self, me: &Issuer, file: &File, rng: &mut Rng) -> Result<u64, AioError> {
        let (mut n, mut sum) = (0u64, 0u64);
        while self.going() {
            for _ in 0..1024 {
                let b = me.read_block(file, (rng.next() % u64::from(self.blocks)) as u32)?;
                let page = b.page();
                sum = if self.touch_page {
                    page.chunks_exact(8).fold(sum, |a, w| {
                        a ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))
                    })
                } else {
                    sum.wrapping_add(u64::from(page[100]))
                };
                n += 1;
            }
        }
        std::hint::black_box(sum);
        Ok(n)
    }
}

/// The buffer-pool hit workload: `blocks` blocks of `filename` are read into the pool once,
/// then `issuers` threads each pin and unpin random resident blocks for `runtime`, reading one
/// byte of each page, or all of it with `touch_page` — or, with `streams`, run read streams over
/// runs of 64 resident blocks from random starts. Measures whether hits serialise. `stop` (a
/// signal) ends the run early; the report covers the time until then.
pub fn pool_hit(
    filename: &Path,
    blocks: u32,
    issuers: u32,
    runtime: Duration,
    touch_page: bool,
    streams: bool,
    stop: &AtomicBool,
) -> Result<PoolHitReport, AioError> {
    let settings = Settings {
        io_method: IoMethodKind::Sync,
        buffer_pool_size: u64::from(blocks) * 2,
        max_issuers: issuers + 1,
        ..Settings::default()
    };
    let aio = Aio::start(settings)?;
    let file = aio.open(filename, &OpenOptions::read())?;
    {
        let me = aio.register_issuer("warm")?;
        for b in 0..blocks {
            drop(me.read_block(&file, b)?);
        }
    }
    let start = Instant::now();
    let load = HitLoad {
        blocks,
        start,
        runtime,
        touch_page,
        streams,
        stop,
    };
    let counts: Vec<Result<u64, AioError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..issuers)
            .map(|t| {
                let (aio, file) = (aio.clone(), file.clone());
                s.spawn(move || load.run(&aio, &file, t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("hit thread"))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut hits = 0;
    for c in counts {
        hits += c?;
    }
    Ok(PoolHitReport {
        issuers,
        blocks,
        hits,
        seconds,
        hits_per_sec: hits as f64 / seconds,
        touch_page,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-c io_max_concurrency` and `-c max_issuers` were replaced by the depth and 4,
    /// silently: kept when given.
    #[test]
    fn dash_c_concurrency_and_issuers_are_kept_when_given() {
        let mut opts = BenchOptions {
            filename: PathBuf::from("f"),
            size: 1 << 20,
            rw: Rw::Randread,
            bs: 4096,
            iodepth: 32,
            runtime: Duration::from_secs(1),
            direct: false,
            batch: 2,
            complete_min: 4,
            seed: 1,
            progress: false,
            socket: None,
            settings: Settings {
                io_max_concurrency: 48,
                max_issuers: 9,
                ..Settings::default()
            },
            keep_io_max_concurrency: false,
            keep_max_issuers: false,
            stop: Arc::new(AtomicBool::new(false)),
        };
        let s = run_settings(&opts, IoMethodKind::Worker, IoWorkerKind::Thread);
        assert_eq!((s.io_max_concurrency, s.max_issuers), (32, 4));
        opts.keep_io_max_concurrency = true;
        opts.keep_max_issuers = true;
        let s = run_settings(&opts, IoMethodKind::Worker, IoWorkerKind::Thread);
        assert_eq!((s.io_max_concurrency, s.max_issuers), (48, 9));
    }
}
