//! Any-thread access: `Aio::with_issuer` gives each calling thread its own issuer on first
//! use, named after the thread and attributed to its OS thread id in the view; calls nest;
//! the issuer is released when the thread ends; after shutdown the call fails cleanly.
//! Guards against: `with_issuer` registering a new issuer per call or per nested call instead of
//! one per thread; a thread's I/Os counted under another name or thread id; its issuer's slot
//! leaked when the thread ends; and `with_issuer` after shutdown hanging or handing out an issuer
//! instead of failing with `ShutDown`.

use crate::support::*;
use dbaio::{AioError, IoBuf, IoMethodKind, OpenOptions};
use std::sync::{Arc, Barrier};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "shared", 1 << 20);
    let aio = start(m);
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let before = aio.waits().len();
    let threads = 4;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (aio, f) = (aio.clone(), f.clone());
            let (barrier, done) = (Arc::clone(&barrier), Arc::clone(&done));
            std::thread::Builder::new()
                .name(format!("reader-{t}"))
                .spawn(move || {
                    for i in 0..64u64 {
                        let off = ((i * 7 + t as u64) % 256) * 4096;
                        let buf = aio
                            .with_issuer(|iss| iss.read_exact_at(&f, off, IoBuf::new(4096)))
                            .unwrap()
                            .unwrap();
                        assert_pattern(&buf, off);
                    }
                    // Nested calls get the same issuer (one slot per thread).
                    let same = aio
                        .with_issuer(|a| {
                            let outer = a as *const _ as usize;
                            aio.with_issuer(|b| b as *const _ as usize == outer)
                                .unwrap()
                        })
                        .unwrap();
                    assert!(same);
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    barrier.wait();
                    done.wait();
                    tid
                })
                .unwrap()
        })
        .collect();
    barrier.wait();
    let rows = aio.waits();
    assert_eq!(rows.len(), before + threads, "one issuer per thread");
    let stats = aio.stats();
    for t in 0..threads {
        let name = format!("reader-{t}");
        assert!(rows.iter().any(|r| r.issuer == name), "{name} in {rows:?}");
        let ios: u64 = stats
            .iter()
            .filter(|r| r.issuer == name)
            .flat_map(|r| r.ops.iter())
            .map(|o| o.count)
            .sum();
        assert_eq!(ios, 64, "{name}'s reads are counted under its name");
    }
    done.wait();
    for (t, h) in handles.into_iter().enumerate() {
        let tid = h.join().unwrap();
        let name = format!("reader-{t}");
        assert!(
            stats.iter().any(|r| r.issuer == name && r.tid == tid),
            "{name} attributed to its own thread id {tid}"
        );
    }
    assert_eq!(aio.waits().len(), before, "released when the threads ended");

    // Unnamed threads get `thread <tid>`; after shutdown the call fails and nothing hangs.
    let a2 = aio.clone();
    let name = std::thread::spawn(move || a2.with_issuer(|i| i.name()).unwrap())
        .join()
        .unwrap();
    assert!(name.starts_with("thread "), "{name}");
    aio.shutdown();
    let a3 = aio.clone();
    let after = std::thread::spawn(move || a3.with_issuer(|_| ()).map_err(|e| e.to_string()))
        .join()
        .unwrap();
    assert_eq!(after, Err(AioError::ShutDown.to_string()));
}

crate::for_every_method!(scenario);
