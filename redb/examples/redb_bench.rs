//! redb on dbaio against redb on its own file backend, side by side: bulk load (keys in
//! random order, a durable commit every `--batch` keys), point reads (random keys, one read
//! transaction per 1000), and a full scan, on a warm page cache. Configurations run
//! interleaved, slice by slice (`--slices`), `--rounds` times, each round starting with the
//! next one; the table shows each phase's median and its ratio to redb's file backend.
//!
//! Each configuration loads its own database, all at once, a slice of commits each in turn.
//! Reads and scans (5 full scans per phase) then
//! run on one database loaded once and copied for each configuration, on a freshly opened
//! `Database` with a small redb cache (`--read-cache`) so that they reach the backend, all
//! configurations interleaved slice by slice (`--slices`) so that the machine's drift hits
//! them alike; the load uses redb's default cache.
//!
//! ```text
//! cargo run --release -p dbaio-redb --example redb_bench -- --keys 1000000
//! ```

use clap::Parser;
use dbaio::{Aio, IoMethodKind, Settings};
use dbaio_redb::{BackendOptions, DbaioBackend, WriteBehind};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::time::Instant;

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("bench");

#[derive(Parser)]
struct Args {
    /// Keys to load.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value: usize,
    /// Keys per durable commit during the load.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
    /// Point reads.
    #[arg(long, default_value_t = 1_000_000)]
    reads: u64,
    /// redb cache for the read phases, MiB.
    #[arg(long, default_value_t = 16)]
    read_cache: usize,
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for the database files (default: target/tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configurations to run (comma-separated): file, sync, worker, io_uring, io_uring+direct,
    /// worker+direct, sync+direct.
    #[arg(long, default_value = "file,sync,worker,io_uring,io_uring+direct")]
    configs: String,
    /// Write-behind of the dbaio backends: auto (behind on O_DIRECT only), off, or a depth.
    #[arg(long, default_value = "auto")]
    write_behind: WriteBehind,
    /// Slices the load's commits and the point reads are cut into, each configuration doing
    /// one slice in turn.
    #[arg(long, default_value_t = 20)]
    slices: u64,
    /// Skip the load rounds (measure reads and scans only).
    #[arg(long)]
    no_load: bool,
    /// A dbaio setting for every dbaio configuration, `NAME=VALUE` (repeatable), e.g.
    /// `-c track_io_timing=off`.
    #[arg(short = 'c', value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Print the results as JSON too.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Default)]
struct Times {
    load: f64,
    reads: f64,
    scan: f64,
    in_flight_at_commit: f64,
    max_in_flight_at_commit: u64,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ceb9fe1a85ec53);
    x ^ (x >> 33)
}

enum Backend {
    File,
    Dbaio(Aio, BackendOptions),
}

fn open(b: &Backend, path: &Path, cache: Option<usize>) -> Database {
    let mut builder = Database::builder();
    if let Some(c) = cache {
        builder.set_cache_size(c);
    }
    match b {
        Backend::File => builder.create(path).expect("create"),
        Backend::Dbaio(aio, opts) => builder
            .create_with_backend(DbaioBackend::open(aio, path, opts.clone()).expect("backend"))
            .expect("create"),
    }
}

/// Loads `a.keys` keys into a new database at `path`; seconds.
fn load(b: &Backend, path: &Path, a: &Args) -> f64 {
    let _ = std::fs::remove_file(path);
    let value = vec![0x5au8; a.value];
    // Keys in a random order (a bijection of 0..keys).
    let db = open(b, path, None);
    let start = Instant::now();
    for c in 0..a.keys.div_ceil(a.batch) {
        commit(&db, c, &value, a);
    }
    let t = start.elapsed().as_secs_f64();
    drop(db);
    t
}

/// Commit number `c` of the load: keys `c * batch ..` (mixed into a random order), durably.
fn commit(db: &Database, c: u64, value: &[u8], a: &Args) {
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(TABLE).unwrap();
        for key in c * a.batch..((c + 1) * a.batch).min(a.keys) {
            table.insert(mix(key), value).unwrap();
        }
    }
    txn.commit().unwrap();
}

/// The load of every configuration at once, each into its own new database, interleaved as
/// the reads are: each configuration makes one slice of the commits in turn, the order
/// rotating each slice (the device's speed drifts too, and a durable commit waits for it).
/// Seconds per configuration.
fn load_all(backends: &[Backend], paths: &[PathBuf], a: &Args, round: usize) -> Vec<f64> {
    let n = backends.len();
    let value = vec![0x5au8; a.value];
    let dbs: Vec<Database> = backends
        .iter()
        .zip(paths)
        .map(|(b, p)| {
            let _ = std::fs::remove_file(p);
            open(b, p, None)
        })
        .collect();
    let mut times = vec![0.0; n];
    let commits = a.keys.div_ceil(a.batch);
    let per_slice = commits.div_ceil(a.slices.max(1)).max(1);
    let mut first = 0;
    let mut s = 0;
    while first < commits {
        let last = (first + per_slice).min(commits);
        for k in 0..n {
            let i = (k + s + round) % n;
            let start = Instant::now();
            for c in first..last {
                commit(&dbs[i], c, &value, a);
            }
            times[i] += start.elapsed().as_secs_f64();
        }
        first = last;
        s += 1;
    }
    drop(dbs);
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
    times
}

/// Point reads, then `SCANS` full scans, of every configuration at once, interleaved: each
/// configuration's database (a copy of the same file, freshly opened, with a small cache)
/// reads one slice of the keys in turn, then the next slice, and so on, the order rotating
/// each slice; then each does a full scan in turn, `SCANS` times. Machine drift (this VM's
/// speed moves by ±20% over seconds) then hits every configuration alike. Seconds of reads
/// and of scans, per configuration.
fn read_phases(backends: &[Backend], paths: &[PathBuf], a: &Args, round: usize) -> Vec<(f64, f64)> {
    let n = backends.len();
    let dbs: Vec<Database> = backends
        .iter()
        .zip(paths)
        .map(|(b, p)| open(b, p, Some(a.read_cache << 20)))
        .collect();
    let mut times = vec![(0.0, 0.0); n];
    let mut found = vec![0u64; n];
    let slices = a.slices.max(1);
    let per_slice = a.reads.div_ceil(slices).next_multiple_of(1000);
    for s in 0..slices {
        let (lo, hi) = (s * per_slice, ((s + 1) * per_slice).min(a.reads));
        if lo >= hi {
            break;
        }
        for k in 0..n {
            let i = (k + s as usize + round) % n;
            let start = Instant::now();
            let mut j = lo;
            while j < hi {
                let r = dbs[i].begin_read().unwrap();
                let table = r.open_table(TABLE).unwrap();
                for q in j..(j + 1000).min(hi) {
                    let key = mix(mix(q) % a.keys);
                    found[i] += table.get(key).unwrap().is_some() as u64;
                }
                j += 1000;
            }
            times[i].0 += start.elapsed().as_secs_f64();
        }
    }
    for f in &found {
        assert_eq!(*f, a.reads, "every key read back");
    }
    for s in 0..SCANS as usize {
        for k in 0..n {
            let i = (k + s + round) % n;
            let start = Instant::now();
            let r = dbs[i].begin_read().unwrap();
            let table = r.open_table(TABLE).unwrap();
            let count = table.iter().unwrap().count() as u64;
            times[i].1 += start.elapsed().as_secs_f64();
            assert_eq!(count, a.keys, "the scan saw every key");
        }
    }
    times
}

/// Full scans per read phase (one is short enough for noise to dominate).
const SCANS: u32 = 5;

/// The load once more on a backend we keep, for the write-behind figures.
fn write_behind_figures(aio: &Aio, opts: &BackendOptions, path: &Path, a: &Args) -> (f64, u64) {
    let _ = std::fs::remove_file(path);
    let backend = DbaioBackend::open(aio, path, opts.clone()).unwrap();
    let probe = std::sync::Arc::new(backend);
    struct Shared(std::sync::Arc<DbaioBackend>);
    impl std::fmt::Debug for Shared {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    impl redb::StorageBackend for Shared {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.0.len()
        }
        fn read(&self, o: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.0.read(o, out)
        }
        fn set_len(&self, l: u64) -> Result<(), std::io::Error> {
            self.0.set_len(l)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            self.0.sync_data()
        }
        fn write(&self, o: u64, d: &[u8]) -> Result<(), std::io::Error> {
            self.0.write(o, d)
        }
        fn close(&self) -> Result<(), std::io::Error> {
            self.0.close()
        }
    }
    let db = Database::builder()
        .create_with_backend(Shared(std::sync::Arc::clone(&probe)))
        .unwrap();
    let value = vec![0x5au8; a.value];
    let keys = a.keys.min(200_000);
    let mut k = 0;
    while k < keys {
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(TABLE).unwrap();
            for i in k..(k + a.batch).min(keys) {
                table.insert(mix(i), value.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        k += a.batch;
    }
    drop(db);
    let s = probe.stats();
    (
        s.in_flight_at_sync as f64 / s.syncs.max(1) as f64,
        s.max_in_flight_at_sync,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The backend of configuration `c` (`file`, or a method with an optional `+direct`), with
/// `a`'s dbaio settings; exits on a setting dbaio refuses.
fn backend(c: &str, a: &Args) -> Backend {
    if c == "file" {
        return Backend::File;
    }
    let (m, direct) = match c.split_once('+') {
        Some((m, "direct")) => (m, true),
        None => (c, false),
        _ => panic!("unknown configuration {c}"),
    };
    let method: IoMethodKind = m.parse().expect("a method");
    let mut settings = Settings {
        io_method: method,
        ..Settings::default()
    };
    for kv in &a.set {
        let (k, v) = kv.split_once('=').expect("-c NAME=VALUE");
        if let Err(e) = settings.set(k, v) {
            eprintln!("redb_bench: {e}");
            std::process::exit(2);
        }
    }
    let aio = Aio::start(settings).expect("start");
    Backend::Dbaio(
        aio,
        BackendOptions {
            direct,
            write_behind: a.write_behind,
            ..BackendOptions::default()
        },
    )
}

/// The comparison: the arguments, each configuration with its backend, and the directory of
/// the database files (removed at the end).
struct Bench {
    a: Args,
    configs: Vec<String>,
    backends: Vec<Backend>,
    dir: tempfile::TempDir,
}

impl Bench {
    /// The comparison `a` asks for, in a new directory under `--dir` (default target/tmp).
    fn new(a: Args) -> Bench {
        let dir = a.dir.clone().unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/tmp"))
        });
        std::fs::create_dir_all(&dir).unwrap();
        let dir = tempfile::tempdir_in(dir).unwrap();
        let configs: Vec<String> = a.configs.split(',').map(str::to_string).collect();
        let backends = configs.iter().map(|c| backend(c, &a)).collect();
        Bench {
            a,
            configs,
            backends,
            dir,
        }
    }

    /// A path in the directory for each configuration: `{prefix}{config}.redb`.
    fn paths(&self, prefix: &str) -> Vec<PathBuf> {
        self.configs
            .iter()
            .map(|c| {
                self.dir
                    .path()
                    .join(format!("{prefix}{}.redb", c.replace('+', "-")))
            })
            .collect()
    }

    /// The load rounds: each configuration writes its own database, interleaved (see
    /// `load_all`); one `Times` per round and configuration, with its load only (0 with
    /// `--no-load`).
    fn load_rounds(&self) -> Vec<Vec<Times>> {
        let a = &self.a;
        let mut all: Vec<Vec<Times>> = vec![Vec::new(); self.configs.len()];
        let load_paths = self.paths("");
        for round in 0..a.rounds {
            if a.no_load {
                for t in all.iter_mut() {
                    t.push(Times::default());
                }
                continue;
            }
            let times = load_all(&self.backends, &load_paths, a, round);
            for (i, t) in times.into_iter().enumerate() {
                eprintln!("round {round} {:<16} load {t:.3}s", self.configs[i]);
                all[i].push(Times {
                    load: t,
                    ..Times::default()
                });
            }
        }
        all
    }

    /// The read rounds: every configuration reads a copy of the same database (loaded once,
    /// by the first configuration; a copy each because redb locks the file it opens),
    /// interleaved (see `read_phases`); fills in the reads and scans of `all`.
    fn read_rounds(&self, all: &mut [Vec<Times>]) {
        let a = &self.a;
        let shared = self.dir.path().join("shared.redb");
        load(&self.backends[0], &shared, a);
        let copies = self.paths("shared-");
        for p in &copies {
            std::fs::copy(&shared, p).expect("copy the shared database");
        }
        for round in 0..a.rounds {
            let times = read_phases(&self.backends, &copies, a, round);
            for ((row, config), (reads, scan)) in all.iter_mut().zip(&self.configs).zip(times) {
                eprintln!("round {round} {config:<16} reads {reads:.3}s scan x{SCANS} {scan:.3}s");
                row[round].reads = reads;
                row[round].scan = scan;
            }
        }
        for p in &copies {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_file(&shared);
    }

    /// Each configuration's medians over the rounds, with the write-behind figures of the
    /// dbaio backends.
    fn medians(&self, all: &[Vec<Times>]) -> Vec<Times> {
        all.iter()
            .zip(&self.backends)
            .enumerate()
            .map(|(i, (ts, b))| {
                let mut m = Times {
                    load: median(ts.iter().map(|t| t.load).collect()),
                    reads: median(ts.iter().map(|t| t.reads).collect()),
                    scan: median(ts.iter().map(|t| t.scan).collect()),
                    ..Times::default()
                };
                if let Backend::Dbaio(aio, opts) = b {
                    let path = self.dir.path().join(format!("probe-{i}.redb"));
                    let (avg, max) = write_behind_figures(aio, opts, &path, &self.a);
                    m.in_flight_at_commit = avg;
                    m.max_in_flight_at_commit = max;
                    let _ = std::fs::remove_file(&path);
                }
                m
            })
            .collect()
    }

    /// Prints the table of medians, with each phase's ratio to the file backend (and the
    /// JSON with `--json`).
    fn print(&self, med: &[Times]) {
        let a = &self.a;
        let base = self
            .configs
            .iter()
            .position(|c| c == "file")
            .map(|i| med[i]);
        println!(
            "redb {} keys x {} B, durable commit every {}, {} point reads, {SCANS} scans, median of {}",
            a.keys, a.value, a.batch, a.reads, a.rounds
        );
        println!(
            "{:<16} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7} {:>14}",
            "backend", "load s", "x file", "reads s", "x file", "scan s", "x file", "writes@commit"
        );
        let ratio = |f: f64, b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2}", b / f));
        let mut json = Vec::new();
        for (c, m) in self.configs.iter().zip(med) {
            let wb = if c == "file" {
                "-".to_string()
            } else {
                format!(
                    "{:.0} (max {})",
                    m.in_flight_at_commit, m.max_in_flight_at_commit
                )
            };
            println!(
                "{:<16} {:>9.3} {:>7} {:>9.3} {:>7} {:>9.3} {:>7} {:>14}",
                c,
                m.load,
                ratio(m.load, base.map(|b| b.load)),
                m.reads,
                ratio(m.reads, base.map(|b| b.reads)),
                m.scan,
                ratio(m.scan, base.map(|b| b.scan)),
                wb
            );
            json.push(serde_json::json!({
                "backend": c, "load_s": m.load, "reads_s": m.reads, "scan_s": m.scan,
                "writes_in_flight_at_commit_avg": m.in_flight_at_commit,
                "writes_in_flight_at_commit_max": m.max_in_flight_at_commit,
            }));
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&json).unwrap());
        }
    }
}

fn main() {
    let bench = Bench::new(Args::parse());
    let mut all = bench.load_rounds();
    bench.read_rounds(&mut all);
    let med = bench.medians(&all);
    bench.print(&med);
}
