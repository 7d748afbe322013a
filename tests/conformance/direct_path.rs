//! The direct path: a handle its issuer runs at once (every handle on `sync`; a SYNCHRONOUS one on
//! any method) and that carries no callbacks goes HANDED_OUT → SUBMITTED → COMPLETED_SHARED and is
//! reclaimed straight to IDLE, instead of the full lifecycle. It keeps what the full path gives:
//! the I/O is in the aios view while it runs (SUBMITTED, its op and length, executor `issuer`) with
//! the issuer's wait event; it is counted in the statistics; its error message names the file and
//! reads the same with a fault rule armed (one that matches nothing; an armed rule no longer takes
//! a handle off the direct path, so both failures take it and this is not a comparison with the
//! full path); a thread waiting on a wait reference of an earlier use of the same handle wakes and
//! returns however the uses interleave; and no handle is left busy.
//! Guards against: a direct-path I/O missing from the aios view or the wait events while it runs,
//! or shown in a state the direct path never takes; direct-path I/Os left out of the statistics; a
//! thread waiting on an earlier use of a reused handle that sleeps for ever (a transition that
//! drops its waiter bit); and a handle left busy afterwards.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, HandleFlags, IoBuf, IoMethodKind, Op, OpenOptions};
use std::sync::atomic::{AtomicBool, Ordering};

const MIB: u64 = 1 << 20;

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "direct", 16 * MIB);
    let aio = start(m);

    // Seen while it runs: one issuer reads 1 MiB at a time until the view has shown it.
    let stop = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        // Stops the reader even if an assertion below fails (the scope would wait for it).
        let _stop = StopOnDrop(&stop);
        let reader = s.spawn(|| {
            let me = aio.register_issuer("direct").unwrap();
            let f = aio.open(&path, &OpenOptions::read()).unwrap();
            let mut buf = IoBuf::new(MIB as usize);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let off = (n % 16) * MIB;
                let mut h = me.acquire().unwrap();
                h.set_flags(HandleFlags::SYNCHRONOUS);
                let c = me.wait(h.read(&f, off, buf));
                c.check().unwrap();
                buf = c.into_buf();
                assert_pattern(&buf[..4096], off);
                n += 1;
            }
            n
        });
        let (mut running_seen, mut wait_seen) = (false, false);
        eventually(120, "the direct read in the view", || {
            assert!(!reader.is_finished(), "the reader died");
            for r in aio.aios().into_iter().filter(|r| r.issuer == "direct") {
                // Between `read` and `wait` the I/O is complete and not yet reclaimed.
                assert!(
                    ["HANDED_OUT", "SUBMITTED", "COMPLETED_SHARED"].contains(&r.state.as_str()),
                    "{r:?}"
                );
                if r.state == "SUBMITTED" {
                    assert_running_own_read(&r, MIB);
                    assert_eq!(r.executor, "issuer", "{r:?}");
                    running_seen = true;
                }
            }
            wait_seen |= waits_on(&aio, "direct", "DataFileRead");
            running_seen && wait_seen
        });
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    let rows = aio.stats();
    let reader = rows.iter().find(|r| r.issuer == "direct").unwrap();
    assert_eq!(
        reader.ops.iter().find(|o| o.op == "readv").unwrap().count,
        reads
    );

    // The same failure on the direct and on the full path reads the same.
    let me = aio.register_issuer("direct-errors").unwrap();
    let ro = aio.open(&path, &OpenOptions::read()).unwrap();
    let failed_write = || {
        let mut h = me.acquire().unwrap();
        h.set_flags(HandleFlags::SYNCHRONOUS);
        let c = me.wait(h.write(&ro, 8192, IoBuf::new(4096)));
        c.check().unwrap_err().to_string()
    };
    let direct_err = failed_write();
    aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EIO)).op(Op::Fallocate));
    let full_err = failed_write();
    aio.clear_faults();
    assert_eq!(direct_err, full_err);
    assert!(direct_err.contains("direct"), "{direct_err}");

    // Waiters on earlier uses of a handle the issuer keeps reusing all return: each wait
    // reference goes to another thread while the issuer reclaims the I/O and starts the next
    // one, on the same handle (the idle stack hands it straight back).
    const USES: usize = 2000;
    let (tx, rx) = std::sync::mpsc::channel();
    let waited = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut n = 0;
            for wref in rx {
                aio.wait(wref).unwrap();
                n += 1;
            }
            n
        });
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let mut buf = IoBuf::new(4096);
        for k in 0..USES as u64 {
            let mut h = me.acquire().unwrap();
            h.set_flags(HandleFlags::SYNCHRONOUS);
            let io = h.read(&f, (k % 4096) * 4096, buf);
            tx.send(io.wait_ref()).unwrap();
            let c = me.wait(io);
            c.check().unwrap();
            buf = c.into_buf();
        }
        drop(tx);
        waiter.join().unwrap()
    });
    assert_eq!(waited, USES);
    drop(me);
    assert!(
        aio.aios().is_empty(),
        "no handle left busy: {:?}",
        aio.aios()
    );
}

crate::for_every_method!(scenario);
