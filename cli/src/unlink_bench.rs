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

use crate::datafile::{free_space, human};
use crate::interrupt::{INTERRUPTED, Interrupt};
use dbaio::{Aio, HandleFlags, IoMethodKind, OpenOptions, Settings};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Writes one chunk file of `size` bytes with 1 MiB writes and syncs it.
fn write_chunk(path: &Path, size: u64, block: &[u8]) -> std::io::Result<()> {
    let f = std::fs::File::create(path)?;
    let mut off = 0;
    while off < size {
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
) {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 | 1).collect();
    for generation in requests {
        let mut paths = Vec::new();
        let mut result = Ok(());
        for c in 0..opts.chunks {
            let p = dir.join(format!("chunk-{generation}-{c}"));
            if let Err(e) = write_chunk(&p, opts.chunk_size, &block) {
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

/// Runs one mode.
pub fn run(
    opts: &UnlinkBenchOptions,
    mode: Mode,
    stop: &Interrupt,
) -> Result<UnlinkReport, String> {
    let need = opts.chunk_size * u64::from(opts.chunks) * 2 + opts.live_size;
    let free = free_space(&opts.dir.join("x"))?;
    if free < need + (1 << 30) {
        return Err(format!(
            "not enough free space in \"{}\": a run needs {} (two generations of chunks and the live file) plus 1 GiB, and {} is free",
            opts.dir.display(),
            human(need),
            human(free)
        ));
    }
    let dir = tempfile::Builder::new()
        .prefix("dbaio-unlink-bench")
        .tempdir_in(&opts.dir)
        .map_err(|e| {
            format!(
                "could not create a directory in \"{}\": {e}",
                opts.dir.display()
            )
        })?;
    let report = run_in(opts, mode, dir.path(), stop);
    let left = bytes_in(dir.path());
    drop(dir); // removes whatever is left
    let mut report = report?;
    report.left_behind_bytes = left;
    report.disk_free_end_bytes = free_space(&opts.dir.join("x"))?;
    Ok(report)
}

fn run_in(
    opts: &UnlinkBenchOptions,
    mode: Mode,
    dir: &Path,
    stop: &Interrupt,
) -> Result<UnlinkReport, String> {
    // The live file, in the page cache: the foreground's I/O is fast unless something stalls it.
    let live_path = dir.join("live");
    {
        let data: Vec<u8> = (0..opts.live_size).map(|i| (i % 253) as u8).collect();
        std::fs::write(&live_path, data)
            .map_err(|e| format!("could not write \"{}\": {e}", live_path.display()))?;
    }
    let aio = Aio::start(opts.settings.clone()).map_err(|e| e.to_string())?;
    let io_method = aio.io_method().name().to_string();
    let me = aio
        .register_issuer("foreground")
        .map_err(|e| e.to_string())?;
    let live = aio
        .open(&live_path, &OpenOptions::read_write().direct(false))
        .map_err(|e| e.to_string())?;

    let (req_tx, req_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let gc = {
        let (dir, opts) = (dir.to_path_buf(), opts.clone());
        std::thread::Builder::new()
            .name("gc".into())
            .spawn(move || gc_thread(dir, opts, req_rx, done_tx))
            .map_err(|e| format!("could not start the GC thread: {e}"))?
    };
    // Generation 0 is the starting state, written before the clock starts.
    req_tx.send(0).expect("the GC thread is running");
    let mut old = done_rx
        .recv()
        .map_err(|_| "the GC thread ended".to_string())??;
    let chunk_bytes = opts.chunk_size * u64::from(opts.chunks);
    req_tx.send(1).expect("the GC thread is running");

    let errors = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
    let mut timeline: Vec<(f64, f64)> = Vec::new();
    let mut bucket_max = 0u64;
    let mut bucket_end = BUCKET;
    let slots = opts.live_size / 8192;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut buf = vec![0u8; 8192];
    let data = vec![0x5au8; 8192];
    let mut ops = 0u64;
    let mut cycles = 0;
    let mut reclaimed = 0u64;
    let mut tail_until: Option<Instant> = None;
    let start = Instant::now();
    loop {
        if stop.raised() {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % slots) * 8192;
        let t0 = Instant::now();
        let r = match opts.foreground {
            Foreground::Read => me.read_exact_into(&live, off, &mut buf[..4096]),
            Foreground::Write => me.write_all_from(&live, off, &data),
        };
        r.map_err(|e| e.to_string())?;
        ops += 1;
        // Every `check_every` ops the foreground looks for a finished generation and, if
        // there is one, finalises the GC inside this op (as irmin-pack does inside a commit):
        // the old chunks go, and whatever that costs the foreground is this op's latency.
        let ready = if tail_until.is_none() && ops % opts.check_every == 0 {
            done_rx.try_recv().ok()
        } else {
            None
        };
        if let Some(new) = ready {
            let new = new?;
            let victims = std::mem::replace(&mut old, new);
            finalise(&me, mode, &victims, &errors, &first_error)?;
            reclaimed += chunk_bytes;
            cycles += 1;
            if cycles == opts.gc_cycles {
                // Go on a little, so the effects of unlinks that were not waited for show.
                tail_until = Some(Instant::now() + Duration::from_millis(500));
            } else {
                req_tx.send(cycles + 1).expect("the GC thread is running");
            }
        }
        let now = Instant::now();
        let us = (now - t0).as_micros() as u64;
        hist.saturating_record(us.max(1));
        bucket_max = bucket_max.max(us);
        let elapsed = now - start;
        while elapsed >= bucket_end {
            timeline.push((
                (bucket_end - BUCKET).as_secs_f64(),
                bucket_max as f64 / 1000.0,
            ));
            bucket_max = 0;
            bucket_end += BUCKET;
        }
        if tail_until.is_some_and(|t| now >= t) {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(req_tx);
    let _ = gc.join();
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
    let unlink_errors = errors.load(Ordering::Relaxed);
    if let Some(e) = first_error.lock().expect("not poisoned").take() {
        return Err(format!("{unlink_errors} unlinks failed; the first: {e}"));
    }
    let q = |v: f64| hist.value_at_quantile(v) as f64;
    Ok(UnlinkReport {
        mode,
        io_method,
        foreground: opts.foreground,
        fg_lat_us: FgLatency {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max: hist.max() as f64,
        },
        fg_ops_per_s: ops as f64 / seconds,
        fg_ops: ops,
        seconds,
        gc_cycles: cycles,
        bytes_reclaimed: reclaimed,
        unlink_errors,
        disk_free_end_bytes: 0,
        left_behind_bytes: 0,
        timeline,
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
