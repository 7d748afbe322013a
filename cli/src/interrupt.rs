//! Ctrl-C and SIGTERM for the commands that leave something behind if cut short (a benchmark's
//! data file): the first signal sets a flag the work loops check, so they stop, clean up and
//! exit with status 130; a second one ends the process at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set when SIGINT or SIGTERM arrives (after [`catch`]).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Catches SIGINT and SIGTERM from now on.
    pub fn catch() -> std::io::Result<Interrupt> {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // A second signal, once the flag is set, ends the process (exit status 130).
            signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))?;
            signal_hook::flag::register(sig, Arc::clone(&flag))?;
        }
        Ok(Interrupt(flag))
    }

    /// True once a signal arrived.
    pub fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag itself, for loops in the library half (`bench::run`).
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// A signal, not a failure of the work: its message and exit status.
pub const INTERRUPTED: &str = "interrupted";
