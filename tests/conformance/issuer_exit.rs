//! An issuer that ends with a handed-out handle (leaked with `mem::forget`) and an open batch
//! logs warnings, submits and completes what was staged, releases the handle, and frees its
//! slot for a new issuer — no leak, no hang.
//! Guards against: an exiting issuer that loses its open batch's staged write, hangs on the leaked
//! handle, or keeps its slot (with `max_issuers = 1` the next issuer cannot register); and an exit
//! that says nothing about the leaked handle or the open batch.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start_with(m, |s| s.max_issuers = 1);
    let path = d.path().join("w");
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    let logs = capture_logs(|| {
        let me = aio.register_issuer("leaky").unwrap();
        me.begin_batch().unwrap();
        drop(
            me.acquire()
                .unwrap()
                .write(&f, 0, IoBuf::from_slice(&[5u8; 4096])),
        );
        std::mem::forget(me.acquire().unwrap());
        drop(me);
    });
    assert!(logs.contains("leaked AIO handle"), "{logs}");
    assert!(logs.contains("open AIO batch at issuer exit"), "{logs}");
    assert_eq!(contents(&aio, &path), vec![5u8; 4096]);
    // The only slot is free again, and its handles work.
    let me = aio.register_issuer("next").unwrap();
    assert_eq!(
        &me.read_exact_at(&f, 0, IoBuf::new(4096)).unwrap()[..],
        &[5u8; 4096][..]
    );
}

crate::for_every_method!(scenario);
