//! The retry policy: an attempt that ends in EAGAIN or EINTR (the kernel gave up on this try,
//! or a fault rule said so) is executed again, up to [`MAX_EXECUTIONS`] times in all, by
//! whoever completes it — the same for every executor. (A signal interrupting a blocking
//! system call inside [`perform`](crate::perform) is retried there and never counts.)

/// How many times an I/O is executed in all when each attempt ends in EAGAIN or EINTR.
pub const MAX_EXECUTIONS: u8 = 16;

/// Whether an I/O whose attempt number `attempts` (0 for the first) returned `raw` is to be
/// executed again.
#[inline]
pub fn retry_transient(raw: i32, attempts: u8) -> bool {
    (raw == -libc::EAGAIN || raw == -libc::EINTR) && attempts.saturating_add(1) < MAX_EXECUTIONS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_results_are_retried_until_the_sixteenth_execution() {
        let executions = (0u8..)
            .take_while(|&a| retry_transient(-libc::EAGAIN, a))
            .count()
            + 1;
        assert_eq!(executions, MAX_EXECUTIONS as usize);
        assert!(!retry_transient(-libc::EIO, 0));
        assert!(!retry_transient(4096, 0));
        assert!(retry_transient(-libc::EINTR, 0));
    }
}
