//! A thread that panics while completing an I/O — a worker, an io_uring reaper, the issuer
//! itself — fails that I/O with an error saying so, and nothing hangs: with a single worker,
//! the panicked worker is replaced and later I/Os still complete. A panicking callback fails
//! only its I/O. Guards against: a completion lost with its thread (issue 15, item 4).

use crate::support::*;
use dbaio::{
    Aio, FaultAction, FaultRule, HandleCallbacks, IoBuf, IoContext, IoMethodKind, IoResult, Op,
    OpenOptions,
};

struct Boom;

impl HandleCallbacks for Boom {
    fn name(&self) -> &'static str {
        "boom"
    }
    fn complete_shared(&self, _io: &IoContext<'_>, _prior: IoResult, _data: u8) -> IoResult {
        panic!("boom")
    }
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let mut s = settings(m);
    s.io_workers = 1;
    let mut b = Aio::builder(s);
    let boom = b.callback(Boom).unwrap();
    let aio = b.start().unwrap();
    let a2 = aio.clone();
    within(60, "I/Os after panicking executors", move || {
        let aio = a2;
        let me = aio.register_issuer("panics").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let logs = capture_logs(|| {
            for round in 0..3u64 {
                aio.inject_fault(FaultRule::new(FaultAction::Panic).op(Op::Readv).times(1));
                let c = me.wait(
                    me.acquire()
                        .unwrap()
                        .read(&f, round * 4096, IoBuf::new(4096)),
                );
                let e = c.check().unwrap_err();
                assert!(
                    e.to_string()
                        .ends_with(": the thread executing it panicked (see the log)"),
                    "{e}"
                );
                // Later I/Os complete (with one worker: its replacement runs them).
                for k in 0..50u64 {
                    let off = (round * 50 + k) % 256 * 4096;
                    assert_pattern(&me.read_exact_at(&f, off, IoBuf::new(4096)).unwrap(), off);
                }
            }
            let mut h = me.acquire().unwrap();
            h.add_callback(boom, 0).unwrap();
            let c = me.wait(h.read(&f, 0, IoBuf::new(4096)));
            assert!(c.check().is_err(), "a panicking callback fails its I/O");
            assert_pattern(&me.read_exact_at(&f, 0, IoBuf::new(4096)).unwrap(), 0);
        });
        if m != IoMethodKind::Worker {
            // (A worker logs on its own thread, which the capture does not see.)
            assert!(logs.contains("panicked"), "the panics are logged: {logs}");
        }
    });
}

crate::for_every_method!(scenario);
