//! The `worker` method: I/Os go to `io_workers` threads through a bounded queue. Workers run
//! the shared callbacks, so completion never needs the issuer. When the queue is full the
//! issuer runs the overflow itself, after queueing the rest. See `docs/design.md`, "Methods".

use super::IoMethod;
use crate::core::Core;
use crate::error::AioError;
use crate::handle::Executor;
use crate::op::HandleFlags;
use crate::settings::{IoMethodKind, Settings};
use dbaio_workers::{CompletionSink, WorkerPool};
use std::sync::Arc;

/// Posts worker completions into the core.
struct Sink(Arc<Core>);

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
        self.0
            .process_completion(user_data as u32, result, Executor::Worker(worker));
    }
}

pub(crate) struct WorkerMethod {
    pool: WorkerPool,
}

impl WorkerMethod {
    pub(crate) fn start(settings: &Settings, core: &Arc<Core>) -> Result<WorkerMethod, AioError> {
        let pool = WorkerPool::start(
            settings.io_workers,
            settings.io_worker_queue_size as usize,
            "dbaio-io-worker",
            Arc::new(Sink(Arc::clone(core))),
        )
        .map_err(AioError::Start)?;
        Ok(WorkerMethod { pool })
    }
}

impl IoMethod for WorkerMethod {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::Worker
    }

    fn needs_synchronous_execution(&self, core: &Core, i: u32) -> bool {
        core.slot(i).flags().contains(HandleFlags::REFERENCES_LOCAL)
    }

    fn submit(&self, core: &Core, _issuer: u32, handles: &[u32]) {
        let mut queued = 0u32;
        let mut overflow_from = None;
        for (k, &i) in handles.iter().enumerate() {
            // SAFETY: the handle is SUBMITTED; its iovecs/path name memory the issuer parks in
            // the handle until reclaim, which waits for the completion the worker posts.
            match unsafe { self.pool.try_submit(core.request(i)) } {
                Ok(()) => queued += 1,
                Err(_) => {
                    overflow_from = Some(k);
                    break;
                }
            }
        }
        self.pool.wake(queued);
        if let Some(k) = overflow_from {
            for &i in &handles[k..] {
                // SAFETY: as above — but a later entry may fit now that workers drained some.
                match unsafe { self.pool.try_submit(core.request(i)) } {
                    Ok(()) => self.pool.wake(1),
                    Err(_) => core.perform_synchronously(i, Executor::Issuer),
                }
            }
        }
    }
}
