//! A read stream with a buffer ring (PostgreSQL's bulk-read strategy) on every method: a scan
//! four times the size of the pool hands back every block in order with the right bytes,
//! and afterwards a hot set read before it is still cached, where the same scan without the
//! ring evicts it; two ring scans at once over the same blocks both get every block and leave
//! the mapping sound; a failed read in a ring scan fails its blocks only. Guards against: a ring buffer reused while pinned or under I/O, a ring
//! that silently takes victims from the whole pool, double-mapped buffers.

use crate::support::*;
use dbaio::{
    FaultAction, FaultRule, IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation,
};

fn scan(me: &dbaio::Issuer, rel: &Relation, blocks: u32, ring: bool) {
    let opts = ReadStreamOptions {
        ring,
        sequential: true,
        ..ReadStreamOptions::default()
    };
    let mut s = ReadStream::new(me, rel, 0..blocks, opts);
    let mut next = 0;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert_eq!(b.block(), next, "buffers come back in order");
        assert_pattern(b.page(), u64::from(next) * 8192);
        next += 1;
    }
    assert_eq!(next, blocks);
}

/// Reads of the hot set's 32 blocks a stream needed: 0 when all were still cached.
fn hot_reads(me: &dbaio::Issuer, hot: &Relation) -> u64 {
    let mut s = ReadStream::new(me, hot, 0..32, ReadStreamOptions::default());
    while let Some(b) = s.next_buffer() {
        assert_pattern(b.unwrap().page(), 0);
    }
    s.stats().ios
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let big = data_file(&d, "big", 1024 * 8192);
    // The hot set: 32 copies of block 0's bytes, so any block checks against offset 0.
    let hot_path = d.path().join("hot");
    let block0: Vec<u8> = std::fs::read(&big).unwrap()[..8192].to_vec();
    std::fs::write(&hot_path, block0.repeat(32)).unwrap();

    for ring in [true, false] {
        // 256 buffers, two issuer slots: each stream may pin up to 128.
        let aio = start_with(m, |s| {
            s.buffer_pool_size = 256;
            s.max_issuers = 2;
        });
        let me = aio.register_issuer("scan").unwrap();
        let open = OpenOptions::read().direct(true);
        let rel = Relation::open(&aio, &big, &open).unwrap();
        let hot = Relation::open(&aio, &hot_path, &open).unwrap();
        // Warm the hot set and use it again, as a working set would be.
        assert!(hot_reads(&me, &hot) > 0);
        assert_eq!(hot_reads(&me, &hot), 0, "the hot set is cached");
        scan(&me, &rel, 1024, ring);
        let again = hot_reads(&me, &hot);
        if ring {
            assert_eq!(again, 0, "a ring scan leaves the hot set cached");
        } else {
            assert!(again > 0, "without a ring the scan evicts the hot set");
        }
        aio.check_buffer_mapping().unwrap();
    }

    // Two ring scans at once over the same blocks, in one pool.
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 256;
        s.max_issuers = 3;
    });
    let rel = Relation::open(&aio, &big, &OpenOptions::read().direct(true)).unwrap();
    std::thread::scope(|s| {
        for t in 0..2 {
            let (aio, rel) = (&aio, &rel);
            s.spawn(move || {
                let me = aio.register_issuer(&format!("scan{t}")).unwrap();
                for _ in 0..3 {
                    scan(&me, rel, 1024, true);
                }
            });
        }
    });
    aio.check_buffer_mapping().unwrap();
    drop(rel);
    drop(aio);

    // A failed read in a ring scan fails its blocks only; its buffers go back into the ring
    // and are reused for later blocks with the right bytes. A fresh pool: blocks the scans
    // above left cached (a block both scans pinned is used twice, and waits for the clock
    // sweep) would be hits, and the scan's first read would not be at offset 0.
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 256;
        s.max_issuers = 3;
    });
    let rel = Relation::open(&aio, &big, &OpenOptions::read().direct(true)).unwrap();
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .on_file(&rel.segments()[0])
            .offsets(0..1) // the scan's first read
            .times(1),
    );
    let me = aio.register_issuer("faulty").unwrap();
    let opts = ReadStreamOptions {
        ring: true,
        sequential: true,
        ..ReadStreamOptions::default()
    };
    let (mut ok, mut failed) = (0u32, Vec::new());
    for b in ReadStream::new(&me, &rel, 0..1024, opts) {
        match b {
            Ok(b) => {
                assert_pattern(b.page(), u64::from(b.block()) * 8192);
                ok += 1;
            }
            Err(e) => failed.push(e.block),
        }
    }
    let expect: Vec<u32> = (0..failed.len() as u32).collect();
    assert!(
        !failed.is_empty() && failed.len() <= 16 && failed == expect,
        "{failed:?}"
    );
    assert_eq!(ok as usize + failed.len(), 1024);
    aio.check_buffer_mapping().unwrap();
}

crate::for_every_method!(scenario);
