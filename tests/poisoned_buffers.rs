//! A poisoned-buffer check for the methods valgrind cannot run (io_uring's kernel writes are
//! invisible to it), and for every method alike: a test allocator quarantines every freed
//! block of 4 KiB or more — fills it with a poison byte and keeps it out of use — and the
//! check then verifies that every quarantined block still holds only poison. A block the
//! kernel (or a worker) wrote into after it was freed is found.
//!
//! `early_free_is_caught` shows the check works: a read into memory the caller frees while
//! the read is still staged (breaking `readv_raw`'s contract on purpose) is caught.
//! `nothing_is_freed_under_an_io` is the real check: thousands of reads and writes whose
//! `InFlight`s are redeemed, dropped mid-flight or left to issuer exit, on every method —
//! no quarantined block is disturbed.
//!
//! Guards against: a buffer freed while the kernel or a worker may still write into it (a
//! use after free that valgrind cannot see for io_uring).

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const POISON: u8 = 0xdb;
/// IoBufs stay on the heap, where the quarantine sees them freed: with
/// `io_uring_registered_io_bufs` on they would come from the registered-buffer slab, whose
/// frees go to its own free lists (what is checked here is when a buffer is let go, which
/// does not depend on where its memory came from).
const NO_SLAB: bool = false;
const QUARANTINE: usize = 1 << 16;

struct Quarantine;
static ON: AtomicBool = AtomicBool::new(false);
static PTRS: [AtomicUsize; QUARANTINE] = [const { AtomicUsize::new(0) }; QUARANTINE];
static LENS: [AtomicUsize; QUARANTINE] = [const { AtomicUsize::new(0) }; QUARANTINE];
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// One test at a time uses the quarantine.
static SERIAL: Mutex<()> = Mutex::new(());

// SAFETY: forwards to the system allocator; a quarantined block is never freed, so it stays
// valid memory that nothing else is given.
unsafe impl GlobalAlloc for Quarantine {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if ON.load(Ordering::SeqCst) && l.size() >= 4096 {
            let k = NEXT.fetch_add(1, Ordering::SeqCst);
            if k < QUARANTINE {
                // SAFETY: the block is ours (being freed) and `l.size()` bytes long.
                unsafe { std::ptr::write_bytes(p, POISON, l.size()) };
                LENS[k].store(l.size(), Ordering::SeqCst);
                PTRS[k].store(p as usize, Ordering::SeqCst);
                return;
            }
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Quarantine = Quarantine;

/// Starts quarantining freed blocks (forgetting earlier ones).
fn quarantine() {
    NEXT.store(0, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
}

/// Stops quarantining; returns (blocks quarantined, blocks written after they were freed).
fn check() -> (usize, usize) {
    ON.store(false, Ordering::SeqCst);
    let n = NEXT.load(Ordering::SeqCst).min(QUARANTINE);
    let mut bad = 0;
    for k in 0..n {
        let (p, len) = (
            PTRS[k].load(Ordering::SeqCst),
            LENS[k].load(Ordering::SeqCst),
        );
        if p == 0 {
            continue;
        }
        // SAFETY: a quarantined block is never freed or reused; it is `len` bytes long.
        let block = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
        if block.iter().any(|&b| b != POISON) {
            bad += 1;
        }
    }
    (n, bad)
}

fn methods() -> Vec<IoMethodKind> {
    IoMethodKind::ALL
        .into_iter()
        .filter(|&m| m != IoMethodKind::IoUring || skips::io_uring_column("poisoned_buffers"))
        .collect()
}

fn data_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("f");
    std::fs::write(&p, vec![0x11u8; 1 << 20]).unwrap();
    p
}

fn start(m: IoMethodKind) -> Aio {
    Aio::start(Settings {
        io_method: m,
        max_issuers: 4,
        io_uring_registered_io_bufs: NO_SLAB,
        ..Settings::default()
    })
    .unwrap()
}

#[test]
fn early_free_is_caught() {
    let _serial = SERIAL.lock().unwrap();
    for m in methods().into_iter().filter(|&m| m != IoMethodKind::Sync) {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = data_file(dir.path());
        let aio = start(m);
        let me = aio.register_issuer("early").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        quarantine();
        me.begin_batch().unwrap();
        let mut buf = vec![0u8; 8192];
        let iov = [libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }];
        // SAFETY: deliberately broken — `buf` is freed below while the read is staged, which
        // is what this test shows the check catches. The memory is quarantined, not reused,
        // so the stray write lands in memory the test still owns.
        let w = unsafe { me.acquire().unwrap().readv_raw(&f, 0, &iov) }.unwrap();
        drop(buf);
        me.end_batch();
        aio.wait(w).unwrap();
        let (n, bad) = check();
        assert!(n >= 1);
        assert_eq!(bad, 1, "on {m}: the read into freed memory is found");
    }
}

#[test]
fn nothing_is_freed_under_an_io() {
    let _serial = SERIAL.lock().unwrap();
    for m in methods() {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = data_file(dir.path());
        let aio = start(m);
        let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
        quarantine();
        {
            let me = aio.register_issuer("poison").unwrap();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for round in 0..300u64 {
                me.begin_batch().unwrap();
                let mut ios = Vec::new();
                for k in 0..8u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = (round * 8 + k) % 256 * 4096;
                    let h = me.acquire().unwrap();
                    let io = if x % 3 == 0 {
                        h.write(&f, off, IoBuf::from_slice(&[0x11u8; 4096]))
                    } else {
                        h.read(&f, off, IoBuf::new(4096 * (1 + (x % 4) as usize)))
                    };
                    ios.push(io);
                }
                // Drop some mid-flight (staged, submitted, or done), redeem the rest.
                let mut kept = Vec::new();
                for (k, io) in ios.into_iter().enumerate() {
                    if (x >> k) & 1 == 0 {
                        drop(io);
                    } else {
                        kept.push(io);
                    }
                    if k == 3 {
                        me.end_batch();
                    }
                }
                for io in kept {
                    assert!(me.wait(io).failure().is_none());
                }
            }
            // The issuer's exit waits for whatever was dropped.
        }
        aio.shutdown();
        let (n, bad) = check();
        assert!(n > 1000, "on {m}: {n} buffers went through the quarantine");
        assert_eq!(
            bad, 0,
            "on {m}: {bad} of {n} freed buffers were written after the free"
        );
        eprintln!("poisoned_buffers on {m}: {n} freed buffers, none written after the free");
    }
}

/// Issue 13: 10,000 I/Os awaited as futures on tokio's multi-threaded runtime, most of the
/// futures dropped at a random point — before the first poll, after it (waker registered),
/// mid-flight — while reads and writes run: no buffer is freed while the kernel or a worker
/// may still use it, and at the end nothing is left in the view.
#[test]
fn dropped_futures_free_nothing_under_an_io() {
    let _serial = SERIAL.lock().unwrap();
    for m in methods() {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = data_file(dir.path());
        let aio = Aio::start(Settings {
            io_method: m,
            max_issuers: 8,
            io_uring_registered_io_bufs: NO_SLAB,
            ..Settings::default()
        })
        .unwrap();
        let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
        quarantine();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_time()
            .build()
            .unwrap();
        let dropped: usize = rt.block_on(async {
            let tasks: Vec<_> = (0..100u64)
                .map(|t| {
                    let (aio, f) = (aio.clone(), f.clone());
                    tokio::spawn(async move {
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t << 32);
                        let mut dropped = 0;
                        for i in 0..100u64 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let off = (t * 100 + i) % 256 * 4096;
                            let ticket = aio
                                .with_issuer(|iss| {
                                    let h = iss.acquire().unwrap();
                                    let io = if x % 4 == 0 {
                                        h.write(&f, off, IoBuf::from_slice(&[0x11u8; 8192]))
                                    } else {
                                        h.read(&f, off, IoBuf::new(4096 * (1 + (x % 4) as usize)))
                                    };
                                    io.into_ticket()
                                })
                                .unwrap();
                            match (x >> 8) % 4 {
                                0 => {
                                    drop(ticket); // never polled
                                    dropped += 1;
                                }
                                1 | 2 => {
                                    // Polled, then dropped after a random time (often mid-I/O).
                                    let wait = std::time::Duration::from_micros((x >> 16) % 200);
                                    if tokio::time::timeout(wait, ticket).await.is_err() {
                                        dropped += 1;
                                    }
                                }
                                _ => assert!(ticket.await.failure().is_none()),
                            }
                        }
                        dropped
                    })
                })
                .collect();
            let mut n = 0;
            for t in tasks {
                n += t.await.unwrap();
            }
            n
        });
        drop(rt);
        assert!(
            aio.aios().is_empty(),
            "on {m}: the view is empty at the end"
        );
        aio.shutdown();
        let (n, bad) = check();
        assert_eq!(
            bad, 0,
            "on {m}: {bad} of {n} freed buffers were written after the free"
        );
        eprintln!(
            "dropped futures on {m}: 10000 I/Os, {dropped} tickets dropped unredeemed, \
             {n} freed buffers, none written after the free"
        );
    }
}
