//! At most one handle per issuer is handed out at a time: a second acquire is an API-violation
//! error (not a hang), and dropping the unused handle gives it back.
//! Guards against: deadlock when acquiring while holding a handle.

use crate::support::*;
use dbaio::{AioError, IoMethodKind};

fn scenario(m: IoMethodKind) {
    let aio = start(m);
    let me = aio.register_issuer("one").unwrap();
    let h = me.acquire().unwrap();
    match me.acquire() {
        Err(AioError::ApiViolation(msg)) => assert!(msg.contains("only one I/O handle")),
        other => panic!(
            "second acquire should be an API violation, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(matches!(me.try_acquire(), Err(AioError::ApiViolation(_))));
    drop(h);
    let h2 = me.acquire().unwrap();
    drop(h2);
}

crate::for_every_method!(scenario);
