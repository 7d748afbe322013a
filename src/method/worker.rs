//! The `worker` method: I/Os go to a pool of worker threads (fixed by `io_workers`, or sized
//! by load between `io_min_workers` and `io_max_workers`) through a bounded queue. Workers run
//! the shared callbacks, so completion never needs the issuer. When the queue is full the
//! issuer runs the overflow itself, after queueing the rest. See `docs/design.md`, "Methods".

use super::IoMethod;
use crate::handle::error::AioError;
use crate::handle::op::HandleFlags;
use crate::handle::settings::{IoMethodKind, Settings};
use crate::handle::shared::Completed;
use crate::handle::shared::Shared;
use crate::handle::slot::{Executor, HandleState};
use dbaio_workers::{CompletionSink, WorkerPool};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Posts worker completions into the shared table.
struct Sink(Arc<Shared>);

impl CompletionSink for Sink {
    fn prepare(&self, worker: u32, req: &mut dbaio_workers::Request) -> bool {
        let s = self.0.slot(req.user_data as u32);
        // A thread waiting for it may have claimed and run it already.
        if !s.claim_queued((req.user_data >> 32) as u32) {
            return false;
        }
        // Shown in the aios view while the worker executes it.
        s.executor
            .store(Executor::Worker(worker).encode(), Ordering::Relaxed);
        true
    }

    fn complete(&self, worker: u32, user_data: u64, result: i32) {
        let (i, ex) = (user_data as u32, Executor::Worker(worker));
        if self.0.complete(i, result, ex) == Completed::Retry {
            // EAGAIN/EINTR: this worker executes it again at once.
            self.0.perform_synchronously(i, ex);
        }
    }

    fn panicked(&self, worker: u32, user_data: u64) {
        let i = user_data as u32;
        // This worker was the I/O's completer: if it is not complete, nobody else will do it.
        if self.0.slot(i).state() == HandleState::Submitted {
            self.0.fail_panicked(i, Executor::Worker(worker));
        }
    }
}

pub(crate) struct WorkerMethod {
    pool: WorkerPool,
}

impl WorkerMethod {
    pub(crate) fn start(
        settings: &Settings,
        shared: &Arc<Shared>,
    ) -> Result<WorkerMethod, AioError> {
        let pool = WorkerPool::start(
            settings.worker_pool_size(),
            settings.io_worker_queue_size as usize,
            "dbaio-io-worker",
            Arc::new(Sink(Arc::clone(shared))),
        )
        .map_err(AioError::Start)?;
        // The view reads the pool through the shared table (introspection does not reach into
        // the methods); a weak reference, so the pool still stops when the method is dropped.
        let _ = shared.worker_pool.set(pool.observer());
        Ok(WorkerMethod { pool })
    }
}

impl IoMethod for WorkerMethod {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::Worker
    }

    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        shared
            .slot(i)
            .flags()
            .contains(HandleFlags::REFERENCES_LOCAL)
    }

    fn submit(&self, shared: &Shared, _issuer: u32, handles: &[u32]) {
        let mut queued = 0u32;
        let mut overflow_from = None;
        for (k, &i) in handles.iter().enumerate() {
            if !shared.claim_submit(i) {
                continue; // a waiter found it staged and ran it
            }
            match self.queue(shared, i) {
                true => queued += 1,
                false => {
                    overflow_from = Some(k);
                    break;
                }
            }
        }
        self.pool.wake(queued);
        if let Some(k) = overflow_from {
            // handles[k] is claimed already; the later ones are not yet.
            for (n, &i) in handles[k..].iter().enumerate() {
                if n > 0 && !shared.claim_submit(i) {
                    continue;
                }
                // A later entry may fit now that workers drained some.
                if self.queue(shared, i) {
                    self.pool.wake(1);
                } else {
                    shared.perform_synchronously(i, Executor::Issuer);
                }
            }
        }
    }

    /// An I/O its waiter finds still queued, not yet picked up by a worker, is run by the
    /// waiter itself: it would otherwise pay a worker's wakeup and hand-off for nothing
    /// (PostgreSQL's workers cannot do this: the queue is theirs alone). The claim word makes
    /// sure exactly one of the waiter and the worker that pops the entry runs it.
    fn wait_one(&self, shared: &Shared, i: u32, generation: u64) -> bool {
        if !shared.slot(i).claim_queued_exact(generation) {
            return false; // a worker has it: sleep until it posts the completion
        }
        shared.perform_synchronously(i, Executor::Waiter);
        true
    }
}

impl WorkerMethod {
    /// Queues claimed handle `i` for the workers, marked claimable. False if the queue is
    /// full: the handle is then still the caller's to run (true if a waiter claimed it in
    /// the meantime and runs it).
    fn queue(&self, shared: &Shared, i: u32) -> bool {
        let s = shared.slot(i);
        let generation = s.generation.load(Ordering::Relaxed);
        // Claimable from the moment a worker can see it.
        s.mark_queued(generation);
        // SAFETY: the handle is SUBMITTED; its iovecs/path name memory the issuer parks in
        // the handle until reclaim, which waits for the completion the worker (or a waiter
        // that claims it) posts.
        if unsafe { self.pool.try_submit(shared.request(i)) }.is_ok() {
            return true;
        }
        // Not queued: take the mark back, unless a waiter saw it and claimed it first.
        !s.claim_queued_exact(generation)
    }
}
