//! After a panic, memory an I/O uses stays parked (issue 15, item 2): an issuer whose drop is
//! cut short by a panic (here a log subscriber that panics on the drop's own warning about an
//! open batch, with an I/O held in flight and another staged) must not free the I/Os' buffers,
//! which the kernel or a worker may still write into — it leaks them. A counting allocator
//! watches for the buffers' deallocation (they have a size nothing else uses). Before: the
//! unwinding dropped the issuer's bookkeeping and freed both buffers.
//! Guards against: in-flight buffers freed while unwinding (a use after free by the kernel or
//! a worker).

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// A buffer size nothing else allocates.
const ODD: usize = 37_035;

struct Watch;
static FREED_ODD: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts frees of one size.
unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if l.size() == ODD {
            FREED_ODD.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Watch = Watch;

/// A subscriber layer that panics on the issuer's "open AIO batch" warning.
struct PanicOnBatchWarning;

impl tracing::Subscriber for PanicOnBatchWarning {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        struct Find(bool);
        impl tracing::field::Visit for Find {
            fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0 |= format!("{v:?}").contains("open AIO batch");
            }
        }
        let mut f = Find(false);
        e.record(&mut f);
        if f.0 {
            panic!("a log subscriber panics inside Issuer::drop");
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn scenario(m: IoMethodKind) {
    if m == IoMethodKind::IoUring && !skips::io_uring_column("issuer_drop_panic") {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
    let aio = Aio::start(Settings {
        io_method: m,
        max_issuers: 4,
        // The held read must reach a worker (a page-cache hit would run, and be held, in
        // the issuer at submit).
        io_worker_try_cached: false,
        ..Settings::default()
    })
    .unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let before = FREED_ODD.load(Ordering::SeqCst);
    let a2 = aio.clone();
    let a3 = aio.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = std::thread::spawn(move || {
        let me = a2.register_issuer("doomed").unwrap();
        if m != IoMethodKind::Sync {
            // One read held in flight by its completer (a worker, or the waiter below that
            // reaps the ring).
            a2.inject_fault(FaultRule::new(FaultAction::Hold).on_file(&f).times(1));
            let io = me.acquire().unwrap().read(&f, 0, IoBuf::new(ODD));
            tx.send(Some(io.wait_ref())).unwrap();
            drop(io);
        } else {
            tx.send(None).unwrap();
        }
        // One read staged in an open batch.
        me.begin_batch().unwrap();
        drop(me.acquire().unwrap().read(&f, 65536, IoBuf::new(ODD)));
        tracing::subscriber::with_default(PanicOnBatchWarning, move || drop(me));
    });
    let waiter = rx
        .recv()
        .unwrap()
        .map(|w| std::thread::spawn(move || a3.wait(w).unwrap()));
    let r = r.join();
    assert!(r.is_err(), "the issuer's drop panicked");
    assert_eq!(
        FREED_ODD.load(Ordering::SeqCst),
        before,
        "no buffer of an unfinished I/O was freed on {m}"
    );
    // The held and the staged reads finish into leaked, still valid memory.
    while waiter.as_ref().is_some_and(|w| !w.is_finished()) {
        aio.release_held();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    aio.shutdown();
}

#[test]
fn sync() {
    scenario(IoMethodKind::Sync);
}

#[test]
fn worker() {
    scenario(IoMethodKind::Worker);
}

#[test]
fn io_uring() {
    scenario(IoMethodKind::IoUring);
}
