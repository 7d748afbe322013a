//! A handle released unused is recycled like a finished one: its wait reference goes stale (done at
//! once, not an API-violation error, and never attached to the slot's next I/O), and a callback
//! added to it does not carry over to the slot's next I/O (the flags set with it are not checked).
//! Guards against: a released handle that keeps its generation (issue 15, item 8), so its old
//! reference is not done at once, is refused as an API violation, or waits on the slot's next I/O;
//! and a callback added to the released handle that runs on the slot's next I/O.

use crate::support::*;
use dbaio::{
    Aio, HandleCallbacks, HandleFlags, IoBuf, IoContext, IoMethodKind, IoResult, OpenOptions,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

struct Count(Arc<AtomicU32>);

impl HandleCallbacks for Count {
    fn name(&self) -> &'static str {
        "count"
    }
    fn complete_shared(&self, _io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        prior
    }
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let runs = Arc::new(AtomicU32::new(0));
    let mut b = Aio::builder(settings(m));
    let cb = b.callback(Count(Arc::clone(&runs))).unwrap();
    let aio = b.start().unwrap();
    let me = aio.register_issuer("release").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();

    let mut h = me.acquire().unwrap();
    let old = h.wait_ref();
    h.add_callback(cb, 0).unwrap();
    h.set_flags(HandleFlags::SYNCHRONOUS);
    drop(h);
    assert!(aio.is_done(old), "a released handle's reference is stale");
    aio.wait(old)
        .expect("waiting on a stale reference returns at once");

    // The slot's next I/O: the old reference names none of it.
    let h = me.acquire().unwrap();
    assert_eq!(
        h.wait_ref().io_id(),
        old.io_id(),
        "the same slot comes back"
    );
    assert_ne!(h.wait_ref().generation(), old.generation());
    let io = h.read(&f, 0, IoBuf::new(4096));
    assert!(aio.is_done(old));
    aio.wait(old).unwrap();
    let c = me.wait(io);
    assert_pattern(&c.into_buf(), 0);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the released handle's callback did not carry over"
    );
}

crate::for_every_method!(scenario);
