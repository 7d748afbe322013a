//! Read streams on every method, how far they look ahead and how they read: a cold
//! sequential stream ramps its distance up and combines reads to `io_combine_limit` blocks; a
//! warm stream is all hits at distance 1; the distance decays on hits after a miss run; a
//! hit/miss/hit/miss pattern is not trapped at distance 1-2 (PostgreSQL 18's weakness); a
//! sequential hint starts with a full-size read; `effective_io_concurrency = 0` reads one at
//! a time, still combined. Guards against a stream that reads block by block, never looks
//! ahead, or keeps reading ahead (and pinning) when everything is cached. (What a stream
//! hands back is `read_stream.rs`.)

use crate::read_stream::{SEG, open_rel, page_ok, three_segments};
use crate::support::*;
use dbaio::{IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation};

/// A cold sequential stream ramps its distance up on misses (to 63, its pin budget: the
/// issuer's share of the pool, 1024 / 16, less the buffer its consumer holds) and combines its
/// reads to io_combine_limit (16 blocks): most of its 250 blocks come in 16-block reads.
/// Guards against a stream that never grows its distance or never combines.
fn a_cold_stream_ramps_up_and_combines_to_io_combine_limit(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("stream").unwrap();
    let rel = open_rel(&aio, &path, true);
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        page_ok(b.block(), b.page());
    }
    let st = s.stats();
    assert_eq!(
        (st.blocks, st.blocks_read, st.hits),
        (250, 250, 0),
        "{st:?}"
    );
    assert_eq!(st.read_sizes.len(), 17, "io_combine_limit is 16 blocks");
    assert!(
        st.max_distance >= 63,
        "the distance ramps up on misses: {st:?}"
    );
    assert!(
        st.read_sizes[16] >= 12,
        "most reads are 16 blocks: {:?}",
        st.read_sizes
    );
}

/// A stream over blocks that are all in the pool does no I/O and stays at distance 1.
/// Guards against a stream that looks ahead (pinning buffers it does not need yet) when
/// nothing is to be read.
fn a_warm_stream_is_all_hits_at_distance_one(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("stream").unwrap();
    let rel = open_rel(&aio, &path, true);
    for blk in 0..250 {
        let (file, b) = rel.locate(blk).unwrap();
        drop(me.read_block(file, b).unwrap());
    }
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
    let mut n = 0;
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        page_ok(b.block(), b.page());
        n += 1;
    }
    assert_eq!(n, 250);
    assert_eq!((s.stats().hits, s.stats().ios), (250, 0), "{:?}", s.stats());
    assert_eq!((s.distance(), s.stats().max_distance), (1, 1));
}

/// After a run of misses (48 cold blocks) the distance has ramped up; the 202 cached blocks
/// that follow bring it down again. Guards against a distance that only ever grows.
fn the_distance_decays_on_hits_after_a_miss_run(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("decay").unwrap();
    let rel = Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read(), SEG).unwrap();
    for blk in 48..250 {
        let (file, b) = rel.locate(blk).unwrap();
        drop(me.read_block(file, b).unwrap());
    }
    let mut s = ReadStream::new(&me, &rel, 0..250, ReadStreamOptions::default());
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
}

/// Even blocks cached, odd blocks cold: every read is one block (split at each cached
/// block), yet the distance still ramps up. Guards against PostgreSQL 18's weakness, a
/// hit/miss alternation trapping the stream at distance 1-2 (one I/O at a time).
fn alternating_hits_and_misses_still_ramp_up(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("alternate").unwrap();
    let rel =
        Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read(), SEG * 3).unwrap();
    for blk in (0..100).step_by(2) {
        drop(me.read_block(&rel.segments()[0], blk).unwrap());
    }
    let mut s = ReadStream::new(&me, &rel, 0..100, ReadStreamOptions::default());
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        page_ok(b.block(), b.page());
    }
    let st = s.stats();
    assert_eq!((st.hits, st.blocks_read), (50, 50), "{st:?}");
    assert_eq!(
        st.read_sizes[1], 50,
        "reads split at every valid block: {st:?}"
    );
    assert!(st.max_distance >= 8, "alternation still ramps up: {st:?}");
}

/// A stream told it is sequential starts at distance 16 and its first read is a full
/// 16-block one. Guards against a hint that is ignored (a ramp from 1 anyway).
fn a_sequential_hint_starts_with_a_full_size_read(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| s.buffer_pool_size = 1024);
    let me = aio.register_issuer("sequential").unwrap();
    let rel = Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read(), SEG).unwrap();
    let hint = ReadStreamOptions {
        sequential: true,
        ..ReadStreamOptions::default()
    };
    let mut s = ReadStream::new(&me, &rel, 0..64, hint);
    assert_eq!(s.distance(), 16);
    let first = s.next_buffer().unwrap().unwrap();
    assert_eq!(first.block(), 0);
    page_ok(first.block(), first.page());
    assert_eq!(
        s.stats().read_sizes[16],
        1,
        "the first read is full: {:?}",
        s.stats()
    );
}

/// With `effective_io_concurrency = 0` a stream has one read in flight at a time, and its
/// reads are still combined to 16 blocks. Guards against a zero that means "unlimited", or
/// that turns combining off.
fn effective_io_concurrency_zero_reads_one_at_a_time_still_combined(m: IoMethodKind) {
    let (_d, path) = three_segments();
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 1024;
        s.effective_io_concurrency = 0;
    });
    let me = aio.register_issuer("one-at-a-time").unwrap();
    let rel = Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read(), SEG).unwrap();
    let mut s = ReadStream::new(&me, &rel, 0..100, ReadStreamOptions::default());
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        page_ok(b.block(), b.page());
    }
    assert_eq!(s.max_ios(), 1);
    assert_eq!(s.stats().max_ios_in_flight, 1, "{:?}", s.stats());
    assert!(s.stats().read_sizes[16] >= 4, "{:?}", s.stats());
}

crate::for_every_method!(
    a_cold_stream_ramps_up_and_combines_to_io_combine_limit,
    a_warm_stream_is_all_hits_at_distance_one,
    the_distance_decays_on_hits_after_a_miss_run,
    alternating_hits_and_misses_still_ramp_up,
    a_sequential_hint_starts_with_a_full_size_read,
    effective_io_concurrency_zero_reads_one_at_a_time_still_combined,
);
