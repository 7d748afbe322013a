//! A child made by `fork` while an `Aio` runs can drop its copy (returning from `main`, say)
//! without harm to itself or to the parent: the background threads the `Aio` started — the
//! worker threads, the worker-process pool's supervisor and completer, io_uring's watcher,
//! the introspection socket's server — are not in the child, so its drops must not join them
//! (a join there waited for ever, or panicked: "threads should not terminate unexpectedly"),
//! and what the child shares with the parent — worker processes, the socket file — stays the
//! parent's. And the child cannot use it: registering an issuer, acquiring a handle, or a
//! helper that runs in the caller's thread (`read_exact_into`, `fdatasync`, through
//! `with_issuer` too) is an API-violation error there, not the internal panic it was nor an
//! I/O run on the parent's handles (the handle table is shared with the parent and holds
//! the parent's I/Os). Found by attacks from the caller's side. Each method in turn: the
//! parent starts an `Aio` with an introspection socket, reads, forks; the child asks for an
//! issuer, a handle of the parent's issuer and the helpers, drops everything and exits 0
//! (2 to 6 if it got one, 1 if a drop panicked; a hang fails the parent's watchdog); the
//! parent then checks that
//! the child exited cleanly, that its socket file is still there, that the reads it had in
//! flight at the fork (which the child's copies of them and of their issuer dropped) complete
//! with their data, and that it still reads.
//! One test, in its own binary, so that no other test's threads hold a lock at the fork.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, AioError, IoBuf, IoMethodKind, OpenOptions, Settings, settings::IoWorkerKind};
use std::time::{Duration, Instant};

fn read_first_block(aio: &Aio, path: &std::path::Path) -> Vec<u8> {
    let me = aio.register_issuer("reader").unwrap();
    let f = aio.open(path, &OpenOptions::read()).unwrap();
    let got = me.wait(me.acquire().unwrap().read(&f, 0, IoBuf::new(4096)));
    got.check().unwrap();
    got.into_buf().to_vec()
}

/// Waits for child `pid` for up to 30 s (then kills it and fails); returns its wait status.
fn wait_with_watchdog(pid: libc::pid_t, what: &str) -> libc::c_int {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let mut status = 0;
        // SAFETY: waits without blocking for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return status;
        }
        assert_eq!(r, 0, "waitpid failed for {what}");
        if Instant::now() > end {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("{what}: the child's drop of the Aio hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_forked_child_drops_its_copy_of_the_aio_and_the_parent_goes_on() {
    let dir = tempfile::Builder::new()
        .prefix("dbaio-fork")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![0x6b; 1 << 16]).unwrap();
    let columns = [
        ("sync", IoMethodKind::Sync, IoWorkerKind::Thread),
        ("worker", IoMethodKind::Worker, IoWorkerKind::Thread),
        (
            "worker_process",
            IoMethodKind::Worker,
            IoWorkerKind::Process,
        ),
        ("io_uring", IoMethodKind::IoUring, IoWorkerKind::Thread),
    ];
    for (name, method, kind) in columns {
        let what = format!("a_forked_child_drops_its_copy_of_the_aio on {name}");
        if method == IoMethodKind::IoUring && !skips::io_uring_column(&what) {
            continue;
        }
        let socket = dir.path().join(format!("{name}.sock"));
        let aio = Aio::start(Settings {
            io_method: method,
            io_worker_kind: kind,
            io_workers: 2,
            // Every read here would hit the page cache and complete at submit, in the
            // issuer, never reaching a worker process: the check below would see nothing.
            io_worker_try_cached: false,
            introspection_socket: Some(socket.clone()),
            ..Settings::default()
        })
        .unwrap();
        assert!(read_first_block(&aio, &path).iter().all(|&b| b == 0x6b));
        let me = aio.register_issuer("parent").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        // The parent's reads in flight (or done, not yet waited for) at the fork: the child's
        // copies of them and of their issuer must leave them alone (its issuer's drop waited
        // for and reclaimed them in the handle table it shares with the parent, whose wait
        // then panicked: found by a caller-side attack, io_uring 5 of 5).
        let pending: Vec<_> = (0..4u64)
            .map(|b| me.acquire().unwrap().read(&f, b * 4096, IoBuf::new(4096)))
            .collect();
        // SAFETY: the child only asks for an issuer and a handle, drops and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // Exit codes: 2 and 3, an issuer or a handle the child got; 4 to 6, a helper that
            // ran; 1, a drop that panicked.
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if !matches!(aio.register_issuer("child"), Err(AioError::ApiViolation(_))) {
                    return 2;
                }
                if !matches!(me.acquire().map(drop), Err(AioError::ApiViolation(_))) {
                    return 3;
                }
                // Nor the helpers that run in the caller's thread (they would move the
                // parent's handles through their states under the parent's own I/O).
                let mut page = [0u8; 4096];
                if !matches!(
                    me.read_exact_into(&f, 0, &mut page),
                    Err(AioError::ApiViolation(_))
                ) {
                    return 4;
                }
                if !matches!(me.fdatasync(&f), Err(AioError::ApiViolation(_))) {
                    return 5;
                }
                match aio.with_issuer(|i| i.fsync(&f)) {
                    Err(AioError::ApiViolation(_)) | Ok(Err(AioError::ApiViolation(_))) => {}
                    _ => return 6,
                }
                0
            }));
            // Its copies of the parent's I/Os (the parent's go on), then of the file (the
            // parent's stays open, in its workers too), the issuer and the subsystem.
            let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(pending)))
                .and_then(|()| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                        drop(f);
                        drop(me);
                        drop(aio);
                    }))
                });
            let code = match (code, dropped) {
                (Ok(code), Ok(())) => code,
                _ => 1,
            };
            // SAFETY: _exit ends the child without running the test harness's code.
            unsafe { libc::_exit(code) };
        }
        let status = wait_with_watchdog(pid, &what);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{what}: the child got an issuer or a handle (exit 2 or 3), ran a helper (4 to 6) \
             or its drop failed \
             (wait status {status:#x})"
        );
        assert!(
            socket.exists(),
            "{what}: the child removed the parent's socket"
        );
        for (b, io) in pending.into_iter().enumerate() {
            let c = me.wait(io);
            assert!(
                c.into_buf().iter().all(|&x| x == 0x6b),
                "{what}: the parent's read {b} in flight at the fork"
            );
        }
        assert!(
            read_first_block(&aio, &path).iter().all(|&b| b == 0x6b),
            "{what}: the parent's read after the child's drop"
        );
        // The parent's own file, which the child closed its copy of, still reads — through
        // the worker processes, which the child's close must not have made drop it.
        for b in 0..8u64 {
            let c = me.wait(me.acquire().unwrap().read(&f, b * 4096, IoBuf::new(4096)));
            assert!(c.into_buf().iter().all(|&x| x == 0x6b), "{what}: block {b}");
        }
        if let Some(pool) = aio.worker_pool() {
            assert_eq!(
                pool.ran_locally, 0,
                "{what}: the child's close of its copy closed the parent's file in its workers"
            );
        }
        drop((f, me));
        drop(aio);
    }
}
