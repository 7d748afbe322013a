//! The `worker` method: I/Os go to `io_workers` threads through a bounded queue. Workers run
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

/// Posts worker completions into the shared table.
struct Sink(Arc<Shared>);

impl CompletionSink for Sink {
    fn prepare(&self, worker: u32, req: &mut dbaio_workers::Request) {
        // Shown in the aios view while the worker executes it.
        let s = self.0.slot(req.user_data as u32);
        s.executor.store(
            Executor::Worker(worker).encode(),
            std::sync::atomic::Ordering::Relaxed,
        );
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
            settings.io_workers,
            settings.io_worker_queue_size as usize,
            "dbaio-io-worker",
            Arc::new(Sink(Arc::clone(shared))),
        )
        .map_err(AioError::Start)?;
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
            // SAFETY: the handle is SUBMITTED; its iovecs/path name memory the issuer parks in
            // the handle until reclaim, which waits for the completion the worker posts.
            match unsafe { self.pool.try_submit(shared.request(i)) } {
                Ok(()) => queued += 1,
                Err(_) => {
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
                // SAFETY: as above — but a later entry may fit now that workers drained some.
                match unsafe { self.pool.try_submit(shared.request(i)) } {
                    Ok(()) => self.pool.wake(1),
                    Err(_) => shared.perform_synchronously(i, Executor::Issuer),
                }
            }
        }
    }
}
