//! An I/O a waiter ran while it was still staged in the issuer's batch is reclaimed from the
//! batch: the issuer's own wait on it returns its data, the batch still submits the others,
//! and the issuer exits cleanly. Found by the model test (tests/model.rs): the reclaim
//! unlinked the handle from an in-flight list it had never joined, corrupting the list, and
//! the issuer's exit then panicked ("expected COMPLETED_SHARED but found IDLE").
//! Guards against: the reclaim of a staged I/O a waiter ran unlinking it from an in-flight list it
//! never joined, so the list is corrupt and issuer exit panics; and the batch then losing or
//! failing its other staged reads.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("batch").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    me.begin_batch().unwrap();
    let a = me.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    let b = me.acquire().unwrap().read(&f, 4096, IoBuf::new(4096));
    let w = a.wait_ref();
    let other = aio.clone();
    std::thread::spawn(move || other.wait(w).unwrap())
        .join()
        .unwrap();
    assert!(a.is_done(), "the waiter ran it");
    let c = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    assert_pattern(&me.wait(a).into_buf(), 0);
    me.end_batch();
    assert_pattern(&me.wait(b).into_buf(), 4096);
    assert_pattern(&me.wait(c).into_buf(), 8192);
    assert_eq!(me.in_flight(), 0);
    drop(me);
    assert!(aio.aios().is_empty());
}

crate::for_every_method!(scenario);
