//! redb on dbaio against a model: seeded random workloads — inserts, removes and overwrites
//! of values from 0 bytes to 3 pages, durable and non-durable commits, aborted transactions,
//! reopening the database, point reads and full scans — on every method, buffered and
//! O_DIRECT, with write-behind and without. After every commit and every reopen the database
//! must hold exactly what the model holds, and redb's own integrity check must pass.

#[path = "../../tests/common/skips.rs"]
mod skips;

use dbaio::{Aio, IoMethodKind, Settings};
use dbaio_redb::{BackendOptions, DbaioBackend, WriteBehind};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::BTreeMap;

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("model");

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn value(key: u64, version: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (key.wrapping_mul(31) ^ version ^ i as u64) as u8)
        .collect()
}

fn open(aio: &Aio, path: &std::path::Path, opts: &BackendOptions) -> Database {
    let backend = DbaioBackend::open(aio, path, opts.clone()).expect("open backend");
    Database::builder()
        .set_cache_size(1 << 20) // small: reads reach the backend
        .create_with_backend(backend)
        .expect("create database")
}

fn check(db: &Database, model: &BTreeMap<u64, Vec<u8>>, rng: &mut Rng, what: &str) {
    let r = db.begin_read().unwrap();
    let t = match r.open_table(TABLE) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            assert!(model.is_empty(), "{what}: table missing");
            return;
        }
        Err(e) => panic!("{what}: {e}"),
    };
    // Point reads (present and absent keys), then a full scan.
    for _ in 0..50 {
        let k = rng.below(2000);
        let got = t.get(k).unwrap().map(|v| v.value().to_vec());
        assert_eq!(got.as_ref(), model.get(&k), "{what}: key {k}");
    }
    let scanned: Vec<(u64, Vec<u8>)> = t
        .iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect();
    let expected: Vec<(u64, Vec<u8>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(scanned.len(), expected.len(), "{what}: scan length");
    assert!(scanned == expected, "{what}: scan differs from the model");
}

fn workload(method: IoMethodKind, direct: bool, write_behind: WriteBehind, seed: u64) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("model.redb");
    let aio = Aio::start(Settings {
        io_method: method,
        ..Settings::default()
    })
    .unwrap();
    let opts = BackendOptions {
        direct,
        write_behind,
        ..BackendOptions::default()
    };
    let mut rng = Rng(seed);
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut db = open(&aio, &path, &opts);
    let mut version = 0;
    let mut unsynced = false;
    for round in 0..60 {
        let what =
            format!("{method} direct={direct} behind={write_behind:?} seed={seed} round {round}");
        let mut txn = db.begin_write().unwrap();
        let durable = rng.below(4) != 0;
        if !durable {
            txn.set_durability(Durability::None).unwrap();
        }
        let mut next = model.clone();
        {
            let mut t = txn.open_table(TABLE).unwrap();
            for _ in 0..rng.below(200) {
                let k = rng.below(2000);
                version += 1;
                if rng.below(5) == 0 {
                    t.remove(k).unwrap();
                    next.remove(&k);
                } else {
                    let len = match rng.below(10) {
                        0 => 0,
                        1 => 4096 + rng.below(8192) as usize,
                        _ => rng.below(300) as usize,
                    };
                    let v = value(k, version, len);
                    t.insert(k, v.as_slice()).unwrap();
                    next.insert(k, v);
                }
            }
        }
        if rng.below(8) == 0 {
            txn.abort().unwrap();
        } else {
            txn.commit().unwrap();
            model = next;
            unsynced = !durable;
        }
        check(&db, &model, &mut rng, &what);
        // Reopen now and then, after a durable commit (a non-durable one may be lost on
        // reopen by design; make it durable first).
        if rng.below(6) == 0 {
            if unsynced {
                let txn = db.begin_write().unwrap();
                txn.commit().unwrap();
            }
            drop(db);
            db = open(&aio, &path, &opts);
            check(&db, &model, &mut rng, &format!("{what}, reopened"));
        }
    }
    assert!(db.check_integrity().unwrap(), "redb's integrity check");
    drop(db);
    // Handles whose tickets were redeemed stay with this thread's issuer (COMPLETED_SHARED)
    // until it next needs one: nothing is in flight.
    let rows = aio.aios();
    assert!(
        rows.iter().all(|r| r.state == "COMPLETED_SHARED"),
        "no I/O left in flight: {rows:?}"
    );
    aio.shutdown();
}

fn methods() -> Vec<IoMethodKind> {
    IoMethodKind::ALL
        .into_iter()
        .filter(|&m| m != IoMethodKind::IoUring || skips::io_uring_column("redb model"))
        .collect()
}

#[test]
fn buffered_with_write_behind_on_every_method() {
    for m in methods() {
        for seed in [1, 2] {
            workload(m, false, WriteBehind::Depth(256), seed);
        }
    }
}

#[test]
fn direct_with_write_behind_on_every_method() {
    for m in methods() {
        for seed in [3, 4] {
            workload(m, true, WriteBehind::Auto, seed);
        }
    }
}

#[test]
fn buffered_default_and_direct_without_write_behind_on_every_method() {
    for m in methods() {
        workload(m, false, WriteBehind::Auto, 5);
        workload(m, true, WriteBehind::Off, 6);
    }
}
