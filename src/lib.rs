//! # dbaio — an embeddable, database-style asynchronous I/O subsystem
//!
//! A storage engine starts an [`Aio`] from [`Settings`] (`io_method = sync | worker |
//! io_uring`, or `sim` — a simulated disk that crashes, tears and lies, for the engine's own
//! tests: [`SimDisk`]), registers one [`Issuer`] per thread, opens its files as [`File`] targets, and
//! starts I/Os on handles. Any thread can wait on a [`WaitRef`]; results come back as
//! [`Completion`]s with the memory the I/O used. Pages can come through a buffer pool
//! ([`Issuer::read_block`], [`ReadStream`]). PostgreSQL 18's AIO subsystem is the reference
//! design; `docs/design.md` explains this one layer by layer.
//!
//! ```
//! use dbaio::{Aio, IoBuf, OpenOptions, Settings};
//! let dir = tempfile::tempdir().unwrap();
//! let mut settings = Settings::default();
//! settings.set("io_method", "sync").unwrap();
//! let aio = Aio::start(settings).unwrap();
//! let me = aio.register_issuer("docs").unwrap();
//! let file = aio.open(dir.path().join("f"), &OpenOptions::read_write()).unwrap();
//! me.write_all_at(&file, 0, IoBuf::from_slice(b"hello")).unwrap();
//! let back = me.read_exact_at(&file, 0, IoBuf::new(5)).unwrap();
//! assert_eq!(&back[..], b"hello");
//! ```
//!
//! ## File map
//!
//! Layers, bottom to top; each imports only the ones above it in this list.
//!
//! | file | role |
//! |---|---|
//! | **`handle/`** | **the shared handle table and its protocol** |
//! | `handle/settings/` | the settings table, parsing, `SHOW`, PostgreSQL-style errors |
//! | `handle/error.rs` | [`AioError`], [`IoError`] |
//! | `handle/op.rs`, `handle/result.rs` | ops and flags; packed results |
//! | `handle/slot.rs` | one handle's shared slot, its eight states, [`WaitRef`] |
//! | `handle/shared.rs` | the shared table; issuer slots; running, completing, waiting |
//! | `handle/bell.rs` | the issuer's bell: where a wait for several I/Os sleeps |
//! | `handle/files.rs` | the file table (descriptors, paths, references) |
//! | `handle/fixed_memory.rs` | memory offered for registration with the kernel; what came of it |
//! | `handle/notice.rs` | notices: how a finished I/O reaches a ticket, a future or `on_error` |
//! | `handle/describe.rs` | an I/O's failure in words (op, file, offset, errno) |
//! | `handle/callback.rs` | callback kinds and what they see |
//! | `handle/fault.rs` | fault injection at completion |
//! | `handle/advice_budget.rs` | the readahead-advice budget: one lock-free counter per device |
//! | `handle/shmem.rs` | anonymous mappings: the shared region, pool memory, prefaulting |
//! | `handle/wait_event.rs` | what an issuer is blocked on |
//! | `handle/storage.rs` | where files live when not in the kernel's file systems (`sim`) |
//! | `handle/test_hold.rs` | test points: where a test stops a thread ([`TestPoint`]) |
//! | **`method/`** | **the method trait; `sync.rs`, `worker.rs`, `io_uring.rs`** |
//! | `method/watcher.rs` | io_uring: reaps a ring nobody waits on (futures, detached I/O) |
//! | `method/sim/` | `io_method = sim`: the simulated clock, [`SimDisk`], faults, crashes |
//! | **`introspect/`** | **reading the table while I/O goes on** |
//! | `introspect/view.rs` | the aios view and the waits |
//! | `introspect/stats.rs` | per-issuer, per-op counters and latency histograms |
//! | `introspect/socket.rs` | the owner-only unix socket serving them as JSON |
//! | **`aio/`** | **the API an engine calls** |
//! | `aio/subsystem.rs` | [`Aio`]: open files, wait from any thread, shutdown |
//! | `aio/issuer.rs` | [`Issuer`]: acquire, batch mode, submit, wait, reclaim, close |
//! | `aio/lifecycle.rs` | the steps behind it: define, stage, the direct path, reclaim |
//! | `aio/io.rs` | [`Handle`], [`InFlight`], [`Completion`]: what callers hold |
//! | `aio/iobuf.rs` | [`IoBuf`]: owned aligned I/O memory |
//! | `aio/file.rs` | [`File`], [`OpenOptions`], byte-range locks |
//! | `aio/ticket.rs` | [`Ticket`] (`Send`, a `Future` with feature `async`), [`IoGroup`], `on_error` |
//! | `aio/any_thread.rs` | [`Aio::with_issuer`]: the calling thread's own issuer |
//! | `aio/slice.rs` | read into `&mut [u8]`, write from `&[u8]`; O_DIRECT read-modify-write |
//! | `aio/inline.rs` | the inline path of slice I/O and the sync/truncate/allocate helpers: two transitions, still in the view and stats |
//! | **`bufmgr/`** | **the buffer manager** |
//! | `bufmgr/pool.rs` | pages, descriptors, mapping, clock sweep, buffer I/O, `buffer-readv` |
//! | `bufmgr/ring.rs` | buffer access strategy rings |
//! | `bufmgr/read.rs` | [`Issuer::read_block`]; a run of blocks as one readv |
//! | `bufmgr/stream.rs` | [`ReadStream`]: look-ahead distance, combining, buffers in order |
//! | `bufmgr/advice.rs` | a stream's readahead [`Advice`]: sequential rule, device budget, adaptive distance |
//! | `bufmgr/relation.rs` | [`Relation`]: a relation's segment files |
//! | `bufmgr/verification.rs` | page verification at completion: trait, modes, messages |
//! | **`start.rs`** | **[`Aio::start`], [`AioBuilder`]: puts the layers together** |
//!
//! Beneath the library: `sys/` (`dbaio-sys`, the foundation: the one [`Op`], the plain
//! request, `perform` with its retry policy, the futex, the shared buffer arena and the
//! registered-buffer slab),
//! `workers/` (the worker engine: threads, or processes over a memfd control segment) and
//! `uring/` (the io_uring engine), both standing on `sys/`. Beside it:
//! `pg/` (PostgreSQL's page and cluster formats), `cli/` (the `dbaio` command) and `redb/`
//! (`dbaio-redb`: redb's storage backend on dbaio, the worked example of embedding);
//! `examples/` holds the measuring programs `docs/benchmarks.md` runs (instructions per read,
//! slice overhead, the pool-sized device ceiling, the cost of a switch between processes, a
//! bare worker hand-off as threads and as processes).

mod aio;
mod bufmgr;
mod handle;
pub mod introspect;
mod method;
mod start;

/// PostgreSQL's page format: header, checksum, `PageIsVerified` (from `dbaio-pg`).
pub use dbaio_pg::page;
/// Settings: names, units, ranges and PostgreSQL-style errors.
pub use handle::settings;

pub use aio::file::{File, OpenOptions};
pub use aio::io::{Completion, Handle, InFlight};
pub use aio::iobuf::{IO_ALIGN, IoBuf};
pub use aio::issuer::{Issuer, SUBMIT_BATCH_SIZE};
pub use aio::slice::DIRECT_ALIGN;
pub use aio::subsystem::Aio;
pub use aio::ticket::{IoGroup, Ticket};
pub use bufmgr::advice::Advice;
pub use bufmgr::read::{NoWait, PinnedBuffer};
pub use bufmgr::relation::{Relation, SEGMENT_BYTES, segment_path};
pub use bufmgr::stream::{
    ReadStream, ReadStreamOptions, ReadStreamStats, StreamBuffer, StreamError,
};
pub use bufmgr::verification::{
    PageVerdict, PageVerification, PageVerifier, PgPageVerifier, ReadVerdicts,
};
/// Tests only: where a retiring worker process may be held ([`Aio::hold_retiring_worker_processes`]).
#[doc(hidden)]
pub use dbaio_workers::process::RetireStep;
pub use handle::callback::{
    CallbackId, HandleCallbacks, IoContext, MAX_CALLBACK_KINDS, ReportTarget,
};
pub use handle::error::{AioError, IoError};
pub use handle::fault::{FaultAction, FaultRule};
pub use handle::fixed_memory::RegisteredBuffers;
pub use handle::op::{HandleFlags, Op};
pub use handle::result::{IoResult, Status};
pub use handle::settings::{
    HugePages, IoMethodKind, IoUringFallback, IoWorkerKind, PoolPrefault, Settings, SettingsError,
    SimLatency,
};
pub use handle::slot::{Executor, HandleState, MAX_CALLBACKS, WaitRef};
pub use handle::wait_event::WaitEvent;
pub use introspect::stats::{AdviceRow, ExecutorRow, IssuerStatsRow, LatencyRow, OpStatsRow};
pub use introspect::view::{AdviceBudgetRow, AioRow, WaitRow, WorkerPoolRow, WorkerRow};
#[doc(hidden)]
pub use method::TestPoint;
pub use method::io_uring_available;
pub use method::sim::SimDisk;
pub use start::AioBuilder;

/// The README's examples, compiled with the doc-tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
