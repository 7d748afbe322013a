//! Dropping things while I/O is in flight: an unused handle, an `InFlight` (the I/O goes on;
//! its buffer stays parked until done), a wait ref, and finally the issuer itself with many
//! detached reads and writes outstanding. Every byte written lands; nothing hangs.
//! Guards against: freeing a buffer the kernel or a worker is still writing.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "r", 4 << 20);
    let aio = start(m);
    let wpath = d.path().join("w");
    {
        let me = aio.register_issuer("dropper").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let w = aio.open(&wpath, &OpenOptions::read_write()).unwrap();
        drop(me.acquire().unwrap());
        for i in 0..200u64 {
            let io = me
                .acquire()
                .unwrap()
                .read(&f, (i % 64) * 65536, IoBuf::new(65536));
            let wref = io.wait_ref();
            drop(io);
            let _ = wref;
            drop(me.acquire().unwrap().write(
                &w,
                i * 512,
                IoBuf::from_slice(&[(i % 250) as u8 + 1; 512]),
            ));
        }
        drop(f);
        drop(w);
        // The issuer drops here with I/Os in flight: it waits for them all.
    }
    let data = contents(&aio, &wpath);
    assert_eq!(data.len(), 200 * 512);
    for i in 0..200usize {
        assert!(
            data[i * 512..(i + 1) * 512]
                .iter()
                .all(|&b| b == (i % 250) as u8 + 1),
            "block {i}"
        );
    }
}

crate::for_every_method!(scenario);
