//! Helpers shared by the tests that run the real `dbaio` binary (`command.rs`, `hostile.rs`):
//! the command with quiet logging, a scratch directory under the target directory, a run's
//! output as text, its exit status checked, every path under a directory, and a file of known
//! bytes.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `dbaio` binary under test, logging only warnings.
pub fn dbaio() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dbaio"));
    c.env("DBAIO_LOG", "warn");
    c
}

/// A scratch directory named `prefix…` under the target directory.
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// A run's stdout and stderr, as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Asserts `o` exited with `code`, by itself (no signal, no panic), and returns its stderr.
#[allow(dead_code)] // not every test file checks exit statuses
pub fn exited(o: &Output, code: i32, what: &str) -> String {
    let (out, err) = text(o);
    assert!(!err.contains("panicked"), "{what} panicked:\n{err}");
    assert_eq!(
        o.status.code(),
        Some(code),
        "{what}: {:?} (signal {:?})\nstdout: {out}\nstderr: {err}",
        o.status,
        o.status.signal()
    );
    err
}

/// Every path under `d`.
pub fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            }
            out.push(p);
        }
    }
    out
}

/// Writes `len` known bytes to `path` and returns them.
#[allow(dead_code)] // not every test file lays out a file
pub fn file_with(path: &Path, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(path, &data).unwrap();
    data
}
