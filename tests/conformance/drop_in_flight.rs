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

/// An issuer that drops its `InFlight`s and then only calls `reclaim_finished` gets every
/// handle back and sees the I/Os in its statistics, without starting or waiting for
/// anything else. Guards against `reclaim_finished` on io_uring leaving the completions in
/// the ring (nothing reaped them while the issuer was idle, so the dropped reads counted as
/// in flight, unreclaimed and uncounted, for as long as the engine did not acquire).
fn reclaim_finished_alone_takes_back_dropped_ios(m: IoMethodKind) {
    within(60, "reclaim_finished after dropped reads", move || {
        let d = dir();
        let path = data_file(&d, "r", 1 << 20);
        let aio = start(m);
        let me = aio.register_issuer("dropper").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let n = aio.handles_per_issuer().min(16) as usize;
        for i in 0..n as u64 {
            drop(me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096)));
        }
        // (The acquires reclaim some of the earlier ones themselves.)
        while !aio.aios().is_empty() {
            me.reclaim_finished();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let counted: u64 = aio
            .stats()
            .iter()
            .filter(|r| r.issuer == "dropper")
            .flat_map(|r| r.ops.iter().map(|o| o.count))
            .sum();
        assert_eq!(counted, n as u64);
    });
}

crate::for_every_method!(scenario, reclaim_finished_alone_takes_back_dropped_ios);
