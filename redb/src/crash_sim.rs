//! A crash-consistency harness for redb on `io_method = sim`, shared by the `crash_sim`
//! example and `tests/crash_sim.rs`; the pattern an engine author copies for their own
//! engine (`docs/embedding.md`, "Crash testing your engine on `io_method = sim`").
//!
//! One seed decides one run:
//!
//! 1. **Dry run.** On a fresh [`SimDisk`] seeded by the seed (`sim_seed` the seed too, latencies
//!    spread so completions reorder), create a database and run `txns` random write
//!    transactions — inserts, overwrites and deletes of keys whose values are derived from
//!    (transaction, key) — each committed with `Durability::Immediate` or, one in six,
//!    aborted; then close. Count the disk's I/Os from the moment the database exists (the
//!    crash window; [`CrashSim::crash_in_create`] opens it before the creation). The run is
//!    deterministic on one thread.
//! 2. **Crash run.** Pick an I/O `k` of the window from the seed, run the same workload on a
//!    fresh disk with [`SimDisk::crash_after`]`(k)` armed when the window opens, and stop at
//!    its first error (the crash makes the `k`th I/O and every later one fail). Record the
//!    expected state after each acknowledged commit, and the commit in flight, if any.
//! 3. **Recovery.** Start a new subsystem on the crash image, open the database (redb repairs
//!    after an unclean shutdown), read the table, run redb's integrity check.
//! 4. **Check.** The recovered table must equal the state after the last acknowledged commit,
//!    or that state with the in-flight commit applied. A table equal to the state after an
//!    earlier acknowledged commit (a clean rollback) loses the commits after it; any other
//!    contents — a value no transaction wrote, a mix of commits — is corrupt, as is a failed
//!    open, a panic, or a failed integrity check (and then every acknowledged commit counts
//!    as lost: none can be read back).

use crate::{BackendOptions, DbaioBackend, WriteBehind};
use dbaio::{Aio, IoMethodKind, Settings, SimDisk};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableError};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("crash_sim");

/// The database file's name in [`CrashSim::dir`].
pub const DB_FILE: &str = "crash-sim.redb";

/// What a run does (the same for every seed).
#[derive(Clone, Debug)]
pub struct CrashSim {
    /// A real directory for the database's path: the simulated disk lets files be made in
    /// any existing directory and writes nothing to the real file system.
    pub dir: PathBuf,
    /// Write transactions per run (committed or aborted).
    pub txns: u64,
    /// Keys are drawn from `0..keys`.
    pub keys: u64,
    /// Operations per transaction are drawn from `1..=max_ops`.
    pub max_ops: u64,
    /// Run the backend with [`BackendOptions::unsafe_skip_sync`]: the control run, which must
    /// lose acknowledged commits.
    pub unsafe_skip_sync: bool,
    /// Let the crash fall inside redb's creation of the database too (by default the crash
    /// window starts once `create_with_backend` has returned). redb 4.6 refuses a file whose
    /// creation a crash interrupted after it was first extended ("Not a redb database: magic
    /// number mismatch"), so with this set such seeds count as corrupt; see
    /// `docs/embedding.md`.
    pub crash_in_create: bool,
}

impl CrashSim {
    /// The defaults of the `crash_sim` example, in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> CrashSim {
        CrashSim {
            dir: dir.into(),
            txns: 40,
            keys: 1000,
            max_ops: 100,
            unsafe_skip_sync: false,
            crash_in_create: false,
        }
    }
}

/// What one seed's run found.
#[derive(Clone, Debug, Default)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// I/Os of the dry run in the crash window (from the database's creation on, or from the
    /// backend's open with [`CrashSim::crash_in_create`]).
    pub total_ios: u64,
    /// The I/O of the crash window after which the power went (`1..=total_ios`).
    pub crash_at: u64,
    /// The armed crash happened (false: the crash run did fewer I/Os than the dry run, so
    /// the run was not deterministic; the disk was crashed at the end instead).
    pub crashed: bool,
    /// Commits acknowledged before the crash (each checked).
    pub commits_checked: u64,
    /// What stopped the crash run (None: it ran to the end, the crash hit its last I/Os).
    pub stopped_by: Option<String>,
    /// Whether a commit was in flight at the crash, and whether recovery kept it.
    pub in_flight: Option<bool>,
    /// Acknowledged commits whose effects are not all in the recovered database.
    pub lost: u64,
    /// Why the recovered database is corrupt (None: it is not).
    pub corrupt: Option<String>,
}

impl SeedOutcome {
    /// Whether this seed found lost commits or corruption.
    pub fn failed(&self) -> bool {
        self.lost > 0 || self.corrupt.is_some()
    }
}

/// The totals over seeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds whose armed crash happened.
    pub crashes: u64,
    /// Acknowledged commits checked.
    pub commits_checked: u64,
    /// Acknowledged commits lost.
    pub lost: u64,
    /// Seeds whose recovered database was corrupt.
    pub corrupt: u64,
}

impl Summary {
    /// Adds one seed's outcome.
    pub fn add(&mut self, o: &SeedOutcome) {
        self.seeds += 1;
        self.crashes += u64::from(o.crashed);
        self.commits_checked += o.commits_checked;
        self.lost += o.lost;
        self.corrupt += u64::from(o.corrupt.is_some());
    }
}

impl Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "crash-sim: seeds {} crashes {} commits_checked {} lost {} corrupt {}",
            self.seeds, self.crashes, self.commits_checked, self.lost, self.corrupt
        )
    }
}

/// SplitMix64: the workload's draws, stable everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A stream of draws for `purpose`, from `seed`.
fn stream(seed: u64, purpose: u64) -> Rng {
    let mut r = Rng::new(seed ^ purpose.wrapping_mul(0xA24B_AED4_963E_E407));
    r.next();
    r
}

/// The value transaction `txn` writes at `key`: its first 16 bytes say who wrote it, the rest
/// is derived from both, so a value can be checked on its own. Mostly short, one in sixteen
/// a few KiB (overflow pages).
pub fn value(txn: u64, key: u64) -> Vec<u8> {
    let mut r = Rng::new(txn.wrapping_mul(0x1000_0000_01B3) ^ key);
    let h = r.next();
    let len = if h.is_multiple_of(16) {
        2000 + (h >> 8) % 4000
    } else {
        16 + (h >> 8) % 480
    } as usize;
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&txn.to_le_bytes());
    v.extend_from_slice(&key.to_le_bytes());
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The table's expected contents: key → the transaction whose value it holds.
type State = BTreeMap<u64, u64>;

/// One acknowledged commit: its transaction and the keys it wrote or deleted.
struct Commit {
    txn: u64,
    touched: BTreeSet<u64>,
}

/// What the crash run acknowledged.
#[derive(Default)]
struct Record {
    /// The state before any commit, then after each acknowledged one.
    states: Vec<State>,
    /// The acknowledged commits, in order (`states[i + 1]` is after `commits[i]`).
    commits: Vec<Commit>,
    /// The state the commit in flight at the stop would make (None: none was in flight).
    in_flight: Option<State>,
    /// What stopped the run (None: it ran to the end).
    stopped_by: Option<String>,
    /// The disk's I/Os when the crash window opened.
    window_start: u64,
}

/// The backend's options for `seed`: the three ways it writes, in turn — on the spot
/// (buffered), behind on a buffered file, behind on O_DIRECT.
fn backend_options(cfg: &CrashSim, seed: u64) -> BackendOptions {
    let (direct, write_behind) = match seed % 3 {
        0 => (false, WriteBehind::Auto),
        1 => (false, WriteBehind::Depth(32)),
        _ => (true, WriteBehind::Auto),
    };
    BackendOptions {
        direct,
        write_behind,
        unsafe_skip_sync: cfg.unsafe_skip_sync,
    }
}

/// A subsystem on `disk` for `seed`: latencies spread from 1 µs to 500 µs, so completions
/// come back out of order.
fn start(disk: &SimDisk, seed: u64) -> Result<Aio, String> {
    let s = Settings {
        io_method: IoMethodKind::Sim,
        sim_seed: seed & (i64::MAX as u64),
        sim_latency_min: 1,
        sim_latency_max: 500,
        buffer_pool_size: 0,
        max_issuers: 4,
        ..Settings::default()
    };
    let mut b = Aio::builder(s);
    b.sim_disk(disk.clone());
    b.start().map_err(|e| format!("start: {e}"))
}

fn text(what: &str, e: impl Display) -> String {
    format!("{what}: {e}")
}

/// The words of a panic's payload.
fn panic_words(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Runs the workload of `seed` on `disk`, recording what was acknowledged, until the end or
/// the first error (or panic); `arm`: a crash after that many I/Os of the crash window.
fn workload(cfg: &CrashSim, seed: u64, disk: &SimDisk, arm: Option<u64>) -> Record {
    let mut rec = Record {
        states: vec![State::new()],
        ..Record::default()
    };
    match catch_unwind(AssertUnwindSafe(|| {
        transactions(cfg, seed, disk, arm, &mut rec)
    })) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => rec.stopped_by = Some(e),
        Err(p) => rec.stopped_by = Some(format!("panic: {}", panic_words(&*p))),
    }
    rec
}

/// The workload's transactions; the first error is returned.
fn transactions(
    cfg: &CrashSim,
    seed: u64,
    disk: &SimDisk,
    arm: Option<u64>,
    rec: &mut Record,
) -> Result<(), String> {
    let open_window = |rec: &mut Record| {
        rec.window_start = disk.ios();
        if let Some(k) = arm {
            disk.crash_after(k);
        }
    };
    let aio = start(disk, seed)?;
    if cfg.crash_in_create {
        open_window(rec);
    }
    let path = cfg.dir.join(DB_FILE);
    let backend = DbaioBackend::open(&aio, &path, backend_options(cfg, seed))
        .map_err(|e| text("open the backend", e))?;
    let db = Database::builder()
        .create_with_backend(backend)
        .map_err(|e| text("create the database", e))?;
    if !cfg.crash_in_create {
        open_window(rec);
    }
    let mut rng = stream(seed, 1);
    for txn in 1..=cfg.txns {
        let abort = rng.below(6) == 0;
        let ops = 1 + rng.below(cfg.max_ops);
        let mut next = rec.states.last().expect("the initial state").clone();
        let mut touched = BTreeSet::new();
        let mut w = db.begin_write().map_err(|e| text("begin", e))?;
        w.set_durability(Durability::Immediate)
            .map_err(|e| text("durability", e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| text("open table", e))?;
            for _ in 0..ops {
                let key = rng.below(cfg.keys);
                touched.insert(key);
                if rng.below(4) == 0 {
                    t.remove(key).map_err(|e| text("remove", e))?;
                    next.remove(&key);
                } else {
                    t.insert(key, value(txn, key).as_slice())
                        .map_err(|e| text("insert", e))?;
                    next.insert(key, txn);
                }
            }
        }
        if abort {
            w.abort().map_err(|e| text("abort", e))?;
            continue;
        }
        rec.in_flight = Some(next.clone());
        w.commit().map_err(|e| text("commit", e))?;
        rec.in_flight = None;
        rec.states.push(next);
        rec.commits.push(Commit { txn, touched });
    }
    db.close().map_err(|e| text("close", e))
}

/// What the recovered database holds, or why it is corrupt.
fn recover(cfg: &CrashSim, seed: u64, image: &SimDisk) -> Result<State, String> {
    let aio = start(image, seed)?;
    let path = cfg.dir.join(DB_FILE);
    let backend = DbaioBackend::open(&aio, &path, backend_options(cfg, seed))
        .map_err(|e| text("reopen the backend", e))?;
    let mut db = Database::builder()
        .create_with_backend(backend)
        .map_err(|e| text("reopen the database", e))?;
    let state = read_table(&db)?;
    match db.check_integrity() {
        Ok(true) => Ok(state),
        Ok(false) => Err("the integrity check failed (and repaired the file)".into()),
        Err(e) => Err(text("the integrity check", e)),
    }
}

/// The table's contents, each value checked against the transaction it names.
fn read_table(db: &Database) -> Result<State, String> {
    let r = db.begin_read().map_err(|e| text("begin read", e))?;
    let t = match r.open_table(TABLE) {
        Ok(t) => t,
        Err(TableError::TableDoesNotExist(_)) => return Ok(State::new()),
        Err(e) => return Err(text("open the table", e)),
    };
    let mut state = State::new();
    for entry in t.iter().map_err(|e| text("scan", e))? {
        let (k, v) = entry.map_err(|e| text("scan", e))?;
        let (key, v) = (k.value(), v.value());
        let txn = v
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        match txn {
            Some(txn) if v == value(txn, key).as_slice() => {
                state.insert(key, txn);
            }
            _ => return Err(format!("key {key} holds a value no transaction wrote")),
        }
    }
    Ok(state)
}

/// Checks the recovered `got` against what `rec` acknowledged: (lost commits, corruption).
fn judge(rec: &Record, got: &State) -> (u64, Option<String>, Option<bool>) {
    let acked = rec.states.last().expect("the initial state");
    let in_flight = rec.in_flight.as_ref().map(|s| s == got);
    if got == acked || in_flight == Some(true) {
        return (0, None, in_flight);
    }
    let n = rec.commits.len();
    if let Some(j) = rec.states.iter().rposition(|s| s == got) {
        // A clean rollback to the state after commit j: the later ones are lost.
        return ((n - j) as u64, None, in_flight);
    }
    // No allowed state: count the acknowledged commits whose last word on a key is missing.
    let keys: BTreeSet<u64> = acked.keys().chain(got.keys()).copied().collect();
    let mut missing = BTreeSet::new();
    for k in keys {
        if acked.get(&k) != got.get(&k)
            && let Some(c) = rec.commits.iter().rev().find(|c| c.touched.contains(&k))
        {
            missing.insert(c.txn);
        }
    }
    let why = "the recovered table matches no state the acknowledged commits allow".into();
    (missing.len() as u64, Some(why), in_flight)
}

/// Runs seed `seed`: dry run, crash run, recovery, check.
pub fn run_seed(cfg: &CrashSim, seed: u64) -> SeedOutcome {
    let mut out = SeedOutcome {
        seed,
        ..SeedOutcome::default()
    };
    let dry_disk = SimDisk::new(seed);
    let dry = workload(cfg, seed, &dry_disk, None);
    out.total_ios = dry_disk.ios() - dry.window_start;
    if let Some(e) = dry.stopped_by {
        out.corrupt = Some(format!("the dry run failed without a crash: {e}"));
        return out;
    }
    out.crash_at = 1 + stream(seed, 2).below(out.total_ios);
    let disk = SimDisk::new(seed);
    let rec = workload(cfg, seed, &disk, Some(out.crash_at));
    let image = match disk.crash_image() {
        Some(image) => {
            out.crashed = true;
            image
        }
        None => disk.crash(),
    };
    out.commits_checked = rec.commits.len() as u64;
    out.stopped_by = rec.stopped_by.clone();
    let recovered = catch_unwind(AssertUnwindSafe(|| recover(cfg, seed, &image)))
        .unwrap_or_else(|p| Err(format!("panic in recovery: {}", panic_words(&*p))));
    match recovered {
        Ok(got) => (out.lost, out.corrupt, out.in_flight) = judge(&rec, &got),
        Err(e) => {
            // Nothing acknowledged can be read back: every commit is lost.
            out.lost = out.commits_checked;
            out.corrupt = Some(e);
            out.in_flight = rec.in_flight.as_ref().map(|_| false);
        }
    }
    out
}

/// The command that replays `seed` of `cfg` with the `crash_sim` example.
pub fn replay_command(cfg: &CrashSim, seed: u64) -> String {
    let d = CrashSim::new(&cfg.dir);
    let mut c = format!(
        "cargo run --release -p dbaio-redb --example crash_sim -- --seeds 1 --first-seed {seed}"
    );
    for (name, v, default) in [
        ("txns", cfg.txns, d.txns),
        ("keys", cfg.keys, d.keys),
        ("max-ops", cfg.max_ops, d.max_ops),
    ] {
        if v != default {
            c += &format!(" --{name} {v}");
        }
    }
    if cfg.unsafe_skip_sync {
        c += " --unsafe-skip-fsync";
    }
    if cfg.crash_in_create {
        c += " --crash-in-create";
    }
    c
}

#[cfg(test)]
mod tests {
    //! The check on made-up records: the states it accepts, a rollback, a mix of commits.
    use super::*;

    /// Three acknowledged commits: 1 writes keys 1 and 2, 2 overwrites 2, 3 deletes 1 and
    /// writes 3; a fourth (writing key 4) in flight.
    fn record() -> Record {
        let mut rec = Record {
            states: vec![State::new()],
            ..Record::default()
        };
        let mut s = State::new();
        for (txn, writes, deletes) in [(1, &[1, 2][..], &[][..]), (2, &[2], &[]), (3, &[3], &[1])] {
            for &k in writes {
                s.insert(k, txn);
            }
            for &k in deletes {
                s.remove(&k);
            }
            rec.states.push(s.clone());
            let touched = writes.iter().chain(deletes).copied().collect();
            rec.commits.push(Commit { txn, touched });
        }
        s.insert(4, 4);
        rec.in_flight = Some(s);
        rec
    }

    #[test]
    fn the_last_acknowledged_state_or_the_one_in_flight_passes() {
        let rec = record();
        let last = rec.states[3].clone();
        assert_eq!(judge(&rec, &last), (0, None, Some(false)));
        let with = rec.in_flight.clone().unwrap();
        assert_eq!(judge(&rec, &with), (0, None, Some(true)));
    }

    #[test]
    fn a_rollback_loses_the_commits_after_it() {
        let rec = record();
        assert_eq!(judge(&rec, &rec.states[1]), (2, None, Some(false)));
        assert_eq!(judge(&rec, &State::new()), (3, None, Some(false)));
    }

    #[test]
    fn a_mix_of_commits_is_corrupt_and_names_the_commits_missing() {
        let rec = record();
        // Commit 3's delete of key 1 is missing, its write of key 3 is there.
        let mut mixed = rec.states[3].clone();
        mixed.insert(1, 1);
        let (lost, corrupt, _) = judge(&rec, &mixed);
        assert_eq!(lost, 1);
        assert!(corrupt.is_some());
    }

    #[test]
    fn a_value_says_who_wrote_it() {
        let v = value(7, 99);
        assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 7);
        assert_eq!(u64::from_le_bytes(v[8..16].try_into().unwrap()), 99);
        assert_ne!(v, value(8, 99));
        assert!((16..6000).contains(&v.len()));
    }
}
