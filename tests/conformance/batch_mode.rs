//! Batch mode: I/Os started in a batch stay staged until the batch ends (methods that submit;
//! `sync` runs each at staging), are flushed automatically at 32, nesting is an error, and an
//! issuer that exits with an open batch logs a warning and still completes its I/Os.
//! Guards against: a method that submits staged I/Os before the batch ends, or never flushes at
//! `SUBMIT_BATCH_SIZE`; a nested `begin_batch` accepted; and a batch left open at issuer exit whose
//! write never reaches the file or is dropped without a warning.

use crate::support::*;
use dbaio::{AioError, IoBuf, IoMethodKind, OpenOptions, SUBMIT_BATCH_SIZE};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start(m);
    let me = aio.register_issuer("batch").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();

    me.begin_batch().unwrap();
    assert!(
        matches!(me.begin_batch(), Err(AioError::ApiViolation(_))),
        "nested batch is an error"
    );
    let ios: Vec<_> = (0..3u64)
        .map(|i| me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096)))
        .collect();
    if m == IoMethodKind::Sync {
        assert_eq!(me.staged(), 0, "sync executes at staging");
    } else {
        assert_eq!(me.staged(), 3);
        assert!(
            ios.iter().all(|io| !io.is_done()),
            "staged I/Os are not submitted yet"
        );
    }
    me.end_batch();
    assert_eq!(me.staged(), 0);
    for (i, io) in ios.into_iter().enumerate() {
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 4096);
    }

    // Auto-flush at the batch limit.
    me.begin_batch().unwrap();
    let mut ios = Vec::new();
    for i in 0..40u64 {
        ios.push(me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096)));
        assert!(me.staged() <= SUBMIT_BATCH_SIZE);
    }
    if m != IoMethodKind::Sync {
        assert_eq!(me.staged(), 40 - SUBMIT_BATCH_SIZE);
    }
    me.end_batch();
    for (i, io) in ios.into_iter().enumerate() {
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 4096);
    }

    // Leftover batch at issuer exit: warned about, submitted, completed.
    let wf = aio
        .open(d.path().join("w"), &dbaio::OpenOptions::read_write())
        .unwrap();
    let logs = capture_logs(|| {
        let me2 = aio.register_issuer("leftover").unwrap();
        me2.begin_batch().unwrap();
        drop(
            me2.acquire()
                .unwrap()
                .write(&wf, 0, IoBuf::from_slice(&[9u8; 4096])),
        );
        drop(me2);
    });
    assert!(
        logs.contains("open AIO batch at issuer exit"),
        "logs: {logs}"
    );
    assert_eq!(contents(&aio, d.path().join("w")), vec![9u8; 4096]);
}

crate::for_every_method!(scenario);
