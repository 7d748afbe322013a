//! The conformance suite: every scenario runs on `sync` (the oracle), `worker` and `io_uring`,
//! one `#[test]` per method, so the test list says which method each result is for. A method
//! that cannot run here (io_uring refused) prints why and is reported as skipped — never
//! silently passed. One scenario per file; helpers in `support.rs`.

mod support;

mod acquire_all_busy;
mod advice;
mod any_thread;
mod awaited_staged;
mod batch_mode;
mod buffer_pool;
mod cached_reads;
mod callbacks;
mod checksum_accounting;
mod close_file;
mod contiguous_reads;
mod cross_method_data;
mod detached;
mod direct_path;
mod drop_in_flight;
mod errors;
mod fault_kinds;
mod foreign_completion;
mod foreign_wait_on_batch;
mod inline_io;
mod io_timing;
mod issuer_exit;
mod lifecycle;
mod many_issuers;
mod one_handed_out;
mod ops;
mod ownership;
mod page_verification;
mod panicking_executor;
mod read_stream;
mod reclaim_in_batch;
mod released_handle;
mod scan_ring;
mod short_combined_read;
mod short_read;
mod shutdown;
mod slice_io;
mod staged_at_shutdown;
mod submit_refused;
mod tickets;
mod torn_last_block;
mod view_paused;
mod view_under_load;
mod wait_any_dropped;
mod wait_from_other_thread;
mod waiter_runs_queued;
mod worker_pool;
