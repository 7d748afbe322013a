//! Read streams on every method, what they hand back: every block named, in the order named,
//! with its own bytes, across segment boundaries; reads that stop at segment ends; a reset
//! that keeps the order; streams sharing blocks in a small pool; a failed read that fails its
//! own blocks only; blocks past the end, each an error in its place; eight streams on one
//! issuer consumed in turn. Guards against:
//! reordering, a read that crosses into the next segment, lost or double-pinned buffers, a
//! stream that stops at its first error or loses a block behind another's error, streams
//! that hold all their issuer's handles between them. (How far a stream
//! looks ahead is `read_stream_distance.rs`.)

use crate::support::*;
use dbaio::{
    Aio, FaultAction, FaultRule, IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation,
};
use std::path::PathBuf;

/// Blocks per segment file.
pub const SEG: u32 = 100;

/// A relation of three segment files of 100, 100 and 50 blocks of pattern bytes (each file's
/// bytes by its own offsets), and the path of its first segment.
pub fn three_segments() -> (tempfile::TempDir, PathBuf) {
    let d = dir();
    let path = data_file(&d, "rel", u64::from(SEG) * 8192);
    data_file(&d, "rel.1", u64::from(SEG) * 8192);
    data_file(&d, "rel.2", 50 * 8192);
    (d, path)
}

/// Opens the relation at `path` with 100-block segments.
pub fn open_rel(aio: &Aio, path: &PathBuf, direct: bool) -> Relation {
    let rel =
        Relation::open_with_segment_blocks(aio, path, &OpenOptions::read().direct(direct), SEG)
            .unwrap();
    assert_eq!((rel.nblocks(), rel.segments().len()), (250, 3));
    rel
}

/// Asserts `page` holds relation block `block`'s bytes.
pub fn page_ok(block: u32, page: &[u8]) {
    let base = u64::from(block % SEG) * 8192;
    if let Some(i) = (0..page.len()).find(|&i| page[i] != pattern_byte(base + i as u64)) {
        panic!(
            "relation block {block} (segment {}, block {}): byte {i} is {:#04x}, not {:#04x}",
            block / SEG,
            block % SEG,
            page[i],
            pattern_byte(base + i as u64)
        );
    }
}

/// A cold stream over the whole relation gives back all 250 blocks in order, each with its
/// own bytes (segment 1's block 0 is not segment 0's), and leaves exactly 250 buffers
/// mapped once the stream is dropped. Guards against reordering, a wrong page across a
/// segment boundary, and buffers lost or mapped twice.
fn every_block_comes_back_in_order_with_its_bytes(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("stream").unwrap();
    let rel = open_rel(&aio, &path, true);
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
    let mut next = 0;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert_eq!(b.block(), next, "buffers come back in order");
        page_ok(b.block(), b.page());
        next += 1;
    }
    assert_eq!(next, 250);
    assert_eq!(
        (s.stats().blocks, s.stats().blocks_read, s.stats().hits),
        (250, 250, 0),
        "{:?}",
        s.stats()
    );
    drop(s);
    assert_eq!(aio.check_buffer_mapping().unwrap(), 250);
}

/// Combined reads stop at segment ends. Segments 0 and 1 here carry 16 blocks of 0xA5 past
/// their 100 blocks (a read running past block 99 of a segment file finds them instead of
/// the next segment's first blocks), and with reads of at most 16 blocks (io_combine_limit)
/// the 100 + 100 + 50 blocks take at least 7 + 7 + 4 = 18 reads. Guards against a combined
/// read that runs past its segment file into bytes that are not the next segment's.
fn combined_reads_stop_at_segment_ends(m: IoMethodKind) {
    let (d, path) = three_segments();
    for seg in ["rel", "rel.1"] {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(seg))
            .unwrap();
        f.write_all(&[0xA5; 16 * 8192]).unwrap();
    }
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("stream").unwrap();
    let rel =
        Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read().direct(true), SEG)
            .unwrap();
    assert_eq!(rel.segments().len(), 3);
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
    let mut next = 0;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert_eq!(b.block(), next);
        page_ok(b.block(), b.page());
        next += 1;
    }
    assert_eq!(next, 250);
    let st = s.stats();
    assert_eq!(st.blocks_read, 250, "{st:?}");
    assert!(st.ios >= 18, "reads end at segment boundaries: {st:?}");
}

/// Blocks named in any order come back in that order, and a block named twice comes back
/// twice, from a cold pool. Guards against a stream that sorts, merges or drops what it was
/// asked for.
fn blocks_named_in_any_order_come_back_in_that_order(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("stream").unwrap();
    let rel = open_rel(&aio, &path, true);
    let order: Vec<u32> = (0..250)
        .map(|i| (i * 37 + 11) % 250)
        .chain([5, 5, 249])
        .collect();
    let s = ReadStream::new(&me, &rel, order.clone(), ReadStreamOptions::default());
    let got: Vec<u32> = s
        .map(|b| {
            let b = b.unwrap();
            page_ok(b.block(), b.page());
            b.block()
        })
        .collect();
    assert_eq!(got, order);
    aio.check_buffer_mapping().unwrap();
}

/// `reset` drops what was looked ahead (pins released, reads left to finish) and starts
/// again at distance 1; the stream goes on, in order, from where its block iterator was.
/// Guards against a reset that leaks pins or I/Os, or loses its place.
fn reset_drops_the_look_ahead_and_goes_on_in_order(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("reset").unwrap();
    let rel = open_rel(&aio, &path, false);
    let mut s = ReadStream::new(&me, &rel, 64..250, ReadStreamOptions::default());
    for want in 64..74 {
        assert_eq!(s.next_buffer().unwrap().unwrap().block(), want);
    }
    s.reset();
    assert_eq!(
        (s.distance(), s.ios_in_flight()),
        (1, 0),
        "after reset: (distance, I/Os in flight)"
    );
    let mut last = 73;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert!(b.block() > last, "still in order after reset");
        page_ok(b.block(), b.page());
        last = b.block();
    }
    assert_eq!(last, 249);
    drop(s);
    aio.check_buffer_mapping().unwrap();
}

/// Four streams at once over the same blocks in a 128-buffer pool: each gets every block it
/// named, in order, with the right bytes (a block another stream is reading is waited for),
/// and no buffer is mapped twice. Guards against lost wakeups on a shared block, double
/// mapping, and pins that starve a small pool.
fn streams_sharing_blocks_in_a_small_pool_each_get_every_block(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 128);
    let rel = open_rel(&aio, &path, false);
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let (aio, rel) = (&aio, &rel);
            sc.spawn(move || {
                let me = aio.register_issuer(&format!("s{t}")).unwrap();
                let start = t * 20;
                let mut want = start;
                for b in ReadStream::new(&me, rel, start..250, ReadStreamOptions::default()) {
                    let b = b.unwrap();
                    assert_eq!(b.block(), want);
                    page_ok(b.block(), b.page());
                    want += 1;
                }
                assert_eq!(want, 250);
            });
        }
    });
    aio.check_buffer_mapping().unwrap();
}

/// A read that fails (EIO on the first read of segment 1) fails its own blocks only, each
/// with an error naming the file and the errno; the stream goes on and hands back every
/// other block; the failed blocks read fine for the next reader. Guards against a stream that
/// stops at its first error, fails blocks it did not lose, or leaves the failed buffers
/// stuck under I/O.
fn a_failed_read_fails_only_its_blocks_and_the_stream_goes_on(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("errors").unwrap();
    let rel = open_rel(&aio, &path, false);
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .on_file(&rel.segments()[1])
            .offsets(0..1) // the first read of segment 1
            .times(1),
    );
    let s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
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
    for &b in &failed {
        let buf = me.read_block(&rel.segments()[1], b - SEG).unwrap();
        page_ok(b, buf.page());
    }
    aio.check_buffer_mapping().unwrap();
}

/// Blocks past the relation's last segment, two of them in one run after another failing
/// block, and the top block number: each is an error naming it, in the order named, and the
/// blocks around them come back. Guards against a second error replacing one the consumer
/// had not taken yet (block 300,002 was never handed out), and against the block after
/// `u32::MAX` being computed by an overflowing add; and an error that named neither the
/// block nor the relation (`API violation: read stream block is past the relation's last
/// segment`, found by a caller-side attack, 2026-12-07).
fn every_block_past_the_end_is_an_error_in_its_place(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("past-the-end").unwrap();
    let rel = open_rel(&aio, &path, false);
    let named = [
        1,
        2,
        300_000,
        300_002,
        300_003,
        35,
        u32::MAX,
        0,
        u32::MAX - 1,
        u32::MAX,
        7,
    ];
    let got: Vec<Result<u32, u32>> =
        ReadStream::new(&me, &rel, named, ReadStreamOptions::default())
            .map(|b| match b {
                Ok(b) => {
                    page_ok(b.block(), b.page());
                    Ok(b.block())
                }
                Err(e) => {
                    if e.block == 300_000 {
                        assert_eq!(
                            e.error.to_string(),
                            format!(
                                "could not read block 300000 of relation \"{}\": past its last \
                                 segment (it had 250 blocks in 3 segments when it was opened)\n\
                                 HINT:  A segment made since the relation was opened is seen by \
                                 opening it again (Relation::open).",
                                path.display()
                            )
                        );
                    }
                    Err(e.block)
                }
            })
            .collect();
    let want: Vec<Result<u32, u32>> = named
        .iter()
        .map(|&b| if b < 250 { Ok(b) } else { Err(b) })
        .collect();
    assert_eq!(got, want);
    aio.check_buffer_mapping().unwrap();
}

/// Eight streams of random blocks on one issuer, consumed in turn as a merge of scans
/// would, with 16 handles on the issuer and a relation eight times the pool: every block
/// comes back with its bytes, none as an error. Guards against streams holding every handle
/// of their issuer between them (a read's handle is held until its block is consumed), so
/// that a stream with nothing queued failed blocks it could read ("all 16 I/O handles of this
/// issuer hold results not yet taken").
fn streams_consumed_in_turn_on_one_issuer_each_get_every_block(m: IoMethodKind) {
    const BLOCKS: u64 = 2048;
    let d = dir();
    let path = data_file(&d, "big", BLOCKS * 8192);
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 256;
        s.effective_io_concurrency = 16;
    });
    let me = aio.register_issuer("merge").unwrap();
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    let random =
        |k: u64| (0..300u64).map(move |i| ((i * 2_654_435_761 + k * 7_919) % BLOCKS) as u32);
    let mut streams: Vec<_> = (0..8)
        .map(|k| ReadStream::new(&me, &rel, random(k), ReadStreamOptions::default()))
        .collect();
    let mut got = 0;
    loop {
        let mut any = false;
        for s in streams.iter_mut() {
            if let Some(b) = s.next_buffer() {
                let b = b.unwrap_or_else(|e| panic!("block {}: {e}", e.block));
                assert_eq!(b.page()[0], pattern_byte(u64::from(b.block()) * 8192));
                got += 1;
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    assert_eq!(got, 8 * 300);
    drop(streams);
    aio.check_buffer_mapping().unwrap();
}

/// A stream asked for `u32::MAX` reads in flight on a buffered file (advice on, the
/// default): every block comes back, and the stream runs at what the issuer's handles allow.
/// Guards against the advice queue being allocated to the number asked (32 GiB: the process
/// aborted, found by a caller-side attack, 2026-12-07).
fn a_stream_asked_for_too_many_reads_is_capped_not_aborted(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("greedy").unwrap();
    let rel = open_rel(&aio, &path, false);
    let opts = ReadStreamOptions {
        max_ios: u32::MAX,
        ..ReadStreamOptions::default()
    };
    let stream = ReadStream::new(&me, &rel, 0..250, opts);
    assert!(
        stream.max_ios() <= aio.handles_per_issuer(),
        "{}",
        stream.max_ios()
    );
    let mut n = 0;
    for (blk, b) in (0..250).zip(stream) {
        page_ok(blk, b.unwrap().page());
        n += 1;
    }
    assert_eq!(n, 250);
}

/// A stream beside pins that leave it fewer buffers than its readahead wants (29 of 32
/// pinned by its own caller) reads the relation with the buffers there are, at the pace of
/// its reads. Guards against each refused readahead waiting for a buffer to come free (the
/// pool's patience with a pool all pinned, 200 ms, paid per block: a 200-block stream took
/// over 40 s).
fn a_stream_beside_pins_it_cannot_get_does_not_wait_for_them(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 32;
        s.max_issuers = 2;
    });
    within(30, "a stream beside held pins", move || {
        let rel = open_rel(&aio, &path, false);
        let me = aio.register_issuer("pinned").unwrap();
        let held: Vec<_> = (221..250u32)
            .map(|b| me.read_block(&rel.segments()[2], b - 2 * SEG).unwrap())
            .collect();
        let mut want = 0;
        for b in ReadStream::new(&me, &rel, 0..200, ReadStreamOptions::default()) {
            let b = b.unwrap_or_else(|e| panic!("block {want}: {e}"));
            assert_eq!(b.block(), want);
            page_ok(b.block(), b.page());
            want += 1;
        }
        assert_eq!(want, 200);
        drop(held);
    });
}

/// A stream over a pool its caller holds all pinned fails each block with `no unpinned
/// buffers available`, in its place, and waits for a buffer once, not once per block.
/// Guards against 200 ms per block (a caller-side attack: 20 blocks in 4 s; here 1,000
/// blocks, which took over 200 s, within a 60 s watchdog).
fn a_stream_over_a_pool_all_pinned_fails_its_blocks_without_waiting_for_each(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 16;
        s.max_issuers = 8;
    });
    within(60, "a stream over a pool all pinned", move || {
        let rel = open_rel(&aio, &path, false);
        let me = aio.register_issuer("full").unwrap();
        let held: Vec<_> = (0..16u32)
            .map(|b| me.read_block(&rel.segments()[2], b).unwrap())
            .collect();
        let blocks: Vec<u32> = (0..4).flat_map(|_| 0..200u32).chain(0..200).collect();
        let mut n = 0;
        for r in ReadStream::new(&me, &rel, blocks, ReadStreamOptions::default()) {
            let e = r.err().expect("no buffer to read into");
            assert!(
                e.to_string().contains("no unpinned buffers available"),
                "{e}"
            );
            n += 1;
        }
        assert_eq!(n, 1000);
        drop(held);
    });
}

crate::for_every_method!(
    a_stream_over_a_pool_all_pinned_fails_its_blocks_without_waiting_for_each,
    a_stream_beside_pins_it_cannot_get_does_not_wait_for_them,
    a_stream_asked_for_too_many_reads_is_capped_not_aborted,
    streams_consumed_in_turn_on_one_issuer_each_get_every_block,
    every_block_past_the_end_is_an_error_in_its_place,
    every_block_comes_back_in_order_with_its_bytes,
    combined_reads_stop_at_segment_ends,
    blocks_named_in_any_order_come_back_in_that_order,
    reset_drops_the_look_ahead_and_goes_on_in_order,
    streams_sharing_blocks_in_a_small_pool_each_get_every_block,
    a_failed_read_fails_only_its_blocks_and_the_stream_goes_on,
);
