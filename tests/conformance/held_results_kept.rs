//! More `InFlight`s alive than the issuer has handles: a caller may start an I/O while every
//! handle is held by an `InFlight` it has not redeemed. The issuer then keeps the oldest
//! result (after waiting for it, if it is not finished) for its `InFlight`, and its handle
//! starts the new I/O — PostgreSQL's wait reference, whose result lands in the owner's
//! memory while the handle goes back. Everything an `InFlight` can do works on a kept one:
//! wait, try_wait, is_done, check_done, wait_ref, into_ticket, on_error, drop,
//! wait_for_completions.
//! Guards against: `acquire` failing with "all N I/O handles of this issuer hold results not
//! yet taken" while it could wait (a read stream next to a caller holding its own `InFlight`s
//! failed 4–154 of 240–840 reads so: caller-side attack, 2026-12-07); a kept result returned
//! to the wrong `InFlight` (the handle's next I/O), lost, or its failure not reported; a
//! dropped `InFlight` of a kept result clearing the hold of the handle's next I/O.

use crate::support::*;
use dbaio::{
    FaultAction, FaultRule, IoBuf, IoMethodKind, Op, OpenOptions, ReadStream, ReadStreamOptions,
    Relation,
};
use std::sync::{Arc, Mutex};

/// 24 reads held at once through 2 handles, in and out of batch mode, redeemed in an
/// order other than their start: each brings its own bytes; `is_done`, `check_done` and
/// `wait_for_completions` count the kept ones as complete.
fn more_in_flights_than_handles_each_get_their_own_bytes(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start_with(m, |s| s.io_max_concurrency = 2);
    let me = aio.register_issuer("many").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    for batch in [false, true] {
        if batch {
            me.begin_batch().unwrap();
        }
        let mut held: Vec<_> = (0..24u64)
            .map(|i| {
                let io = me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096));
                (i, io)
            })
            .collect();
        if batch {
            me.end_batch();
        }
        me.wait_for_completions(24);
        assert!(held.iter().all(|(_, io)| io.is_done() && io.check_done()));
        // Odd ones first, newest first; then the even ones in start order.
        held.sort_by_key(|&(i, _)| (i % 2 == 0, if i % 2 == 1 { u64::MAX - i } else { i }));
        for (i, io) in held {
            let c = me.wait(io);
            c.check().unwrap();
            assert_pattern(&c.into_buf(), i * 4096);
        }
        assert_eq!(me.in_flight(), 0);
    }
    // Both handles are free again.
    let a = me
        .try_acquire()
        .unwrap()
        .expect("a handle")
        .read(&f, 0, IoBuf::new(4096));
    let b = me
        .try_acquire()
        .unwrap()
        .expect("a handle")
        .read(&f, 4096, IoBuf::new(4096));
    assert_pattern(&me.wait(b).into_buf(), 4096);
    assert_pattern(&me.wait(a).into_buf(), 0);
}

/// With one handle, each new read keeps the one before: a kept read turned into a ticket is
/// redeemed on another thread with its bytes; one detached with `on_error` reports its
/// failure there; one dropped logs its failure; its wait reference is done at once; and
/// `try_wait` and `try_acquire` take kept results without blocking.
fn a_kept_result_goes_wherever_its_in_flight_sends_it(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start_with(m, |s| s.io_max_concurrency = 1);
    let me = aio.register_issuer("one").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let read = |i: u64| me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096));

    // A ticket.
    let first = read(0);
    let second = read(1); // keeps the first
    let wref = first.wait_ref();
    aio.wait(wref).unwrap();
    let ticket = first.into_ticket();
    let bytes = std::thread::spawn(move || ticket.wait().into_buf())
        .join()
        .unwrap();
    assert_pattern(&bytes, 0);

    // try_wait, after try_acquire kept it.
    me.wait_for_completions(1);
    let third = me
        .try_acquire()
        .unwrap()
        .expect("the finished read is kept");
    let third = third.read(&f, 2 * 4096, IoBuf::new(4096));
    let Ok(second) = me.try_wait(second) else {
        panic!("{m}: a kept result is complete")
    };
    assert_pattern(&second.into_buf(), 4096);

    // A failure, detached with a callback.
    fail_once_at(&aio, &f, 3 * 4096);
    assert_pattern(&me.wait(third).into_buf(), 2 * 4096);
    let failing = read(3);
    let fourth = read(4); // keeps the failure
    let seen = Arc::new(Mutex::new(None));
    let s2 = Arc::clone(&seen);
    failing.on_error(move |e| *s2.lock().unwrap() = Some(e));
    eventually(30, "the kept failure's callback", || {
        seen.lock().unwrap().is_some()
    });
    let e = seen.lock().unwrap().take().unwrap();
    assert_eq!((e.errno, e.offset), (libc::EIO, 3 * 4096), "{e}");

    // A failure dropped: logged.
    fail_once_at(&aio, &f, 5 * 4096);
    assert_pattern(&me.wait(fourth).into_buf(), 4 * 4096);
    let logs = capture_logs(|| {
        let failing = read(5);
        let sixth = read(6); // keeps the failure
        drop(failing);
        assert_pattern(&me.wait(sixth).into_buf(), 6 * 4096);
    });
    assert!(logs.contains("offset 20480"), "{logs}");
}

/// A kept failure is the `InFlight`'s to take, in the same words as any I/O error: op,
/// file, offset, errno.
fn a_kept_failure_names_op_file_offset_and_errno(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start_with(m, |s| s.io_max_concurrency = 1);
    let me = aio.register_issuer("one").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    fail_once_at(&aio, &f, 8192);
    let failing = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    let next = me.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    let e = me.wait(failing).check().expect_err("the injected EIO");
    assert_eq!(
        (e.errno, e.offset, e.length),
        (libc::EIO, 8192, 4096),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert_pattern(&me.wait(next).into_buf(), 0);
}

/// Read streams on an issuer whose caller holds `InFlight`s of its own there (up to three
/// at a time, redeemed oldest first), with 1–3 handles and 2–7 streams consumed in turn:
/// every block and every read of the caller's comes, right. Before, the caller's reads
/// took the handle the streams left free, and 4–154 of 240–840 stream reads failed with
/// `all N I/O handles of this issuer hold results not yet taken`.
fn read_streams_beside_the_callers_own_in_flights_fail_no_block(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "16431", 64 * 8192);
    for (handles, streams) in [(1, 2), (2, 7), (3, 5)] {
        let aio = start_with(m, |s| {
            s.io_max_concurrency = handles;
            s.buffer_pool_size = 256;
        });
        let me = aio.register_issuer("mixed").unwrap();
        let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
        let raw = aio.open(&path, &OpenOptions::read()).unwrap();
        let orders: Vec<Vec<u32>> = (0..streams as u32)
            .map(|k| (0..40).map(|j| (j * 7 + k * 13) % 64).collect())
            .collect();
        let mut open: Vec<_> = orders
            .iter()
            .map(|o| ReadStream::new(&me, &rel, o.clone(), ReadStreamOptions::default()))
            .collect();
        let mut mine = std::collections::VecDeque::new();
        for step in 0..40 {
            let at = (step as u64 * 5 % 64) * 8192;
            mine.push_back((at, me.acquire().unwrap().read(&raw, at, IoBuf::new(4096))));
            if mine.len() > 3 {
                let (at, io) = mine.pop_front().unwrap();
                assert_pattern(&me.wait(io).into_buf(), at);
            }
            for (k, (s, order)) in open.iter_mut().zip(&orders).enumerate() {
                let b = s
                    .next_buffer()
                    .expect("a block")
                    .unwrap_or_else(|e| panic!("{m}: {handles} handles, stream {k}: {e}"));
                assert_eq!(b.block(), order[step], "{m}: stream {k}, step {step}");
                assert_pattern(b.page(), u64::from(b.block()) * 8192);
            }
        }
        for (at, io) in mine {
            assert_pattern(&me.wait(io).into_buf(), at);
        }
    }
}

/// The next read of `f` at `offset` fails with EIO.
fn fail_once_at(aio: &dbaio::Aio, f: &dbaio::File, offset: u64) {
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(f)
            .offsets(offset..offset + 1)
            .times(1),
    );
}

crate::for_every_method!(
    read_streams_beside_the_callers_own_in_flights_fail_no_block,
    more_in_flights_than_handles_each_get_their_own_bytes,
    a_kept_result_goes_wherever_its_in_flight_sends_it,
    a_kept_failure_names_op_file_offset_and_errno,
);
