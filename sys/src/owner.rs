//! [`Owner`]: the process that started a background thread, so that a `Drop` run in a child
//! made by `fork` — where that thread does not exist — neither joins it (a join there waits
//! for ever, or panics) nor undoes what the parent still uses; and, for hot paths, a count of
//! the forks this process came through that costs one load to read.

use std::sync::atomic::{AtomicU32, Ordering};

/// Forks this process came through since the first `Owner` was made (a `pthread_atfork`
/// child handler counts them; a child made by a raw `clone` is not counted).
static FORKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The process (pid) a value was made in.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pid: u32,
    forks: u32,
}

impl Owner {
    /// This process.
    pub fn here() -> Owner {
        static COUNTING: std::sync::Once = std::sync::Once::new();
        COUNTING.call_once(|| {
            // SAFETY: registers a child handler that only increments an atomic (which is
            // async-signal-safe); it is never unregistered.
            unsafe { libc::pthread_atfork(None, None, Some(count_fork)) };
        });
        Owner {
            pid: std::process::id(),
            forks: FORKS.load(Ordering::Relaxed),
        }
    }

    /// True in a child made by `fork` after this value was made: the threads it started
    /// are not there, and what it shares with the parent is the parent's. (A system call:
    /// for drops and other cold paths.)
    pub fn in_forked_child(&self) -> bool {
        std::process::id() != self.pid
    }

    /// The same question for hot paths, in one load: true in a child made by libc's `fork`
    /// after this value was made.
    #[inline]
    pub fn forked_since(&self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.forks
    }
}

#[cfg(test)]
mod tests {
    use super::Owner;

    #[test]
    fn a_fork_child_is_not_the_owner_and_the_parent_still_is() {
        let owner = Owner::here();
        assert!(!owner.in_forked_child());
        // SAFETY: the child only computes a bool and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let both = owner.in_forked_child() && owner.forked_since();
            // SAFETY: _exit ends the child without running the test harness's code.
            unsafe { libc::_exit(if both { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(!owner.in_forked_child() && !owner.forked_since());
    }
}
