//! Edges of the buffer manager a caller can push it to (found by a caller-side attack,
//! 2026-12-07), on every method: one block pinned as often as a buffer's pin count holds is
//! refused with an error, and the pool stays sound; a failed read in a relation's later
//! segment names the relation's block numbers, as md.c and the page verification messages
//! do; a ring scan of a small pool leaves the pool's other pages cached. Guards against: a
//! panic inside the library (or a pin count run into the usage bits) when a caller pins one
//! block too often; segment-local block numbers in a buffer read's error; a strategy ring as
//! big as a small pool, or one refusing its own buffers because a stale hint's probe counted
//! them as used; and more read streams on one issuer than it has handles, read in turn (a
//! merge join, a nested loop), failing blocks they could read: `all 2 I/O handles of this
//! issuer hold results not yet taken`.

use crate::support::*;
use dbaio::{
    AioError, FaultAction, FaultRule, IoMethodKind, NoWait, Op, OpenOptions, ReadStream,
    ReadStreamOptions, Relation,
};

/// Pins a buffer's shared count holds (18 bits); an issuer's 8 hit pins come on top.
const PIN_LIMIT: u32 = (1 << 18) - 1;

/// Asserts `e` is the refusal of one more pin of block `block` of the file at `path`.
fn assert_pinned_too_often(e: &AioError, path: &std::path::Path, block: u32) {
    match e {
        AioError::PinnedTooOften {
            block: b, limit, ..
        } => assert_eq!((*b, *limit), (block, PIN_LIMIT), "{e}"),
        _ => panic!("expected PinnedTooOften, got {e}"),
    }
    let text = e.to_string();
    let named = format!("could not pin block {block} of file \"{}\"", path.display());
    assert!(text.starts_with(&named), "{text}");
    assert!(
        text.contains(&format!("pinned {PIN_LIMIT} times")),
        "{text}"
    );
}

/// One block pinned again and again by `read_block` until a pin is refused: the refusal is
/// an error naming the block and the limit (from `read_block`, `read_block_nowait` and a read
/// stream alike), not a panic; other blocks read meanwhile, and once the pins are dropped the
/// buffer is free again (a read with every other buffer pinned takes it).
fn a_block_pinned_too_often_is_refused_with_an_error(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "16400", 64 * 8192);
    let aio = start_with(m, |s| s.buffer_pool_size = 32);
    let me = aio.register_issuer("pins").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let mut held = Vec::with_capacity(PIN_LIMIT as usize + 16);
    let refused = loop {
        match me.read_block(&f, 7) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
        assert!(held.len() <= 2 * PIN_LIMIT as usize, "no limit to pins");
    };
    assert_pinned_too_often(&refused, &path, 7);
    assert!(
        held.len() >= PIN_LIMIT as usize,
        "refused after {}",
        held.len()
    );
    assert_pattern(held[held.len() - 1].page(), 7 * 8192);

    match me.read_block_nowait(&f, 7) {
        Err(e) => assert_pinned_too_often(&e, &path, 7),
        Ok(NoWait::Ready(_)) => panic!("read_block_nowait pinned past the limit"),
        Ok(NoWait::BeingRead(_)) => panic!("the block is valid, not being read"),
    }
    let rel = Relation::from_file(f.clone()).unwrap();
    let mut s = ReadStream::new(&me, &rel, [7, 8], ReadStreamOptions::default());
    let e = s
        .next_buffer()
        .unwrap()
        .err()
        .expect("a stream pin past the limit");
    assert_eq!(e.block, 7);
    assert_pinned_too_often(&e.error, &path, 7);
    let b8 = s.next_buffer().unwrap().expect("the stream goes on");
    assert_eq!(b8.block(), 8);
    assert_pattern(b8.page(), 8 * 8192);
    drop(b8);
    drop(s);

    drop(held);
    // Every buffer but block 7's pinned: a new block needs that one, so it must be unpinned.
    let others: Vec<_> = (32..63u32).map(|b| me.read_block(&f, b).unwrap()).collect();
    assert_pattern(me.read_block(&f, 0).unwrap().page(), 0);
    drop(others);
    assert_pattern(me.read_block(&f, 7).unwrap().page(), 7 * 8192);
    let mapped = aio.check_buffer_mapping().unwrap();
    assert!(mapped <= 32, "{mapped} buffers mapped in a pool of 32");
}

/// Blocks per segment of the relation below.
const SEG: u32 = 16;

/// Makes the next read of `file` from its block 4 on fail with EIO.
fn fail_once_at_block_4(aio: &dbaio::Aio, file: &dbaio::File) {
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(file)
            .offsets(4 * 8192..4 * 8192 + 1)
            .times(1),
    );
}

/// A read of relation block 20 (block 4 of segment `.1`) that fails with EIO, and of block 24
/// (torn: the segment ends 100 bytes into it): each error names the relation-wide block and
/// the segment's file, as md.c's `could not read blocks 20..20 in file "…/16421.1"`, through
/// `read_block` on the segment and through a read stream over the relation.
fn a_failed_read_in_a_later_segment_names_relation_blocks(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "16421", u64::from(SEG) * 8192);
    let seg1 = data_file(&d, "16421.1", 8 * 8192 + 100);
    let aio = start(m);
    let me = aio.register_issuer("segments").unwrap();
    let rel = Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read(), SEG).unwrap();
    assert_eq!((rel.nblocks(), rel.segments().len()), (24, 2));
    let file1 = &rel.segments()[1];
    let eio = |block: u32| {
        format!(
            "could not read blocks {block}..{block} in file \"{}\": Input/output error (errno 5)",
            seg1.display()
        )
    };
    let short = |block: u32| {
        format!(
            "could not read blocks {block}..{block} in file \"{}\": read only 0 of 8192 bytes",
            seg1.display()
        )
    };

    fail_once_at_block_4(&aio, file1);
    let e = me.read_block(file1, 4).err().expect("the injected EIO");
    assert_eq!(e.to_string(), eio(20));
    let AioError::Io(io) = &e else {
        panic!("expected an I/O error, got {e}")
    };
    assert_eq!(
        io.blocks,
        Some((20, 1)),
        "the error's blocks are the relation's"
    );
    let e = me.read_block(file1, 8).err().expect("a torn block");
    assert_eq!(e.to_string(), short(24));

    // A fresh subsystem: the blocks read above would be hits now.
    drop(rel);
    let aio = start(m);
    let me = aio.register_issuer("segments").unwrap();
    let rel = Relation::open_with_segment_blocks(&aio, &path, &OpenOptions::read(), SEG).unwrap();
    let file1 = &rel.segments()[1];
    fail_once_at_block_4(&aio, file1);
    let mut s = ReadStream::new(&me, &rel, [20, 24], ReadStreamOptions::default());
    let e = s.next_buffer().unwrap().err().expect("the injected EIO");
    assert_eq!((e.block, e.error.to_string()), (20, eio(20)));
    let e = s.next_buffer().unwrap().err().expect("a torn block");
    assert_eq!((e.block, e.error.to_string()), (24, short(24)));
    assert!(s.next_buffer().is_none());
}

/// Hot pages (16, or half the pool of 16), each read 5 times, then a ring scan of four times
/// the pool, in pools of 16, 32, 64 and 128 buffers with one issuer (whose streams may pin the
/// whole pool): every hot page is still cached afterwards, and from 32 buffers on the ring
/// scan still reads more than one block at a time.
fn a_ring_scan_of_a_small_pool_leaves_the_hot_pages_cached(m: IoMethodKind) {
    let d = dir();
    let hot_path = data_file(&d, "hot", 16 * 8192);
    let big_path = data_file(&d, "big", 4 * 128 * 8192);
    for pool in [16u32, 32, 64, 128] {
        let hot_pages = (pool / 2).min(16);
        let aio = start_with(m, |s| {
            s.buffer_pool_size = u64::from(pool);
            s.max_issuers = 1;
        });
        let me = aio.register_issuer("scan").unwrap();
        let hot = Relation::open(&aio, &hot_path, &OpenOptions::read()).unwrap();
        let big = Relation::open(&aio, &big_path, &OpenOptions::read()).unwrap();
        for _ in 0..5 {
            for b in 0..hot_pages {
                drop(me.read_block(&hot.segments()[0], b).unwrap());
            }
        }
        let opts = ReadStreamOptions {
            ring: true,
            sequential: true,
            ..ReadStreamOptions::default()
        };
        let mut scan = ReadStream::new(&me, &big, 0..4 * pool, opts);
        let mut next = 0;
        while let Some(b) = scan.next_buffer() {
            let b = b.unwrap();
            assert_eq!(b.block(), next);
            assert_pattern(b.page(), u64::from(next) * 8192);
            next += 1;
        }
        assert_eq!(next, 4 * pool);
        let combined: u64 = scan.stats().read_sizes[2..].iter().sum();
        assert!(
            combined > 0 || pool < 32,
            "pool {pool}: the ring scan read one block at a time: {:?}",
            scan.stats()
        );
        drop(scan);
        let mut again = ReadStream::new(&me, &hot, 0..hot_pages, ReadStreamOptions::default());
        for b in again.by_ref() {
            let b = b.unwrap();
            assert_pattern(b.page(), u64::from(b.block()) * 8192);
        }
        let read = again.stats().blocks_read;
        assert_eq!(
            read, 0,
            "pool {pool}: the ring scan evicted hot pages ({read} of {hot_pages} read again)"
        );
        aio.check_buffer_mapping().unwrap();
    }
}

/// More read streams on one issuer than it has handles, each over blocks in a random order,
/// read one buffer from each in turn: every block comes, right. Before, reads looked ahead
/// held every handle between the streams, and a stream whose consumer came with nothing
/// queued failed its block (`all 2 I/O handles of this issuer hold results not yet taken`):
/// 13 of 400 blocks with 2 handles and 4 streams, 104-147 with one handle.
fn more_streams_than_handles_read_in_turn_fail_no_block(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "16430", 128 * 8192);
    for (handles, streams) in [(1, 4), (2, 4), (4, 12)] {
        let aio = start_with(m, |s| {
            s.io_max_concurrency = handles;
            s.buffer_pool_size = 256;
        });
        let me = aio.register_issuer("joins").unwrap();
        let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
        let orders: Vec<Vec<u32>> = (0..streams as u64)
            .map(|k| {
                let mut x = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(k + 1);
                (0..100)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        ((x >> 33) % 128) as u32
                    })
                    .collect()
            })
            .collect();
        let mut open: Vec<_> = orders
            .iter()
            .map(|o| ReadStream::new(&me, &rel, o.clone(), ReadStreamOptions::default()))
            .collect();
        let mut failed = Vec::new();
        for step in 0..100 {
            for (k, (s, order)) in open.iter_mut().zip(&orders).enumerate() {
                match s.next_buffer() {
                    Some(Ok(b)) => {
                        assert_eq!(b.block(), order[step], "{m}: stream {k}, step {step}");
                        assert_pattern(b.page(), u64::from(b.block()) * 8192);
                    }
                    Some(Err(e)) => {
                        failed.push(format!("stream {k} block {}: {}", e.block, e.error))
                    }
                    None => panic!("{m}: stream {k} ended at step {step}"),
                }
            }
        }
        assert!(
            failed.is_empty(),
            "{m}: {handles} handles, {streams} streams: {} of {} blocks failed, first: {}",
            failed.len(),
            100 * streams,
            failed[0]
        );
    }
}

/// Issuers streaming at once in a pool of their smallest size, the token pool of an engine
/// with its own cache (`buffer_pool_size = 0`), each consumer holding the block it was
/// given while the next is asked for: every block comes, in both orders of taking, and in
/// two threads. Guards against a stream that pins the next block beside the one its
/// consumer holds, so that one issuer took two buffers of a token pool of one per issuer
/// and the other's stream, with nothing to hand out, failed with `no unpinned buffers
/// available` (found by a caller-side attack, 2026-12-07: 2 to 4 runs in 5 on every method).
fn issuers_streaming_at_once_in_the_token_pool_get_every_block(m: IoMethodKind) {
    const BLOCKS: u32 = 32;
    let d = dir();
    let path = data_file(&d, "rel", u64::from(BLOCKS) * 8192);
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 0;
        s.max_issuers = 2;
    });
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    {
        // One thread, two issuers, their consumers taking turns: the order that failed at once.
        let (a, b) = (
            aio.register_issuer("a").unwrap(),
            aio.register_issuer("b").unwrap(),
        );
        let mut sa = ReadStream::new(&a, &rel, 0..BLOCKS, ReadStreamOptions::default());
        let mut sb = ReadStream::new(&b, &rel, 0..BLOCKS, ReadStreamOptions::default());
        let (mut held_a, mut held_b) = (None, None);
        for blk in 0..BLOCKS {
            drop(held_a.take());
            let x = sa
                .next()
                .unwrap()
                .unwrap_or_else(|e| panic!("a, block {blk}: {e}"));
            assert_pattern(x.page(), u64::from(blk) * 8192);
            held_a = Some(x);
            drop(held_b.take());
            let y = sb
                .next()
                .unwrap()
                .unwrap_or_else(|e| panic!("b, block {blk}: {e}"));
            assert_pattern(y.page(), u64::from(blk) * 8192);
            held_b = Some(y);
        }
    }
    // Two threads, each streaming the relation over and over.
    std::thread::scope(|s| {
        for t in 0..2 {
            let (aio, rel) = (&aio, &rel);
            s.spawn(move || {
                let me = aio.register_issuer(&format!("t{t}")).unwrap();
                for _ in 0..20 {
                    let stream = ReadStream::new(&me, rel, 0..BLOCKS, ReadStreamOptions::default());
                    for (blk, r) in (0..BLOCKS).zip(stream) {
                        let buf = r.unwrap_or_else(|e| panic!("thread {t}, block {blk}: {e}"));
                        assert_pattern(buf.page(), u64::from(blk) * 8192);
                    }
                }
            });
        }
    });
    aio.check_buffer_mapping().unwrap();
}

crate::for_every_method!(
    issuers_streaming_at_once_in_the_token_pool_get_every_block,
    more_streams_than_handles_read_in_turn_fail_no_block,
    a_block_pinned_too_often_is_refused_with_an_error,
    a_failed_read_in_a_later_segment_names_relation_blocks,
    a_ring_scan_of_a_small_pool_leaves_the_hot_pages_cached,
);
