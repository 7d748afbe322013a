//! SIGINT, SIGTERM and SIGHUP for the commands that leave something behind if cut short (a
//! benchmark's data file, the live screen's terminal): the first signal sets a flag the work
//! loops check, so they stop, print what they measured, clean up and exit; a second one ends
//! the process at once, after running the cleanups registered with [`on_forced_exit`]
//! (removing the files the run made, restoring the terminal).
//!
//! The exit status of a run a signal ended is 128 + the signal's number (SIGHUP 129, SIGINT
//! 130, SIGTERM 143): what a shell reports for a process the signal killed, so the status is
//! the same whether the signal came before the handler was installed or after, and a script
//! can tell Ctrl-C from `kill`. docs/reliability.md, "The command under hostile use".

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The signals caught.
const CAUGHT: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// The first signal that arrived since [`Interrupt::catch`] (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// What to do before a second signal ends the process: (id, action).
type Cleanups = Vec<(u64, Box<dyn Fn() + Send>)>;
static CLEANUPS: Mutex<Cleanups> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Set when SIGINT, SIGTERM or SIGHUP arrives (after [`Interrupt::catch`]).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Catches SIGINT, SIGTERM and SIGHUP from now on, on a thread of its own: the first sets
    /// the flag, a second runs the registered cleanups and ends the process.
    pub fn catch() -> std::io::Result<Interrupt> {
        let flag = Arc::new(AtomicBool::new(false));
        let mut signals = signal_hook::iterator::Signals::new(CAUGHT)?;
        let raised = Arc::clone(&flag);
        std::thread::Builder::new()
            .name("dbaio-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if SIGNAL
                        .compare_exchange(0, sig, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        raised.store(true, Ordering::Release);
                    } else {
                        forced_exit(sig);
                    }
                }
            })?;
        Ok(Interrupt(flag))
    }

    /// True once a signal arrived.
    pub fn raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The flag itself, for loops in the library half (`bench::run`).
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// The exit status for the signal that arrived, if one did: 128 + its number.
pub fn status() -> Option<u8> {
    match SIGNAL.load(Ordering::Acquire) {
        0 => None,
        sig => Some((128 + sig).clamp(0, 255) as u8),
    }
}

/// The signal's name, for messages (`SIGINT`), if one arrived.
pub fn signal_name() -> Option<&'static str> {
    match SIGNAL.load(Ordering::Acquire) {
        signal_hook::consts::SIGINT => Some("SIGINT"),
        signal_hook::consts::SIGTERM => Some("SIGTERM"),
        signal_hook::consts::SIGHUP => Some("SIGHUP"),
        _ => None,
    }
}

/// `interrupted by SIGINT`: the words of a run a signal stopped.
pub fn message() -> String {
    format!("{INTERRUPTED} by {}", signal_name().unwrap_or("a signal"))
}

/// Runs the cleanups and ends the process with 128 + `sig`.
fn forced_exit(sig: i32) -> ! {
    // The lock can only be held by a register or a drop of a guard, which do not block.
    let cleanups = CLEANUPS.lock().unwrap_or_else(|p| p.into_inner());
    for (_, f) in cleanups.iter().rev() {
        f();
    }
    // SAFETY: _exit ends the process at once; no Rust state is used after it.
    unsafe { libc::_exit(128 + sig) }
}

/// A cleanup registered with [`on_forced_exit`]; dropping it unregisters it (without
/// running it).
#[must_use = "the cleanup is unregistered when this is dropped"]
pub struct Cleanup(u64);

impl std::fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cleanup({})", self.0)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut c = CLEANUPS.lock().unwrap_or_else(|p| p.into_inner());
        c.retain(|(id, _)| *id != self.0);
    }
}

/// Registers `f` to run if a second signal ends the process before the returned guard is
/// dropped (the normal paths clean up themselves).
pub fn on_forced_exit(f: impl Fn() + Send + 'static) -> Cleanup {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    CLEANUPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((id, Box::new(f)));
    Cleanup(id)
}

/// Removes `path` (a file, or a directory with everything in it) if a second signal ends the
/// process while the guard lives.
pub fn remove_on_forced_exit(path: &std::path::Path) -> Cleanup {
    let path = path.to_path_buf();
    on_forced_exit(move || {
        if path.is_dir() {
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    })
}

/// A signal, not a failure of the work: its message (the exit status is [`status`]).
pub const INTERRUPTED: &str = "interrupted";
