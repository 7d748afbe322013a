//! Requests their waiters took back do not fill the worker queue. An issuer that waits for
//! each read right after starting it runs the read itself (the worker method's waiter takes
//! a still-queued I/O back); with worker threads the read's queue entry stays until a worker
//! pops it, and while the workers cannot run (here: the only worker held) those entries
//! pile up. A submission that finds the queue full of them drops them and queues its read.
//! Guards against: a queue of 16 entries full of taken-back requests after 16 such reads, so
//! that every later read overflowed and ran in its issuer at submit — the submit blocking for
//! the read, executor `issuer` — though nothing waited for a worker (found by a caller-side
//! attack, 2026-12-07: 796–1525 of 4000 reads at depth 2 on a 256-entry queue, with the
//! workers idle). Other methods, and worker processes (whose take-back clears the request's
//! queued bit), simply run each read once.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

const QUEUE: u32 = 16;

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start_with(m, |s| {
        s.io_workers = 1;
        s.io_worker_queue_size = QUEUE;
        s.io_worker_try_cached = false; // the reads must be queued, not run at submit
    });
    let me = aio.register_issuer("takes").unwrap();
    let _release = ReleaseHeldOnDrop(aio.clone());
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    // The only worker kept busy: a read held mid-completion (threads; a process's completion
    // runs in the embedder, so there the worker simply takes the reads or they are taken back).
    let busy =
        (m == IoMethodKind::Worker && !on_processes()).then(|| hold_the_worker(&aio, &me, &f));
    for k in 1..=(4 * QUEUE as u64) {
        let io = me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096));
        assert_pattern(&me.wait(io).into_buf(), k * 4096);
    }
    if busy.is_some() {
        assert_eq!(
            executed_by(&aio, "takes", "issuer"),
            0,
            "reads ran at submit: the queue was full of taken-back entries"
        );
        assert_eq!(executed_by(&aio, "takes", "waiter"), 4 * u64::from(QUEUE));
        assert_eq!(aio.worker_pool().unwrap().queued, 0);
    }
    aio.release_held();
    if let Some(busy) = busy {
        assert_pattern(&me.wait(busy).into_buf(), 0);
    }
}

crate::for_every_method!(scenario);
