//! The introspection socket: a unix socket (`introspection_socket = path`, mode 0600) that
//! serves the aios view, the waits and the stats as JSON to peers with this process's uid
//! (checked with `SO_PEERCRED`). One request per connection: a line of at most
//! [`MAX_REQUEST`] bytes, read within [`REQUEST_TIMEOUT`]; anything else is answered with an
//! error and never disturbs the embedder. See `docs/aios.md`, "Socket".

use super::Source;
use crate::handle::error::AioError;
use serde::Serialize;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// The longest request accepted, in bytes.
pub const MAX_REQUEST: usize = 4096;
/// How long a peer may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The commands the socket answers.
pub const COMMANDS: &[&str] = &["aios", "waits", "stats", "all", "reset_stats"];

pub(crate) struct Introspection {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

/// Everything at once, for `dbaio aios --watch`.
#[derive(Serialize)]
struct All {
    pid: u32,
    io_method: &'static str,
    uptime_s: f64,
    aios: Vec<crate::AioRow>,
    waits: Vec<crate::WaitRow>,
    stats: Vec<crate::IssuerStatsRow>,
    advice_budget: Vec<crate::AdviceBudgetRow>,
    worker_pool: Option<crate::WorkerPoolRow>,
    /// Missed wake-ups the safety nets caught, every issuer, since start (0 unless there is
    /// a bug).
    backstop_wakes: u64,
}

fn error_json(msg: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&serde_json::json!({ "error": msg })).expect("json");
    v.push(b'\n');
    v
}

impl Introspection {
    pub(crate) fn start(path: &Path, src: Source) -> Result<Self, AioError> {
        let err = |e: std::io::Error| AioError::Introspection {
            path: path.display().to_string(),
            source: e,
        };
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a file that is not a socket is in the way",
                )));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another process is serving on it",
                )));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        let listener = UnixListener::bind(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        listener.set_nonblocking(true).map_err(err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("dbaio-introspect".into())
            .spawn(move || serve(&listener, &src, &stop2))
            .map_err(err)?;
        Ok(Introspection {
            stop,
            thread: Some(thread),
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Introspection {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(listener: &UnixListener, src: &Source, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle(stream, src)));
                if r.is_err() {
                    tracing::error!(
                        "introspection request handler panicked; the request was dropped"
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut pfd, 1, 100) };
            }
            Err(e) => {
                tracing::warn!("introspection socket accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The peer's uid, from SO_PEERCRED.
fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes passed.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

fn read_request(stream: &mut UnixStream) -> Result<String, String> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_REQUEST {
                    return Err(format!("request too large (limit {MAX_REQUEST} bytes)"));
                }
                if buf.contains(&b'\n') {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!(
                    "request timed out after {} ms",
                    REQUEST_TIMEOUT.as_millis()
                ));
            }
            Err(e) => return Err(format!("could not read the request: {e}")),
        }
    }
    parse_request(&buf)
}

/// The command in a request's first line: a bare command, or `{"cmd": "…"}`. Untrusted
/// bytes: every rejection is an error in words, never a panic.
fn parse_request(buf: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(buf).map_err(|_| "request is not UTF-8".to_string())?;
    let line = text.lines().next().unwrap_or("").trim();
    // Accept a bare command or {"cmd": "..."}.
    let cmd = if line.starts_with('{') {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("malformed JSON request: {e}"))?;
        v.get("cmd")
            .and_then(|c| c.as_str())
            .ok_or("JSON request lacks a \"cmd\" string")?
            .to_string()
    } else {
        line.to_string()
    };
    Ok(cmd)
}

fn handle(mut stream: UnixStream, src: &Source) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    // The request is read first, even from a peer about to be refused: closing a unix socket
    // with unread bytes resets the connection, and the peer would lose the reason.
    let request = read_request(&mut stream);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match peer_uid(&stream) {
        Ok(uid) if uid == me => {}
        Ok(uid) => {
            let _ = stream.write_all(&error_json(&format!(
                "permission denied: peer uid {uid} is not the owner (uid {me})"
            )));
            return;
        }
        Err(e) => {
            let _ = stream.write_all(&error_json(&format!("could not identify the peer: {e}")));
            return;
        }
    }
    let reply = match request {
        Err(msg) => error_json(&msg),
        Ok(cmd) => answer(&cmd, src),
    };
    let _ = stream.write_all(&reply);
}

fn answer(cmd: &str, src: &Source) -> Vec<u8> {
    let json = match cmd {
        "aios" => serde_json::to_vec(&serde_json::json!({ "aios": src.aios() })),
        "waits" => serde_json::to_vec(&serde_json::json!({ "waits": src.waits() })),
        "stats" => serde_json::to_vec(&serde_json::json!({
            "stats": src.stat_rows(),
            "advice_budget": src.advice_budget(),
            "worker_pool": src.worker_pool(),
        })),
        "reset_stats" => {
            src.stats.reset(src.shared.now_ns());
            serde_json::to_vec(&serde_json::json!({ "reset_stats": true }))
        }
        "all" => serde_json::to_vec(&All {
            pid: std::process::id(),
            io_method: src.method,
            uptime_s: src.shared.epoch.elapsed().as_secs_f64(),
            aios: src.aios(),
            waits: src.waits(),
            stats: src.stat_rows(),
            advice_budget: src.advice_budget(),
            worker_pool: src.worker_pool(),
            backstop_wakes: src
                .shared
                .backstop_wakes
                .load(std::sync::atomic::Ordering::Relaxed),
        }),
        other => {
            let shown: String = other.chars().take(40).collect();
            return error_json(&format!(
                "unknown command \"{shown}\"; valid commands: {}",
                COMMANDS.join(", ")
            ));
        }
    };
    let mut v = json.unwrap_or_else(|e| error_json(&format!("could not encode the reply: {e}")));
    v.push(b'\n');
    v
}

/// Sends `cmd` to the socket at `path` and returns the JSON reply (a client for the CLI).
pub fn request(path: &Path, cmd: &str) -> std::io::Result<serde_json::Value> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let sent = s
        .write_all(cmd.as_bytes())
        .and_then(|()| s.write_all(b"\n"));
    match sent {
        // A server that refuses the peer says why and closes at once, maybe before the request
        // is written: its one-line reason is still there to read.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        // A reset after a whole reply (an older server that refused without reading).
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !out.is_empty() => {}
        other => {
            other?;
        }
    }
    serde_json::from_slice(&out)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::parse_request;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Any bytes: a command or an error in words; never a panic.
        #[test]
        fn any_request_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            match parse_request(&bytes) {
                Ok(cmd) => prop_assert!(!cmd.contains('\n')),
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }

        /// JSON-shaped requests, the likely garbage.
        #[test]
        fn json_shaped_requests(
            key in "[a-z\"]{0,6}",
            value in "[ -~]{0,20}",
            tail in "[ -~\n]{0,40}",
        ) {
            let req = format!("{{\"{key}\": {value}}}{tail}");
            match parse_request(req.as_bytes()) {
                Ok(cmd) => prop_assert!(key == "cmd" || !cmd.is_empty() || cmd.is_empty()),
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }

    #[test]
    fn requests_read_as_meant() {
        assert_eq!(parse_request(b"aios\n").unwrap(), "aios");
        assert_eq!(parse_request(b"{\"cmd\": \"stats\"}\n").unwrap(), "stats");
        assert_eq!(
            parse_request(b"{\"cmd\": 3}").unwrap_err(),
            "JSON request lacks a \"cmd\" string"
        );
        assert!(parse_request(&[0xff, 0xfe]).unwrap_err().contains("UTF-8"));
        assert!(
            parse_request(b"{nope")
                .unwrap_err()
                .starts_with("malformed JSON request")
        );
    }
}
