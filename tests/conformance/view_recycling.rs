//! The view while a handle is recycled: between the handle's next generation and its move to
//! IDLE its fields are still the finished I/O's, and the view must not show them under the
//! next I/O's generation; and a result appears only once the state says the I/O completed.
//! Guards against: a finished read listed as `COMPLETED_SHARED` under the generation of the
//! handle's next I/O, with the finished one's op, offset and result, so that an engine
//! matching a `WaitRef` against the view saw an I/O not yet started as done (and its state
//! then went back to SUBMITTED) — found by a caller-side attack, 2026-12-07, about once in
//! 4 s of load on every method; here the issuer is stopped in that window
//! (`TestPoint::Recycling`).

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions, TestPoint};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("recycles").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let io = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    let w = io.wait_ref();
    let (id, generation) = (w.io_id(), w.generation());
    aio.hold_next_here(TestPoint::Recycling);
    let rows = std::thread::scope(|t| {
        let looker = t.spawn(|| {
            let _release = ReleaseHoldOnDrop(&aio, TestPoint::Recycling);
            eventually(60, "the issuer stopped in its recycle", || {
                aio.held_at(TestPoint::Recycling)
            });
            let rows: Vec<_> = aio.aios().into_iter().filter(|r| r.io_id == id).collect();
            rows
        });
        // The wait collects the read, and its reclaim recycles the handle.
        assert_pattern(&me.wait(io).into_buf(), 8192);
        looker.join().unwrap()
    });
    for r in &rows {
        assert_eq!(
            r.io_generation, generation,
            "a finished I/O's fields under the next generation: {r:?}"
        );
    }
    // Results only once completed: a read the issuer runs itself, looked at throughout.
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|t| {
        t.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for r in aio.aios() {
                    let completed = r.state.starts_with("COMPLETED");
                    if !completed && r.result.is_some() {
                        assert_eq!(r.result.as_deref(), Some("UNKNOWN"), "{r:?}");
                    }
                }
            }
        });
        for k in 0..2000u64 {
            let at = (k % 16) * 4096;
            assert_pattern(&me.read_exact_at(&f, at, IoBuf::new(4096)).unwrap(), at);
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

crate::for_every_method!(scenario);
