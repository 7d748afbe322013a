//! io_uring refused: in a child process whose thread has a seccomp filter making
//! `io_uring_setup` fail with EPERM (as a container policy would), starting with
//! `io_method = io_uring` fails with an error naming the cause and the fallback setting, and
//! with `io_uring_fallback = worker` it starts on the worker method and does I/O.
//! Guards against: a silent fallback, or a panic, when the kernel says no. And once io_uring
//! runs, a new issuer whose ring the kernel refuses (no descriptor left: EMFILE) gets an error
//! that says so, not "could not start io_method" with a hint to allow io_uring (found by a
//! caller-side attack, 2026-12-07). And a descriptor limit (`ulimit -n`) below `max_files`
//! does not refuse every ring: the registered-file table stops at the limit (it was
//! `max_files` long, which the kernel refuses past the limit: every `register_issuer`
//! failed, blamed on descriptors running out; found by a caller-side attack, 2026-12-07).

use dbaio::{Aio, AioError, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::process::Command;

const CHILD: &str = "DBAIO_REFUSED_CHILD";
const LOW_NOFILE_CHILD: &str = "DBAIO_LOW_NOFILE_CHILD";

/// Denies io_uring_setup (EPERM) to the calling thread.
fn deny_io_uring() {
    deny_io_uring_with(libc::EPERM);
}

/// Makes io_uring_setup fail with `errno` on the calling thread.
fn deny_io_uring_with(errno: i32) {
    let nr = libc::SYS_io_uring_setup as u32;
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | errno as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: plain prctl calls; `prog` and `filter` outlive them (the kernel copies the
    // program).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0
        );
    }
}

fn child() {
    deny_io_uring();
    let s = Settings {
        io_method: IoMethodKind::IoUring,
        ..Settings::default()
    };
    match Aio::start(s.clone()) {
        Err(e @ AioError::IoUringRefused { .. }) => {
            let text = e.to_string();
            assert!(
                text.starts_with("could not start io_method \"io_uring\": "),
                "{text}"
            );
            assert!(
                text.contains("seccomp") || text.contains("io_uring_disabled"),
                "{text}"
            );
            assert!(text.contains("Operation not permitted"), "{text}");
            assert!(text.contains("io_uring_fallback = worker"), "{text}");
            println!("refusal message: {text}");
        }
        other => panic!("expected IoUringRefused, got {other:?}"),
    }
    let fallback = Settings {
        io_uring_fallback: dbaio::IoUringFallback::Worker,
        ..s
    };
    let aio = Aio::start(fallback).expect("fallback start");
    assert_eq!(aio.io_method(), IoMethodKind::Worker);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let me = aio.register_issuer("fallback").unwrap();
    let f = aio
        .open(dir.path().join("f"), &OpenOptions::read_write())
        .unwrap();
    me.write_all_at(&f, 0, IoBuf::from_slice(b"still works"))
        .unwrap();
    assert_eq!(
        &me.read_exact_at(&f, 0, IoBuf::new(11)).unwrap()[..],
        b"still works"
    );
}

#[test]
fn refused_io_uring_errors_or_falls_back() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let text = in_child("refused_io_uring_errors_or_falls_back", CHILD);
    assert!(
        text.contains("refusal message: could not start io_method"),
        "{text}"
    );
    eprintln!(
        "{}",
        text.lines()
            .find(|l| l.contains("refusal message"))
            .unwrap_or("")
    );
}

#[test]
fn a_new_issuer_whose_ring_is_refused_says_so() {
    let aio = match Aio::start(Settings {
        io_method: IoMethodKind::IoUring,
        ..Settings::default()
    }) {
        Ok(aio) => aio,
        Err(e) => {
            eprintln!("SKIPPED a_new_issuer_whose_ring_is_refused_says_so: {e}");
            return;
        }
    };
    let a2 = aio.clone();
    // A thread of its own: the filter stays on it.
    let text = std::thread::spawn(move || {
        deny_io_uring_with(libc::EMFILE);
        match a2.register_issuer("late") {
            Err(e @ AioError::IssuerRing { .. }) => e.to_string(),
            Err(other) => panic!("expected IssuerRing, got {other:?}"),
            Ok(_) => panic!("expected IssuerRing, got an issuer"),
        }
    })
    .join()
    .unwrap();
    assert!(
        text.starts_with("could not register an issuer: its io_uring ring could not be created: "),
        "{text}"
    );
    assert!(text.contains("ulimit -n"), "{text}");
    assert!(!text.contains("Allow io_uring"), "{text}");
    // The subsystem runs on: another thread registers and reads.
    let me = aio.register_issuer("after").unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let f = aio
        .open(dir.path().join("f"), &OpenOptions::read_write())
        .unwrap();
    me.write_all_at(&f, 0, IoBuf::from_slice(b"runs on"))
        .unwrap();
}

/// Runs `test` again in a child process with `env` set; fails with the child's output if it
/// fails, else returns that output.
fn in_child(test: &str, env: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    text
}

#[test]
fn a_descriptor_limit_below_max_files_leaves_rings_working() {
    if std::env::var_os(LOW_NOFILE_CHILD).is_none() {
        in_child(
            "a_descriptor_limit_below_max_files_leaves_rings_working",
            LOW_NOFILE_CHILD,
        );
        return;
    }
    let low = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 4096,
    };
    // SAFETY: setrlimit reads one rlimit we own; this child process is ours alone.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let aio = match Aio::start(Settings {
        io_method: IoMethodKind::IoUring,
        max_files: 1024,
        ..Settings::default()
    }) {
        Ok(aio) => aio,
        Err(e) => {
            eprintln!("SKIPPED a_descriptor_limit_below_max_files_leaves_rings_working: {e}");
            return;
        }
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for name in ["one", "two"] {
        let me = aio
            .register_issuer(name)
            .expect("a ring under a descriptor limit below max_files");
        let f = aio
            .open(dir.path().join(name), &OpenOptions::read_write())
            .unwrap();
        me.write_all_at(&f, 0, IoBuf::from_slice(b"registered or not"))
            .unwrap();
        assert_eq!(
            &me.read_exact_at(&f, 0, IoBuf::new(17)).unwrap()[..],
            b"registered or not"
        );
    }
}
