//! Reading the view never blocks the I/O path (issue 15, item 6): a reader frozen in the
//! middle of `Aio::stats()` — its thread's allocator is made to stop at its n-th allocation
//! inside the call, for each n of the first eight, which is where the reader used to hold the
//! issuer's stats mutex while building its rows — must not stop the issuer, which records
//! every completed I/O's statistics. The issuer does 200 I/Os while the reader is frozen; a
//! watchdog turns a block into a failure. The same for `Aio::aios()` and `Aio::waits()`.
//! Guards against: a lock the view's reader holds while it allocates, which stalled the
//! issuer's completions behind a stalled reader.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

thread_local! {
    /// Set in the reader thread: its n-th allocation from now stops until `THAW` (0: none).
    static FREEZE_AT: Cell<u32> = const { Cell::new(0) };
}
static FROZEN: AtomicBool = AtomicBool::new(false);
static THAW: AtomicBool = AtomicBool::new(false);

struct Freezer;

// SAFETY: forwards to the system allocator unchanged; may only delay a call.
unsafe impl GlobalAlloc for Freezer {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = FREEZE_AT.with(|f| {
            let n = f.get();
            f.set(n.saturating_sub(1));
            n
        });
        if n == 1 {
            FROZEN.store(true, Ordering::SeqCst);
            while !THAW.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Freezer = Freezer;

fn frozen_reader(at: u32, read: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    THAW.store(false, Ordering::SeqCst);
    FROZEN.store(false, Ordering::SeqCst);
    let t = std::thread::spawn(move || {
        FREEZE_AT.with(|f| f.set(at));
        read();
    });
    // (A read that allocates nothing, such as a view with no row, finishes instead.)
    while !FROZEN.load(Ordering::SeqCst) && !t.is_finished() {
        std::thread::yield_now();
    }
    t
}

#[test]
fn a_frozen_reader_does_not_stop_the_issuer() {
    for m in IoMethodKind::ALL {
        if m == IoMethodKind::IoUring && !skips::io_uring_column("view_never_blocks") {
            continue;
        }
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![3u8; 1 << 20]).unwrap();
        let aio = Aio::start(Settings {
            io_method: m,
            max_issuers: 4,
            ..Settings::default()
        })
        .unwrap();
        let me = aio.register_issuer("busy").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        // Some statistics to compute quantiles over.
        for k in 0..32u64 {
            me.read_exact_at(&f, k * 4096, IoBuf::new(4096)).unwrap();
        }
        type Read = fn(&Aio);
        let reads: [(&str, Read); 3] = [
            ("stats", |a| drop(a.stats())),
            ("aios", |a| drop(a.aios())),
            ("waits", |a| drop(a.waits())),
        ];
        for ((what, read), at) in reads
            .into_iter()
            .flat_map(|r| (1..=8).map(move |at| (r, at)))
        {
            let a2 = aio.clone();
            let reader = frozen_reader(at, move || read(&a2));
            // A watchdog thaws the reader after 30 s (which lets a blocked issuer go on) and
            // says so: the issuer must not have needed it.
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let watchdog = std::thread::spawn(move || {
                let fired = rx.recv_timeout(Duration::from_secs(30)).is_err();
                THAW.store(true, Ordering::SeqCst);
                fired
            });
            for k in 0..200u64 {
                me.read_exact_at(&f, k % 256 * 4096, IoBuf::new(4096))
                    .unwrap();
            }
            let _ = tx.send(());
            let fired = watchdog.join().unwrap();
            assert!(
                !fired,
                "on {m}: the issuer stopped while a reader was inside Aio::{what}() \
                 (at its allocation {at})"
            );
            reader.join().unwrap();
        }
    }
}
