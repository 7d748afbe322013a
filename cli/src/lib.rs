//! The `dbaio` command's tools, as a library so that tests can drive them without a process.
//!
//! | file | role |
//! |---|---|
//! | `main.rs` | the command line: flags, output, exit status |
//! | `bench.rs` | `dbaio bench`: fio-like runs, the method comparison, buffer-pool hit runs |
//! | `datafile.rs` | a benchmark's data file: what a run may do to it, laying it out, cleaning up |
//! | `interrupt.rs` | SIGINT, SIGTERM, SIGHUP: stop, clean up, exit 128 + the signal |
//! | `output.rs` | standard output that may fail (full, closed, its reader gone): errors, not panics |
//! | `memory.rs` | the memory a run may take, checked before it starts |
//! | `options.rs` | flags into settings and checked numbers, in PostgreSQL's words |
//! | `plot.rs` | `--plot`: SVG charts of latency over time and latency distributions |
//! | `prewarm.rs` | `dbaio prewarm`: relations into the pool through read streams |
//! | `scan_bench.rs` | `dbaio bench --workload scan`: cold scans with readahead advice off / unthrottled / throttled |
//! | `checksums.rs` | `dbaio verify`: `pg_checksums --check` at device speed |
//! | `screens.rs` | `dbaio aios` and `dbaio stat`: tables, JSON, Prometheus, the live screen |
//! | `unlink_bench.rs` | `dbaio unlink-bench`: a GC's unlinks against foreground latency |
//!
//! It uses the `dbaio` library through its public API only, and `dbaio-pg` for PostgreSQL's
//! formats. See `docs/benchmarks.md` and `docs/aios.md`.

pub mod bench;
pub mod checksums;
pub mod datafile;
pub mod interrupt;
pub mod memory;
pub mod options;
pub mod output;
pub mod plot;
pub mod prewarm;
pub mod scan_bench;
pub mod screens;
pub mod unlink_bench;
