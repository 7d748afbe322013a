//! The crash harness (`dbaio_redb::crash_sim`, the `crash_sim` example) on a few seeds with a
//! small workload: every acknowledged commit survives a crash at a seeded I/O and the database
//! reopens whole; the same seed replays the same run; and the control run, with the backend's
//! fdatasync and directory fsync skipped, loses acknowledged commits. Guards against an
//! adapter or a simulated disk that loses synced data (the first test fails), a harness that
//! cannot fail because the crash keeps everything or the check compares nothing (the control
//! fails), and a run that is not decided by its seed (a replay could not reproduce a failure).

use dbaio_redb::crash_sim::{CrashSim, SeedOutcome, Summary, replay_command, run_seed};

/// A small workload in a fresh real directory (nothing is written to it).
fn config(dir: &tempfile::TempDir, unsafe_skip_sync: bool) -> CrashSim {
    CrashSim {
        txns: 12,
        keys: 200,
        max_ops: 40,
        unsafe_skip_sync,
        ..CrashSim::new(dir.path())
    }
}

fn dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Runs `seeds`: the summary and the failing seeds' outcomes.
fn run(cfg: &CrashSim, seeds: std::ops::Range<u64>) -> (Summary, Vec<SeedOutcome>) {
    let mut sum = Summary::default();
    let mut failed = Vec::new();
    for seed in seeds {
        let o = run_seed(cfg, seed);
        sum.add(&o);
        if o.failed() {
            failed.push(o);
        }
    }
    (sum, failed)
}

#[test]
fn acknowledged_commits_survive_a_crash_at_any_io() {
    let d = dir();
    let cfg = config(&d, false);
    let (sum, failed) = run(&cfg, 0..100);
    let replays: Vec<String> = failed
        .iter()
        .map(|o| format!("{o:?}\n  replay: {}", replay_command(&cfg, o.seed)))
        .collect();
    assert!(failed.is_empty(), "{sum}\n{}", replays.join("\n"));
    assert_eq!(sum.crashes, 100, "every armed crash happened: {sum}");
    assert!(sum.commits_checked > 300, "commits were checked: {sum}");
}

#[test]
fn a_seed_replays_the_same_run() {
    let d = dir();
    let cfg = config(&d, false);
    for seed in [3, 4, 5] {
        let (a, b) = (run_seed(&cfg, seed), run_seed(&cfg, seed));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "seed {seed}");
    }
}

#[test]
fn without_fsync_the_harness_finds_lost_commits() {
    let d = dir();
    let cfg = config(&d, true);
    let (sum, failed) = run(&cfg, 0..30);
    assert!(sum.lost > 0, "the control run lost nothing: {sum}");
    let replay = replay_command(&cfg, failed[0].seed);
    assert!(replay.ends_with("--unsafe-skip-fsync"), "{replay}");
}
