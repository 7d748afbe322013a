//! The introspection socket: a unix socket (`introspection_socket = path`, mode 0600) that
//! serves the aios view, the waits and the stats as JSON to peers with this process's uid
//! (checked with `SO_PEERCRED`). One request per connection: a line of at most
//! [`MAX_REQUEST`] bytes, read within [`REQUEST_TIMEOUT`]; anything else is answered with an
//! error and never disturbs the embedder. Clients are served at once by one thread polling
//! them all without blocking (at most [`MAX_CLIENTS`], the oldest idle one let go for a new
//! one), so a slow or idle client delays no other. See `docs/aios.md`, "Socket".

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
use std::time::{Duration, Instant};

/// The longest request accepted, in bytes.
pub const MAX_REQUEST: usize = 4096;
/// How long a peer may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a peer may take to read its reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Clients served at once; at the cap, a new client lets the oldest idle one go.
pub const MAX_CLIENTS: usize = 64;
/// How long [`request`] waits for a reply.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the server looks at its stop flag.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The commands the socket answers.
pub const COMMANDS: &[&str] = &["aios", "waits", "stats", "all", "reset_stats"];

pub(crate) struct Introspection {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    /// The process that started the thread (and owns the socket file).
    owner: dbaio_sys::Owner,
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
    /// io_uring's registered buffers (absent unless `io_uring_registered_buffers` is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    registered_buffers: Option<crate::handle::fixed_memory::RegisteredBuffers>,
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
                    "another subsystem is serving on it (in this process or another)",
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
            owner: dbaio_sys::Owner::here(),
            stop,
            thread: Some(thread),
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Introspection {
    fn drop(&mut self) {
        // In a child made by fork the thread is not there, and the socket is the parent's.
        if self.owner.in_forked_child() {
            std::mem::forget(self.thread.take());
            return;
        }
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One client: its request as it arrives, then its reply as it goes out.
struct Client {
    stream: UnixStream,
    /// The request's bytes so far.
    request: Vec<u8>,
    /// The reply and how much of it is written, once the request is in (or refused).
    reply: Option<(Vec<u8>, usize)>,
    /// When the request must be in (then: when the reply must be out).
    deadline: Instant,
    /// When it was accepted (the oldest idle client is the one let go at the cap).
    accepted: Instant,
}

/// What reading a client's request came to.
enum Reading {
    /// Not all there yet.
    More,
    /// The request (or why it is refused), to answer.
    Done(Result<String, String>),
}

impl Client {
    fn new(stream: UnixStream) -> Client {
        let now = Instant::now();
        Client {
            stream,
            request: Vec::with_capacity(256),
            reply: None,
            deadline: now + REQUEST_TIMEOUT,
            accepted: now,
        }
    }

    /// Reads what the client sent, without blocking: the request once a line (or the end of
    /// its writes) is in, an error once it is too large or the reading failed.
    fn read(&mut self) -> Reading {
        let mut chunk = [0u8; 512];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Reading::Done(parse_request(&self.request)),
                Ok(n) => {
                    self.request.extend_from_slice(&chunk[..n]);
                    if self.request.len() > MAX_REQUEST {
                        return Reading::Done(Err(format!(
                            "request too large (limit {MAX_REQUEST} bytes)"
                        )));
                    }
                    if chunk[..n].contains(&b'\n') {
                        return Reading::Done(parse_request(&self.request));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Reading::More,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Reading::Done(Err(format!("could not read the request: {e}"))),
            }
        }
    }

    /// Sets the reply to `request` (the peer's uid checked first), due within the write
    /// timeout.
    fn answer(&mut self, request: Result<String, String>, src: &Source) {
        let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reply_to(&self.stream, request, src)
        }))
        .unwrap_or_else(|_| {
            tracing::error!("introspection request handler panicked; the request was dropped");
            error_json("the request could not be answered")
        });
        self.reply = Some((reply, 0));
        self.deadline = Instant::now() + WRITE_TIMEOUT;
    }

    /// Moves the client on, without blocking: reads its request, answers it, writes the
    /// reply; false once it is done with (reply written, or its time is up).
    fn progress(&mut self, src: &Source, now: Instant) -> bool {
        if self.reply.is_none() {
            match self.read() {
                Reading::Done(request) => self.answer(request, src),
                Reading::More if now >= self.deadline => self.answer(
                    Err(format!(
                        "request timed out after {} ms",
                        REQUEST_TIMEOUT.as_millis()
                    )),
                    src,
                ),
                Reading::More => return true,
            }
        }
        let Some((reply, written)) = &mut self.reply else {
            return true;
        };
        while *written < reply.len() {
            match send(&self.stream, &reply[*written..]) {
                Ok(n) => *written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return now < self.deadline;
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// The events to wait for: the request's bytes, or room for the reply.
    fn events(&self) -> libc::c_short {
        if self.reply.is_some() {
            libc::POLLOUT
        } else {
            libc::POLLIN
        }
    }
}

/// Writes what it can of `bytes` to `stream` without blocking, and without a SIGPIPE if the
/// peer is gone (the embedder may not ignore that signal).
fn send(stream: &UnixStream, bytes: &[u8]) -> std::io::Result<usize> {
    // SAFETY: sends at most `bytes.len()` bytes from `bytes`, which lives across the call.
    let n = unsafe {
        libc::send(
            stream.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The reply to `request` from the peer on `stream`: refused unless its uid is ours. The
/// request is read first, even from a peer about to be refused: closing a unix socket with
/// unread bytes resets the connection, and the peer would lose the reason.
fn reply_to(stream: &UnixStream, request: Result<String, String>, src: &Source) -> Vec<u8> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match peer_uid(stream) {
        Ok(uid) if uid == me => {}
        Ok(uid) => {
            return error_json(&format!(
                "permission denied: peer uid {uid} is not the owner (uid {me})"
            ));
        }
        Err(e) => return error_json(&format!("could not identify the peer: {e}")),
    }
    match request {
        Err(msg) => error_json(&msg),
        Ok(cmd) => answer(&cmd, src),
    }
}

/// The clients being served, and when the listener may next accept (after a failure such as
/// too many open files, it waits a little instead of spinning).
struct Clients {
    all: Vec<Client>,
    accept_after: Instant,
}

impl Clients {
    /// Accepts every connection waiting, letting the oldest idle client go when
    /// [`MAX_CLIENTS`] are served at once (a new client, which sends its request at once, is
    /// never the one turned away for idle ones).
    fn accept(&mut self, listener: &UnixListener) {
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.all.len() >= MAX_CLIENTS && !self.let_oldest_idle_go() {
                        let _ = send(&stream, &error_json(&too_many()));
                        continue;
                    }
                    self.all.push(Client::new(stream));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!("introspection socket accept failed: {e}");
                    self.accept_after = Instant::now() + Duration::from_millis(100);
                    return;
                }
            }
        }
    }

    /// Closes the client that has waited longest without sending its request, telling it
    /// why; false if every client is being answered.
    fn let_oldest_idle_go(&mut self) -> bool {
        let oldest = (0..self.all.len())
            .filter(|&i| self.all[i].reply.is_none())
            .min_by_key(|&i| self.all[i].accepted);
        let Some(i) = oldest else {
            return false;
        };
        let c = self.all.swap_remove(i);
        let _ = send(&c.stream, &error_json(&too_many()));
        true
    }
}

/// The words for a client let go at the cap.
fn too_many() -> String {
    format!("too many clients at once (limit {MAX_CLIENTS}); this idle one was closed")
}

/// Serves clients until `stop`: all at once, each without blocking (one poll over the
/// listener and every client), so that one slow or idle client delays no other; a client has
/// [`REQUEST_TIMEOUT`] to send its request and [`WRITE_TIMEOUT`] to take its reply.
fn serve(listener: &UnixListener, src: &Source, stop: &AtomicBool) {
    let mut clients = Clients {
        all: Vec::new(),
        accept_after: Instant::now(),
    };
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let listening = now >= clients.accept_after;
        fds.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: if listening { libc::POLLIN } else { 0 },
            revents: 0,
        });
        fds.extend(clients.all.iter().map(|c| libc::pollfd {
            fd: c.stream.as_raw_fd(),
            events: c.events(),
            revents: 0,
        }));
        let soonest = clients.all.iter().map(|c| c.deadline).min();
        let wait = soonest
            .map_or(POLL_INTERVAL, |d| d.saturating_duration_since(now))
            .min(POLL_INTERVAL);
        // SAFETY: `fds` holds `fds.len()` valid pollfds for the duration of the call.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as i32,
            )
        };
        let now = Instant::now();
        // Every client is moved on (each step is non-blocking), not just those poll named:
        // deadlines pass without events.
        clients.all.retain_mut(|c| c.progress(src, now));
        if listening && fds[0].revents != 0 {
            clients.accept(listener);
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

fn answer(cmd: &str, src: &Source) -> Vec<u8> {
    let json = match cmd {
        "aios" => serde_json::to_vec(&serde_json::json!({ "aios": src.aios() })),
        "waits" => serde_json::to_vec(&serde_json::json!({ "waits": src.waits() })),
        "stats" => serde_json::to_vec(&serde_json::json!({
            "stats": src.stat_rows(),
            "advice_budget": src.advice_budget(),
            "worker_pool": src.worker_pool(),
            "registered_buffers": src.registered_buffers.as_ref().map(|read| read()),
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
            registered_buffers: src.registered_buffers.as_ref().map(|read| read()),
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
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
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
