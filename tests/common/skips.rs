//! How a test says it skipped something, shared by the test binaries (each includes this file
//! with `#[path]`). Goal: a skip is always seen, and where io_uring works (CI sets
//! `DBAIO_REQUIRE_IO_URING`) an io_uring column that cannot run is a failure. Guards against
//! the silent pass: an `eprintln!` inside a passing test is swallowed by the test harness's
//! output capture, so a column that returned early looked exactly like one that ran; and a
//! broken io_uring probe on a machine where io_uring works would have turned every io_uring
//! column into a quiet skip.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::io::Write;

/// The variable that turns a refused io_uring into a failure (`.ci/run` sets it where the
/// kernel lets this user create a ring).
pub const REQUIRE_IO_URING: &str = "DBAIO_REQUIRE_IO_URING";

/// Prints `SKIPPED {what}: {why}` on the process's stderr directly, past the test harness's
/// capture, so it shows in `cargo test` output (and `.ci/run`'s closing list of skips) even
/// though the test passes.
pub fn skipped(what: &str, why: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {what}: {why}");
}

/// Whether the io_uring column of `name` can run here. If the kernel refuses io_uring, prints
/// `SKIPPED {name} on io_uring: {why}` and returns false; but if `DBAIO_REQUIRE_IO_URING` is
/// set, fails the test instead.
pub fn io_uring_column(name: &str) -> bool {
    match dbaio::io_uring_available() {
        Ok(()) => true,
        Err(why) => {
            if std::env::var_os(REQUIRE_IO_URING).is_some() {
                panic!(
                    "{name} on io_uring: io_uring refused ({why}) but {REQUIRE_IO_URING} is set"
                );
            }
            skipped(&format!("{name} on io_uring"), why);
            false
        }
    }
}
