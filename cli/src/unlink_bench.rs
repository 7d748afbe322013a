//! `dbaio unlink-bench`: what a garbage collector's `unlink` of big files does to foreground
//! latency, with the unlink on the foreground path (`sync`), handed to dbaio and awaited
//! (`worker-wait`), or handed to dbaio and not awaited (`dont-wait`, failures to `on_error`).
//!
//! The scenario is irmin-pack's GC: a foreground thread does small I/Os on a live file without
//! pause and records each one's latency; a GC thread writes a new generation of chunk files
//! (default 8 × 256 MiB, really written and synced, as a copying collector does); when a
//! generation is ready the foreground, at its next check (every `check_every` ops), finalises
//! the GC — switches to the new chunks and removes the old ones. On ext4, removing a big
//! written file frees its extents (and discards them, with `-o discard`) in the `unlink` call:
//! tens to hundreds of milliseconds the foreground stalls for, unless someone else waits.

use crate::datafile::{check_room, free_space, human};
use crate::interrupt::{INTERRUPTED, Interrupt};
use dbaio::{Aio, HandleFlags, IoMethodKind, OpenOptions, Settings};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the GC's unlinks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The foreground thread calls unlink itself.
    Sync,
    /// dbaio runs the unlinks (on a worker, or io_uring) and the foreground waits for them.
    WorkerWait,
    /// dbaio runs the unlinks; the foreground goes on at once (`on_error` for failures).
    DontWait,
}

impl Mode {
    /// The name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::WorkerWait => "worker-wait",
            Mode::DontWait => "dont-wait",
        }
    }
}

/// The foreground's I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Foreground {
    /// 4 KiB random reads.
    Read,
    /// 8 KiB random writes.
    Write,
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct UnlinkBenchOptions {
    /// A directory on the file system to test; the run works in a fresh directory inside it
    /// and removes it.
    pub dir: PathBuf,
    /// Chunk files per GC generation.
    pub chunks: u32,
    /// Bytes per chunk file.
    pub chunk_size: u64,
    /// GC cycles per run.
    pub gc_cycles: u32,
    /// The foreground checks for a finished generation every this many ops.
    pub check_every: u64,
    /// The foreground's I/O.
    pub foreground: Foreground,
    /// Size of the live file the foreground works on.
    pub live_size: u64,
    /// The subsystem's settings (io_method: who runs the unlinks in the dbaio modes).
    pub settings: Settings,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct FgLatency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// One run's figures (`--json`: one object per run, one per line).
#[derive(Clone, Debug, Serialize)]
pub struct UnlinkReport {
    /// The mode.
    pub mode: Mode,
    /// The method that ran the dbaio modes' unlinks.
    pub io_method: String,
    /// The foreground's I/O.
    pub foreground: Foreground,
    /// Foreground latency.
    pub fg_lat_us: FgLatency,
    /// Foreground ops per second over the run.
    pub fg_ops_per_s: f64,
    /// Foreground ops.
    pub fg_ops: u64,
    /// Wall time.
    pub seconds: f64,
    /// GC cycles finalised.
    pub gc_cycles: u32,
    /// Bytes of chunk files removed.
    pub bytes_reclaimed: u64,
    /// Unlinks that failed (reported by `on_error` in dont-wait mode).
    pub unlink_errors: u64,
    /// Free space on the file system at the end.
    pub disk_free_end_bytes: u64,
    /// Bytes the run left in its directory (0: it cleaned up).
    pub left_behind_bytes: u64,
    /// The foreground's worst latency in each 100 ms of the run, in ms (for `--plot`).
    #[serde(skip)]
    pub timeline: Vec<(f64, f64)>,
}

/// The width of one timeline bucket.
const BUCKET: Duration = Duration::from_millis(100);

/// Writes one chunk file of `size` bytes with 1 MiB writes and syncs it; stops (an
/// `Interrupted` error) when `stop` is set.
fn write_chunk(path: &Path, size: u64, block: &[u8], stop: &AtomicBool) -> std::io::Result<()> {
    let f = std::fs::File::create(path)?;
    let mut off = 0;
    while off < size {
        if stop.load(Ordering::Relaxed) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let n = block.len().min((size - off) as usize);
        f.write_all_at(&block[..n], off)?;
        off += n as u64;
    }
    f.sync_all()
}

/// The GC thread: on each request writes a generation of chunks and reports it done.
fn gc_thread(
    dir: PathBuf,
    opts: UnlinkBenchOptions,
    requests: mpsc::Receiver<u32>,
    done: mpsc::Sender<Result<Vec<PathBuf>, String>>,
    stop: Arc<AtomicBool>,
) {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 | 1).collect();
    for generation in requests {
        let mut paths = Vec::new();
        let mut result = Ok(());
        for c in 0..opts.chunks {
            let p = dir.join(format!("chunk-{generation}-{c}"));
            if let Err(e) = write_chunk(&p, opts.chunk_size, &block, &stop) {
                result = Err(format!(
                    "could not write chunk file \"{}\": {e}",
                    p.display()
                ));
                paths.push(p);
                break;
            }
            paths.push(p);
        }
        let msg = result.map(|()| paths.clone());
        if msg.is_err() {
            for p in &paths {
                let _ = std::fs::remove_file(p);
            }
        }
        if done.send(msg).is_err() {
            return;
        }
    }
}

/// Bytes of the files in `dir`.
fn bytes_in(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("a path made here has no NUL byte")
}

/// The most a run has on disk at once: two generations of chunks and the live file.
fn need(opts: &UnlinkBenchOptions) -> u64 {
    opts.chunk_size * u64::from(opts.chunks) * 2 + opts.live_size
}

/// Where the runs write, in words (for stderr before the first run): the directory, how much,
/// that it is removed, and a warning when it is a tmpfs (whose unlinks free memory, not disk
/// extents: not what the benchmark is for).
pub fn where_it_writes(opts: &UnlinkBenchOptions, defaulted: bool) -> String {
    let mut s = format!(
        "dbaio unlink-bench: writing up to {} of chunk files in a new directory under \"{}\"{}, removed after each run",
        human(need(opts)),
        opts.dir.display(),
        if defaulted {
            " (the system's temporary directory; --dir chooses another)"
        } else {
            ""
        }
    );
    let tmpfs = nix::sys::statfs::statfs(&opts.dir)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    if tmpfs {
        s += "\nWARNING:  it is a tmpfs: unlinks there free memory, not disk extents; name a directory on the file system to test with --dir";
    }
    s
}

/// Runs one mode.
pub fn run(
    opts: &UnlinkBenchOptions,
    mode: Mode,
    stop: &Interrupt,
) -> Result<UnlinkReport, String> {
    check_room(
        &opts.dir.join("x"),
        need(opts),
        &format!(
            "a run's files ({}: two generations of chunks and the live file)",
            human(need(opts))
        ),
        "Use fewer or smaller chunks (--chunks, --chunk-size), or another --dir.",
    )?;
    let dir = tempfile::Builder::new()
        .prefix("dbaio-unlink-bench")
        .tempdir_in(&opts.dir)
        .map_err(|e| {
            format!(
                "could not create a directory in \"{}\": {e}",
                opts.dir.display()
            )
        })?;
    let _cleanup = crate::interrupt::remove_on_forced_exit(dir.path());
    let report = run_in(opts, mode, dir.path(), stop);
    let left = bytes_in(dir.path());
    drop(dir); // removes whatever is left
    let mut report = report?;
    report.left_behind_bytes = left;
    report.disk_free_end_bytes = free_space(&opts.dir.join("x"))?;
    Ok(report)
}

/// Writes the live file the foreground works on (`size` bytes, into the page cache).
fn write_live_file(path: &Path, size: u64) -> Result<(), String> {
    let data: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    std::fs::write(path, data).map_err(|e| format!("could not write \"{}\": {e}", path.display()))
}

/// The GC thread of a run, and the two ends the foreground talks to it with.
struct GcThread {
    /// Generation numbers to write.
    requests: mpsc::Sender<u32>,
    /// Each generation's chunk files, once written.
    done: mpsc::Receiver<Result<Vec<PathBuf>, String>>,
    thread: std::thread::JoinHandle<()>,
}

impl GcThread {
    /// Starts the GC thread, writing chunks into `dir` until `stop` is set.
    fn start(dir: &Path, opts: &UnlinkBenchOptions, stop: &Interrupt) -> Result<GcThread, String> {
        let (requests, req_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let (dir, opts, stop) = (dir.to_path_buf(), opts.clone(), stop.flag());
        let thread = std::thread::Builder::new()
            .name("gc".into())
            .spawn(move || gc_thread(dir, opts, req_rx, done_tx, stop))
            .map_err(|e| format!("could not start the GC thread: {e}"))?;
        Ok(GcThread {
            requests,
            done,
            thread,
        })
    }

    /// Asks for generation `generation`.
    fn request(&self, generation: u32) {
        self.requests
            .send(generation)
            .expect("the GC thread is running");
    }

    /// Generation 0, the starting state, written before the clock starts; then asks for
    /// generation 1.
    fn first_generation(&self) -> Result<Vec<PathBuf>, String> {
        self.request(0);
        let old = self
            .done
            .recv()
            .map_err(|_| "the GC thread ended".to_string())??;
        self.request(1);
        Ok(old)
    }

    /// Tells the thread there is no more to do and waits for it.
    fn stop(self) {
        drop(self.requests);
        let _ = self.thread.join();
    }
}

/// The failures of unlinks nobody waited for, as `on_error` reports them.
#[derive(Default)]
struct UnlinkErrors {
    count: Arc<AtomicU64>,
    first: Arc<Mutex<Option<String>>>,
}

/// The foreground's latency: a histogram, and its worst in each timeline bucket.
struct LatencyRecord {
    latency_us: Histogram<u64>,
    timeline: Vec<(f64, f64)>,
    bucket_max_us: u64,
    bucket_end: Duration,
}

impl LatencyRecord {
    /// An empty record.
    fn new() -> LatencyRecord {
        LatencyRecord {
            latency_us: Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"),
            timeline: Vec::new(),
            bucket_max_us: 0,
            bucket_end: BUCKET,
        }
    }

    /// Records an op of `us` microseconds that ended `elapsed` into the run.
    fn record(&mut self, us: u64, elapsed: Duration) {
        self.latency_us.saturating_record(us.max(1));
        self.bucket_max_us = self.bucket_max_us.max(us);
        while elapsed >= self.bucket_end {
            self.timeline.push((
                (self.bucket_end - BUCKET).as_secs_f64(),
                self.bucket_max_us as f64 / 1000.0,
            ));
            self.bucket_max_us = 0;
            self.bucket_end += BUCKET;
        }
    }

    /// The percentiles.
    fn percentiles(&self) -> FgLatency {
        let q = |v: f64| self.latency_us.value_at_quantile(v) as f64;
        FgLatency {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max: self.latency_us.max() as f64,
        }
    }
}

/// The foreground of a run: its I/O on the live file, the GC cycles it finalises, and what it
/// measured.
struct ForegroundLoop<'a> {
    opts: &'a UnlinkBenchOptions,
    mode: Mode,
    me: &'a dbaio::Issuer,
    live: &'a dbaio::File,
    gc: &'a GcThread,
    errors: UnlinkErrors,
    /// The xorshift state of the random offsets.
    x: u64,
    /// 8 KiB slots of the live file.
    slots: u64,
    buf: Vec<u8>,
    data: Vec<u8>,
    /// The current generation's chunk files.
    old: Vec<PathBuf>,
    latency: LatencyRecord,
    ops: u64,
    cycles: u32,
    reclaimed: u64,
    /// Set after the last cycle: the run goes on until then.
    tail_until: Option<Instant>,
}

impl<'a> ForegroundLoop<'a> {
    /// The foreground of a run of `mode`, doing its I/O on `live` and finalising the
    /// generations of `gc`, once the first generation is written.
    fn new(
        opts: &'a UnlinkBenchOptions,
        mode: Mode,
        me: &'a dbaio::Issuer,
        live: &'a dbaio::File,
        gc: &'a GcThread,
    ) -> Result<Self, String> {
        Ok(ForegroundLoop {
            opts,
            mode,
            me,
            live,
            gc,
            errors: UnlinkErrors::default(),
            x: 0x2545_f491_4f6c_dd1d,
            slots: opts.live_size / 8192,
            buf: vec![0u8; 8192],
            data: vec![0x5au8; 8192],
            old: gc.first_generation()?,
            latency: LatencyRecord::new(),
            ops: 0,
            cycles: 0,
            reclaimed: 0,
            tail_until: None,
        })
    }

    /// Runs ops from `start` until the GC cycles are done (and a little after) or a signal;
    /// an op or a GC that fails ends it with the error.
    fn run(&mut self, start: Instant, stop: &Interrupt) -> Result<(), String> {
        loop {
            if stop.raised() {
                break;
            }
            let t0 = Instant::now();
            self.one_op()?;
            self.ops += 1;
            // Every `check_every` ops the foreground looks for a finished generation and, if
            // there is one, finalises the GC inside this op (as irmin-pack does inside a
            // commit): the old chunks go, and whatever that costs the foreground is this
            // op's latency.
            if self.tail_until.is_none() && self.ops % self.opts.check_every == 0 {
                if let Ok(new) = self.gc.done.try_recv() {
                    self.finalise_generation(new?)?;
                }
            }
            let now = Instant::now();
            self.latency
                .record((now - t0).as_micros() as u64, now - start);
            if self.tail_until.is_some_and(|t| now >= t) {
                break;
            }
        }
        Ok(())
    }

    /// One foreground I/O at a random offset of the live file.
    fn one_op(&mut self) -> Result<(), String> {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        let off = (self.x % self.slots) * 8192;
        let r = match self.opts.foreground {
            Foreground::Read => self
                .me
                .read_exact_into(self.live, off, &mut self.buf[..4096]),
            Foreground::Write => self.me.write_all_from(self.live, off, &self.data),
        };
        r.map_err(|e| e.to_string())
    }

    /// Switches to generation `new`, removes the old one's chunks as the mode says, and asks
    /// for the next generation (or, after the last cycle, sets the tail).
    fn finalise_generation(&mut self, new: Vec<PathBuf>) -> Result<(), String> {
        let victims = std::mem::replace(&mut self.old, new);
        finalise(
            self.me,
            self.mode,
            &victims,
            &self.errors.count,
            &self.errors.first,
        )?;
        self.reclaimed += self.opts.chunk_size * u64::from(self.opts.chunks);
        self.cycles += 1;
        if self.cycles == self.opts.gc_cycles {
            // Go on a little, so the effects of unlinks that were not waited for show.
            self.tail_until = Some(Instant::now() + Duration::from_millis(500));
        } else {
            self.gc.request(self.cycles + 1);
        }
        Ok(())
    }
}

/// One run of `mode` in `dir`: the live file, the GC thread, the foreground loop, the report.
fn run_in(
    opts: &UnlinkBenchOptions,
    mode: Mode,
    dir: &Path,
    stop: &Interrupt,
) -> Result<UnlinkReport, String> {
    // The live file, in the page cache: the foreground's I/O is fast unless something stalls it.
    let live_path = dir.join("live");
    write_live_file(&live_path, opts.live_size)?;
    let aio = Aio::start(opts.settings.clone()).map_err(|e| e.to_string())?;
    let io_method = aio.io_method().name().to_string();
    let me = aio
        .register_issuer("foreground")
        .map_err(|e| e.to_string())?;
    let live = aio
        .open(&live_path, &OpenOptions::read_write().direct(false))
        .map_err(|e| e.to_string())?;
    let gc = GcThread::start(dir, opts, stop)?;
    let mut fg = ForegroundLoop::new(opts, mode, &me, &live, &gc)?;
    let start = Instant::now();
    fg.run(start, stop)?;
    let seconds = start.elapsed().as_secs_f64();
    let ForegroundLoop {
        old,
        latency,
        ops,
        cycles,
        reclaimed,
        errors,
        ..
    } = fg;
    gc.stop();
    // Unlinks not waited for are done once the subsystem shuts down (and their failures
    // reported through on_error).
    drop(me);
    aio.shutdown();
    // The run's own files go; whatever is still there afterwards was left behind.
    for p in old.iter().chain([&live_path]) {
        let _ = std::fs::remove_file(p);
    }
    if stop.raised() {
        return Err(INTERRUPTED.to_string());
    }
    let unlink_errors = errors.count.load(Ordering::Relaxed);
    if let Some(e) = errors.first.lock().expect("not poisoned").take() {
        return Err(format!("{unlink_errors} unlinks failed; the first: {e}"));
    }
    Ok(UnlinkReport {
        mode,
        io_method,
        foreground: opts.foreground,
        fg_lat_us: latency.percentiles(),
        fg_ops_per_s: ops as f64 / seconds,
        fg_ops: ops,
        seconds,
        gc_cycles: cycles,
        bytes_reclaimed: reclaimed,
        unlink_errors,
        disk_free_end_bytes: 0,
        left_behind_bytes: 0,
        timeline: latency.timeline,
    })
}

/// Removes a generation's chunk files as `mode` says.
fn finalise(
    me: &dbaio::Issuer,
    mode: Mode,
    victims: &[PathBuf],
    errors: &Arc<AtomicU64>,
    first_error: &Arc<Mutex<Option<String>>>,
) -> Result<(), String> {
    match mode {
        Mode::Sync => {
            for p in victims {
                let mut h = me.acquire().map_err(|e| e.to_string())?;
                h.set_flags(HandleFlags::SYNCHRONOUS);
                let io = h.unlink(c_path(p));
                me.wait(io).check().map_err(|e| e.to_string())?;
            }
        }
        Mode::WorkerWait => {
            me.begin_batch().map_err(|e| e.to_string())?;
            let ios: Result<Vec<_>, _> = victims
                .iter()
                .map(|p| me.acquire().map(|h| h.unlink(c_path(p))))
                .collect();
            me.end_batch();
            for io in ios.map_err(|e| e.to_string())? {
                me.wait(io).check().map_err(|e| e.to_string())?;
            }
        }
        Mode::DontWait => {
            me.begin_batch().map_err(|e| e.to_string())?;
            for p in victims {
                let h = me.acquire().map_err(|e| e.to_string())?;
                let (errors, first) = (Arc::clone(errors), Arc::clone(first_error));
                h.unlink(c_path(p)).on_error(move |e| {
                    errors.fetch_add(1, Ordering::Relaxed);
                    first
                        .lock()
                        .expect("not poisoned")
                        .get_or_insert_with(|| e.to_string());
                });
            }
            me.end_batch();
        }
    }
    Ok(())
}

/// The median of each figure over runs of one mode.
pub fn median(runs: &[UnlinkReport]) -> UnlinkReport {
    let med = |f: &dyn Fn(&UnlinkReport) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let mut m = runs[0].clone();
    m.fg_lat_us = FgLatency {
        p50: med(&|r| r.fg_lat_us.p50),
        p99: med(&|r| r.fg_lat_us.p99),
        p999: med(&|r| r.fg_lat_us.p999),
        max: med(&|r| r.fg_lat_us.max),
    };
    m.fg_ops_per_s = med(&|r| r.fg_ops_per_s);
    m.seconds = med(&|r| r.seconds);
    // The timeline of the run whose max is the median one.
    if let Some(r) = runs.iter().find(|r| r.fg_lat_us.max == m.fg_lat_us.max) {
        m.timeline = r.timeline.clone();
    }
    m
}

/// The table of medians, with each mode's ratios to sync mode.
pub fn table(medians: &[UnlinkReport], rounds: usize) -> String {
    let mut out = Vec::new();
    let sync = medians.iter().find(|r| r.mode == Mode::Sync);
    let _ = writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>9} {:>10} {:>8} {:>11} {:>8} {:>7} {:>10}",
        "mode",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "max/sync",
        "fg ops/s",
        "/sync",
        "cycles",
        "reclaimed"
    );
    for r in medians {
        let (rmax, rops) = match sync {
            Some(s) => (
                format!("{:.2}", r.fg_lat_us.max / s.fg_lat_us.max),
                format!("{:.2}", r.fg_ops_per_s / s.fg_ops_per_s),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "{:<12} {:>9.0} {:>9.0} {:>9.0} {:>10.0} {:>8} {:>11.0} {:>8} {:>7} {:>10}",
            r.mode.name(),
            r.fg_lat_us.p50,
            r.fg_lat_us.p99,
            r.fg_lat_us.p999,
            r.fg_lat_us.max,
            rmax,
            r.fg_ops_per_s,
            rops,
            r.gc_cycles,
            human(r.bytes_reclaimed)
        );
    }
    let _ = writeln!(
        out,
        "(median of {rounds}; unlinks run by io_method {}; nothing left behind: {})",
        medians.first().map_or("-", |r| r.io_method.as_str()),
        medians.iter().all(|r| r.left_behind_bytes == 0)
    );
    String::from_utf8(out).expect("ASCII")
}

/// The method to use when none is asked for.
pub fn default_method() -> IoMethodKind {
    IoMethodKind::Worker
}
