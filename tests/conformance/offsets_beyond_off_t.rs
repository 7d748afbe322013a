//! Offsets at the edge of what the kernel takes: a read or write at an offset beyond `off_t`
//! (`u64::MAX`, which is -1, among them) fails with EINVAL on every method and changes
//! nothing. (A buffer over 4 GiB on io_uring: `dbaio-uring`'s
//! `a_buffer_over_4_gib_is_not_cut_to_32_bits`, where 4 GiB can be reserved without being
//! zeroed.)
//! Guards against: a read or write at offset `u64::MAX` done at the file's position and
//! reported as done (io_uring takes offset -1 as "at the position", and so does `preadv2`,
//! which `io_worker_try_cached` uses: reads came back with blocks 0, 1, 2 … and an O_DIRECT
//! write overwrote block 0 — found by a caller-side attack, 2026-12-07); `sim` panicking on
//! such offsets.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 16 * 4096);
    let before = std::fs::read(&path).unwrap();
    // The page cache tried first, with preadv2, where the worker method may do that.
    let aio = start_with(m, |s| s.io_worker_try_cached = true);
    let me = aio.register_issuer("edges").unwrap();
    for direct in [false, true] {
        let f = aio
            .open(&path, &OpenOptions::read_write().direct(direct))
            .unwrap();
        for offset in [u64::MAX, u64::MAX - 4095, 1 << 63] {
            let what = format!("direct {direct}, offset {offset}");
            for _ in 0..3 {
                let c = me.wait(me.acquire().unwrap().read(&f, offset, IoBuf::new(4096)));
                let e = c.check().expect_err(&what);
                assert_eq!((e.errno, e.offset), (libc::EINVAL, offset), "read, {what}");
            }
            let e = me
                .read_exact_at(&f, offset, IoBuf::new(4096))
                .expect_err(&what);
            assert!(e.to_string().contains("Invalid argument"), "{what}: {e}");
            let c = me.wait(
                me.acquire()
                    .unwrap()
                    .readv(&f, offset, vec![IoBuf::new(4096), IoBuf::new(4096)])
                    .unwrap(),
            );
            assert_eq!(c.check().expect_err(&what).errno, libc::EINVAL, "readv");
            let c = me.wait(me.acquire().unwrap().write(
                &f,
                offset,
                IoBuf::from_slice(&[0xee; 4096]),
            ));
            assert_eq!(c.check().expect_err(&what).errno, libc::EINVAL, "write");
        }
        // Advice of a length beyond `off_t` is EINVAL, as the kernel has it, on io_uring too
        // (whose entry carries only 32 bits of the length: a longer range is advised by the
        // issuer). (The kernel takes any offset for advice.)
        let c = me.wait(me.acquire().unwrap().fadvise_willneed(&f, 0, u64::MAX));
        let e = c.check().expect_err("advice beyond off_t");
        assert_eq!(e.errno, libc::EINVAL);
        let c = me.wait(me.acquire().unwrap().fadvise_willneed(&f, 0, 8 << 30));
        c.check().expect("advice over 8 GiB");
        // The file is as it was: nothing landed at its position, nothing grew it.
        assert_eq!(contents(&aio, &path), before, "direct {direct}");
    }
}

crate::for_every_method!(scenario);
