//! `dbaio-pg`: PostgreSQL's on-disk formats, as dbaio's buffer manager and tools read them.
//!
//! - `page.rs` — the page header and `PageIsVerified`'s checks, and the data checksum
//!   (`pg_checksum_page`). The library's default page verifier uses it.
//! - `cluster.rs` (feature `cluster`) — a stopped cluster's `global/pg_control` and the
//!   relation files `pg_checksums` checks. Only the `dbaio` command needs it.
//!
//! Nothing here does I/O through dbaio; it is plain data in, verdicts out. See
//! `docs/design.md`, "PostgreSQL's formats".

pub mod page;

#[cfg(feature = "cluster")]
pub mod cluster;

pub use page::{PageCheck, PageHeader, pg_checksum_page, verify_page};
