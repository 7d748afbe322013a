//! Read streams on every method: buffers come back in the order the blocks were named, with
//! the right bytes, across segment boundaries; a cold sequential stream ramps its distance up
//! and combines reads to `io_combine_limit` blocks, never across a segment; a warm stream is
//! all hits at distance 1; the distance decays on hits after a miss run; a hit/miss/hit/miss
//! pattern is not trapped at distance 1-2 (PostgreSQL 18's weakness); a sequential hint starts
//! with a full-size read; reset and `effective_io_concurrency = 0` behave; four streams over
//! the same blocks in a small pool each get every block; a failed read is an
//! error for its block only and the stream goes on. Guards against: reordering, reads that
//! cross a segment, lost or double-pinned buffers, a stream that stops at its first error.

use crate::support::*;
use dbaio::{
    FaultAction, FaultRule, IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation,
};

const SEG: u32 = 100;

fn scenario(m: IoMethodKind) {
    let d = dir();
    // A relation of three segments of 100, 100 and 50 blocks.
    let path = data_file(&d, "rel", u64::from(SEG) * 8192);
    data_file(&d, "rel.1", u64::from(SEG) * 8192);
    data_file(&d, "rel.2", 50 * 8192);
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("stream").unwrap();
    let rel =
        Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read().direct(true), SEG)
            .unwrap();
    assert_eq!((rel.nblocks(), rel.segments().len()), (250, 3));
    let page_ok = |block: u32, page: &[u8]| assert_pattern(page, u64::from(block % SEG) * 8192);

    // Cold and sequential: in order, right bytes, ramp-up, full-size reads within segments.
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
    let mut next = 0;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert_eq!(b.block(), next, "buffers come back in order");
        page_ok(b.block(), b.page());
        next += 1;
    }
    assert_eq!(next, 250);
    let st = s.stats().clone();
    assert_eq!(
        (st.blocks, st.blocks_read, st.hits),
        (250, 250, 0),
        "{st:?}"
    );
    assert_eq!(st.read_sizes.len(), 17, "io_combine_limit is 16 blocks");
    assert!(
        st.max_distance >= 64,
        "the distance ramps up on misses: {st:?}"
    );
    let full = st.read_sizes[16];
    assert!(full >= 12, "most reads are 16 blocks: {:?}", st.read_sizes);
    // Segments of 100 and 50 blocks cannot be read in 16-block pieces only: reads stop at
    // segment ends.
    assert!(
        st.ios >= 250 / 16 + 2,
        "reads end at segment boundaries: {st:?}"
    );
    drop(s);
    assert_eq!(aio.check_buffer_mapping().unwrap(), 250);

    // Warm: all hits, no reads, distance stays 1.
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
    let mut n = 0;
    while let Some(b) = s.next_buffer() {
        page_ok(b.as_ref().unwrap().block(), b.unwrap().page());
        n += 1;
    }
    assert_eq!(n, 250);
    assert_eq!((s.stats().hits, s.stats().ios), (250, 0));
    assert_eq!((s.distance(), s.stats().max_distance), (1, 1));
    drop(s);

    // A sequential hint starts with full-size reads (a fresh pool, so all are misses).
    let aio5 = start_with(m, |s| s.buffer_pool_size = 1024);
    let me5 = aio5.register_issuer("sequential").unwrap();
    let rel5 = Relation::open_with_segment_blocks(&aio5, &path, &OpenOptions::read(), SEG).unwrap();
    let hint = ReadStreamOptions {
        sequential: true,
        ..ReadStreamOptions::default()
    };
    let mut s = ReadStream::new(&me5, &rel5, 0..64, hint);
    assert_eq!(s.distance(), 16);
    assert_eq!(s.next_buffer().unwrap().unwrap().block(), 0);
    assert_eq!(
        s.stats().read_sizes[16],
        1,
        "the first read is full: {:?}",
        s.stats()
    );
    drop(s);

    // Reset drops what was looked ahead (pins released, reads left to finish) and starts
    // again at distance 1; the stream goes on from where its block iterator was.
    let mut s = ReadStream::new(&me5, &rel5, 64..250, ReadStreamOptions::default());
    for want in 64..74 {
        assert_eq!(s.next_buffer().unwrap().unwrap().block(), want);
    }
    s.reset();
    assert_eq!((s.distance(), s.ios_in_flight()), (1, 0));
    let mut last = 73;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert!(b.block() > last, "still in order after reset");
        page_ok(b.block(), b.page());
        last = b.block();
    }
    assert_eq!(last, 249);
    drop(s);
    aio5.check_buffer_mapping().unwrap();

    // effective_io_concurrency = 0: one read at a time, still combined.
    let aio6 = start_with(m, |s| {
        s.buffer_pool_size = 1024;
        s.effective_io_concurrency = 0;
    });
    let me6 = aio6.register_issuer("one-at-a-time").unwrap();
    let rel6 = Relation::open_with_segment_blocks(&aio6, &path, &OpenOptions::read(), SEG).unwrap();
    let mut s = ReadStream::new(&me6, &rel6, 0..100, ReadStreamOptions::default());
    while let Some(b) = s.next_buffer() {
        page_ok(b.as_ref().unwrap().block(), b.unwrap().page());
    }
    assert_eq!(s.max_ios(), 1);
    assert_eq!(s.stats().max_ios_in_flight, 1, "{:?}", s.stats());
    assert!(s.stats().read_sizes[16] >= 4, "{:?}", s.stats());
    drop(s);

    // Four streams at once over the same blocks in a small pool: each gets every block, in
    // order, right (blocks another stream is reading are waited for), and the mapping holds.
    let aio7 = start_with(m, |s| s.buffer_pool_size = 128);
    let rel7 = Relation::open_with_segment_blocks(&aio7, &path, &OpenOptions::read(), SEG).unwrap();
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let (aio7, rel7) = (&aio7, &rel7);
            sc.spawn(move || {
                let me = aio7.register_issuer(&format!("s{t}")).unwrap();
                let start = t * 20;
                let mut want = start;
                for b in ReadStream::new(&me, rel7, start..250, ReadStreamOptions::default()) {
                    let b = b.unwrap();
                    assert_eq!(b.block(), want);
                    page_ok(b.block(), b.page());
                    want += 1;
                }
                assert_eq!(want, 250);
            });
        }
    });
    aio7.check_buffer_mapping().unwrap();

    // Any order comes back in that order; blocks named twice come back twice.
    let order: Vec<u32> = (0..250)
        .map(|i| (i * 37 + 11) % 250)
        .chain([5, 5, 249])
        .collect();
    let s = ReadStream::new(&me, &rel, order.clone(), ReadStreamOptions::default());
    let got: Vec<u32> = s.map(|b| b.unwrap().block()).collect();
    assert_eq!(got, order);

    // Distance shrinks on hits: a fresh pool, 48 cold blocks, then 202 warm ones.
    let aio2 = start_with(m, |s| s.buffer_pool_size = 1024);
    let me2 = aio2.register_issuer("decay").unwrap();
    let rel2 = Relation::open_with_segment_blocks(&aio2, &path, &OpenOptions::read(), SEG).unwrap();
    for blk in 48..250 {
        let (file, b) = rel2.locate(blk).unwrap();
        drop(me2.read_block(file, b).unwrap());
    }
    let mut s = ReadStream::new(&me2, &rel2, 0..250, ReadStreamOptions::default());
    let mut peak = 0;
    while let Some(b) = s.next_buffer() {
        b.unwrap();
        peak = peak.max(s.distance());
    }
    assert!(peak >= 8, "ramped up over 48 misses: {peak}");
    assert!(
        s.distance() < peak,
        "decays on hits: {} vs {peak}",
        s.distance()
    );
    drop(s);

    // Hit/miss alternation (even blocks warm, odd cold) is not trapped at 1-2.
    let aio3 = start_with(m, |s| s.buffer_pool_size = 1024);
    let me3 = aio3.register_issuer("alternate").unwrap();
    let rel3 =
        Relation::open_with_segment_blocks(&aio3, &path, &OpenOptions::read(), SEG * 3).unwrap();
    for blk in (0..100).step_by(2) {
        drop(me3.read_block(&rel3.segments()[0], blk).unwrap());
    }
    let mut s = ReadStream::new(&me3, &rel3, 0..100, ReadStreamOptions::default());
    while let Some(b) = s.next_buffer() {
        page_ok(b.as_ref().unwrap().block(), b.unwrap().page());
    }
    let st = s.stats();
    assert_eq!((st.hits, st.blocks_read), (50, 50), "{st:?}");
    assert_eq!(
        st.read_sizes[1], 50,
        "reads split at every valid block: {st:?}"
    );
    assert!(st.max_distance >= 8, "alternation still ramps up: {st:?}");
    drop(s);

    // A failed read fails its blocks only; the stream goes on.
    let aio4 = start_with(m, |s| s.buffer_pool_size = 1024);
    let me4 = aio4.register_issuer("errors").unwrap();
    let rel4 = Relation::open_with_segment_blocks(&aio4, &path, &OpenOptions::read(), SEG).unwrap();
    aio4.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .on_file(&rel4.segments()[1])
            .offsets(0..1) // the first read of segment 1
            .times(1),
    );
    let s = ReadStream::new(&me4, &rel4, 0..250, ReadStreamOptions::default());
    let mut failed = Vec::new();
    let mut ok = 0;
    for b in s {
        match b {
            Ok(b) => {
                page_ok(b.block(), b.page());
                ok += 1;
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("rel.1") && text.contains("errno 5"), "{text}");
                failed.push(e.block);
            }
        }
    }
    let expect: Vec<u32> = (100..100 + failed.len() as u32).collect();
    assert!(
        !failed.is_empty() && failed == expect,
        "that read's blocks fail: {failed:?}"
    );
    assert_eq!(ok + failed.len(), 250);
    // The failed blocks are read again (and now work) by the next reader.
    for &b in &failed {
        let buf = me4.read_block(&rel4.segments()[1], b - SEG).unwrap();
        page_ok(b, buf.page());
    }
    aio4.check_buffer_mapping().unwrap();
}

crate::for_every_method!(scenario);
