//! Closing a file submits the issuer's staged I/Os on it and waits for its in-flight ones;
//! the data is on disk afterwards, and an `InFlight` started before the close is still
//! redeemable. Guards against: closing an fd under an I/O.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start(m);
    let me = aio.register_issuer("close").unwrap();
    let path = d.path().join("w");
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    me.begin_batch().unwrap();
    for i in 0..8u64 {
        drop(
            me.acquire()
                .unwrap()
                .write(&f, i * 4096, IoBuf::from_slice(&[i as u8 + 1; 4096])),
        );
    }
    me.close(f); // staged writes: submitted, then waited for
    let data = contents(&aio, &path);
    assert_eq!(data.len(), 8 * 4096);
    for i in 0..8 {
        assert!(
            data[i * 4096..(i + 1) * 4096]
                .iter()
                .all(|&b| b == i as u8 + 1)
        );
    }
    me.end_batch();

    let r = data_file(&d, "r", 1 << 20);
    let f = aio.open(&r, &OpenOptions::read()).unwrap();
    let ios: Vec<_> = (0..8u64)
        .map(|i| me.acquire().unwrap().read(&f, i * 65536, IoBuf::new(65536)))
        .collect();
    me.close(f);
    for (i, io) in ios.into_iter().enumerate() {
        assert!(io.is_done());
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 65536);
    }
}

crate::for_every_method!(scenario);
