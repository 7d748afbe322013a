//! The `dbaio` command: `bench` (fio-like, or a comparison of every method), `aios` and `stat`
//! (clients of an embedder's introspection socket).
//! The contract of its flags and JSON fields is in ARCHITECTURE.md and `docs/benchmarks.md`.

use clap::{Parser, Subcommand};
use dbaio::IoMethodKind;
use dbaio_cli::bench::{self, BenchOptions, Rw};
use dbaio_cli::screens;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Benchmark reads or writes; without --filename, compare every method on a temp file.
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
}

#[derive(clap::Args)]
struct PrewarmArgs {
    /// First segment of each relation (e.g. base/5/16403).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// io_method (default: io_uring if the kernel allows it, else worker).
    #[arg(long)]
    io_method: Option<String>,
    /// Read with O_DIRECT (the default; --buffered reads through the page cache).
    #[arg(long, overrides_with = "buffered")]
    direct: bool,
    /// Read through the kernel's page cache.
    #[arg(long)]
    buffered: bool,
    /// Buffer pool size (8kB blocks or units: 512MB, 2GB). Default: room for every block,
    /// at most half the memory.
    #[arg(long, value_parser = bench::parse_size)]
    buffer_pool: Option<u64>,
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
    /// io_method (default: io_uring if the kernel allows it, else worker).
    #[arg(long)]
    io_method: Option<String>,
    /// Worker threads for the worker method.
    #[arg(long, default_value_t = 4)]
    io_workers: u32,
    /// Reads (of up to 128 kB) in flight.
    #[arg(long, default_value_t = 16)]
    iodepth: u32,
    /// Read through the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
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
    /// A live screen by issuer, refreshed every SECS seconds (default 1).
    #[arg(long, num_args = 0..=1, default_missing_value = "1")]
    watch: Option<f64>,
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
    #[arg(long)]
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
    /// Data file (created and filled if missing or short). Without it: a temp file and a
    /// comparison of every available method.
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
    /// I/Os in flight.
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
    /// Seconds per run.
    #[arg(long)]
    runtime: Option<f64>,
    /// Use O_DIRECT (the comparison always does).
    #[arg(long)]
    direct: bool,
    /// io_method (sync, worker, io_uring); default: every method.
    #[arg(long)]
    io_method: Option<String>,
    /// Worker threads for the worker method.
    #[arg(long, default_value_t = 3)]
    io_workers: u32,
    /// Refill submissions are grouped in batches of at most this many I/Os.
    #[arg(long, default_value_t = 4)]
    batch: u32,
    /// Wait for at least this many completions before refilling (0: iodepth/8).
    #[arg(long, default_value_t = 0)]
    complete_min: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Serve this run's aios view on a unix socket (see `dbaio aios --socket`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// `io` (default); `pool-hit`: block pins from --issuers threads, all resident;
    /// `stream-hit`: read streams over resident blocks.
    #[arg(long, default_value = "io")]
    workload: String,
    /// Issuer threads for --workload pool-hit.
    #[arg(long, default_value_t = 1)]
    issuers: u32,
    /// With --workload pool-hit: read each pinned page whole (not just one byte).
    #[arg(long)]
    touch_page: bool,
}

fn aios_cmd(a: AiosArgs) -> Result<(), String> {
    if let Some(secs) = a.watch {
        if !(secs > 0.0 && secs.is_finite()) {
            return Err(format!("invalid --watch interval {secs}"));
        }
        return screens::watch(&a.socket, Duration::from_secs_f64(secs), a.count);
    }
    let v = screens::fetch(&a.socket, "aios")?;
    let mut rows: Vec<dbaio::AioRow> =
        serde_json::from_value(v["aios"].clone()).map_err(|e| format!("unexpected reply: {e}"))?;
    if a.json {
        print_json(&rows)?;
    } else {
        print!("{}", screens::aios_table(&mut rows));
    }
    Ok(())
}

fn stat_cmd(a: StatArgs) -> Result<(), String> {
    let all = screens::fetch_all(&a.socket)?;
    if a.json {
        let v = serde_json::json!({ "pid": all.pid, "io_method": all.io_method, "uptime_s": all.uptime_s, "waits": all.waits, "stats": all.stats });
        print_json(&v)?;
    } else if a.prometheus {
        print!("{}", screens::prometheus(&all));
    } else {
        print!("{}", screens::stats_table(&all));
    }
    if a.reset {
        screens::fetch(&a.socket, "reset_stats")?;
    }
    Ok(())
}

/// Prints `v` as pretty JSON on stdout.
fn print_json(v: &impl serde::Serialize) -> Result<(), String> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn prewarm_cmd(a: PrewarmArgs) -> Result<ExitCode, String> {
    let mut settings = dbaio::Settings::default();
    let method = match &a.io_method {
        Some(m) => m.clone(),
        None if dbaio::io_uring_available().is_ok() => "io_uring".into(),
        None => "worker".into(),
    };
    settings
        .set("io_method", &method)
        .map_err(|e| e.to_string())?;
    for kv in &a.set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("invalid setting \"{kv}\": expected NAME=VALUE"))?;
        settings.set(k, v).map_err(|e| e.to_string())?;
    }
    settings.buffer_pool_size = match a.buffer_pool {
        Some(bytes) => (bytes / u64::from(settings.block_size)).max(16),
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
        print_json(&r)?;
    } else {
        println!(
            "prewarmed {} blocks ({} files, {:.1} MB) in {:.3} s: {:.1} MB/s, {} reads, io_method {}{}",
            r.blocks,
            r.files,
            r.bytes as f64 / 1e6,
            r.seconds,
            r.bytes_per_sec / 1e6,
            r.reads,
            r.io_method,
            if a.verify_checksums {
                format!(", {} checksum failures", r.checksum_failures)
            } else {
                String::new()
            }
        );
    }
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn verify_cmd(a: VerifyArgs) -> Result<ExitCode, String> {
    let io_method = match &a.io_method {
        Some(m) => m.parse().map_err(|e: dbaio::SettingsError| e.to_string())?,
        None if dbaio::io_uring_available().is_ok() => IoMethodKind::IoUring,
        None => IoMethodKind::Worker,
    };
    let opts = dbaio_cli::checksums::VerifyOptions {
        io_method,
        io_workers: a.io_workers,
        depth: a.iodepth,
        direct: !a.buffered,
    };
    let report = match dbaio_cli::checksums::run(&a.pgdata, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("dbaio: error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if a.json {
        print_json(&report)?;
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

fn pool_hit_cmd(a: &BenchArgs) -> Result<(), String> {
    let temp = tempfile::tempdir().map_err(|e| format!("could not create a temp dir: {e}"))?;
    let filename = a
        .filename
        .clone()
        .unwrap_or_else(|| temp.path().join("dbaio-pool.dat"));
    let blocks = 4096u32; // 32 MiB of 8 KiB pages
    bench::prepare_file(&filename, u64::from(blocks) * 8192).map_err(|e| e.to_string())?;
    let runtime = Duration::from_secs_f64(a.runtime.unwrap_or(3.0));
    let streams = a.workload == "stream-hit";
    let r = bench::pool_hit(
        &filename,
        blocks,
        a.issuers.max(1),
        runtime,
        a.touch_page,
        streams,
    )
    .map_err(|e| e.to_string())?;
    if a.json {
        print_json(&r)?;
    } else {
        println!(
            "{}: {} issuers, {} resident blocks, {:.0} hits/s ({} hits in {:.2} s)",
            a.workload, r.issuers, r.blocks, r.hits_per_sec, r.hits, r.seconds
        );
    }
    Ok(())
}

fn bench_cmd(a: BenchArgs) -> Result<(), String> {
    match a.workload.as_str() {
        "io" => {}
        "pool-hit" | "stream-hit" => return pool_hit_cmd(&a),
        other => {
            return Err(format!(
                "unknown --workload \"{other}\" (io, pool-hit, stream-hit)"
            ));
        }
    }
    let methods: Vec<IoMethodKind> = match &a.io_method {
        Some(m) => vec![m.parse().map_err(|e: dbaio::SettingsError| e.to_string())?],
        None => IoMethodKind::ALL.to_vec(),
    };
    let temp = tempfile::tempdir().map_err(|e| format!("could not create a temp dir: {e}"))?;
    let compare = a.filename.is_none();
    let filename = a
        .filename
        .clone()
        .unwrap_or_else(|| temp.path().join("dbaio-bench.dat"));
    let size = a.size.unwrap_or(if compare { 512 << 20 } else { 1 << 30 });
    let runtime = a.runtime.unwrap_or(if compare { 3.0 } else { 5.0 });
    if a.bs == 0 || a.bs > u64::from(u32::MAX) || size < a.bs {
        return Err(format!("invalid block size {} for size {size}", a.bs));
    }
    if compare && !a.json {
        eprintln!(
            "dbaio bench: writing a {} MiB data file in {} ...",
            size >> 20,
            temp.path().display()
        );
    }
    bench::prepare_file(&filename, size)
        .map_err(|e| format!("could not prepare \"{}\": {e}", filename.display()))?;
    let opts = BenchOptions {
        filename,
        size,
        rw: a.rw,
        bs: a.bs as u32,
        iodepth: a.iodepth,
        runtime: Duration::from_secs_f64(runtime),
        direct: a.direct || compare,
        io_workers: a.io_workers,
        batch: a.batch.max(1),
        complete_min: if a.complete_min == 0 {
            (a.iodepth / 8).max(1)
        } else {
            a.complete_min
        },
        progress: !a.json && runtime > 2.0 && std::io::stderr().is_terminal(),
        socket: a.socket.clone(),
    };
    let mut reports = Vec::new();
    for m in methods {
        if m == IoMethodKind::IoUring {
            if let Err(why) = dbaio::io_uring_available() {
                if compare {
                    eprintln!("dbaio bench: skipping io_uring: {why}");
                    continue;
                }
                return Err(format!("io_uring is not available: {why}"));
            }
        }
        reports.push(bench::run(&opts, m).map_err(|e| e.to_string())?);
    }
    if a.json {
        let out = if reports.len() == 1 && !compare {
            serde_json::to_string_pretty(&reports[0])
        } else {
            serde_json::to_string_pretty(&reports)
        };
        println!("{}", out.map_err(|e| e.to_string())?);
    } else {
        print!("{}", bench::table(&reports));
    }
    Ok(())
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`dbaio verify … | head`), instead of panicking on a failed print.
    // SAFETY: restoring the default disposition of SIGPIPE, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
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
    let r = match cli.command {
        Command::Bench(a) => bench_cmd(a),
        Command::Aios(a) => aios_cmd(a),
        Command::Stat(a) => stat_cmd(a),
        Command::Prewarm(a) => match prewarm_cmd(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Verify(a) => match verify_cmd(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dbaio: {e}");
            ExitCode::FAILURE
        }
    }
}
