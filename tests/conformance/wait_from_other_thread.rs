//! Waiting from any thread: a `WaitRef` is `Copy + Send`; another thread can wait on it to
//! completion with no help from the issuer (which only joins that thread), and the issuer then
//! takes the result.
//! Guards against: a wait from a thread other than the issuer that never wakes (on io_uring it must
//! get the completion reaped itself while the issuer sits in `join`), returns before the I/O is
//! done, or leaves `is_done` false; and an issuer that cannot take the result afterwards, or gets
//! another read's bytes.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start(m);
    let me = aio.register_issuer("main").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let ios: Vec<_> = (0..8u64)
        .map(|i| me.acquire().unwrap().read(&f, i * 65536, IoBuf::new(65536)))
        .collect();
    let refs: Vec<_> = ios.iter().map(|io| io.wait_ref()).collect();
    let other = aio.clone();
    std::thread::spawn(move || {
        for r in refs {
            other.wait(r).unwrap();
            assert!(other.is_done(r));
        }
    })
    .join()
    .unwrap();
    for (i, io) in ios.into_iter().enumerate() {
        assert!(io.is_done(), "the other thread saw it complete");
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 65536);
    }
}

crate::for_every_method!(scenario);
