//! Futex wait and wake on a 32-bit word.
//!
//! The non-private futex operations are used on purpose: the word may live in a shared
//! mapping that several processes see (the handle table is built to be placed in one), and a
//! private futex would not wake a waiter in another process.

use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

/// How long after its time limit a sleeper may run and still judge what the limit found: one
/// that runs later (the CPUs busy) may find done what finished after the limit, its wake no
/// longer anyone's to deliver.
pub const PROMPT: Duration = Duration::from_millis(20);

/// Whether a sleep begun at `since` with time limit `limit`, which the limit ended, returned
/// to its thread promptly enough (see [`PROMPT`]) to call what it then finds a missed wake.
pub fn ran_promptly(since: Instant, limit: Duration) -> bool {
    since.elapsed() < limit + PROMPT
}

/// Blocks while `*word == expected`, or until woken, a signal arrives, or `timeout` passes;
/// returns true if it returned because `timeout` passed. Spurious returns are allowed;
/// callers re-check their condition in a loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, 4-byte-aligned atomic for the duration of the call, and `ts_ptr`
    // is null or points at `ts`, which outlives the call. FUTEX_WAIT only reads both.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// Wakes up to `count` waiters blocked on `word`.
pub fn wake(word: &AtomicU32, count: u32) {
    // SAFETY: `word` is a live, aligned atomic; FUTEX_WAKE does not access memory through it
    // beyond using its address as the key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            count.min(i32::MAX as u32),
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
