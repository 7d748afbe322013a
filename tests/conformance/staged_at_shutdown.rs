//! I/Os still staged in a batch are not left behind (issue 15, item 5): a thread that waits
//! on one (its issuer busy elsewhere, batch open) runs it itself, and shutdown runs every
//! staged one, so after `shutdown` returns every started I/O is complete. Guards against: a
//! foreign wait that hangs until the issuer submits, and a shutdown that leaves staged I/Os.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};
use std::sync::mpsc;

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let (refs_tx, refs_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let a2 = aio.clone();
    let issuer = std::thread::spawn(move || {
        let me = a2.register_issuer("batch").unwrap();
        let f = a2.open(&path, &OpenOptions::read()).unwrap();
        me.begin_batch().unwrap();
        let ios: Vec<_> = (0..4u64)
            .map(|k| me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)))
            .collect();
        refs_tx
            .send(ios.iter().map(|io| io.wait_ref()).collect::<Vec<_>>())
            .unwrap();
        go_rx.recv().unwrap(); // busy elsewhere, batch still open
        me.end_batch();
        for (k, io) in ios.into_iter().enumerate() {
            assert_pattern(&me.wait(io).into_buf(), k as u64 * 4096);
        }
    });
    let refs = refs_rx.recv().unwrap();
    let a3 = aio.clone();
    let first = refs[0];
    within(30, "a foreign wait on a staged I/O", move || {
        a3.wait(first).unwrap()
    });
    assert!(aio.is_done(refs[0]));
    let a4 = aio.clone();
    within(30, "shutdown with a batch open", move || a4.shutdown());
    for r in &refs {
        assert!(aio.is_done(*r), "shutdown ran every staged I/O");
    }
    go_tx.send(()).unwrap();
    issuer.join().unwrap();
}

crate::for_every_method!(scenario);
