//! Rename works on every method: a file renamed keeps its data under the new name and is gone
//! from the old one; a rename onto an existing file replaces it (a descriptor open on the
//! replaced file still reads it, as on Linux); a file renamed while open is still reached
//! through its descriptor; a failed rename names both paths and the errno.
//! Guards against: a method that lacks rename, runs it wrongly (the two paths swapped, the
//! second path read from the wrong place), or loses an open file's identity across it; and
//! an error with the wrong op, paths or words.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, Op, OpenOptions};
use std::ffi::CString;

fn c(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start(m);
    let me = aio.register_issuer("rename").unwrap();
    let (a, b, t) = (d.path().join("a"), d.path().join("b"), d.path().join("t"));
    let fa = aio.open(&a, &OpenOptions::read_write()).unwrap();
    me.write_all_at(&fa, 0, IoBuf::from_slice(&[1u8; 4096]))
        .unwrap();
    // Renamed while open: the descriptor still reaches the file.
    me.wait(me.acquire().unwrap().rename(&c(&a), &c(&b)))
        .check()
        .unwrap();
    assert!(!exists(&aio, &a) && exists(&aio, &b));
    me.write_all_at(&fa, 4096, IoBuf::from_slice(&[2u8; 4096]))
        .unwrap();
    me.close(fa);
    let fb = aio.open(&b, &OpenOptions::read()).unwrap();
    let got = me.read_exact_at(&fb, 0, IoBuf::new(8192)).unwrap();
    assert!(got[..4096].iter().all(|&x| x == 1) && got[4096..].iter().all(|&x| x == 2));
    // Onto an existing file: it is replaced; its open descriptor still reads the old data.
    let ft = aio.open(&t, &OpenOptions::read_write()).unwrap();
    me.write_all_at(&ft, 0, IoBuf::from_slice(&[9u8; 4096]))
        .unwrap();
    me.rename(&b, &t).unwrap();
    assert!(!exists(&aio, &b));
    let old = me.read_exact_at(&ft, 0, IoBuf::new(4096)).unwrap();
    assert!(old.iter().all(|&x| x == 9), "the replaced file's data");
    me.close(ft);
    let fnew = aio.open(&t, &OpenOptions::read()).unwrap();
    let got = me.read_exact_at(&fnew, 0, IoBuf::new(8192)).unwrap();
    assert!(
        got[..4096].iter().all(|&x| x == 1),
        "the renamed file under the new name"
    );
    me.close(fnew);
    me.close(fb);
    // A missing source: the error names both paths.
    let e = me
        .wait(me.acquire().unwrap().rename(&c(&a), &c(&b)))
        .check()
        .unwrap_err();
    assert_eq!((e.op, e.errno), (Op::Rename, libc::ENOENT));
    assert_eq!(
        e.to_string(),
        format!(
            "could not rename file \"{}\" to \"{}\": No such file or directory (errno 2)",
            a.display(),
            b.display()
        )
    );
}

crate::for_every_method!(scenario);
