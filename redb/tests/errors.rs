//! A write that fails (injected EIO, or ENOSPC) in the middle of a commit fails that commit
//! with an `io::Error` naming the file and errno — whether the write was behind (the failure
//! surfaces at the commit's sync) or on the spot — and after reopening, the database is whole
//! (redb's integrity check passes) and holds either the last successful commit or the failed
//! one entirely, never part of it. (Injected errors are reported after the write was really
//! done, as a disk may do after an error; so a failure of the commit's last write can leave
//! the commit durable, which is what a failed `fsync` means too.) On every method, buffered
//! and O_DIRECT.

#[path = "../../tests/common/skips.rs"]
mod skips;

use dbaio::{Aio, FaultAction, FaultRule, IoMethodKind, Op, Settings};
use dbaio_redb::{BackendOptions, DbaioBackend, WriteBehind};
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};

const TABLE: TableDefinition<u64, u64> = TableDefinition::new("t");

fn open(aio: &Aio, path: &std::path::Path, opts: &BackendOptions) -> Database {
    Database::builder()
        .create_with_backend(DbaioBackend::open(aio, path, opts.clone()).unwrap())
        .unwrap()
}

fn commit(db: &Database, from: u64, n: u64) -> Result<(), redb::CommitError> {
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(TABLE).unwrap();
        for k in from..from + n {
            t.insert(k, k * 3).unwrap();
        }
    }
    txn.commit()
}

fn scenario(method: IoMethodKind, opts: BackendOptions, errno: i32) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("e.redb");
    let aio = Aio::start(Settings {
        io_method: method,
        ..Settings::default()
    })
    .unwrap();
    {
        let db = open(&aio, &path, &opts);
        commit(&db, 0, 5000).unwrap();
        aio.inject_fault(
            FaultRule::new(FaultAction::Errno(errno))
                .op(Op::Writev)
                .times(1),
        );
        let e = commit(&db, 5000, 5000).expect_err("the commit with a failed write fails");
        let words = e.to_string();
        assert!(
            words.contains("e.redb") && words.contains(&format!("errno {errno}")),
            "{method} {opts:?}: {words}"
        );
        aio.clear_faults();
    }
    let mut db = open(&aio, &path, &opts);
    assert!(db.check_integrity().unwrap(), "{method} {opts:?}: whole");
    let r = db.begin_read().unwrap();
    let t = r.open_table(TABLE).unwrap();
    let n = t.len().unwrap();
    assert!(
        n == 5000 || n == 10000,
        "{method} {opts:?}: {n} keys, not one commit or the other"
    );
}

#[test]
fn a_failed_write_fails_its_commit_on_every_method() {
    for m in IoMethodKind::ALL {
        if m == IoMethodKind::IoUring && !skips::io_uring_column("redb failed writes") {
            continue;
        }
        for (opts, errno) in [
            (
                BackendOptions {
                    direct: false,
                    write_behind: WriteBehind::Depth(256),
                    ..BackendOptions::default()
                },
                libc::EIO,
            ),
            (BackendOptions::default(), libc::ENOSPC),
            (
                BackendOptions {
                    direct: true,
                    write_behind: WriteBehind::Auto,
                    ..BackendOptions::default()
                },
                libc::EIO,
            ),
        ] {
            scenario(m, opts, errno);
        }
    }
}
