//! Foreign waits racing the issuer's own wait on a batch — the io_uring deadlock of issue 15.
//! The issuer stages reads in a batch and then waits for completions (`wait_any`, or
//! `wait_for_completions(k)`), submitting them in the same call; meanwhile another thread
//! waits on one of those reads (`Aio::wait` on its `WaitRef`), or a second issuer reads the
//! same block through the buffer pool (wait event `BufferIo`). Repeated, and once with both
//! threads on one CPU. Guards against: a waiter asleep in the kernel, holding the ring's
//! completion side, on a read the issuer has not handed to the kernel yet, while the issuer
//! blocks on that same completion side to submit it. A hang fails the test (watchdog).

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};
use std::sync::mpsc;

const ROUNDS: u32 = 1500;

fn on_one_cpu() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity only
    // write and read that local set (pid 0: the calling thread).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

fn raw_waits(m: IoMethodKind, one_cpu: bool) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start(m);
    let (tx, rx) = mpsc::channel::<Option<dbaio::WaitRef>>();
    let other = aio.clone();
    let waiter = std::thread::spawn(move || {
        if one_cpu {
            on_one_cpu();
        }
        while let Ok(Some(w)) = rx.recv() {
            other.wait(w).unwrap();
        }
    });
    let issuer_side = aio.clone();
    within(120, "issuer and foreign waiter", move || {
        if one_cpu {
            on_one_cpu();
        }
        let me = issuer_side.register_issuer("batch").unwrap();
        let f = issuer_side.open(&path, &OpenOptions::read()).unwrap();
        for round in 0..ROUNDS {
            me.begin_batch().unwrap();
            let ios: Vec<_> = (0..4u64)
                .map(|i| {
                    let off = (u64::from(round) * 4 + i) % 256 * 4096;
                    me.acquire().unwrap().read(&f, off, IoBuf::new(4096))
                })
                .collect();
            tx.send(Some(ios[(round % 4) as usize].wait_ref())).unwrap();
            if round % 2 == 0 {
                me.wait_any();
            } else {
                me.wait_for_completions(3);
            }
            me.end_batch();
            for io in ios {
                me.wait(io).check().unwrap();
            }
        }
        tx.send(None).unwrap();
    });
    waiter.join().unwrap();
}

fn buffer_waits(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 16 << 20);
    let aio = start(m);
    let (tx, rx) = mpsc::channel::<Option<u32>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let other = aio.clone();
    let p2 = path.clone();
    let reader = std::thread::spawn(move || {
        let me = other.register_issuer("reader").unwrap();
        let f = other.open(&p2, &OpenOptions::read()).unwrap();
        while let Ok(Some(block)) = rx.recv() {
            let b = me.read_block(&f, block).unwrap();
            assert_pattern(b.page(), u64::from(block) * 8192);
            done_tx.send(()).unwrap();
        }
    });
    let issuer_side = aio.clone();
    within(120, "issuer and buffer reader", move || {
        let me = issuer_side.register_issuer("batch").unwrap();
        let f = issuer_side.open(&path, &OpenOptions::read()).unwrap();
        let rel = dbaio::Relation::from_file(f.clone()).unwrap();
        for round in 0..ROUNDS / 3 {
            // A stream starts its reads in a batch; the other issuer asks for the same block.
            let first = round * 4; // fresh blocks: each round reads
            let mut stream = dbaio::ReadStream::new(
                &me,
                &rel,
                first..first + 4,
                dbaio::ReadStreamOptions {
                    full: true,
                    ..Default::default()
                },
            );
            stream.prefetch();
            tx.send(Some(first + round % 4)).unwrap();
            me.wait_any();
            for b in stream {
                let b = b.unwrap();
                assert_pattern(b.page(), u64::from(b.block()) * 8192);
            }
            done_rx.recv().unwrap();
        }
        tx.send(None).unwrap();
    });
    reader.join().unwrap();
}

fn scenario(m: IoMethodKind) {
    raw_waits(m, false);
    raw_waits(m, true);
    buffer_waits(m);
}

crate::for_every_method!(scenario);
