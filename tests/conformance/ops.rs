//! Every op works on every method: fsync, fdatasync, fadvise(WILLNEED), fallocate, ftruncate,
//! unlink — and a failed unlink names the op and the file.
//! Guards against: a method that lacks one of these ops or runs it wrongly (fallocate or ftruncate
//! leaving the wrong length, unlink leaving the file), or reports one that worked as failed; and an
//! unlink error with the wrong op, errno or words.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, Op, OpenOptions};
use std::ffi::CString;

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start(m);
    let me = aio.register_issuer("ops").unwrap();
    let path = d.path().join("ops");
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    me.write_all_at(&f, 0, IoBuf::from_slice(&[3u8; 8192]))
        .unwrap();
    me.wait(me.acquire().unwrap().fdatasync(&f))
        .check()
        .unwrap();
    me.wait(me.acquire().unwrap().fsync(&f)).check().unwrap();
    me.wait(me.acquire().unwrap().fadvise_willneed(&f, 0, 8192))
        .check()
        .unwrap();
    me.wait(me.acquire().unwrap().fallocate(&f, 0, 1 << 20))
        .check()
        .unwrap();
    assert_eq!(f.len().unwrap(), 1 << 20);
    me.wait(me.acquire().unwrap().ftruncate(&f, 12345))
        .check()
        .unwrap();
    assert_eq!(f.len().unwrap(), 12345);
    me.close(f);
    let c = CString::new(path.to_str().unwrap()).unwrap();
    me.wait(me.acquire().unwrap().unlink(c.clone()))
        .check()
        .unwrap();
    assert!(!exists(&aio, &path));
    let e = me
        .wait(me.acquire().unwrap().unlink(c))
        .check()
        .unwrap_err();
    assert_eq!((e.op, e.errno), (Op::Unlink, libc::ENOENT));
    assert_eq!(
        e.to_string(),
        format!(
            "could not remove file \"{}\": No such file or directory (errno 2)",
            path.display()
        )
    );
}

crate::for_every_method!(scenario);
