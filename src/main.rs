//! The `dbaio` command: `bench` (fio-like, or a comparison of every method).
//! The contract of its flags and JSON fields is in ARCHITECTURE.md and `docs/benchmarks.md`.

use clap::{Parser, Subcommand};
use dbaio::IoMethodKind;
use dbaio::bench::{self, BenchOptions, Rw};
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
}

fn bench_cmd(a: BenchArgs) -> Result<(), String> {
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DBAIO_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Bench(a) => bench_cmd(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dbaio: {e}");
            ExitCode::FAILURE
        }
    }
}
