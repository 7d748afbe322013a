//! On the worker method a buffered read the page cache holds whole runs in the issuer at
//! submit (`io_worker_try_cached`, default on): one non-blocking system call instead of a
//! hand-off to a worker and two wakeups. A read the cache cannot serve whole — its pages
//! dropped, an O_DIRECT file, a short read at the end of the file — still goes to a worker,
//! as does a read over 16 KiB (workers copy those in parallel), and every read returns what
//! it returns on the other methods.
//! Guards against: a cached read paying for a worker's wakeup; a non-blocking attempt that
//! hands back a partial or wrong result as if it were whole.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions, Status};
use std::os::fd::AsRawFd;

/// Writes the file's pages back and drops `len` bytes at `offset` from the page cache,
/// checking with `mincore` that they are gone (a page still under writeback may stay).
fn drop_from_cache(path: &std::path::Path, offset: u64, len: u64) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    let size = f.metadata().unwrap().len() as usize;
    for _ in 0..100 {
        // SAFETY: only integers are passed; `f` is an open descriptor.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0, "posix_fadvise(DONTNEED)");
        // SAFETY: a fresh read-only shared mapping of the whole file, unmapped below; the
        // vector has one byte per page of it, as mincore writes.
        let resident = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut v = vec![0u8; size.div_ceil(4096)];
            assert_eq!(libc::mincore(p, size, v.as_mut_ptr()), 0);
            libc::munmap(p, size);
            v[(offset / 4096) as usize..(offset + len).div_ceil(4096) as usize]
                .iter()
                .any(|b| b & 1 != 0)
        };
        if !resident {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the page cache kept {} after 100 drops", path.display());
}

/// I/Os of `issuer` that went to the queue: run by a worker, or by the waiter that found
/// them still queued (which of the two is a race).
fn queued_ios(aio: &dbaio::Aio, issuer: &str) -> u64 {
    aio.stats()
        .into_iter()
        .filter(|r| r.issuer == issuer)
        .flat_map(|r| r.executors)
        .filter(|e| e.executor.starts_with("worker") || e.executor == "waiter")
        .map(|e| e.ios)
        .sum()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let len = 1u64 << 20;
    let path = data_file(&d, "f", len);
    let aio = start(m);
    let me = aio.register_issuer("cached").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();

    // Just written, so cached: whole, from the issuer.
    let c = me.wait(me.acquire().unwrap().read(&f, 8192, IoBuf::new(8192)));
    c.check().unwrap();
    assert_pattern(&c.into_buf(), 8192);
    // Cached, but short (the file ends 4096 bytes in): not taken as whole.
    let c = me.wait(me.acquire().unwrap().read(&f, len - 4096, IoBuf::new(8192)));
    assert_eq!(c.result().status, Status::Partial);
    assert_eq!(c.bytes(), 4096);
    assert_pattern(&c.into_buf()[..4096], len - 4096);
    // Cached, but over 16 KiB: workers copy those in parallel.
    let c = me.wait(me.acquire().unwrap().read(&f, 262144, IoBuf::new(65536)));
    c.check().unwrap();
    assert_pattern(&c.into_buf(), 262144);
    // Not cached any more.
    drop_from_cache(&path, 65536, 16384);
    let c = me.wait(me.acquire().unwrap().read(&f, 65536, IoBuf::new(16384)));
    c.check().unwrap();
    assert_pattern(&c.into_buf(), 65536);
    // O_DIRECT: never tried.
    let direct = aio.open(&path, &OpenOptions::read().direct(true)).unwrap();
    let c = me.wait(
        me.acquire()
            .unwrap()
            .read(&direct, 131072, IoBuf::new(4096)),
    );
    c.check().unwrap();
    assert_pattern(&c.into_buf(), 131072);

    // A file system that refuses non-blocking reads (tmpfs here, kernel 6.18): read whole
    // all the same (by a worker, the refusal remembered for the file), on an issuer of its
    // own so that a kernel that takes the flag there changes no count above.
    let shm = std::path::Path::new("/dev/shm");
    let tmpfs = shm.is_dir().then(|| {
        let d = tempfile::tempdir_in(shm).unwrap();
        let p = data_file(&d, "t", 65536);
        (d, p)
    });
    if let Some((_d, p)) = &tmpfs {
        let other = aio.register_issuer("tmpfs").unwrap();
        let t = aio.open(p, &OpenOptions::read()).unwrap();
        for off in [0u64, 8192] {
            let c = other.wait(other.acquire().unwrap().read(&t, off, IoBuf::new(4096)));
            c.check().unwrap();
            assert_pattern(&c.into_buf(), off);
        }
    } else {
        eprintln!("cached_reads: no /dev/shm here, the tmpfs case is not run");
    }

    if m == IoMethodKind::Worker {
        assert_eq!(
            executed_by(&aio, "cached", "issuer"),
            1,
            "the cached read, at submit"
        );
        assert_eq!(
            queued_ios(&aio, "cached"),
            4,
            "the short, the large, the dropped and the O_DIRECT read"
        );
        // Off: the same cached read goes to a worker.
        let off = start_with(m, |s| s.io_worker_try_cached = false);
        let me = off.register_issuer("off").unwrap();
        let f = off.open(&path, &OpenOptions::read()).unwrap();
        let c = me.wait(me.acquire().unwrap().read(&f, 8192, IoBuf::new(8192)));
        c.check().unwrap();
        assert_pattern(&c.into_buf(), 8192);
        assert_eq!(queued_ios(&off, "off"), 1);
        assert_eq!(executed_by(&off, "off", "issuer"), 0);
    }
}

crate::for_every_method!(scenario);
