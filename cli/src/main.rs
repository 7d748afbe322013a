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
use dbaio_cli::interrupt::{self, INTERRUPTED, Interrupt};
use dbaio_cli::options;
use dbaio_cli::screens;
use dbaio_cli::unlink_bench;
use dbaio_cli::{note, output};
use std::io::{IsTerminal, Write as _};
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
    /// Directory on the file system to test (a fresh directory is made inside for each run
    /// and removed). Default: the system's temporary directory ($TMPDIR, else /tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
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
    /// io_method (sync, worker, io_uring, or sim: the file is copied into a simulated disk in
    /// memory and written only there); default: every real method.
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
    /// The flags given on the command line (their ids), filled in after parsing.
    #[arg(skip)]
    given: Vec<String>,
}

/// Why a command ended badly: its words and exit status.
struct Failed {
    message: String,
    code: u8,
}

impl From<String> for Failed {
    /// A failure's words; the exit status is 141 for a reader that went away, 128 + the
    /// signal's number for a run a signal stopped, else 1.
    fn from(message: String) -> Failed {
        let code = if message == output::BROKEN_PIPE {
            output::BROKEN_PIPE_STATUS
        } else if message.starts_with(INTERRUPTED) {
            interrupt::status().unwrap_or(130)
        } else {
            1
        };
        // A layout a signal stopped says only "interrupted": name the signal, as a run does.
        let message = if message == INTERRUPTED {
            interrupt::message()
        } else {
            message
        };
        Failed { message, code }
    }
}

type Outcome = Result<ExitCode, Failed>;

fn aios_cmd(a: AiosArgs) -> Outcome {
    if a.count.is_some() && a.watch.is_none() {
        return Err(
            "--count applies only with --watch\nHINT:  Add --watch, or leave --count out."
                .to_string()
                .into(),
        );
    }
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
        output::json_pretty(&rows)?;
    } else {
        output::out(&screens::aios_table(&mut rows))?;
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
        output::json_pretty(&v)?;
    } else if a.prometheus {
        output::out(&screens::prometheus(&all))?;
    } else {
        output::out(&screens::stats_table(&all))?;
    }
    if a.reset {
        screens::fetch(&a.socket, "reset_stats")?;
    }
    Ok(ExitCode::SUCCESS)
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
        keep_max_issuers: options::given(&a.set, "max_issuers"),
    };
    dbaio_cli::memory::check_pool(
        &dbaio_cli::prewarm::prewarm_settings(&opts),
        "Use a smaller --buffer-pool (the blocks that do not fit are read and evicted).",
    )?;
    let r = dbaio_cli::prewarm::run(&opts)?;
    for w in &r.warnings {
        note!("dbaio: WARNING:  {w}");
    }
    for e in &r.errors {
        note!("dbaio: ERROR:  {e}");
    }
    if a.json {
        output::json_pretty(&r)?;
    } else {
        output::line(&r.summary(a.verify_checksums))?;
    }
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `verify`'s options: the settings (from -c and the flags; the run sizes the rest unless -c
/// names it), the depth, checked against the settings and the memory.
fn verify_options(a: &VerifyArgs) -> Result<dbaio_cli::checksums::VerifyOptions, Failed> {
    let method = default_method(&a.io_method, &a.set);
    let mut settings = options::settings(
        &a.set,
        &[
            ("io_method", method.as_deref()),
            ("io_workers", Some(&a.io_workers)),
        ],
    )?;
    options::bulk_reads(&mut settings, &a.set);
    if options::given(&a.set, "maintenance_io_concurrency") {
        return Err("verify sets maintenance_io_concurrency from --iodepth\nHINT:  Give --iodepth N instead of -c maintenance_io_concurrency=N.".to_string().into());
    }
    let depth = options::in_range("iodepth", a.iodepth, 1, 256)? as u32;
    if options::given(&a.set, "io_max_concurrency")
        && settings.effective_io_max_concurrency() < depth
    {
        return Err(format!(
            "-c io_max_concurrency={} leaves {} handles for --iodepth {depth}\nHINT:  Raise io_max_concurrency to at least {depth}, lower --iodepth, or leave io_max_concurrency out (the run sets it to 4 x the depth).",
            settings.io_max_concurrency,
            settings.effective_io_max_concurrency()
        )
        .into());
    }
    let opts = dbaio_cli::checksums::VerifyOptions {
        settings,
        depth,
        direct: !a.buffered,
        given: options::names_given(&a.set),
    };
    dbaio_cli::memory::check_pool(
        &dbaio_cli::checksums::verify_settings(&opts, depth),
        "Use a smaller -c buffer_pool_size.",
    )?;
    Ok(opts)
}

fn verify_cmd(a: VerifyArgs) -> Outcome {
    let opts = verify_options(&a)?;
    let report = dbaio_cli::checksums::run(&a.pgdata, &opts)?;
    if a.json {
        output::json_pretty(&report)?;
    } else {
        for f in &report.failures {
            note!("dbaio: error: {}", f.message());
        }
        output::out(&report.summary())?;
    }
    Ok(if report.bad_checksums > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `--workload pool-hit` and `stream-hit`: hits on 32 MiB of resident blocks, from a file in a
/// temporary directory removed on every way out.
fn pool_hit_cmd(a: &BenchArgs) -> Outcome {
    let issuers = options::in_range("issuers", a.issuers, 1, 256)? as u32;
    let runtime = match &a.runtime {
        Some(r) => options::seconds("runtime", r)?,
        None => Duration::from_secs(3),
    };
    let blocks = 4096u32; // 32 MiB of 8 KiB pages
    let bytes = u64::from(blocks) * 8192;
    let avail = dbaio_cli::memory::available();
    dbaio_cli::memory::check(
        bytes * 3, // the file in the page cache, a pool of twice its blocks
        &format!(
            "{} of page cache and buffer pool",
            datafile::human(bytes * 3)
        ),
        &avail,
        "Free some memory first.",
    )?;
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    let temp = tempfile::Builder::new()
        .prefix("dbaio-pool")
        .tempdir()
        .map_err(|e| format!("could not create a temporary directory: {e}"))?;
    let _cleanup = interrupt::remove_on_forced_exit(temp.path());
    let filename = temp.path().join("dbaio-pool.dat");
    datafile::check_room(
        &filename,
        bytes,
        &format!("the {} data file", datafile::human(bytes)),
        "Point TMPDIR at a file system with room.",
    )?;
    std::fs::write(&filename, vec![1u8; bytes as usize])
        .map_err(|e| format!("could not write \"{}\": {e}", filename.display()))?;
    let streams = a.workload == "stream-hit";
    let r = bench::pool_hit(
        &filename,
        blocks,
        issuers,
        runtime,
        a.touch_page,
        streams,
        &stop.flag(),
    )
    .map_err(|e| e.to_string())?;
    drop(temp);
    if a.json {
        output::json_line(&r)?;
    } else {
        output::line(&format!(
            "{}: {} issuers, {} resident blocks, {:.0} hits/s ({} hits in {:.2} s)",
            a.workload, r.issuers, r.blocks, r.hits_per_sec, r.hits, r.seconds
        ))?;
    }
    if stop.raised() {
        return Err(interrupt::message().into());
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
    let socket = bench_socket(a.socket.as_deref(), &settings)?;
    let settings = dbaio::Settings {
        introspection_socket: socket,
        ..settings
    };
    if options::given(&a.set, "max_issuers") && settings.max_issuers <= clients {
        return Err(format!(
            "-c max_issuers={} is too few for --clients {clients}: each client is an issuer, and the run needs {} slots\nHINT:  Raise max_issuers, or leave it out (the run sizes it).",
            settings.max_issuers,
            clients + 1
        )
        .into());
    }
    dbaio_cli::memory::check_pool(&settings, "Use a smaller -c buffer_pool_size.")?;
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
        note!("dbaio bench: could not drop every data file's pages: this run is not cold");
    } else if !r.dropped_all_caches {
        note!("dbaio bench: not root: dropped the data files' pages only (not all caches)");
    }
    if a.json {
        output::json_line(&r)?;
    } else {
        output::line(&scan_bench::line(&r))?;
    }
    if r.interrupted {
        return Err(interrupt::message().into());
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
        let plan = IoBenchPlan {
            methods,
            compare,
            iodepth,
            bs,
            batch,
            complete_min,
            runtime,
            direct: a.direct || compare,
        };
        plan.check_concurrency(a, settings)?;
        plan.check_memory(settings)?;
        Ok(plan)
    }

    /// The I/Os a run keeps in flight, so buffers it holds: 1 when every method is sync.
    fn buffers(&self) -> u64 {
        if self.methods.iter().all(|&(m, _)| m == IoMethodKind::Sync) {
            1
        } else {
            u64::from(self.iodepth)
        }
    }

    /// A `-c io_max_concurrency` (honoured; otherwise the run sets it to the depth) must leave
    /// handles for `--iodepth`.
    fn check_concurrency(&self, a: &BenchArgs, settings: &dbaio::Settings) -> Result<(), Failed> {
        if !options::given(&a.set, "io_max_concurrency") || self.buffers() == 1 {
            return Ok(());
        }
        let handles = settings.effective_io_max_concurrency();
        if u64::from(handles) < self.buffers() {
            return Err(format!(
                "-c io_max_concurrency={} leaves {handles} handles for --iodepth {}\nHINT:  Raise io_max_concurrency to at least {}, lower --iodepth, or leave io_max_concurrency out (the run then sets it to the depth).",
                settings.io_max_concurrency, self.iodepth, self.iodepth
            )
            .into());
        }
        Ok(())
    }

    /// The run's buffers (`--bs` × `--iodepth`) and buffer pool must fit in the memory
    /// available; the refusal says what would.
    fn check_memory(&self, settings: &dbaio::Settings) -> Result<(), Failed> {
        let avail = dbaio_cli::memory::available();
        let pool = dbaio_cli::memory::pool_bytes(settings);
        let buffers = self.bs.saturating_mul(self.buffers());
        let fits = dbaio_cli::memory::room_for_buffers(&avail, pool) / self.bs;
        let hint = if fits == 0 {
            format!(
                "Use a smaller --bs, or a smaller buffer pool (-c buffer_pool_size; it is {}).",
                datafile::human(pool)
            )
        } else {
            format!(
                "At --bs {} at most --iodepth {} fits; or use a smaller --bs.",
                datafile::human(self.bs),
                fits.min(1024)
            )
        };
        let what = format!(
            "{} of I/O buffers (--bs {} x --iodepth {}) and a {} buffer pool",
            datafile::human(buffers),
            datafile::human(self.bs),
            self.buffers(),
            datafile::human(pool)
        );
        dbaio_cli::memory::check(buffers.saturating_add(pool), &what, &avail, &hint)?;
        Ok(())
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
                direct: self.direct,
                progress: !a.json,
            },
            stop,
        )?;
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
            socket: settings.introspection_socket.clone(),
            keep_io_max_concurrency: options::given(&a.set, "io_max_concurrency"),
            keep_max_issuers: options::given(&a.set, "max_issuers"),
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
                        note!("dbaio bench: skipping io_uring: {why}");
                        continue;
                    }
                    return Err(format!("io_uring is not available: {why}").into());
                }
            }
            if m == IoMethodKind::Sync && self.iodepth > 1 {
                note!(
                    "dbaio bench: io_method sync runs one I/O at a time: iodepth 1 ({} asked)",
                    self.iodepth
                );
            }
            let r = bench::run(opts, m, kind).map_err(|e| e.to_string())?;
            self.note_pool_cap(opts, &r);
            if a.json {
                output::json_line(&r)?;
            }
            reports.push(r);
            if stop.raised() {
                break;
            }
        }
        Ok(reports)
    }

    /// Says so when a self-sizing worker pool stopped at its maximum below the depth asked:
    /// no more reads than workers reach the device, which a reader of the table comparing
    /// the methods at one depth should know.
    fn note_pool_cap(&self, opts: &BenchOptions, r: &bench::BenchReport) {
        let s = &opts.settings;
        let Some(workers) = r.workers else {
            return;
        };
        let sizes_itself = s.io_workers == 0 && s.io_min_workers < s.io_max_workers;
        if sizes_itself && workers >= s.io_max_workers && workers < r.iodepth {
            let kind = match r.io_worker_kind.as_deref() {
                Some("process") => "processes",
                _ => "threads",
            };
            note!(
                "dbaio bench: io_method worker ({kind}) ran its most workers, {workers} \
                 (io_max_workers), for iodepth {}: at most {workers} reads at a time reach \
                 the device (--io-workers or -c io_max_workers= for more)",
                r.iodepth
            );
        }
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
            output::line(&format!(
                "latency distribution drawn in \"{}\"",
                path.display()
            ))?;
        }
        Ok(())
    }
}

impl IoBenchPlan {
    /// After the runs: the table of what was measured (a run a signal stopped before its
    /// first I/O is left out, and said), the plot, the data file removed if temporary, and
    /// the exit status (128 + the signal's number when one stopped the runs).
    fn finish(
        &self,
        a: &BenchArgs,
        data: datafile::Prepared,
        mut reports: Vec<bench::BenchReport>,
        stop: &Interrupt,
    ) -> Outcome {
        if stop.raised() {
            let measured = |r: &bench::BenchReport| r.ios + r.errors > 0;
            for r in reports.iter().filter(|r| !measured(r)) {
                note!(
                    "dbaio bench: io_method {} was interrupted before its first I/O completed: no row for it",
                    r.io_method
                );
            }
            reports.retain(measured);
        }
        if !a.json && !reports.is_empty() {
            output::out(&bench::table(&reports))?;
        }
        if let Some(path) = &a.plot {
            if !reports.is_empty() {
                self.plot(a, path, &reports)?;
            }
        }
        drop(data); // a temporary file goes now
        if stop.raised() {
            let removed = if self.compare {
                "; removed the temporary data file"
            } else {
                ""
            };
            note!(
                "dbaio bench: {} of {} runs measured before the signal{removed}",
                reports.len(),
                self.methods.len()
            );
            return Err(interrupt::message().into());
        }
        first_failed_run(&reports)?;
        Ok(ExitCode::SUCCESS)
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
        "io" | "pool-hit" | "stream-hit" | "scan" => {}
        other => {
            return Err(format!(
                "invalid value for option \"--workload\": \"{other}\"\nHINT:  Available values: io, pool-hit, stream-hit, scan."
            )
            .into());
        }
    }
    options::check_bench_flags(&a.workload, &a.given)?;
    match a.workload.as_str() {
        "pool-hit" | "stream-hit" => return pool_hit_cmd(&a),
        "scan" => return scan_cmd(&a),
        _ => {}
    }
    let settings = options::settings(
        &a.set,
        &[
            ("io_method", a.io_method.as_deref()),
            ("io_workers", a.io_workers.as_deref()),
        ],
    )?;
    let socket = bench_socket(a.socket.as_deref(), &settings)?;
    let settings = dbaio::Settings {
        introspection_socket: socket,
        ..settings
    };
    let plan = IoBenchPlan::new(&a, &settings)?;
    if let Some(path) = &a.plot {
        dbaio_cli::plot::check_writable(path)?;
    }
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    let data = plan.data(&a, &stop)?;
    let opts = plan.options(&a, settings, &data, &stop);
    let reports = plan.run_methods(&a, &opts, &stop)?;
    plan.finish(&a, data, reports, &stop)
}

/// The socket a bench serves its view on: `--socket`, or `-c introspection_socket`; both only
/// if they agree.
fn bench_socket(
    flag: Option<&std::path::Path>,
    settings: &dbaio::Settings,
) -> Result<Option<PathBuf>, Failed> {
    match (flag, &settings.introspection_socket) {
        (Some(f), Some(c)) if f != c => Err(format!(
            "conflicting values for introspection_socket: --socket {} but -c introspection_socket={}",
            f.display(),
            c.display()
        )
        .into()),
        (Some(f), _) => Ok(Some(f.to_path_buf())),
        (None, c) => Ok(c.clone()),
    }
}

/// Runs each mode `rounds` times, in alternation, printing each run (as JSON with `--json`,
/// else its maximum and rate on stderr); the runs of each mode, until a signal stops them.
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
                let _ = write!(
                    std::io::stderr(),
                    "round {} of {rounds}: {} ... ",
                    round + 1,
                    mode.name()
                );
            }
            let r = match unlink_bench::run(opts, mode, stop) {
                Err(_) if stop.raised() => {
                    if !a.json {
                        note!("interrupted");
                    }
                    return Ok(runs);
                }
                r => r?,
            };
            if !a.json {
                note!("max {:.0} us, {:.0} ops/s", r.fg_lat_us.max, r.fg_ops_per_s);
            } else {
                output::json_line(&r)?;
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
        output::line(&format!(
            "latency over time drawn in \"{}\"",
            path.display()
        ))?;
    }
    Ok(())
}

/// `dbaio unlink-bench`'s options from its arguments, checked; says where it writes.
fn unlink_options(a: &UnlinkBenchArgs) -> Result<unlink_bench::UnlinkBenchOptions, Failed> {
    let method = a.io_method.clone().or_else(|| {
        let named = options::given(&a.set, "io_method");
        (!named).then(|| unlink_bench::default_method().name().to_string())
    });
    let settings = options::settings(&a.set, &[("io_method", method.as_deref())])?;
    let modes: Vec<&str> = a.mode.iter().map(|m| m.name()).collect();
    options::no_repeats("--mode", &modes)?;
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
    let opts = unlink_bench::UnlinkBenchOptions {
        dir: a.dir.clone().unwrap_or_else(std::env::temp_dir),
        chunks: options::in_range("chunks", a.chunks, 1, 1024)? as u32,
        chunk_size: options::in_range("chunk-size", a.chunk_size, 4096, 64 << 30)?,
        gc_cycles: options::in_range("gc-cycles", a.gc_cycles, 1, 1000)? as u32,
        check_every: options::in_range("check-every", a.check_every, 1, 1 << 30)?,
        foreground: a.foreground,
        live_size: 64 << 20,
        settings,
    };
    if let Some(path) = &a.plot {
        dbaio_cli::plot::check_writable(path)?;
    }
    note!("{}", unlink_bench::where_it_writes(&opts, a.dir.is_none()));
    Ok(opts)
}

/// `dbaio unlink-bench`: the rounds of each mode, their medians (of the runs done, when a
/// signal stopped them), and the plot.
fn unlink_bench_cmd(a: UnlinkBenchArgs) -> Outcome {
    let rounds = options::in_range("rounds", a.rounds, 1, 100)? as usize;
    let opts = unlink_options(&a)?;
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    let runs = unlink_rounds(&a, &opts, rounds, &stop)?;
    let done = runs.iter().map(Vec::len).min().unwrap_or(0);
    let medians: Vec<_> = runs
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| unlink_bench::median(r))
        .collect();
    if a.json {
        for m in &medians {
            let mut v =
                serde_json::to_value(m).map_err(|e| format!("could not encode the report: {e}"))?;
            v["median"] = serde_json::Value::Bool(true);
            output::json_line(&v)?;
        }
    } else if !medians.is_empty() {
        output::out(&unlink_bench::table(&medians, done.max(1)))?;
    }
    if let (Some(path), false) = (&a.plot, medians.is_empty()) {
        plot_unlink_timeline(&a, path, &opts, &medians)?;
    }
    if stop.raised() {
        return Err(interrupt::message().into());
    }
    Ok(ExitCode::SUCCESS)
}

/// True if the command line asks for JSON (so even a parse error is printed as JSON). The
/// arguments may hold any bytes (`--filename $'\xff'`).
fn wants_json() -> bool {
    std::env::args_os().skip(1).any(|a| a == "--json")
}

/// Reports a failure: words on stderr, and `{"error": …}` on stdout for `--json`; nothing
/// when standard output's reader went away.
fn fail(f: &Failed, json: bool) -> ExitCode {
    if f.message != output::BROKEN_PIPE {
        note!("dbaio: {}", f.message);
        if json {
            let _ = output::json_line(&serde_json::json!({ "error": f.message }));
        }
    }
    ExitCode::from(f.code)
}

/// The command line, with the flags each subcommand was given on it (so that a flag that does
/// not apply can be refused, not ignored).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Command::Bench(b), Some(m)) = (&mut cli.command, matches.subcommand_matches("bench")) {
        b.given = m
            .ids()
            .filter(|id| {
                m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|id| id.as_str().to_string())
            .collect();
    }
    Ok(cli)
}

/// A command line clap could not take, or `--help` and `--version`: printed as clap prints
/// them (the first line as JSON with `--json`), exit status 2 (0 for help and version, 1 if
/// they cannot be written).
fn parse_failed(e: &clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return match output::out(&e.render().to_string()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(m) => fail(&Failed::from(m), false),
        };
    }
    let text = e.render().to_string();
    if json {
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
    let _ = write!(std::io::stderr(), "{text}");
    ExitCode::from(2)
}

/// Looks at descriptor 1 before Rust's runtime puts `/dev/null` on a closed one (output.rs).
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = output::note_closed_stdout;

fn main() -> ExitCode {
    // SIGPIPE stays ignored (Rust's default): a reader that goes away (`dbaio bench --json |
    // head -1`) is a failed write the command handles, cleaning up its files on the way out,
    // then exiting quietly with status 141 (output.rs).
    if let Some(e) = output::closed_at_start() {
        note!("dbaio: {e}");
        return ExitCode::FAILURE;
    }
    let json = wants_json();
    let cli = match parse() {
        Ok(c) => c,
        Err(e) => return parse_failed(&e, json),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// A new flag of `dbaio bench` must say which workloads it applies to, or it would be
    /// taken, and ignored, by the others.
    #[test]
    fn every_bench_flag_says_which_workloads_it_applies_to() {
        let cli = Cli::command();
        let bench = cli.find_subcommand("bench").expect("bench");
        for arg in bench.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "json", "workload"].contains(&id) {
                continue;
            }
            assert!(
                options::BENCH_FLAGS.iter().any(|(f, _)| *f == id),
                "--{id} is not in options::BENCH_FLAGS"
            );
        }
    }
}
