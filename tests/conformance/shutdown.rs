//! Shutdown with I/O in flight: `Aio::shutdown` from another thread waits for every submitted
//! I/O; afterwards acquire and open fail with a clear error, while results already started
//! can still be taken.
//! Guards against: `shutdown` returning while submitted I/Os are still in flight; `acquire` or
//! `open` succeeding after shutdown (a new file could reuse a slot whose buffers are kept); and
//! results of I/Os started before shutdown lost or holding wrong bytes.

use crate::support::*;
use dbaio::{AioError, IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "r", 4 << 20);
    let aio = start(m);
    let me = aio.register_issuer("shut").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let ios: Vec<_> = (0..16u64)
        .map(|i| {
            me.acquire()
                .unwrap()
                .read(&f, i * 262144, IoBuf::new(262144))
        })
        .collect();
    let a2 = aio.clone();
    std::thread::spawn(move || a2.shutdown()).join().unwrap();
    assert!(aio.is_shut_down());
    assert!(
        ios.iter().all(|io| io.is_done()),
        "shutdown drained every submitted I/O"
    );
    assert!(matches!(me.acquire(), Err(AioError::ShutDown)));
    // No new files either: a slot freed after shutdown keeps its buffers, so none may be
    // reused by another file.
    assert!(matches!(
        aio.open(&path, &OpenOptions::read()),
        Err(AioError::ShutDown)
    ));
    for (i, io) in ios.into_iter().enumerate() {
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 262144);
    }
}

crate::for_every_method!(scenario);
