//! Crash-consistency test of redb on dbaio's simulated disk (`io_method = sim`): for each seed
//! in `S..S+N`, a seeded run of random transactions is crashed at an I/O picked by the seed,
//! the database is recovered from what the disk kept, and every acknowledged commit is
//! checked (`dbaio_redb::crash_sim` says how; `docs/embedding.md` how to write one for another
//! engine).
//!
//! ```text
//! cargo run --release -p dbaio-redb --example crash_sim -- --seeds 500
//! cargo run --release -p dbaio-redb --example crash_sim -- --seeds 500 --unsafe-skip-fsync
//! ```
//!
//! Prints a line per failing seed with the command that replays it, then one summary line:
//! `crash-sim: seeds N crashes N commits_checked C lost L corrupt K`. Exit status: 0 when
//! nothing was lost or corrupt, 1 when something was; with `--unsafe-skip-fsync` (the control
//! run, which must fail) the other way round: 0 when something was lost or corrupt, 1 when the
//! harness caught nothing. `-v` prints every seed.

use clap::Parser;
use dbaio_redb::crash_sim::{CrashSim, Summary, replay_command, run_seed};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Parser)]
struct Args {
    /// Seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed (default: one from the clock, printed).
    #[arg(long)]
    first_seed: Option<u64>,
    /// Write transactions per seed (committed or aborted).
    #[arg(long, default_value_t = CrashSim::new("").txns)]
    txns: u64,
    /// Keys are drawn from 0..keys.
    #[arg(long, default_value_t = CrashSim::new("").keys)]
    keys: u64,
    /// Operations per transaction are drawn from 1..=max-ops.
    #[arg(long, default_value_t = CrashSim::new("").max_ops)]
    max_ops: u64,
    /// Run the backend without fdatasync or directory fsync (the control run: it must lose
    /// commits, or the harness cannot catch anything).
    #[arg(long)]
    unsafe_skip_fsync: bool,
    /// Let the crash fall inside redb's creation of the database too (by default the crash
    /// window opens once the database exists; redb 4.6 refuses a file whose creation was cut
    /// short, see docs/embedding.md).
    #[arg(long)]
    crash_in_create: bool,
    /// Print every seed's outcome.
    #[arg(short, long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let first = a.first_seed.unwrap_or_else(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        let s = now.as_nanos() as u64 % 1_000_000_000;
        println!("crash-sim: first seed {s} (from the clock)");
        s
    });
    // A real directory for the database's path; the simulated disk writes nothing to it.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cfg = CrashSim {
        txns: a.txns,
        keys: a.keys,
        max_ops: a.max_ops,
        unsafe_skip_sync: a.unsafe_skip_fsync,
        crash_in_create: a.crash_in_create,
        ..CrashSim::new(dir.path())
    };
    let mut sum = Summary::default();
    for seed in first..first + a.seeds {
        let o = run_seed(&cfg, seed);
        sum.add(&o);
        if a.verbose {
            println!("{o:?}");
        }
        if o.failed() {
            let why = o.corrupt.as_deref().unwrap_or("-");
            println!(
                "seed {seed}: lost {} corrupt {why} (crash after I/O {} of {}, {} commits acknowledged); replay: {}",
                o.lost,
                o.crash_at,
                o.total_ios,
                o.commits_checked,
                replay_command(&cfg, seed)
            );
        }
    }
    println!("{sum}");
    let failed = sum.lost > 0 || sum.corrupt > 0;
    if failed != a.unsafe_skip_fsync {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
