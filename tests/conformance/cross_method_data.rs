//! Data written by one method is read back identically by every method, io_uring included:
//! each column writes a file with vectored O_DIRECT writes (several buffers per I/O), then
//! sync (the oracle), worker threads, worker processes and io_uring each read it back, whole,
//! with one vectored read, buffered and O_DIRECT, and every byte is checked; each reader's
//! reads must have been executed by that reader's method. Guards against a method that
//! writes or reads a vectored I/O differently from the others (a buffer misplaced, an offset
//! off by one buffer, a short transfer taken for a whole one), and against a reader column
//! that does not run (an io_uring reader skipped in silence, or a read served by another
//! executor than the method under test).

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, IoWorkerKind, OpenOptions};

const BUFS: u64 = 64;
const BUF: u64 = 4096;

/// The readers: every method, the worker method with threads and with processes.
const READERS: [(&str, IoMethodKind, IoWorkerKind); 4] = [
    ("sync", IoMethodKind::Sync, IoWorkerKind::Thread),
    ("worker threads", IoMethodKind::Worker, IoWorkerKind::Thread),
    (
        "worker processes",
        IoMethodKind::Worker,
        IoWorkerKind::Process,
    ),
    ("io_uring", IoMethodKind::IoUring, IoWorkerKind::Thread),
];

/// Who may execute a read of `reader`'s: the issuer on sync; a worker, or the waiting issuer
/// taking a queued I/O back, on the worker method; the ring on io_uring.
fn executed_by_method(reader: IoMethodKind, executor: &str) -> bool {
    match reader {
        IoMethodKind::Sync => executor == "issuer",
        IoMethodKind::Worker => executor.starts_with("worker ") || executor == "waiter",
        IoMethodKind::IoUring => executor == "io_uring",
        IoMethodKind::Sim => executor == "sim",
    }
}

fn scenario(method: IoMethodKind) {
    let writer = if on_processes() {
        "worker processes".to_string()
    } else {
        method.to_string()
    };
    let d = dir();
    let path = d.path().join("x");
    {
        let aio = start(method);
        let me = aio.register_issuer("writer").unwrap();
        let f = aio
            .open(&path, &OpenOptions::read_write().direct(true))
            .unwrap();
        for i in 0..BUFS / 4 {
            let bufs: Vec<IoBuf> = (0..4u64)
                .map(|k| {
                    let off = (i * 4 + k) * BUF;
                    let bytes: Vec<u8> = (off..off + BUF).map(pattern_byte).collect();
                    IoBuf::from_slice(&bytes)
                })
                .collect();
            me.wait(me.acquire().unwrap().writev(&f, i * 4 * BUF, bufs).unwrap())
                .check()
                .unwrap();
        }
        me.fsync(&f).unwrap();
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), BUFS * BUF);
    for (reader_name, reader, kind) in READERS {
        if reader == IoMethodKind::IoUring
            && !io_uring_column(&format!("{} (reading what {writer} wrote)", module_path!()))
        {
            continue;
        }
        let aio = start_with(reader, |s| {
            s.io_worker_kind = kind;
            s.io_max_combine_limit = BUFS as u32;
            // Buffered reads go to the workers too, not to the issuer's page-cache try.
            s.io_worker_try_cached = false;
        });
        let me = aio.register_issuer("reader").unwrap();
        for direct in [false, true] {
            let f = aio
                .open(&path, &OpenOptions::read().direct(direct))
                .unwrap();
            let bufs: Vec<IoBuf> = (0..BUFS).map(|_| IoBuf::new(BUF as usize)).collect();
            let c = me.wait(me.acquire().unwrap().readv(&f, 0, bufs).unwrap());
            c.check().unwrap_or_else(|e| {
                panic!("{writer} wrote, {reader_name} read (direct {direct}): {e}")
            });
            let bufs = c.into_bufs();
            assert_eq!(bufs.len(), BUFS as usize);
            for (j, b) in bufs.iter().enumerate() {
                let off = j as u64 * BUF;
                let wrong = (0..BUF).find(|&i| b[i as usize] != pattern_byte(off + i));
                assert_eq!(
                    wrong, None,
                    "{writer} wrote, {reader_name} read (direct {direct}): buffer {j} wrong \
                     from byte {wrong:?}"
                );
            }
        }
        let executors: Vec<(String, u64)> = aio
            .stats()
            .into_iter()
            .filter(|r| r.issuer == "reader")
            .flat_map(|r| r.executors)
            .map(|e| (e.executor, e.ios))
            .collect();
        assert!(
            executors.iter().map(|(_, n)| n).sum::<u64>() >= 2
                && executors.iter().all(|(e, _)| executed_by_method(reader, e)),
            "{reader_name}'s reads were executed by {executors:?}"
        );
    }
}

crate::for_every_method!(scenario);
