//! Tickets: an I/O turned into a `Send` ticket is redeemed on another thread with its result
//! and buffer; `check_done` polls without blocking and reaps what is ready; an `IoGroup`
//! reports the first failure in push order and logs the others; a ticket dropped unredeemed
//! leaves its I/O to finish and logs its failure exactly once — whether it is dropped before
//! or after the I/O completes.
//! Guards against: a ticket's result or buffer lost or mixed up when redeemed on another thread;
//! `check_done` that never turns true because nothing reaps (io_uring); an `IoGroup` reporting
//! another failure than the first pushed, or not logging the other; and an unredeemed ticket's
//! failure logged twice (at completion and again at drop or reclaim) or never.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoGroup, IoMethodKind, Op, OpenOptions, Ticket};

fn scenario(m: IoMethodKind) {
    global_logs(); // capture from here on
    let d = dir();
    let path = data_file(&d, "tickets", 256 << 10);
    let aio = start(m);
    let me = aio.register_issuer("tickets").unwrap();
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();

    // Redeemed on another thread, in reverse order.
    let tickets: Vec<(u64, Ticket)> = (0..32u64)
        .map(|i| {
            let off = i * 8192;
            let t = me
                .acquire()
                .unwrap()
                .read(&f, off, IoBuf::new(4096))
                .into_ticket();
            (off, t)
        })
        .collect();
    within(30, "tickets redeemed on another thread", move || {
        for (off, t) in tickets.into_iter().rev() {
            let c = t.wait();
            c.check().unwrap();
            assert_pattern(&c.into_buf(), off);
        }
    });

    // check_done never blocks and, polled alone, sees the I/O finish (io_uring: it reaps).
    let t = me
        .acquire()
        .unwrap()
        .read(&f, 4096, IoBuf::new(4096))
        .into_ticket();
    let t = within(30, "check_done to see the read finish", move || {
        while !t.check_done() {
            std::thread::yield_now();
        }
        t
    });
    let c = t.try_wait().expect("done");
    assert_pattern(&c.into_buf(), 4096);

    // A group of write-behind I/Os: the first failure in push order, the other logged.
    let group = IoGroup::new();
    for (off, errno) in [
        (0u64, 0),
        (8192, libc::EIO),
        (16384, 0),
        (24576, libc::ENOSPC),
    ] {
        if errno != 0 {
            aio.inject_fault(
                FaultRule::new(FaultAction::Errno(errno))
                    .op(Op::Writev)
                    .on_file(&f)
                    .offsets(off..off + 1)
                    .times(1),
            );
        }
        let t = me
            .acquire()
            .unwrap()
            .write(&f, off, IoBuf::from_slice(&[7u8; 4096]))
            .into_ticket();
        group.push(t);
    }
    assert_eq!(group.len(), 4);
    let e = within(30, "a group's wait", move || group.wait()).unwrap_err();
    assert_eq!((e.op, e.offset, e.errno), (Op::Writev, 8192, libc::EIO));
    let on_disk = contents(&aio, &path);
    assert_eq!(&on_disk[..4096], &[7u8; 4096][..]);
    assert_eq!(&on_disk[16384..20480], &[7u8; 4096][..]);
    let logs = global_logs();
    let lost = format!("at offset 24576 of file \"{}\"", path.display());
    assert_eq!(logs.matches(&lost).count(), 1, "{logs}");

    // Dropped unredeemed at once (on worker and io_uring, most likely before it completes;
    // on sync, after): logged once either way.
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(&f)
            .offsets(40960..40961)
            .times(1),
    );
    let t = me
        .acquire()
        .unwrap()
        .read(&f, 40960, IoBuf::new(4096))
        .into_ticket();
    let wref = t.wait_ref();
    drop(t);
    within(30, "a dropped ticket's I/O to finish", {
        let aio = aio.clone();
        move || aio.wait(wref).unwrap()
    });
    // Dropped after it completed: logged once, at the drop.
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(&f)
            .offsets(49152..49153)
            .times(1),
    );
    let t = me
        .acquire()
        .unwrap()
        .read(&f, 49152, IoBuf::new(4096))
        .into_ticket();
    let t = within(30, "the second read", move || {
        while !t.check_done() {
            std::thread::yield_now();
        }
        t
    });
    drop(t);
    // The issuer recycles both handles without logging them again.
    for _ in 0..3 {
        assert_pattern(
            &me.read_exact_at(&f, 65536, IoBuf::new(4096)).unwrap(),
            65536,
        );
    }
    drop(me);
    let logs = global_logs();
    for off in [40960, 49152] {
        let line = format!("at offset {off} of file \"{}\"", path.display());
        assert_eq!(logs.matches(&line).count(), 1, "offset {off}: {logs}");
    }
}

crate::for_every_method!(scenario);
