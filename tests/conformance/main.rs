//! The conformance suite: every scenario runs on `sync` (the oracle), `worker` (threads and
//! processes), `io_uring` and `sim` (the seeded simulated disk), one `#[test]` per scenario and
//! method, so the test list says what each result guards and on which method. Goal: the methods are
//! interchangeable. A method that cannot run here (io_uring refused) prints `SKIPPED … on io_uring:
//! <why>` past the output capture, and fails instead where `DBAIO_REQUIRE_IO_URING` is set (CI,
//! where io_uring works); a scenario that does not apply to `sim` says so the same way. One subject
//! per file, one scenario per test; helpers in `support.rs`.
//! Guards against: a method whose data, results, error messages, view rows or statistics differ
//! from the `sync` oracle's on the same program; and a column that passes without having run.

mod support;

mod acquire_all_busy;
mod advice;
mod any_thread;
mod awaited_staged;
mod batch_mode;
mod buffer_pool;
mod buffer_pool_close;
mod bufmgr_edges;
mod cached_reads;
mod callbacks;
mod checksum_accounting;
mod close_file;
mod contiguous_reads;
mod cross_method_data;
mod detached;
mod direct_path;
mod direct_slice_races;
mod drop_in_flight;
mod error_callbacks_at_the_end;
mod errors;
mod fault_kinds;
mod file_helpers;
mod foreign_completion;
mod foreign_wait_on_batch;
mod held_results_kept;
mod hostile_callbacks;
mod inline_io;
mod io_timing;
mod issuer_exit;
mod lifecycle;
mod many_issuers;
mod offsets_beyond_off_t;
mod one_handed_out;
mod ops;
mod ownership;
mod page_verification;
mod panicking_executor;
mod read_stream;
mod read_stream_distance;
mod reclaim_in_batch;
mod released_handle;
mod rename;
mod scan_ring;
mod short_combined_read;
mod short_read;
mod shutdown;
mod slice_io;
mod staged_at_shutdown;
mod submit_refused;
mod taken_back_entries;
mod ticket_results_let_go;
mod tickets;
mod torn_last_block;
mod view_executor;
mod view_paused;
mod view_recycling;
mod view_under_load;
mod wait_any_dropped;
mod wait_from_other_thread;
mod waiter_runs_queued;
mod waits_during_registration;
mod waker_on_completing_thread;
mod with_issuer_lifetime;
mod worker_pool;
