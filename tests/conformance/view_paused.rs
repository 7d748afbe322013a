//! The aios view lists exactly the I/Os of a paused scenario, with pg_aios's null rules: a
//! handed-out handle (all columns after `state` null), staged I/Os in a batch, an I/O held in
//! COMPLETED_IO by a fault rule (with the waiting issuer's wait event), and finished I/Os whose
//! results are not yet taken (COMPLETED_SHARED, raw_result set, executor named).
//! Guards against: idle handles listed or live I/Os missing; a handed-out handle shown with
//! columns it does not have yet; an fsync described as `0 bytes at offset 0 in file …`; a staged, held or finished I/O shown with the wrong state, offset, length,
//! raw result or executor; the waits view not naming the I/O a waiting issuer waits on; and a
//! dropped issuer still listed.

use crate::support::*;
use dbaio::{AioRow, FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions};

fn rows_of(aio: &dbaio::Aio, issuer: &str) -> Vec<AioRow> {
    let mut rows: Vec<AioRow> = aio
        .aios()
        .into_iter()
        .filter(|r| r.issuer == issuer)
        .collect();
    rows.sort_by_key(|r| (r.state.clone(), r.off));
    rows
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    // The held read must reach a worker: a page-cache hit would otherwise run (and be held)
    // in the issuer.
    let aio = start_with(m, |s| s.io_worker_try_cached = false);
    let me = aio.register_issuer("paused").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    assert!(
        rows_of(&aio, "paused").is_empty(),
        "idle handles are not listed"
    );

    me.begin_batch().unwrap();
    let ios: Vec<_> = [3u64, 5, 7]
        .iter()
        .map(|&b| me.acquire().unwrap().read(&f, b * 8192, IoBuf::new(8192)))
        .collect();
    let held = me.acquire().unwrap();
    let rows = rows_of(&aio, "paused");
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let ho: Vec<_> = rows.iter().filter(|r| r.state == "HANDED_OUT").collect();
    assert_eq!(ho.len(), 1);
    let h = ho[0];
    assert!(
        h.operation.is_none() && h.off.is_none() && h.length.is_none() && h.raw_result.is_none()
    );
    assert!(h.result.is_none() && h.target_desc.is_none() && h.f_sync.is_none());
    assert_eq!(h.pid, std::process::id() as i32);
    let others: Vec<_> = rows.iter().filter(|r| r.state != "HANDED_OUT").collect();
    for (r, b) in others.iter().zip([3u64, 5, 7]) {
        assert_eq!(
            (r.operation.as_deref(), r.off, r.length),
            (Some("readv"), Some(b * 8192), Some(8192))
        );
        assert!(
            r.target_desc
                .as_deref()
                .unwrap()
                .contains(&*path.display().to_string())
        );
        assert_eq!(r.f_buffered, Some(true));
        if m == IoMethodKind::Sync {
            // sync runs each I/O at staging: done, result not yet taken.
            assert_eq!(
                (r.state.as_str(), r.raw_result, r.result.as_deref()),
                ("COMPLETED_SHARED", Some(8192), Some("OK"))
            );
            assert_eq!(r.executor, "issuer");
        } else {
            assert_eq!(
                (r.state.as_str(), r.raw_result, r.result.as_deref()),
                ("STAGED", None, Some("UNKNOWN"))
            );
        }
    }
    drop(held);
    me.end_batch();
    for io in &ios {
        aio.wait(io.wait_ref()).unwrap();
    }
    let rows = rows_of(&aio, "paused");
    assert_eq!(rows.len(), 3);
    let expected_executor = match m {
        IoMethodKind::Sync => "issuer",
        IoMethodKind::Worker => "worker",
        IoMethodKind::IoUring => "io_uring",
        IoMethodKind::Sim => "sim",
    };
    for r in &rows {
        assert_eq!(
            (r.state.as_str(), r.raw_result),
            ("COMPLETED_SHARED", Some(8192))
        );
        // Under worker, the waiter runs a read it finds still queued.
        assert!(
            r.executor.starts_with(expected_executor)
                || (m == IoMethodKind::Worker && r.executor == "waiter"),
            "{}",
            r.executor
        );
    }
    for io in ios {
        me.wait(io).check().unwrap();
    }
    assert!(rows_of(&aio, "paused").is_empty());

    // An I/O held mid-completion by a fault rule, and who waits for it.
    aio.inject_fault(FaultRule::new(FaultAction::Hold).on_file(&f).times(1));
    // Whatever happens below, let the held completion go so the subsystem can shut down.
    let _release = ReleaseHeldOnDrop(aio.clone());
    let a2 = aio.clone();
    let (f2, tx) = (f.clone(), std::sync::mpsc::channel::<u32>());
    let t = std::thread::spawn(move || {
        let me = a2.register_issuer("waiter").unwrap();
        let h = me.acquire().unwrap();
        tx.0.send(h.wait_ref().io_id()).unwrap(); // before start: sync runs it inside `read`
        let io = h.read(&f2, 0, IoBuf::new(4096));
        me.wait(io).check().unwrap();
    });
    let io_id = tx.1.recv().unwrap();
    // Poll (no time limit) until the I/O is parked and its issuer waits for it.
    let waiting_for_it = loop {
        let rows = rows_of(&aio, "waiter");
        let w = aio.waits().into_iter().find(|w| w.issuer == "waiter");
        if let (Some(r), Some(w)) = (rows.first(), w) {
            if r.state == "COMPLETED_IO"
                && (m == IoMethodKind::Sync || w.wait_event == "AioIoCompletion")
            {
                assert_eq!(r.io_id, io_id);
                assert_eq!(r.raw_result, Some(4096));
                break w;
            }
        }
        assert!(
            !t.is_finished(),
            "the held I/O finished without being released"
        );
        std::thread::yield_now();
    };
    if m != IoMethodKind::Sync {
        assert_eq!(waiting_for_it.waiting_on, format!("io {io_id}"));
    }
    aio.release_held();
    t.join().unwrap();
    assert!(
        aio.waits().iter().all(|w| w.issuer != "waiter"),
        "a dropped issuer is not listed"
    );

    // An fsync held the same way names its file, not a range of 0 bytes at offset 0.
    aio.inject_fault(
        FaultRule::new(FaultAction::Hold)
            .op(dbaio::Op::Fsync)
            .times(1),
    );
    let (a2, f2) = (aio.clone(), f.clone());
    let t = std::thread::spawn(move || {
        let me = a2.register_issuer("syncer").unwrap();
        me.fsync(&f2).unwrap();
    });
    let row = loop {
        if let Some(r) = rows_of(&aio, "syncer")
            .into_iter()
            .find(|r| r.state == "COMPLETED_IO")
        {
            break r;
        }
        assert!(
            !t.is_finished(),
            "the held fsync finished without being released"
        );
        std::thread::yield_now();
    };
    aio.release_held();
    t.join().unwrap();
    assert_eq!(row.operation.as_deref(), Some("fsync"));
    assert_eq!(
        row.target_desc,
        Some(format!("file \"{}\"", path.display())),
        "{row:?}"
    );
}

crate::for_every_method!(scenario);
