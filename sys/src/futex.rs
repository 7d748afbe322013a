//! Futex wait and wake on a 32-bit word.
//!
//! Two kinds. [`wait`] and [`wake`] are the shared operations, for a word in a mapping that
//! several processes see (the worker processes' control segment): a private futex would not
//! wake a waiter in another process. [`wait_private`] and [`wake_private`] are for a word
//! that only this process's threads wait on and wake (the worker threads' words, the handle
//! table's states and bells): the kernel keys them by address alone, where a shared
//! operation first looks up the page behind the word and takes a reference to it — a locked
//! add and subtract on one `struct page` shared by every thread that sleeps or wakes on a
//! word in that page.

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
    wait_op(word, libc::FUTEX_WAIT, expected, timeout)
}

/// [`wait`] for a word only this process's threads use (see the module's doc).
pub fn wait_private(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    wait_op(
        word,
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
        expected,
        timeout,
    )
}

fn wait_op(word: &AtomicU32, op: libc::c_int, expected: u32, timeout: Option<Duration>) -> bool {
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
            op,
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
    wake_op(word, libc::FUTEX_WAKE, count);
}

/// [`wake`] for a word only this process's threads use (see the module's doc): it wakes only
/// waiters that slept with [`wait_private`].
pub fn wake_private(word: &AtomicU32, count: u32) {
    wake_op(word, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, count);
}

fn wake_op(word: &AtomicU32, op: libc::c_int, count: u32) {
    // SAFETY: `word` is a live, aligned atomic; FUTEX_WAKE does not access memory through it
    // beyond using its address as the key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            count.min(i32::MAX as u32),
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
