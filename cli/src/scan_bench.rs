//! `dbaio bench --workload scan`: clients reading relations through read streams, buffered
//! and from a cold page cache, with readahead advice off, unthrottled or throttled — the
//! figure that shows whether advice pays (issue 11's table in docs/benchmarks.md).
//!
//! The data is 16 files (`scan-0.dat` … `scan-15.dat`, together `--size`, default 4 GiB) in
//! `--dir`, made on first use and only read afterwards; client `i` of `N` reads files `i`,
//! `i + N`, … one after the other, so every client count reads the same bytes. Patterns:
//! `seq` reads every block in order (parallel sequential scans); `sorted-random` reads one
//! block in eight, chosen by a seeded hash, in ascending order (a bitmap heap scan). Before a
//! run the device is let go idle (no I/O in flight for 200 ms: advice a previous run sent
//! may still be reading) and each file's pages are dropped from the page cache
//! (`POSIX_FADV_DONTNEED`, and all caches when root), so every run is cold and starts on a
//! quiet device; the report says when dropping was not possible.

use crate::bench::{device_stat, stat_field};
use crate::interrupt::INTERRUPTED;
use dbaio::{
    Advice, AdviceRow, Aio, OpenOptions, ReadStream, ReadStreamOptions, Relation, Settings,
};
use serde::Serialize;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Data files the clients share out.
pub const FILES: u32 = 16;

/// Which blocks each client reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Every block, in order.
    Seq,
    /// One block in eight, in ascending order (a bitmap heap scan).
    SortedRandom,
}

/// Advice mode, as the command line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AdviceMode {
    /// No advice.
    Off,
    /// Every upcoming block advised: no budget, no sequential rule, no adaptation.
    Unthrottled,
    /// dbaio's throttle (the default for read streams).
    Throttled,
}

impl AdviceMode {
    fn advice(self) -> Advice {
        match self {
            AdviceMode::Off => Advice::Off,
            AdviceMode::Unthrottled => Advice::Unthrottled,
            AdviceMode::Throttled => Advice::Throttled,
        }
    }
}

/// What a scan run is asked to do.
pub struct ScanOptions {
    /// Where the data files are.
    pub dir: PathBuf,
    /// Their total size.
    pub size: u64,
    /// Client threads.
    pub clients: u32,
    /// Which blocks they read.
    pub pattern: Pattern,
    /// Readahead advice.
    pub advice: AdviceMode,
    /// The subsystem's settings (method, concurrency, budget).
    pub settings: Settings,
    /// Set by Ctrl-C: stop and report the interruption.
    pub stop: std::sync::Arc<AtomicBool>,
}

/// One scan run's figures (`--json`: one object per line).
#[derive(Debug, Serialize)]
pub struct ScanReport {
    /// `scan`.
    pub workload: &'static str,
    /// Method used.
    pub io_method: String,
    /// Which blocks were read.
    pub pattern: Pattern,
    /// Client threads.
    pub clients: u32,
    /// Readahead advice mode.
    pub advice: AdviceMode,
    /// The setting, as run.
    pub effective_io_concurrency: u32,
    /// The advice budget per device, in blocks, as run.
    pub io_advice_budget: u32,
    /// Every file's pages were dropped from the page cache before the run.
    pub cold: bool,
    /// All caches were dropped too (`/proc/sys/vm/drop_caches`; needs root).
    pub dropped_all_caches: bool,
    /// Blocks read by all clients.
    pub blocks: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Wall time of the run (all clients).
    pub seconds: f64,
    /// Megabytes (10^6) read per second.
    pub mb_per_sec: f64,
    /// Readahead advice of all clients together, in blocks.
    pub advice_blocks: AdviceRow,
    /// The most blocks advised and not yet read at once, on any device.
    pub advice_budget_peak: u32,
    /// A signal stopped the run: the figures cover the time until then.
    pub interrupted: bool,
    /// io_uring: the buffer pool's memory registered with the rings (fixed reads), or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registered_buffers: Option<dbaio::RegisteredBuffers>,
}

fn file_path(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("scan-{i}.dat"))
}

/// Makes the data files that are missing, after checking there is room for them (and
/// saying where they go: they stay for later runs); refuses ones of another size (never
/// written over). A file is written as `scan-N.dat.part` and renamed when whole; the part goes
/// if writing fails or a signal arrives, and so does a directory this run made that holds no
/// whole file.
pub fn prepare(dir: &Path, size: u64, stop: &AtomicBool) -> Result<(), String> {
    let per_file = (size / u64::from(FILES)) / 8192 * 8192;
    if per_file == 0 {
        return Err(format!(
            "--size {size} is too small for {FILES} files of whole 8 kB blocks"
        ));
    }
    let missing = missing_files(dir, per_file)?;
    if missing.is_empty() {
        return Ok(());
    }
    let need = per_file * missing.len() as u64;
    crate::datafile::check_room(
        &file_path(dir, 0),
        need,
        &format!(
            "the scan data ({} of {FILES} files of {})",
            missing.len(),
            crate::datafile::human(per_file)
        ),
        "Ask for a smaller --size, or name a --dir on a file system with room.",
    )?;
    let made = missing_dirs(dir);
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("could not create \"{}\": {e}", dir.display()))?;
    // The directories this run made go again if no whole file is left in them (a layout that
    // failed or was interrupted on the first file), also on a second signal.
    let remove_made = move || {
        for d in &made {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    };
    let _made_cleanup = crate::interrupt::on_forced_exit(remove_made.clone());
    crate::note!(
        "dbaio bench: laying out the scan data in \"{}\" ({} files, {}); it stays there for later runs",
        dir.display(),
        missing.len(),
        crate::datafile::human(need)
    );
    for i in missing {
        let p = file_path(dir, i);
        let tmp = p.with_extension("dat.part");
        let _cleanup = crate::interrupt::remove_on_forced_exit(&tmp);
        let result = write_file(&tmp, per_file, i, stop).and_then(|()| {
            std::fs::rename(&tmp, &p)
                .map_err(|e| format!("could not rename \"{}\": {e}", tmp.display()))
        });
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
            remove_made();
        }
        result?;
    }
    Ok(())
}

/// The directories `create_dir_all(dir)` would make, deepest first.
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect()
}

/// The data files of `dir` still to make; an error for one of another size than `per_file`.
fn missing_files(dir: &Path, per_file: u64) -> Result<Vec<u32>, String> {
    let mut missing = Vec::new();
    for i in 0..FILES {
        let p = file_path(dir, i);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() && m.len() == per_file => {}
            Ok(m) if !m.is_file() => {
                return Err(format!(
                    "\"{}\" is {}, not a data file; remove it or choose another --dir",
                    p.display(),
                    crate::datafile::file_kind(&m.file_type())
                ));
            }
            Ok(m) => {
                return Err(format!(
                    "\"{}\" exists with {} bytes, not {per_file}; remove it or choose another --dir",
                    p.display(),
                    m.len()
                ));
            }
            Err(_) => missing.push(i),
        }
    }
    Ok(missing)
}

fn write_file(p: &Path, len: u64, seed: u32, stop: &AtomicBool) -> Result<(), String> {
    let mut f = std::fs::File::create(p)
        .map_err(|e| format!("could not create \"{}\": {e}", p.display()))?;
    let mut chunk = vec![0u8; 1 << 20];
    for (k, b) in chunk.iter_mut().enumerate() {
        *b = (k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8;
    }
    let mut left = len;
    while left > 0 {
        if stop.load(Ordering::Relaxed) {
            return Err(INTERRUPTED.to_string());
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])
            .map_err(|e| format!("could not write \"{}\": {e}", p.display()))?;
        left -= n as u64;
    }
    f.sync_all()
        .map_err(|e| format!("could not sync \"{}\": {e}", p.display()))
}

/// Waits (at most 60 s) until the device has had no I/O in flight for 200 ms: readahead a
/// previous run started (advice sent ahead, still being read when that run ended) must not
/// land in this run's time or cache.
fn wait_idle(stat: Option<&Path>) {
    let Some(stat) = stat else {
        return;
    };
    // Field 9: I/Os in flight.
    let in_flight = || stat_field(stat, 8).unwrap_or(0);
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        if in_flight() > 0 {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= std::time::Duration::from_millis(200) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Drops the files' pages from the page cache, once the device is idle; (every file done,
/// all caches dropped).
fn make_cold(dir: &Path) -> (bool, bool) {
    let stat = device_stat(dir);
    wait_idle(stat.as_deref());
    let mut cold = true;
    for i in 0..FILES {
        match std::fs::File::open(file_path(dir, i)) {
            Ok(f) => {
                // SAFETY: plain advice on an open descriptor; no memory is passed.
                let r =
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                cold &= r == 0;
            }
            Err(_) => cold = false,
        }
    }
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let all = std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok();
    wait_idle(stat.as_deref());
    (cold, all)
}

/// Whether client-visible block `b` of file `file` is in the sorted-random sample.
fn sampled(file: u32, b: u32) -> bool {
    let mut x = (u64::from(file) << 32 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 32;
    x % 8 == 0
}

/// Runs one scan: every client in its own thread with its own issuer.
pub fn run(o: &ScanOptions) -> Result<ScanReport, String> {
    let (cold, dropped_all_caches) = make_cold(&o.dir);
    let aio = Aio::start(Settings {
        max_issuers: o.settings.max_issuers.max(o.clients + 1),
        ..o.settings.clone()
    })
    .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let counts: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..o.clients)
            .map(|c| {
                let aio = &aio;
                s.spawn(move || client(aio, o, c))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut blocks = 0;
    for c in counts {
        blocks += c?;
    }
    let advice_budget_peak = aio
        .advice_budget()
        .iter()
        .map(|b| b.peak)
        .max()
        .unwrap_or(0);
    let report = ScanReport {
        workload: "scan",
        io_method: aio.io_method().name().to_string(),
        pattern: o.pattern,
        clients: o.clients,
        advice: o.advice,
        effective_io_concurrency: o.settings.effective_io_concurrency,
        io_advice_budget: o.settings.advice_budget_blocks(),
        cold,
        dropped_all_caches,
        blocks,
        bytes: blocks * u64::from(o.settings.block_size),
        seconds,
        mb_per_sec: (blocks * u64::from(o.settings.block_size)) as f64 / 1e6 / seconds,
        advice_blocks: aio.advice_totals(),
        advice_budget_peak,
        interrupted: o.stop.load(Ordering::Relaxed),
        registered_buffers: aio.registered_buffers(),
    };
    aio.shutdown();
    Ok(report)
}

/// Client `c`: reads its files through read streams; returns the blocks it read.
fn client(aio: &Aio, o: &ScanOptions, c: u32) -> Result<u64, String> {
    let me = aio
        .register_issuer(&format!("scan-{c}"))
        .map_err(|e| e.to_string())?;
    let mut blocks = 0u64;
    let mut sum = 0u64;
    for file in (c..FILES).step_by(o.clients as usize) {
        if o.stop.load(Ordering::Relaxed) {
            break;
        }
        let rel = Relation::open(aio, file_path(&o.dir, file), &OpenOptions::read())
            .map_err(|e| e.to_string())?;
        let n = rel.nblocks();
        let pattern = o.pattern;
        let wanted = (0..n).filter(move |&b| pattern == Pattern::Seq || sampled(file, b));
        let opts = ReadStreamOptions {
            advice: o.advice.advice(),
            ring: true,
            sequential: pattern == Pattern::Seq,
            ..ReadStreamOptions::default()
        };
        for buf in ReadStream::new(&me, &rel, wanted, opts) {
            let buf = buf.map_err(|e| e.to_string())?;
            sum = sum.wrapping_add(u64::from(buf.page()[100]));
            blocks += 1;
        }
    }
    std::hint::black_box(sum);
    Ok(blocks)
}

/// The run as one table line.
pub fn line(r: &ScanReport) -> String {
    format!(
        "{:<9} {:<14} {:>3} clients  advice {:<12} {:>8.2} s {:>9.1} MB/s  advice: {} issued, {} sequential, {} refused, {} useful, {} wasted{}",
        r.io_method,
        format!("{:?}", r.pattern).to_lowercase(),
        r.clients,
        format!("{:?}", r.advice).to_lowercase(),
        r.seconds,
        r.mb_per_sec,
        r.advice_blocks.issued,
        r.advice_blocks.suppressed_sequential,
        r.advice_blocks.refused_by_budget,
        r.advice_blocks.useful,
        r.advice_blocks.wasted,
        if r.cold { "" } else { "  (NOT cold)" },
    ) + if r.interrupted { "  (interrupted)" } else { "" }
}
