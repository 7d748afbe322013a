//! Where the command's words go, and what happens when they cannot: a write to standard output
//! that fails is an error the command returns (cleaning up on the way out), never a panic —
//! `could not write to standard output: No space left on device` and exit status 1 for a full
//! disk, a quiet exit with status 141 (128 + SIGPIPE, what the shell would report had the
//! signal killed it) when the reader went away (`dbaio bench --json | head -1`). Notes on
//! standard error never fail the command ([`note!`](crate::note)). A standard output closed
//! at start (`dbaio stat >&-`) is refused before anything runs, status 1, as coreutils do:
//! Rust's runtime puts `/dev/null` on a closed descriptor 0, 1 or 2 before `main` (so no data
//! file can be opened as descriptor 1 and written to by a print), which would otherwise lose
//! the output with status 0; [`note_closed_stdout`] looks first, from `.init_array`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Descriptor 1 was closed when the process started.
static STDOUT_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// Notes whether descriptor 1 is closed. For the binary's `.init_array` entry: it runs before
/// Rust's runtime puts `/dev/null` there.
pub extern "C" fn note_closed_stdout() {
    // SAFETY: F_GETFD only reads the descriptor's flags; an unopened one gives EBADF.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED_AT_START.store(true, Ordering::Relaxed);
    }
}

/// The error when standard output was closed at start (`>&-`): the command's output could go
/// nowhere.
pub fn closed_at_start() -> Option<String> {
    STDOUT_CLOSED_AT_START.load(Ordering::Relaxed).then(|| {
        format!(
            "could not write to standard output: {} (it was closed when dbaio started)\nHINT:  Send it somewhere: >/dev/null discards it.",
            std::io::Error::from_raw_os_error(libc::EBADF)
        )
    })
}

/// The error of a write to standard output whose reader went away (EPIPE): the command stops
/// quietly, with exit status [`BROKEN_PIPE_STATUS`].
pub const BROKEN_PIPE: &str = "standard output was closed by its reader";

/// 128 + SIGPIPE.
pub const BROKEN_PIPE_STATUS: u8 = 128 + 13;

/// Writes a note to standard error, ignoring a failure (a closed or full stderr must not end
/// the run: its words are lost, the exit status still tells).
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The words for a failed write to standard output.
fn stdout_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        BROKEN_PIPE.to_string()
    } else {
        format!("could not write to standard output: {e}")
    }
}

/// Writes `text` to standard output and flushes it.
pub fn out(text: &str) -> Result<(), String> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())
        .and_then(|()| o.flush())
        .map_err(|e| stdout_error(&e))
}

/// Writes `text` and a newline to standard output.
pub fn line(text: &str) -> Result<(), String> {
    out(&format!("{text}\n"))
}

/// Writes `v` as one line of JSON.
pub fn json_line(v: &impl serde::Serialize) -> Result<(), String> {
    let s = serde_json::to_string(v).map_err(|e| format!("could not encode the report: {e}"))?;
    line(&s)
}

/// Writes `v` as pretty JSON.
pub fn json_pretty(v: &impl serde::Serialize) -> Result<(), String> {
    let s =
        serde_json::to_string_pretty(v).map_err(|e| format!("could not encode the report: {e}"))?;
    line(&s)
}

/// Serialises a path as text, replacing bytes that are not UTF-8 (a file name may hold any
/// bytes; JSON holds text).
pub fn lossy_path<S: serde::Serializer>(p: &std::path::Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}
