//! A database file that `DbaioBackend::open` created survives a power loss once a commit with
//! `Durability::Immediate` has returned: the file, and the commit in it, are there after the
//! crash. Guards against an open that creates the file but never makes its directory entry
//! durable (no fsync of the parent directory): on `io_method = sim` such an entry is lost by
//! a crash about one time in two, taking every acknowledged commit with it.

use dbaio::{Aio, IoMethodKind, SimDisk};
use dbaio_redb::{BackendOptions, DbaioBackend};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const TABLE: TableDefinition<u64, u64> = TableDefinition::new("t");

/// A subsystem on `disk`.
fn start(disk: SimDisk, seed: u64) -> Aio {
    let s = dbaio::Settings {
        io_method: IoMethodKind::Sim,
        sim_seed: seed,
        buffer_pool_size: 0,
        ..dbaio::Settings::default()
    };
    let mut b = Aio::builder(s);
    b.sim_disk(disk);
    b.start().expect("a subsystem on the simulated disk")
}

/// Creates a database at `path` on a fresh disk, commits keys 0..100 durably, and cuts the
/// power with the database still open: the image of what survived.
fn create_commit_crash(seed: u64, path: &Path) -> SimDisk {
    let disk = SimDisk::new(seed);
    let aio = start(disk.clone(), seed);
    let backend = DbaioBackend::open(&aio, path, BackendOptions::default()).unwrap();
    let db = Database::builder().create_with_backend(backend).unwrap();
    let mut txn = db.begin_write().unwrap();
    txn.set_durability(Durability::Immediate).unwrap();
    {
        let mut t = txn.open_table(TABLE).unwrap();
        for k in 0..100u64 {
            t.insert(k, k * 7).unwrap();
        }
    }
    txn.commit().unwrap();
    let image = disk.crash();
    drop(db); // its shutdown writes fail: the power is already gone
    image
}

#[test]
fn a_created_database_and_its_commit_survive_a_crash() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("new.redb");
    let mut lost = Vec::new();
    for seed in 0..16 {
        let image = create_commit_crash(seed, &path);
        if image.contents(&path).is_none() {
            lost.push(seed);
            continue;
        }
        let aio = start(image, seed);
        let backend = DbaioBackend::open(&aio, &path, BackendOptions::default()).unwrap();
        let db = Database::builder().create_with_backend(backend).unwrap();
        let r = db.begin_read().unwrap();
        let t = r
            .open_table(TABLE)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for k in 0..100u64 {
            let v = t.get(k).unwrap().map(|v| v.value());
            assert_eq!(
                v,
                Some(k * 7),
                "seed {seed}: key {k} of the acknowledged commit"
            );
        }
        assert_eq!(t.iter().unwrap().count(), 100, "seed {seed}");
    }
    assert!(
        lost.is_empty(),
        "the database file was lost by the crash of seeds {lost:?}: its directory entry was never made durable"
    );
}
