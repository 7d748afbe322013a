//! The introspection socket: created owner-only (0600); a peer with another uid is refused
//! (by the file mode and, when that is opened up, by the SO_PEERCRED check); garbage,
//! malformed, oversized and slow requests get an error and the embedder keeps running and
//! serving; a stale socket file is replaced, a foreign file or a live socket is not; the file
//! is removed when the subsystem goes. Guards against: a view that crashes or leaks to others.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CLIENT: &str = "DBAIO_SOCKET_CLIENT";

fn start(sock: &Path) -> Aio {
    let s = Settings {
        io_method: IoMethodKind::Worker,
        introspection_socket: Some(sock.to_path_buf()),
        max_issuers: 4,
        ..Settings::default()
    };
    Aio::start(s).unwrap()
}

/// Sends `req` raw and returns the reply as text.
fn raw(sock: &Path, req: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(req);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn dir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = d.path().join("aio.sock");
    (d, p)
}

#[test]
fn serves_the_view_and_survives_bad_requests() {
    let (d, sock) = dir();
    let aio = start(&sock);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "owner-only");

    let me = aio.register_issuer("served").unwrap();
    let f = aio
        .open(d.path().join("f"), &OpenOptions::read_write())
        .unwrap();
    me.write_all_at(&f, 0, IoBuf::from_slice(&[1u8; 8192]))
        .unwrap();
    let held = me.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    aio.wait(held.wait_ref()).unwrap();

    let v: serde_json::Value = serde_json::from_str(&raw(&sock, b"aios\n")).unwrap();
    let rows = v["aios"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["issuer"], "served");
    assert_eq!(rows[0]["state"], "COMPLETED_SHARED");
    let v: serde_json::Value =
        serde_json::from_str(&raw(&sock, b"{\"cmd\": \"stats\"}\n")).unwrap();
    assert_eq!(v["stats"][0]["ops"][0]["op"], "writev", "{v}");
    let v: serde_json::Value = serde_json::from_str(&raw(&sock, b"waits\n")).unwrap();
    assert_eq!(v["waits"][0]["issuer"], "served");
    let v: serde_json::Value = serde_json::from_str(&raw(&sock, b"all\n")).unwrap();
    assert_eq!(v["io_method"], "worker");

    let err = |reply: String| -> String {
        let v: serde_json::Value =
            serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply}"));
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {reply}"))
            .to_string()
    };
    assert!(
        err(raw(&sock, b"garbage\n"))
            .starts_with("unknown command \"garbage\"; valid commands: aios")
    );
    assert!(err(raw(&sock, b"\xff\xfe\n")).contains("not UTF-8"));
    assert!(err(raw(&sock, b"{\"cmd\": \n")).starts_with("malformed JSON request"));
    assert!(err(raw(&sock, b"{\"nope\": 1}\n")).contains("lacks a \"cmd\""));
    assert!(
        err(raw(&sock, &vec![b'a'; 64 * 1024])).starts_with("request too large (limit 4096 bytes)")
    );
    // Slow: connect and say nothing.
    let mut slow = UnixStream::connect(&sock).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut out = String::new();
    slow.read_to_string(&mut out).unwrap();
    assert!(err(out).starts_with("request timed out"));

    // The embedder kept running: I/O works and the socket still serves.
    assert_eq!(me.wait(held).bytes(), 4096);
    me.write_all_at(&f, 8192, IoBuf::from_slice(&[2u8; 4096]))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&raw(&sock, b"stats\n")).unwrap();
    assert!(
        v["stats"][0]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["op"] == "readv")
    );
    let v: serde_json::Value = serde_json::from_str(&raw(&sock, b"reset_stats\n")).unwrap();
    assert_eq!(v["reset_stats"], true);
    drop((me, f, aio));
    assert!(
        !sock.exists(),
        "the socket file is removed when the subsystem goes"
    );
}

#[test]
fn socket_path_conflicts() {
    let (d, sock) = dir();
    // A stale socket file (no server) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let aio = start(&sock);
    // A live one is not taken over.
    let s = Settings {
        introspection_socket: Some(sock.clone()),
        ..Settings::default()
    };
    let e = Aio::start(s).unwrap_err().to_string();
    // (Here the server is a subsystem of this very process: the message must not say
    // "another process".)
    assert!(
        e.contains("another subsystem is serving on it (in this process or another)"),
        "{e}"
    );
    drop(aio);
    // A regular file in the way is never deleted.
    let file = d.path().join("precious");
    std::fs::write(&file, b"keep me").unwrap();
    let s = Settings {
        introspection_socket: Some(file.clone()),
        ..Settings::default()
    };
    let e = Aio::start(s).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "could not create introspection socket \"{}\"",
            file.display()
        )),
        "{e}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

fn client_main(sock: &str) {
    match UnixStream::connect(sock) {
        Ok(mut s) => {
            let _ = s.write_all(b"aios\n");
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            print!("reply: {out}");
        }
        Err(e) => print!("connect failed: {e}"),
    }
}

#[test]
fn another_uid_is_refused() {
    if let Ok(sock) = std::env::var(CLIENT) {
        return client_main(&sock);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skips::skipped(
            "another_uid_is_refused",
            "needs root to run a client as another uid",
        );
        return;
    }
    let (d, sock) = dir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let aio = start(&sock);
    let as_nobody = |sock: &Path| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "another_uid_is_refused",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CLIENT, sock)
            .uid(65534)
            .gid(65534)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
            Ok(o) => {
                skips::skipped(
                    "another_uid_is_refused",
                    format!(
                        "the test binary did not run as uid 65534: {}",
                        String::from_utf8_lossy(&o.stderr)
                            .lines()
                            .next()
                            .unwrap_or("")
                    ),
                );
                None
            }
            Err(e) => {
                skips::skipped(
                    "another_uid_is_refused",
                    format!("cannot run as uid 65534: {e}"),
                );
                None
            }
        }
    };
    // The file mode alone keeps others out.
    let Some(out) = as_nobody(&sock) else { return };
    assert!(out.contains("connect failed: Permission denied"), "{out}");
    // Opened up by mistake, the SO_PEERCRED check still refuses.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody(&sock).expect("it ran as uid 65534 a moment ago");
    assert!(
        out.contains("permission denied: peer uid 65534 is not the owner (uid 0)"),
        "{out}"
    );
    // And the owner is still served.
    assert!(raw(&sock, b"aios\n").starts_with("{\"aios\":"));
    drop(aio);
}
