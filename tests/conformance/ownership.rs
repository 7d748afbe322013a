//! Safe code cannot break ownership (issue 15, item 2): an `InFlight` redeemed through
//! another issuer of the same thread is reclaimed by its own issuer (before: the other
//! issuer's slot of the same number was reclaimed, and the I/O's own handle leaked); a `File`
//! of one subsystem used with another's issuer fails with an error naming it (before: the
//! other table's slot of that number — another file — was read, and closing could close it);
//! a wait reference of another subsystem is refused.
//! Guards against: an `InFlight` redeemed through the wrong issuer that reclaims that issuer's
//! handle of the same number; a `File` of another subsystem resolved by slot number, so a read
//! returns another file's bytes or `close` closes another file; and a wait reference of another
//! subsystem waited on in this one's handle table.

use crate::support::*;
use dbaio::{AioError, IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path_a = data_file(&d, "a", 65536);
    let path_b = d.path().join("b");
    std::fs::write(&path_b, vec![0xbbu8; 65536]).unwrap();

    // Two issuers of one thread; each has one I/O in flight on the same handle number.
    let aio = start(m);
    let one = aio.register_issuer("one").unwrap();
    let two = aio.register_issuer("two").unwrap();
    let f = aio.open(&path_a, &OpenOptions::read()).unwrap();
    let io_one = one.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    let io_two = two.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    let c = one.wait(io_two); // the wrong issuer
    assert_pattern(&c.into_buf(), 8192);
    assert_eq!(two.in_flight(), 0, "two's handle was reclaimed by two");
    assert_eq!(one.in_flight(), 1, "one's own I/O is untouched");
    assert_pattern(&one.wait(io_one).into_buf(), 0);
    let mut io = two.acquire().unwrap().read(&f, 4096, IoBuf::new(4096));
    let c = loop {
        match one.try_wait(io) {
            Ok(c) => break c,
            Err(back) => {
                io = back;
                std::thread::yield_now();
            }
        }
    };
    assert_pattern(&c.into_buf(), 4096);
    assert_eq!((one.in_flight(), two.in_flight()), (0, 0));

    // A second subsystem whose file table has `b` where the first has `a`.
    let other = start(m);
    let theirs = other.register_issuer("theirs").unwrap();
    let fb = other.open(&path_b, &OpenOptions::read()).unwrap();
    let c = theirs.wait(theirs.acquire().unwrap().read(&f, 0, IoBuf::new(4096)));
    let e = c.check().unwrap_err();
    assert_eq!(e.errno, libc::EBADF);
    assert_eq!(
        e.to_string(),
        format!(
            "could not read 4096 bytes at offset 0 of file \"{}\": Bad file descriptor (errno 9)\n\
             HINT:  The file was opened by another Aio than this issuer's; open it with the \
             issuer's own Aio.",
            path_a.display()
        )
    );
    assert!(
        c.into_buf().iter().all(|&b| b == 0),
        "nothing of b was read"
    );
    assert!(matches!(
        theirs.read_block(&f, 0),
        Err(AioError::ApiViolation(_))
    ));
    theirs.close(f.clone()); // closes nothing of theirs
    let back = theirs.read_exact_at(&fb, 0, IoBuf::new(4096)).unwrap();
    assert!(
        back.iter().all(|&b| b == 0xbb),
        "their own file is still open"
    );

    // A wait reference of the first subsystem, handed to the second.
    let io = one.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    let w = io.wait_ref();
    assert!(matches!(other.wait(w), Err(AioError::ApiViolation(_))));
    assert!(matches!(theirs.wait_ref(w), Err(AioError::ApiViolation(_))));
    one.wait(io).check().unwrap();
}

crate::for_every_method!(scenario);
