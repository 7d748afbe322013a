//! Callbacks: what runs when an I/O is staged and when it completes.
//!
//! Registered per handle by [`CallbackId`] (at most four, each with one byte of data), they run
//! last-registered first, so the innermost layer sees the raw result first and each outer layer
//! transforms the [`IoResult`]. `complete_shared` runs in whichever thread completes the I/O (a
//! worker, a reaper, the issuer) and must not block or panic; `complete_local` runs in the
//! issuer when it reclaims the handle. Embedders register their own kinds with
//! [`AioBuilder::callback`](crate::AioBuilder::callback). See `docs/design.md`, "Callbacks".

use crate::handle::op::Op;
use crate::handle::result::IoResult;
use crate::handle::shared::Shared;
use crate::handle::slot::{Executor, NO_BLOCK};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

thread_local! {
    /// Callbacks running on this thread (`stage`, `complete_shared`, `complete_local`).
    static IN_CALLBACK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// True while this thread runs a handle callback: inside the completion protocol, where
/// `Aio::with_issuer` is refused and `Aio::shutdown` and drops must not wait (the I/O the
/// thread is staging or completing is among those they would wait for).
pub(crate) fn in_callback() -> bool {
    IN_CALLBACK.with(|c| c.get() > 0)
}

/// True inside the completion protocol on this thread: a handle callback ([`in_callback`])
/// or a future's waker (`notice::in_waker`), both run before the I/O they belong to counts
/// as complete. Waits for I/Os not yet complete, `Aio::with_issuer` and
/// `Aio::register_issuer` are refused there.
pub(crate) fn inside_completion() -> bool {
    in_callback() || crate::handle::notice::in_waker()
}

/// Counts this thread as running callbacks while it lives (see [`in_callback`]).
pub(crate) struct InCallback(());

impl InCallback {
    pub(crate) fn enter() -> InCallback {
        IN_CALLBACK.with(|c| c.set(c.get() + 1));
        InCallback(())
    }
}

impl Drop for InCallback {
    fn drop(&mut self) {
        IN_CALLBACK.with(|c| c.set(c.get() - 1));
    }
}

/// Identifies a registered callback kind (1..=63; 0 is the subsystem's base result, 1 the
/// built-in buffer read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallbackId(pub(crate) u8);

impl CallbackId {
    /// The number stored in handles and results.
    pub fn get(self) -> u8 {
        self.0
    }
}

/// The most callback kinds one subsystem has, the built-in buffer read (id 1) among them: an
/// embedder can register 62 ([`AioBuilder::callback`](crate::AioBuilder::callback)).
pub const MAX_CALLBACK_KINDS: usize = 63;

/// A callback kind. Every method has a default that leaves the result unchanged.
///
/// What the subsystem does with a callback that breaks its rules: a panic in any method is
/// caught (and logged) — in `stage` the I/O is not executed and fails, in `complete_shared`
/// it fails, in `complete_local` it fails for the issuer's own wait (a ticket, `on_error` or
/// a detached I/O took the shared result before local callbacks run), in `message`, `report`
/// and `invalid_pages` the error is described without that part; the error then reads `…:
/// its NAME callback panicked (see the log)` (or `… callback's report panicked`). A result
/// the I/O cannot have ([`IoResult::is_possible`]: no status, OK for fewer or more bytes than
/// asked, PARTIAL for none or all) fails the I/O the same way (`… returned a result the I/O
/// cannot have`). A callback runs inside the completion protocol: `Aio::with_issuer` and
/// `Aio::register_issuer` from any of its methods return an API-violation error on every
/// method, `Aio::shutdown` there refuses new I/O and returns without waiting, and a wait for
/// an I/O not yet complete is refused (`Aio::wait` returns an API-violation error;
/// `Ticket::wait` panics, which fails the callback's I/O): a callback must not block.
pub trait HandleCallbacks: Send + Sync + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;

    /// Runs in the issuer between DEFINED and STAGED: take ownership of resources for the I/O.
    fn stage(&self, _io: &IoContext<'_>, _data: u8) {}

    /// Runs in the completer. Must not block; a panic is caught and turned into an error.
    fn complete_shared(&self, _io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        prior
    }

    /// Runs in the issuer when it reclaims the handle.
    fn complete_local(&self, _io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        prior
    }

    /// A whole message for a result this callback produced, replacing the `could not read …`
    /// line of the [`IoError`](crate::IoError) (for messages that read like PostgreSQL's, such
    /// as a page verification failure). `None` (the default) keeps that line and appends
    /// [`report`](HandleCallbacks::report).
    fn message(&self, _result: &IoResult, _target: &ReportTarget<'_>) -> Option<String> {
        None
    }

    /// How many pages a result this callback produced found invalid (a page-verifying read;
    /// becomes [`IoError::invalid_pages`](crate::IoError)). 0 by default.
    fn invalid_pages(&self, _result: &IoResult) -> u32 {
        0
    }

    /// Words for a result this callback produced (becomes [`IoError::detail`](crate::IoError)).
    fn report(&self, result: &IoResult) -> String {
        format!(
            "{} reported status {} (data {})",
            self.name(),
            result.status.name(),
            result.error_data
        )
    }
}

/// What a failed I/O covered, for [`HandleCallbacks::message`].
#[derive(Clone, Copy, Debug)]
pub struct ReportTarget<'a> {
    /// The relation (a segment's path without its `.N` suffix), or the file's path.
    pub relation: &'a str,
    /// The first block, numbered across the relation's segments.
    pub first_block: u32,
    /// Blocks covered.
    pub nblocks: u32,
}

/// What a callback may see of its I/O.
pub struct IoContext<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) index: u32,
}

impl IoContext<'_> {
    /// The op.
    pub fn op(&self) -> Op {
        self.shared.slot(self.index).op()
    }
    /// File offset in bytes.
    pub fn offset(&self) -> u64 {
        self.shared.slot(self.index).offset.load(Ordering::Relaxed)
    }
    /// Bytes asked for.
    pub fn length(&self) -> u64 {
        self.shared.slot(self.index).length.load(Ordering::Relaxed)
    }
    /// The raw result (bytes or -errno); 0 before completion.
    pub fn raw_result(&self) -> i32 {
        self.shared
            .slot(self.index)
            .raw_result
            .load(Ordering::Relaxed)
    }
    /// The handle's index (`io_id`).
    pub fn io_id(&self) -> u32 {
        self.index
    }
    /// The wait reference of this I/O (for publishing where other threads will wait on it).
    pub fn wait_ref(&self) -> crate::WaitRef {
        let generation = self
            .shared
            .slot(self.index)
            .generation
            .load(Ordering::Relaxed);
        self.shared.wait_ref(self.index, generation)
    }
    /// The issuer slot that owns the handle.
    pub fn issuer_slot(&self) -> u32 {
        self.shared.slot(self.index).owner.load(Ordering::Relaxed)
    }
    /// Who is executing or executed the I/O.
    pub fn executor(&self) -> Executor {
        Executor::decode(
            self.shared
                .slot(self.index)
                .executor
                .load(Ordering::Relaxed),
        )
    }
    /// The target block range, if set.
    pub fn blocks(&self) -> Option<(u32, u32)> {
        let s = self.shared.slot(self.index);
        let first = s.first_block.load(Ordering::Relaxed);
        (first != NO_BLOCK).then(|| (first, s.nblocks.load(Ordering::Relaxed)))
    }
    /// The relation-wide number of the target file's block 0 (see
    /// [`OpenOptions::segment_base`](crate::OpenOptions::segment_base)).
    pub fn segment_base(&self) -> u32 {
        let file = self.shared.slot(self.index).file.load(Ordering::Relaxed);
        self.shared
            .files
            .slots
            .get(file as usize)
            .map_or(0, |f| f.segment_base.load(Ordering::Relaxed))
    }
    /// The handle data set by the issuer.
    pub fn handle_data(&self) -> Vec<u64> {
        let s = self.shared.slot(self.index);
        let n = s.handle_data_len.load(Ordering::Relaxed) as usize;
        self.shared.handle_data(self.index)[..n]
            .iter()
            .map(|d| d.load(Ordering::Relaxed))
            .collect()
    }
    /// Calls `f` with handle data entry `i` (no allocation).
    pub fn handle_data_at(&self, i: usize) -> Option<u64> {
        let s = self.shared.slot(self.index);
        (i < s.handle_data_len.load(Ordering::Relaxed) as usize)
            .then(|| self.shared.handle_data(self.index)[i].load(Ordering::Relaxed))
    }
    /// The target file's path.
    pub fn path(&self) -> Arc<Path> {
        self.shared
            .files
            .path(self.shared.slot(self.index).file.load(Ordering::Relaxed))
    }
    /// The I/O memory, one slice per iovec. Only meaningful once the I/O completed (in
    /// `complete_shared`/`complete_local`): the memory belongs to the I/O until the issuer
    /// reclaims the handle, so nothing else writes it while a callback reads it.
    pub fn with_buffers<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let n = self
            .shared
            .slot(self.index)
            .iov_count
            .load(Ordering::Relaxed) as usize;
        let iov = self.shared.iovecs(self.index);
        let mut parts: [&[u8]; 8] = [&[]; 8];
        let mut big = Vec::new();
        for i in 0..n {
            // SAFETY: iovec i of this handle was written by the issuer before the state
            // reached SUBMITTED (published by the release store that the completer's acquire
            // observed); the memory it names is owned by this I/O until reclaim (see iobuf.rs
            // and issuer.rs), and the I/O is complete, so no one writes it concurrently.
            let part = unsafe {
                let v = *iov.add(i);
                std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
            };
            if n <= parts.len() {
                parts[i] = part;
            } else {
                big.push(part);
            }
        }
        if n <= parts.len() {
            f(&parts[..n])
        } else {
            f(&big)
        }
    }
}

/// The registered callback kinds, fixed at start.
#[derive(Default)]
pub(crate) struct CallbackRegistry {
    pub kinds: Vec<Arc<dyn HandleCallbacks>>,
}

impl CallbackRegistry {
    pub(crate) fn get(&self, id: u8) -> Option<&Arc<dyn HandleCallbacks>> {
        (id as usize).checked_sub(1).and_then(|i| self.kinds.get(i))
    }
}
