//! Awaiting I/O from async code (feature `async`): on tokio's multi-threaded runtime, tasks
//! read through tickets awaited as futures, on every method; each future is woken by whoever
//! completes its I/O (a worker, a thread reaping the ring, or io_uring's watcher thread) — no
//! thread is parked per I/O and nothing polls in a loop. The issuers are the runtime threads'
//! own (`Aio::with_issuer`), so the view attributes each I/O to the thread that started it.
//! Guards against: a future never woken (a lost wake-up when another thread completes its
//! I/O), and a thread parked per I/O.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings};

fn pattern(off: u64) -> u8 {
    (off / 4096 % 251) as u8
}

fn methods() -> Vec<IoMethodKind> {
    IoMethodKind::ALL
        .into_iter()
        .filter(|&m| m != IoMethodKind::IoUring || skips::io_uring_column("futures"))
        .collect()
}

#[test]
fn tokio_tasks_read_through_futures_on_every_method() {
    for m in methods() {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(4u64 << 20)).map(|o| pattern(o - o % 4096)).collect();
        std::fs::write(&path, data).unwrap();
        let aio = Aio::start(Settings {
            io_method: m,
            max_issuers: 8,
            ..Settings::default()
        })
        .unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .thread_name("tokio-io")
            .build()
            .unwrap();
        let total: u64 = rt.block_on(async {
            let tasks: Vec<_> = (0..64u64)
                .map(|t| {
                    let (aio, f) = (aio.clone(), f.clone());
                    tokio::spawn(async move {
                        let mut read = 0;
                        for i in 0..50u64 {
                            let off = (t * 131 + i * 17) % 1024 * 4096;
                            let ticket = aio
                                .with_issuer(|iss| {
                                    iss.acquire()
                                        .map(|h| h.read(&f, off, IoBuf::new(4096)).into_ticket())
                                })
                                .unwrap()
                                .unwrap();
                            let c = ticket.await;
                            c.check().unwrap();
                            let buf = c.into_buf();
                            assert!(buf.iter().all(|&b| b == pattern(off)), "read at {off}");
                            read += 1;
                        }
                        read
                    })
                })
                .collect();
            let mut n = 0;
            for t in tasks {
                n += t.await.unwrap();
            }
            n
        });
        assert_eq!(total, 64 * 50);
        drop(rt); // its threads end and release their issuers
        assert!(aio.aios().is_empty(), "on {m}: nothing left in flight");
        assert!(
            aio.waits().is_empty(),
            "on {m}: the runtime's issuers were released"
        );
        aio.shutdown();
        eprintln!("futures on {m}: {total} reads awaited from 4 runtime threads");
    }
}

/// A ticket whose future returned its completion, then waited for: a named panic saying a
/// ticket is redeemed once, not an internal-looking "notice is delivered before its I/O
/// completes" (found by a caller-side attack on the lifecycle, 2026-12-08).
#[test]
fn waiting_on_a_ticket_its_future_already_redeemed_says_so() {
    for m in methods() {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![3u8; 8192]).unwrap();
        let aio = Aio::start(Settings {
            io_method: m,
            max_issuers: 4,
            ..Settings::default()
        })
        .unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let me = aio.register_issuer("twice").unwrap();
        let mut ticket = me
            .acquire()
            .unwrap()
            .read(&f, 0, IoBuf::new(4096))
            .into_ticket();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let c = rt.block_on(&mut ticket);
        assert_eq!(&c.into_buf()[..], &[3u8; 4096][..]);
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || ticket.wait()));
        let payload = again.expect_err("a ticket redeemed twice");
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(
            message.contains("a ticket is redeemed once"),
            "{m}: {message}"
        );
    }
}
