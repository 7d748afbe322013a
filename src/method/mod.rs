//! The I/O method trait — the contract each of `sync`, `worker` and `io_uring` fulfils — and
//! the one place where `io_method` picks one. See `docs/design.md`, "Methods".
//!
//! Calling context: `submit` and `drive_many` run in the issuer that owns the handles;
//! `drive_one` and `poll` may run in any thread; completion (`Shared::complete`, after an
//! execution here through `Shared::run_here` or elsewhere) happens wherever the method says,
//! exactly once per submitted handle.

mod io_uring;
pub(crate) mod sim;
mod sync;
mod watcher;
mod worker;

use crate::handle::error::AioError;
use crate::handle::fixed_memory::RegisteredBuffersReader;
use crate::handle::settings::{IoMethodKind, IoUringFallback, Settings};
use crate::handle::shared::{Drive, Shared};
use std::os::fd::RawFd;
use std::sync::Arc;

pub(crate) use crate::handle::test_hold::TestHold;
pub use crate::handle::test_hold::TestPoint;
pub(crate) use sync::SyncMethod;

/// What a method must do.
pub(crate) trait IoMethod: Send + Sync {
    /// Which method this is.
    fn kind(&self) -> IoMethodKind;

    /// Required. True if handle `i` (STAGED) must run synchronously in the issuer instead of
    /// being submitted (sync: always; worker: issuer-private memory; io_uring: an op the kernel
    /// lacks).
    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool;

    /// Optional. True if an I/O its issuer is about to block on, staged and not yet handed
    /// over, is better run on the issuer than handed to an executor and waited for (the
    /// worker method, threads or processes: the hand-off costs a wakeup and two context
    /// switches for a result the issuer would sleep through anyway). False where the hand-off
    /// wakes no thread (io_uring: the kernel runs the queue entry).
    fn runs_awaited_io_here(&self) -> bool {
        false
    }

    /// Optional. Prepares issuer slot `issuer` before its first I/O (io_uring: its ring).
    fn init_issuer(&self, _shared: &Shared, _issuer: u32) -> Result<(), AioError> {
        Ok(())
    }

    /// Required (except for sync). Starts `handles` — all SUBMITTED, all owned by `issuer` —
    /// and guarantees each is eventually completed exactly once.
    fn submit(&self, shared: &Shared, issuer: u32, handles: &[u32]);

    /// Optional. A thread waits on handle `i` (SUBMITTED, `generation`); it need not be the
    /// issuer. The method moves the I/O on from this thread if it can — runs it if no
    /// executor has taken it (worker), reaps the ring and sleeps in the kernel for it when
    /// only a completion there can finish it (io_uring) — and returns `Progressed`; the
    /// waiter then looks at the handle again. `Sleep`: nothing to do here; the waiter sleeps
    /// on the handle's state word, which its completer wakes. Never sleeps on anything a
    /// completion of `i` elsewhere does not end.
    fn drive_one(&self, _shared: &Shared, _i: u32, _generation: u64) -> Drive {
        Drive::Sleep
    }

    /// Optional. Issuer `issuer` (the calling thread) waits until `need` more of `awaited`
    /// — its in-flight I/Os not complete when it looked, (handle, generation), oldest
    /// first — are complete, whoever completes them. First it hands `staged` to the method
    /// (as [`IoMethod::submit`]; may be empty). Then the method may move them on from here
    /// (run one no executor has taken, reap the ring, sleep in the kernel when only
    /// completions there can finish them, or drain worker processes' results) and return
    /// `Progressed`: the issuer counts again. `Sleep`: the issuer sleeps on its bell, which
    /// every completion of its I/Os on another thread rings.
    fn drive_many(
        &self,
        shared: &Shared,
        issuer: u32,
        staged: &[u32],
        _awaited: &[(u32, u64)],
        _need: u32,
    ) -> Drive {
        if !staged.is_empty() {
            self.submit(shared, issuer, staged);
        }
        Drive::Sleep
    }

    /// Optional, for tests. Makes submissions to the kernel fail with `errno` (0: stop); a
    /// method that does not submit to the kernel ignores it.
    fn inject_submit_error(&self, _errno: i32) {}

    /// Optional, for tests. Makes the next submission to the kernel only fail with `errno`.
    fn inject_submit_error_once(&self, _errno: i32) {}

    /// Optional, for tests. The method's hold at `point` ([`TestHold`]), if it has that
    /// point.
    fn test_hold(&self, _point: TestPoint) -> Option<&TestHold> {
        None
    }

    /// Optional. Completes whatever of `issuer`'s I/Os are ready, without blocking.
    fn poll(&self, _shared: &Shared, _issuer: u32) {}

    /// Optional. Someone looks at an I/O's state without driving completion (`is_done`):
    /// a method whose queued requests can be left beside sleeping workers (worker
    /// processes, when the worker a wake went to is stopped) wakes one if it has seen that
    /// for a while. Completes nothing.
    fn nudge(&self) {}

    /// Optional. Makes sure `issuer`'s I/Os — handle `i`'s among them — complete even if
    /// nobody waits for them (a ticket awaited as a future, perhaps still staged in a
    /// batch). Methods whose completions need no waiter (sync, worker threads) do nothing;
    /// io_uring has its watcher thread reap the issuer's ring; worker processes have the
    /// completer woken for handle `i`'s result.
    fn watch(&self, _issuer: u32, _i: u32) {}

    /// Optional. The worker pool, for the view (the worker method only).
    fn pool(&self) -> Option<dbaio_workers::PoolObserver> {
        None
    }

    /// Optional. A reader of what `io_uring_registered_buffers` achieved, for `Aio` and the
    /// introspection socket (the io_uring method with the setting on only).
    fn registered_buffers(&self) -> Option<RegisteredBuffersReader> {
        None
    }

    /// Optional. A file was opened into slot `slot` (io_uring registers it).
    fn file_opened(&self, _slot: u32, _fd: RawFd) {}

    /// Optional. File slot `slot` was closed.
    fn file_closed(&self, _slot: u32) {}
}

/// Starts the method the settings ask for, applying `io_uring_fallback` if io_uring is refused.
/// `sim`: the simulated disk's store, made before the shared table (which executes I/Os
/// against it) for `io_method = sim`.
pub(crate) fn start(
    settings: &Settings,
    shared: &Arc<Shared>,
    sim: Option<Arc<sim::SimStore>>,
) -> Result<Box<dyn IoMethod>, AioError> {
    match settings.io_method {
        IoMethodKind::Sim => {
            let store = sim.expect("io_method = sim has its store");
            Ok(Box::new(sim::SimMethod::start(settings, shared, store)))
        }
        IoMethodKind::Sync => Ok(Box::new(sync::SyncMethod)),
        IoMethodKind::Worker => Ok(Box::new(worker::WorkerMethod::start(settings, shared)?)),
        IoMethodKind::IoUring => match io_uring::UringMethod::start(settings, shared) {
            Ok(m) => Ok(Box::new(m)),
            Err(cause) => match settings.io_uring_fallback {
                IoUringFallback::Error => Err(AioError::IoUringRefused { cause }),
                IoUringFallback::Worker => {
                    tracing::warn!(
                        "io_method \"io_uring\" refused ({cause}); falling back to \"worker\" as io_uring_fallback asks"
                    );
                    Ok(Box::new(worker::WorkerMethod::start(settings, shared)?))
                }
                IoUringFallback::Sync => {
                    tracing::warn!(
                        "io_method \"io_uring\" refused ({cause}); falling back to \"sync\" as io_uring_fallback asks"
                    );
                    Ok(Box::new(sync::SyncMethod))
                }
            },
        },
    }
}

/// Checks whether io_uring can be used here; `Err` carries the reason in words.
pub fn io_uring_available() -> Result<(), String> {
    dbaio_uring::probe().map(|_| ()).map_err(|r| r.to_string())
}
