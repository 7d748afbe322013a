//! Telling a loaded machine from a stall, shared by the test binaries that assert no wait ran
//! into the library's 100 ms safety net (each includes this file with `#[path]`). Threads
//! that sat runnable but not running for half that net in all may have made a wait run into
//! it by being late themselves; such a round is not judged. A stall of the library is a
//! thread asleep, which this does not excuse.

// Each test binary uses the part it needs.
#![allow(dead_code)]

/// Half the library's 100 ms safety net.
pub const STARVED_NS: u64 = 50_000_000;

/// Nanoseconds the calling thread has spent runnable but not running, so far (0 where the
/// kernel keeps no such count).
pub fn run_delay_ns() -> u64 {
    run_delay_of("/proc/thread-self/schedstat")
}

/// The run delay in a `schedstat` file: its second field.
fn run_delay_of(schedstat: impl AsRef<std::path::Path>) -> u64 {
    std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds every thread of this process has spent runnable but not running, so far,
/// added up (threads that have ended are not counted; io_uring's kernel workers, which are
/// threads of the process, are).
pub fn process_run_delay_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .map(|t| run_delay_of(t.path().join("schedstat")))
        .sum()
}
