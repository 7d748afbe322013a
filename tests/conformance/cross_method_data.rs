//! Data written by one method is read back identically by every method (sync is the oracle):
//! vectored writes and reads, several buffers per I/O, buffered and O_DIRECT.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(writer: IoMethodKind) {
    let d = dir();
    let path = d.path().join("x");
    {
        let aio = start(writer);
        let me = aio.register_issuer("writer").unwrap();
        let f = aio
            .open(&path, &OpenOptions::read_write().direct(true))
            .unwrap();
        for i in 0..16u64 {
            let bufs: Vec<IoBuf> = (0..4u64)
                .map(|k| IoBuf::from_slice(&vec![(i * 4 + k) as u8; 4096]))
                .collect();
            me.wait(me.acquire().unwrap().writev(&f, i * 16384, bufs).unwrap())
                .check()
                .unwrap();
        }
        me.fsync(&f).unwrap();
    }
    for reader in IoMethodKind::ALL {
        if reader == IoMethodKind::IoUring && dbaio::io_uring_available().is_err() {
            continue;
        }
        let aio = start_with(reader, |s| s.io_max_combine_limit = 64);
        let me = aio.register_issuer("reader").unwrap();
        for direct in [false, true] {
            let f = aio
                .open(&path, &OpenOptions::read().direct(direct))
                .unwrap();
            let bufs: Vec<IoBuf> = (0..64).map(|_| IoBuf::new(4096)).collect();
            let c = me.wait(me.acquire().unwrap().readv(&f, 0, bufs).unwrap());
            c.check().unwrap();
            for (j, b) in c.into_bufs().iter().enumerate() {
                assert!(
                    b.iter().all(|&x| x == j as u8),
                    "{writer} wrote, {reader} read block {j} wrong"
                );
            }
        }
    }
}

crate::for_every_method!(scenario);
