//! # dbaio — an embeddable, database-style asynchronous I/O subsystem
//!
//! A storage engine starts an [`Aio`] from [`Settings`] (`io_method = sync | worker |
//! io_uring`), registers one [`Issuer`] per thread, opens its files as [`File`] targets, and
//! starts I/Os on handles. Any thread can wait on a [`WaitRef`]; results come back as
//! [`Completion`]s with the memory the I/O used. PostgreSQL 18's AIO subsystem is the reference
//! design; `docs/design.md` explains this one module by module.
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
//! | file | role |
//! |---|---|
//! | `settings.rs` | parameters, parsing, PostgreSQL-style errors |
//! | `aio.rs` | [`Aio`]: start, open files, wait from any thread, shutdown |
//! | `issuer.rs` | [`Issuer`]: acquire, batch mode, submit, reclaim, close |
//! | `io.rs` | [`Handle`], [`InFlight`], [`Completion`]: what callers hold |
//! | `handle.rs` | the shared handle slot, its eight states, [`WaitRef`] |
//! | `core.rs` | handle table in the shared region; completion and waiting |
//! | `shmem.rs` | the anonymous shared mapping |
//! | `target.rs` | the file table and [`File`] |
//! | `op.rs`, `result.rs`, `error.rs` | ops and flags; packed results; errors |
//! | `callback.rs` | callback kinds and what they see |
//! | `iobuf.rs` | owned aligned I/O memory |
//! | `bufpool.rs` | the buffer pool: pages, descriptors, mapping, clock sweep, buffer I/O |
//! | `bufread.rs` | reading blocks into the pool: one block, or a run as one readv |
//! | `relation.rs` | a relation's segment files, by relation-wide block number |
//! | `stream.rs` | read streams: look-ahead distance, combining, buffers in order |
//! | `page.rs` | PostgreSQL page checksum and header verification |
//! | `verifier.rs` | page verification at completion: trait, modes, PostgreSQL's messages |
//! | `pgdata.rs` | a stopped cluster's control file and relation files |
//! | `verify.rs` | `dbaio verify`: pg_checksums --check at device speed |
//! | `prewarm.rs` | `dbaio prewarm`: relations into the pool through read streams |
//! | `fault.rs` | fault injection at completion |
//! | `view.rs` | the aios view and wait events: lock-free snapshots |
//! | `stats.rs` | per-issuer, per-op counters and latency histograms |
//! | `introspect.rs` | the owner-only unix socket serving the view as JSON |
//! | `method/` | the method trait; `sync.rs`, `worker.rs`, `io_uring.rs` |
//! | `bench.rs` | `dbaio bench` |
//! | `main.rs` | the `dbaio` command |

mod aio;
pub mod bench;
mod bufpool;
mod bufread;
mod callback;
mod core;
mod error;
mod fault;
mod handle;
pub mod introspect;
mod io;
mod iobuf;
mod issuer;
mod method;
mod op;
pub mod page;
pub mod pgdata;
pub mod prewarm;
mod relation;
mod result;
pub mod settings;
mod shmem;
mod stats;
mod stream;
mod target;
mod verifier;
pub mod verify;
mod view;

pub use aio::{Aio, AioBuilder};
pub use bufread::{NoWait, PinnedBuffer};
pub use callback::{CallbackId, HandleCallbacks, IoContext, MAX_CALLBACK_KINDS, ReportTarget};
pub use error::{AioError, IoError};
pub use fault::{FaultAction, FaultRule};
pub use handle::{Executor, HandleState, MAX_CALLBACKS, WaitRef};
pub use io::{Completion, Handle, InFlight};
pub use iobuf::{IO_ALIGN, IoBuf};
pub use issuer::{Issuer, SUBMIT_BATCH_SIZE};
pub use method::io_uring_available;
pub use op::{HandleFlags, Op};
pub use relation::{Relation, SEGMENT_BYTES, segment_path};
pub use result::{IoResult, Status};
pub use settings::{HugePages, IoMethodKind, IoUringFallback, Settings, SettingsError};
pub use stats::{ExecutorRow, IssuerStatsRow, LatencyRow, OpStatsRow};
pub use stream::{ReadStream, ReadStreamOptions, ReadStreamStats, StreamBuffer, StreamError};
pub use target::{File, OpenOptions};
pub use verifier::{PageVerdict, PageVerification, PageVerifier, PgPageVerifier, ReadVerdicts};
pub use view::{AioRow, WaitEvent, WaitRow};
