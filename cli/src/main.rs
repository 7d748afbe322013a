//! The `dbaio` command: `bench` (fio-like, or a comparison of every method), `prewarm` and
//! `verify` (PostgreSQL relations and clusters), `aios` and `stat` (clients of an embedder's
//! introspection socket).
//!
//! Its promises (docs/benchmarks.md): it never writes to a file or device it did not create
//! unless told to; bad input is an error in PostgreSQL's words and a non-zero exit, never a
//! panic; a run whose I/Os fail is a failure; with `--json`, stdout is always JSON, errors
//! included (`{"error": "…"}`, the words also on stderr).

use clap::{Parser, Subcommand};
use dbaio::{IoMethodKind, IoWorkerKind};
use dbaio_cli::bench::{self, BenchOptions, Rw};
use dbaio_cli::datafile;
use dbaio_cli::interrupt::{INTERRUPTED, Interrupt};
use dbaio_cli::options;
use dbaio_cli::screens;
use dbaio_cli::unlink_bench;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `dbaio bench`'s default seed of random offsets (the one it always used).
const DEFAULT_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Parser)]
#[command(
    name = "dbaio",
    version,
    about = "dbaio: database-style asynchronous I/O"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark reads or writes; without --filename, compare every method on a temporary
    /// file. Never writes to a file or device it did not create unless --allow-overwrite.
    Bench(BenchArgs),
    /// Show the I/Os in flight in a running embedder (its introspection socket).
    Aios(AiosArgs),
    /// Show per-issuer I/O statistics of a running embedder.
    Stat(StatArgs),
    /// Check the data checksums of a stopped PostgreSQL cluster, like pg_checksums --check.
    Verify(VerifyArgs),
    /// Read relations (their first segment; .1, .2 follow) into the buffer pool through a
    /// read stream, like pg_prewarm(rel, 'buffer').
    Prewarm(PrewarmArgs),
    /// A garbage collector's unlinks of big files against foreground latency: unlink on the
    /// foreground path, handed off and awaited, or handed off and not awaited.
    UnlinkBench(UnlinkBenchArgs),
}

#[derive(clap::Args)]
struct UnlinkBenchArgs {
    /// Directory on the file system to test (a fresh directory is made inside and removed).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Modes to run (comma-separated): sync, worker-wait, dont-wait.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "sync,worker-wait,dont-wait"
    )]
    mode: Vec<unlink_bench::Mode>,
    /// Chunk files per GC generation.
    #[arg(long, default_value_t = 8)]
    chunks: u64,
    /// Size of each chunk file (4k .. 64g; 256m, 1g).
    #[arg(long, default_value = "256m", value_parser = bench::parse_size)]
    chunk_size: u64,
    /// GC cycles per run.
    #[arg(long, default_value_t = 3)]
    gc_cycles: u64,
    /// The foreground checks for a finished GC every this many ops.
    #[arg(long, default_value_t = 1000)]
    check_every: u64,
    /// The foreground's I/O: 4 KiB random reads, or 8 KiB random writes.
    #[arg(long, value_enum, default_value = "read")]
    foreground: unlink_bench::Foreground,
    /// Runs of each mode, in alternation (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// io_method that runs the unlinks in worker-wait and dont-wait (default worker).
    #[arg(long)]
    io_method: Option<String>,
    /// Any setting, as name=value (repeatable).
    #[arg(short = 'c', value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Draw foreground latency over time, one line per mode, into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Print JSON: one object per run, one per line, then one per mode with the medians
    /// (`"median": true`).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct PrewarmArgs {
    /// First segment of each relation (e.g. base/5/16403).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// io_method (default: io_uring if the kernel allows it, else worker; worker when -c
    /// io_worker_kind is given).
    #[arg(long)]
    io_method: Option<String>,
    /// Read with O_DIRECT (the default; --buffered reads through the page cache).
    #[arg(long, conflicts_with = "buffered")]
    direct: bool,
    /// Read through the kernel's page cache.
    #[arg(long)]
    buffered: bool,
    /// Buffer pool size (8kB blocks, or with a unit: 512MB, 2GB). Default: room for every
    /// block, at most half the memory.
    #[arg(long)]
    buffer_pool: Option<String>,
    /// Verify every page (header and data checksum) as its read completes.
    #[arg(long)]
    verify_checksums: bool,
    /// Any setting, as name=value (repeatable), e.g. -c maintenance_io_concurrency=32.
    #[arg(short = 'c', value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// The cluster's data directory.
    #[arg(long, short = 'D')]
    pgdata: PathBuf,
    /// io_method (default: io_uring if the kernel allows it, else worker; worker when -c
    /// io_worker_kind is given).
    #[arg(long)]
    io_method: Option<String>,
    /// Worker threads for the worker method (the io_workers setting; 0: sized by load).
    #[arg(long, default_value = "4")]
    io_workers: String,
    /// Reads (of up to 512 kB unless -c io_combine_limit says otherwise) in flight.
    #[arg(long, default_value_t = 16)]
    iodepth: u64,
    /// Read through the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// Any setting, as name=value (repeatable).
    #[arg(short = 'c', value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Print JSON instead of pg_checksums' lines.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct AiosArgs {
    /// The embedder's introspection socket.
    #[arg(long)]
    socket: PathBuf,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
    /// Refresh every SECS seconds (default 1): a live screen on a terminal, a table per
    /// refresh otherwise.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", allow_hyphen_values = true)]
    watch: Option<String>,
    /// With --watch: stop after this many refreshes.
    #[arg(long)]
    count: Option<u64>,
}

#[derive(clap::Args)]
struct StatArgs {
    /// The embedder's introspection socket.
    #[arg(long)]
    socket: PathBuf,
    /// Print JSON.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print Prometheus text exposition.
    #[arg(long)]
    prometheus: bool,
    /// Zero the statistics after printing them.
    #[arg(long)]
    reset: bool,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Data file: read where it exists (a file or block device, its own size capped by
    /// --size), created when missing (and kept), written over only with --allow-overwrite.
    /// Without it: a temporary file (removed afterwards) and a comparison of every method.
    #[arg(long)]
    filename: Option<PathBuf>,
    /// Bytes of the file to cover (fio style: 4k, 512m, 4g).
    #[arg(long, value_parser = bench::parse_size)]
    size: Option<u64>,
    /// Access pattern.
    #[arg(long, value_enum, default_value = "randread")]
    rw: Rw,
    /// Block size.
    #[arg(long, default_value = "4k", value_parser = bench::parse_size)]
    bs: u64,
    /// I/Os in flight (1 .. 1024; the sync method runs one at a time).
    #[arg(long, default_value_t = 32)]
    iodepth: u64,
    /// Seconds per run (default 3 for the comparison, else 5).
    #[arg(long, allow_hyphen_values = true)]
    runtime: Option<String>,
    /// Use O_DIRECT (the comparison always does).
    #[arg(long)]
    direct: bool,
    /// Write over an existing file, or a block device (write workloads refuse otherwise).
    #[arg(long)]
    allow_overwrite: bool,
    /// io_method (sync, worker, io_uring); default: every method.
    #[arg(long)]
    io_method: Option<String>,
    /// Worker threads for the worker method (the io_workers setting; 0: sized by load).
    #[arg(long)]
    io_workers: Option<String>,
    /// Any setting, as name=value (repeatable).
    #[arg(short = 'c', value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Refill submissions are grouped in batches of at most this many I/Os (1 .. 32).
    #[arg(long, default_value_t = 2)]
    batch: u64,
    /// Wait for at least this many completions before refilling (0: iodepth/8).
    #[arg(long, default_value_t = 0)]
    complete_min: u64,
    /// Seed of the random offsets. The default reads the same offsets every run, as fio's
    /// default `randrepeat=1` does; on a virtual disk whose host caches what was read
    /// before, repeated offsets are much faster than fresh ones (docs/benchmarks.md), so
    /// give a new seed to read offsets no earlier run read.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Draw the latency distribution of each run, one line per method, into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Print JSON: one object per run, one per line (errors: {"error": "…"}).
    #[arg(long)]
    json: bool,
    /// Serve this run's aios view on a unix socket (see `dbaio aios --socket`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// `io` (default); `pool-hit`: block pins from --issuers threads, all resident;
    /// `stream-hit`: read streams over resident blocks; `scan`: --clients read streams over
    /// 16 files (--size in all, default 4g, kept in --dir), buffered, from a cold page cache,
    /// with readahead advice --advice (drops all caches when root, else each file's pages).
    #[arg(long, default_value = "io")]
    workload: String,
    /// With --workload scan: clients, each a thread with its own read streams (1 .. 64).
    #[arg(long, default_value_t = 1)]
    clients: u64,
    /// With --workload scan: readahead advice off, unthrottled (every upcoming block), or
    /// throttled (dbaio's: device budget, no advice for sequential runs, adaptive distance).
    #[arg(long, value_enum, default_value = "throttled")]
    advice: dbaio_cli::scan_bench::AdviceMode,
    /// With --workload scan: seq (every block in order) or sorted-random (one block in
    /// eight, ascending, as a bitmap heap scan).
    #[arg(long, value_enum, default_value = "seq")]
    pattern: dbaio_cli::scan_bench::Pattern,
    /// With --workload scan: the effective_io_concurrency setting (read-stream depth and
    /// the largest advice distance, in blocks).
    #[arg(long)]
    effective_io_concurrency: Option<String>,
    /// With --workload scan: directory of its data files (default: scan data under the
    /// system's temp directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Issuer threads for --workload pool-hit and stream-hit (1 .. 256).
    #[arg(long, default_value_t = 1)]
    issuers: u64,
    /// With --workload pool-hit: read each pinned page whole (not just one byte).
    #[arg(long)]
    touch_page: bool,
}

/// Why a command ended badly: its words and exit status.
struct Failed {
    message: String,
    code: u8,
}

impl From<String> for Failed {
    fn from(message: String) -> Failed {
        let code = if message == INTERRUPTED { 130 } else { 1 };
        Failed { message, code }
    }
}

type Outcome = Result<ExitCode, Failed>;

fn aios_cmd(a: AiosArgs) -> Outcome {
    if let Some(secs) = &a.watch {
        let every = options::seconds("watch", secs)?;
        if a.json {
            return Err("--watch and --json cannot go together".to_string().into());
        }
        if std::io::stdout().is_terminal() {
            screens::watch(&a.socket, every, a.count)?;
        } else {
            screens::watch_plain(&a.socket, every, a.count)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let v = screens::fetch(&a.socket, "aios")?;
    let mut rows: Vec<dbaio::AioRow> =
        serde_json::from_value(v["aios"].clone()).map_err(|e| format!("unexpected reply: {e}"))?;
    if a.json {
        print_json(&rows);
    } else {
        print!("{}", screens::aios_table(&mut rows));
    }
    Ok(ExitCode::SUCCESS)
}

fn stat_cmd(a: StatArgs) -> Outcome {
    let all = screens::fetch_all(&a.socket)?;
    if a.json {
        let advice_total = screens::advice_total(&all);
        let v = serde_json::json!({
            "pid": all.pid,
            "io_method": all.io_method,
            "uptime_s": all.uptime_s,
            "waits": all.waits,
            "stats": all.stats,
            "advice_total": advice_total,
            "advice_budget": all.advice_budget,
            "worker_pool": all.worker_pool,
        });
        print_json(&v);
    } else if a.prometheus {
        print!("{}", screens::prometheus(&all));
    } else {
        print!("{}", screens::stats_table(&all));
    }
    if a.reset {
        screens::fetch(&a.socket, "reset_stats")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints `v` as pretty JSON on stdout.
fn print_json(v: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("reports are plain data")
    );
}

/// The io_method of the PostgreSQL tools: the one named (`--io-method` or `-c io_method`,
/// which `options::settings` then checks against each other); else the worker method if `-c
/// io_worker_kind` is given (the kind of that method's workers: naming it asks for them);
/// else io_uring where the kernel allows it, the worker method where not.
fn default_method(asked: &Option<String>, sets: &[String]) -> Option<String> {
    if asked.is_some() || options::given(sets, "io_method") {
        return asked.clone();
    }
    let method = if options::given(sets, "io_worker_kind") || dbaio::io_uring_available().is_err() {
        "worker"
    } else {
        "io_uring"
    };
    Some(method.to_string())
}

fn prewarm_cmd(a: PrewarmArgs) -> Outcome {
    let method = default_method(&a.io_method, &a.set);
    let mut settings = options::settings(&a.set, &[("io_method", method.as_deref())])?;
    options::bulk_reads(&mut settings, &a.set);
    settings.buffer_pool_size = match &a.buffer_pool {
        Some(size) => {
            // As the setting, in blocks or with a unit (plain numbers are blocks).
            let v = if size.trim().chars().all(|c| c.is_ascii_digit()) {
                size.clone()
            } else {
                let bytes = bench::parse_size(size)?;
                format!("{bytes}B")
            };
            let mut s = settings.clone();
            s.set("buffer_pool_size", &v).map_err(|e| e.to_string())?;
            if s.buffer_pool_size == 0 {
                return Err("0 blocks is outside the valid range for --buffer-pool (buffer_pool_size 16 .. 1073741824): prewarm reads into the buffer pool\nHINT:  Leave --buffer-pool out to size the pool from the files.".to_string().into());
            }
            s.buffer_pool_size
        }
        None => 0,
    };
    let opts = dbaio_cli::prewarm::PrewarmOptions {
        files: a.files,
        settings,
        direct: !a.buffered,
        verify_checksums: a.verify_checksums,
        segment_blocks: 0,
    };
    let r = dbaio_cli::prewarm::run(&opts)?;
    for e in &r.errors {
        eprintln!("dbaio: ERROR:  {e}");
    }
    if a.json {
        print_json(&r);
    } else {
        println!("{}", r.summary(a.verify_checksums));
    }
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn verify_cmd(a: VerifyArgs) -> Outcome {
    let method = default_method(&a.io_method, &a.set);
    let mut settings = options::settings(
        &a.set,
        &[
            ("io_method", method.as_deref()),
            ("io_workers", Some(&a.io_workers)),
        ],
    )?;
    options::bulk_reads(&mut settings, &a.set);
    let opts = dbaio_cli::checksums::VerifyOptions {
        settings,
        depth: options::in_range("iodepth", a.iodepth, 1, 256)? as u32,
        direct: !a.buffered,
    };
    let report = dbaio_cli::checksums::run(&a.pgdata, &opts)?;
    if a.json {
        print_json(&report);
    } else {
        for f in &report.failures {
            eprintln!("dbaio: error: {}", f.message());
        }
        print!("{}", report.summary());
    }
    Ok(if report.bad_checksums > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn pool_hit_cmd(a: &BenchArgs) -> Outcome {
    let issuers = options::in_range("issuers", a.issuers, 1, 256)? as u32;
    let runtime = match &a.runtime {
        Some(r) => options::seconds("runtime", r)?,
        None => Duration::from_secs(3),
    };
    let temp = tempfile::tempdir().map_err(|e| format!("could not create a temp dir: {e}"))?;
    let filename = temp.path().join("dbaio-pool.dat");
    let blocks = 4096u32; // 32 MiB of 8 KiB pages
    std::fs::write(&filename, vec![1u8; blocks as usize * 8192])
        .map_err(|e| format!("could not write \"{}\": {e}", filename.display()))?;
    let streams = a.workload == "stream-hit";
    let r = bench::pool_hit(&filename, blocks, issuers, runtime, a.touch_page, streams)
        .map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("plain data"));
    } else {
        println!(
            "{}: {} issuers, {} resident blocks, {:.0} hits/s ({} hits in {:.2} s)",
            a.workload, r.issuers, r.blocks, r.hits_per_sec, r.hits, r.seconds
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn scan_cmd(a: &BenchArgs) -> Outcome {
    use dbaio_cli::scan_bench;
    let clients = options::in_range("clients", a.clients, 1, 64)? as u32;
    let settings = options::settings(
        &a.set,
        &[
            ("io_method", a.io_method.as_deref()),
            ("io_workers", a.io_workers.as_deref()),
            (
                "effective_io_concurrency",
                a.effective_io_concurrency.as_deref(),
            ),
        ],
    )?;
    let settings = dbaio::Settings {
        introspection_socket: a.socket.clone().or(settings.introspection_socket),
        ..settings
    };
    let size = a.size.unwrap_or(4 << 30);
    options::in_range("size", size, 1, u64::MAX)?;
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("dbaio-scan"));
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    scan_bench::prepare(&dir, size, &stop.flag())?;
    let r = scan_bench::run(&scan_bench::ScanOptions {
        dir,
        size,
        clients,
        pattern: a.pattern,
        advice: a.advice,
        settings,
        stop: stop.flag(),
    })?;
    if !r.cold {
        eprintln!("dbaio bench: could not drop every data file's pages: this run is not cold");
    } else if !r.dropped_all_caches {
        eprintln!("dbaio bench: not root: dropped the data files' pages only (not all caches)");
    }
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("plain data"));
    } else {
        println!("{}", scan_bench::line(&r));
    }
    Ok(ExitCode::SUCCESS)
}

/// What `bench --workload io` runs, from its checked arguments.
struct IoBenchPlan {
    /// The methods in order, each with the kind of its workers.
    methods: Vec<(IoMethodKind, IoWorkerKind)>,
    /// The comparison of every method on a temporary file (no --filename).
    compare: bool,
    iodepth: u32,
    bs: u64,
    batch: u32,
    /// 0: iodepth/8.
    complete_min: u32,
    runtime: Duration,
    direct: bool,
}

impl IoBenchPlan {
    /// Checks `a`'s numbers and picks the methods: one when it is named (as a flag or with
    /// -c), else the comparison of all: sync, worker threads, io_uring, then worker
    /// processes (last: from their start on, every buffer of this process comes from the
    /// shared arena), unless `io_worker_kind` is set.
    fn new(a: &BenchArgs, settings: &dbaio::Settings) -> Result<IoBenchPlan, Failed> {
        let named = a.io_method.is_some() || options::given(&a.set, "io_method");
        let kind_named = options::given(&a.set, "io_worker_kind");
        let methods: Vec<(IoMethodKind, IoWorkerKind)> = if named {
            vec![(settings.io_method, settings.io_worker_kind)]
        } else {
            let mut all: Vec<_> = IoMethodKind::ALL
                .iter()
                .map(|&m| (m, settings.io_worker_kind))
                .collect();
            if !kind_named {
                all.push((IoMethodKind::Worker, IoWorkerKind::Process));
            }
            all
        };
        let compare = a.filename.is_none();
        let iodepth = options::in_range("iodepth", a.iodepth, 1, 1024)? as u32;
        let bs = options::in_range("bs", a.bs, 1, 64 << 20)?;
        if let Some(size) = a.size {
            options::in_range("size", size, 1, u64::MAX)?;
        }
        let batch = options::in_range("batch", a.batch, 1, 32)? as u32;
        let complete_min = options::in_range("complete-min", a.complete_min, 0, a.iodepth)? as u32;
        let runtime = match &a.runtime {
            Some(r) => options::seconds("runtime", r)?,
            None => Duration::from_secs(if compare { 3 } else { 5 }),
        };
        Ok(IoBenchPlan {
            methods,
            compare,
            iodepth,
            bs,
            batch,
            complete_min,
            runtime,
            direct: a.direct || compare,
        })
    }

    /// The data file of the run (found, made, or a temporary one), checked for O_DIRECT.
    fn data(&self, a: &BenchArgs, stop: &Interrupt) -> Result<datafile::Prepared, Failed> {
        let data = datafile::prepare(
            &datafile::Request {
                filename: a.filename.as_deref(),
                size: a.size,
                default_size: if self.compare { 512 << 20 } else { 1 << 30 },
                writes: matches!(a.rw, Rw::Randwrite | Rw::Write),
                allow_overwrite: a.allow_overwrite,
                bs: self.bs,
                progress: !a.json,
            },
            stop,
        )?;
        if self.direct {
            datafile::check_direct(data.file.path(), self.bs)?;
        }
        Ok(data)
    }

    /// The options of each run on `data`.
    fn options(
        &self,
        a: &BenchArgs,
        settings: dbaio::Settings,
        data: &datafile::Prepared,
        stop: &Interrupt,
    ) -> BenchOptions {
        BenchOptions {
            filename: data.file.path().to_path_buf(),
            size: data.size,
            rw: a.rw,
            bs: self.bs as u32,
            iodepth: self.iodepth,
            runtime: self.runtime,
            direct: self.direct,
            batch: self.batch,
            complete_min: if self.complete_min == 0 {
                (self.iodepth / 8).max(1)
            } else {
                self.complete_min
            },
            seed: a.seed,
            progress: !a.json
                && self.runtime.as_secs_f64() > 2.0
                && std::io::stderr().is_terminal(),
            socket: a.socket.clone(),
            settings,
            stop: stop.flag(),
        }
    }

    /// Runs each method in turn (skipping io_uring in the comparison where the kernel
    /// refuses it), printing each report as JSON with `--json`; stops early on a signal.
    fn run_methods(
        &self,
        a: &BenchArgs,
        opts: &BenchOptions,
        stop: &Interrupt,
    ) -> Result<Vec<bench::BenchReport>, Failed> {
        let mut reports = Vec::new();
        for &(m, kind) in &self.methods {
            if m == IoMethodKind::IoUring {
                if let Err(why) = dbaio::io_uring_available() {
                    if self.compare {
                        eprintln!("dbaio bench: skipping io_uring: {why}");
                        continue;
                    }
                    return Err(format!("io_uring is not available: {why}").into());
                }
            }
            if m == IoMethodKind::Sync && self.iodepth > 1 {
                eprintln!(
                    "dbaio bench: io_method sync runs one I/O at a time: iodepth 1 ({} asked)",
                    self.iodepth
                );
            }
            let r = bench::run(opts, m, kind).map_err(|e| e.to_string())?;
            if a.json {
                println!("{}", serde_json::to_string(&r).expect("plain data"));
            }
            reports.push(r);
            if stop.raised() {
                break;
            }
        }
        Ok(reports)
    }

    /// Draws the latency distribution of each report into `path`.
    fn plot(
        &self,
        a: &BenchArgs,
        path: &std::path::Path,
        reports: &[bench::BenchReport],
    ) -> Result<(), Failed> {
        let series: Vec<_> = reports
            .iter()
            .map(|r| (r.io_method.clone(), r.lat_curve.clone()))
            .collect();
        let title = format!(
            "dbaio bench: {} {} at iodepth {}, latency distribution",
            a.rw.name(),
            datafile::human(self.bs),
            self.iodepth
        );
        dbaio_cli::plot::distribution(path, &title, &series)?;
        if !a.json {
            println!("latency distribution drawn in \"{}\"", path.display());
        }
        Ok(())
    }
}

/// The failure of the first run whose I/Os failed, if any did.
fn first_failed_run(reports: &[bench::BenchReport]) -> Result<(), Failed> {
    let failed: u64 = reports.iter().map(|r| r.errors).sum();
    if failed > 0 {
        let r = reports
            .iter()
            .find(|r| r.errors > 0)
            .expect("some run failed");
        let total: u64 = r.ios + r.errors;
        return Err(format!(
            "{} of {total} I/Os failed with io_method {}; the first: {}",
            r.errors,
            r.io_method,
            r.first_error.as_deref().unwrap_or("(no message)")
        )
        .into());
    }
    Ok(())
}

/// `dbaio bench`: the workload asked for; for `io`, each method's run and the table.
fn bench_cmd(a: BenchArgs) -> Outcome {
    match a.workload.as_str() {
        "io" => {}
        "pool-hit" | "stream-hit" => return pool_hit_cmd(&a),
        "scan" => return scan_cmd(&a),
        other => {
            return Err(format!(
                "invalid value for option \"--workload\": \"{other}\"\nHINT:  Available values: io, pool-hit, stream-hit, scan."
            )
            .into());
        }
    }
    let settings = options::settings(
        &a.set,
        &[
            ("io_method", a.io_method.as_deref()),
            ("io_workers", a.io_workers.as_deref()),
        ],
    )?;
    let plan = IoBenchPlan::new(&a, &settings)?;
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    let data = plan.data(&a, &stop)?;
    let opts = plan.options(&a, settings, &data, &stop);
    let reports = plan.run_methods(&a, &opts, &stop)?;
    if !a.json {
        print!("{}", bench::table(&reports));
    }
    if let Some(path) = &a.plot {
        plan.plot(&a, path, &reports)?;
    }
    if stop.raised() {
        // The temporary file (if any) goes when `data` is dropped.
        drop(data);
        let removed = if plan.compare {
            "; removed the temporary data file"
        } else {
            ""
        };
        eprintln!("dbaio bench: interrupted{removed}");
        return Err(Failed {
            message: format!("{INTERRUPTED} by a signal"),
            code: 130,
        });
    }
    drop(data); // a temporary file goes now
    first_failed_run(&reports)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs each mode `rounds` times, in alternation, printing each run (as JSON with `--json`,
/// else its maximum and rate on stderr); the runs of each mode.
fn unlink_rounds(
    a: &UnlinkBenchArgs,
    opts: &unlink_bench::UnlinkBenchOptions,
    rounds: usize,
    stop: &Interrupt,
) -> Result<Vec<Vec<unlink_bench::UnlinkReport>>, Failed> {
    let mut runs: Vec<Vec<unlink_bench::UnlinkReport>> = vec![Vec::new(); a.mode.len()];
    for round in 0..rounds {
        // Each round starts with the next mode, so none always runs first.
        for k in 0..a.mode.len() {
            let i = (k + round) % a.mode.len();
            let mode = a.mode[i];
            if !a.json {
                eprint!("round {} of {rounds}: {} ... ", round + 1, mode.name());
            }
            let r = unlink_bench::run(opts, mode, stop)?;
            if !a.json {
                eprintln!("max {:.0} us, {:.0} ops/s", r.fg_lat_us.max, r.fg_ops_per_s);
            } else {
                println!("{}", serde_json::to_string(&r).expect("plain data"));
            }
            runs[i].push(r);
        }
    }
    Ok(runs)
}

/// Draws the foreground latency over time of each mode's median run into `path`.
fn plot_unlink_timeline(
    a: &UnlinkBenchArgs,
    path: &std::path::Path,
    opts: &unlink_bench::UnlinkBenchOptions,
    medians: &[unlink_bench::UnlinkReport],
) -> Result<(), Failed> {
    let series: Vec<_> = medians
        .iter()
        .map(|m| (m.mode.name().to_string(), m.timeline.clone()))
        .collect();
    let title = format!(
        "unlink-bench: foreground {} latency, GC of {} x {} chunks ({} unlinks)",
        match a.foreground {
            unlink_bench::Foreground::Read => "4 KiB read",
            unlink_bench::Foreground::Write => "8 KiB write",
        },
        opts.chunks,
        datafile::human(opts.chunk_size),
        medians.first().map_or("-", |m| m.io_method.as_str())
    );
    dbaio_cli::plot::timeline(path, &title, &series)?;
    if !a.json {
        println!("latency over time drawn in \"{}\"", path.display());
    }
    Ok(())
}

/// `dbaio unlink-bench`: the rounds of each mode, their medians, and the plot.
fn unlink_bench_cmd(a: UnlinkBenchArgs) -> Outcome {
    let method = a.io_method.clone().or_else(|| {
        let named = options::given(&a.set, "io_method");
        (!named).then(|| unlink_bench::default_method().name().to_string())
    });
    let settings = options::settings(&a.set, &[("io_method", method.as_deref())])?;
    let chunks = options::in_range("chunks", a.chunks, 1, 1024)? as u32;
    let chunk_size = options::in_range("chunk-size", a.chunk_size, 4096, 64 << 30)?;
    let gc_cycles = options::in_range("gc-cycles", a.gc_cycles, 1, 1000)? as u32;
    let check_every = options::in_range("check-every", a.check_every, 1, 1 << 30)?;
    let rounds = options::in_range("rounds", a.rounds, 1, 100)? as usize;
    if a.mode.is_empty() {
        return Err("--mode needs at least one of sync, worker-wait, dont-wait"
            .to_string()
            .into());
    }
    if settings.io_method == IoMethodKind::IoUring {
        if let Err(why) = dbaio::io_uring_available() {
            return Err(format!("io_uring is not available: {why}").into());
        }
    }
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    let opts = unlink_bench::UnlinkBenchOptions {
        dir: a.dir.clone(),
        chunks,
        chunk_size,
        gc_cycles,
        check_every,
        foreground: a.foreground,
        live_size: 64 << 20,
        settings,
    };
    let runs = unlink_rounds(&a, &opts, rounds, &stop)?;
    let medians: Vec<_> = runs.iter().map(|r| unlink_bench::median(r)).collect();
    if a.json {
        for m in &medians {
            let mut v = serde_json::to_value(m).expect("plain data");
            v["median"] = serde_json::Value::Bool(true);
            println!("{v}");
        }
    } else {
        print!("{}", unlink_bench::table(&medians, rounds));
    }
    if let Some(path) = &a.plot {
        plot_unlink_timeline(&a, path, &opts, &medians)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// True if the command line asks for JSON (so even a parse error is printed as JSON).
fn wants_json() -> bool {
    std::env::args().skip(1).any(|a| a == "--json")
}

/// Reports a failure: words on stderr, and `{"error": …}` on stdout for `--json`.
fn fail(f: &Failed, json: bool) -> ExitCode {
    eprintln!("dbaio: {}", f.message);
    if json {
        println!("{}", serde_json::json!({ "error": f.message }));
    }
    ExitCode::from(f.code)
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`dbaio verify … | head`), instead of panicking on a failed print.
    // SAFETY: restoring the default disposition of SIGPIPE, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let json = wants_json();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if json && e.use_stderr() => {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            return fail(
                &Failed {
                    message: first.to_string(),
                    code: 2,
                },
                true,
            );
        }
        Err(e) => e.exit(),
    };
    // verify prints its findings as pg_checksums does; the pool's per-read warnings about the
    // same pages would only repeat them.
    let default_log = match cli.command {
        Command::Verify(_) => "error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DBAIO_LOG")
                .unwrap_or_else(|_| default_log.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let outcome = match cli.command {
        Command::Bench(a) => bench_cmd(a),
        Command::Aios(a) => aios_cmd(a),
        Command::Stat(a) => stat_cmd(a),
        Command::Prewarm(a) => prewarm_cmd(a),
        Command::Verify(a) => verify_cmd(a),
        Command::UnlinkBench(a) => unlink_bench_cmd(a),
    };
    match outcome {
        Ok(code) => code,
        Err(f) => fail(&f, json),
    }
}
