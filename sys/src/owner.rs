//! [`Owner`]: the process that started a background thread, so that a `Drop` run in a child
//! made by `fork` — where that thread does not exist — neither joins it (a join there waits
//! for ever, or panics) nor undoes what the parent still uses.

/// The process (pid) a value was made in.
#[derive(Clone, Copy, Debug)]
pub struct Owner(u32);

impl Owner {
    /// This process.
    pub fn here() -> Owner {
        Owner(std::process::id())
    }

    /// True in a child made by `fork` after this value was made: the threads it started
    /// are not there, and what it shares with the parent is the parent's.
    pub fn in_forked_child(&self) -> bool {
        std::process::id() != self.0
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
            // SAFETY: _exit ends the child without running the test harness's code.
            unsafe { libc::_exit(if owner.in_forked_child() { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(!owner.in_forked_child());
    }
}
