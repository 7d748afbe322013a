//! A property test of a read stream's readahead advice over random block sequences: runs of
//! consecutive blocks of every length, repeats, jumps back, a small advice budget and a short
//! distance, the stream read to its end or dropped part-way. Checked each time:
//!
//! - the stream yields exactly the caller's blocks, in order, each with its own page;
//! - every block of budget is given back (read, or dropped unread);
//! - no more blocks are advised than lie in runs of at most four (a longer run is the
//!   kernel's readahead's, and none of it is advised, not even its first blocks), and no more
//!   are counted sequential than lie in longer runs.
//!
//! Guards against: a held run (advice waits until a run is known to be short or long) that
//! loses, repeats or reorders blocks, leaks budget when the stream reads a held block before
//! its run is judged or is dropped with one held, or advises a sequential run's first blocks.

#[path = "conformance/support.rs"]
#[allow(dead_code)]
mod support;

use dbaio::{Advice, Aio, IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation};
use proptest::prelude::*;
use support::*;

const BLOCKS: u32 = 96;
const BLOCK_SIZE: usize = 8192;

/// The caller's blocks: runs of consecutive blocks, each from a start and a length.
fn blocks(runs: &[(u32, u32)]) -> Vec<u32> {
    runs.iter()
        .flat_map(|&(start, len)| start..(start + len).min(BLOCKS))
        .collect()
}

/// (blocks in maximal runs of at most 4, blocks in longer runs) of `seq`.
fn short_and_long(seq: &[u32]) -> (u64, u64) {
    let (mut short, mut long) = (0, 0);
    let mut i = 0;
    while i < seq.len() {
        let mut j = i + 1;
        while j < seq.len() && seq[j - 1].checked_add(1) == Some(seq[j]) {
            j += 1;
        }
        let n = (j - i) as u64;
        if n <= 4 {
            short += n;
        } else {
            long += n;
        }
        i = j;
    }
    (short, long)
}

fn check(
    runs: Vec<(u32, u32)>,
    stop_after: Option<usize>,
    distance: u32,
    budget: i64,
) -> dbaio::AdviceRow {
    let seq = blocks(&runs);
    let (_d, aio, path) = subsystem(BLOCKS, 512, budget, distance);
    let me = aio.register_issuer("advice-runs").unwrap();
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    let opts = ReadStreamOptions {
        advice: Advice::Throttled,
        ..ReadStreamOptions::default()
    };
    let mut stream = ReadStream::new(&me, &rel, seq.clone(), opts);
    let stop = stop_after.unwrap_or(usize::MAX).min(seq.len());
    for (k, &want) in seq.iter().enumerate().take(stop) {
        let buf = stream.next_buffer().expect("a block").expect("read");
        assert_eq!(buf.block(), want, "block {k} of {seq:?}");
        assert_eq!(buf.page()[0], want as u8, "the page of block {want}");
    }
    if stop == seq.len() {
        assert!(
            stream.next_buffer().is_none(),
            "nothing after the last block"
        );
    }
    drop(stream);
    for b in aio.advice_budget() {
        assert_eq!(b.in_use, 0, "budget given back: {b:?}");
        assert!(b.peak <= b.limit, "{b:?}");
    }
    let a = aio.advice_totals();
    let (short, long) = short_and_long(&seq);
    assert!(
        a.issued <= short,
        "advised {a:?}, {short} in short runs of {seq:?}"
    );
    assert!(
        a.suppressed_sequential <= long,
        "sequential {a:?}, {long} in long runs of {seq:?}"
    );
    a
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn advice_over_runs_of_every_length(
        runs in proptest::collection::vec((0..BLOCKS, 1u32..9), 0..40),
        stop_after in proptest::option::of(0usize..200),
        distance in 1u32..48,
        budget in 1i64..24,
    ) {
        check(runs, stop_after, distance, budget);
    }
}

/// A stream whose runs are all longer than four blocks advises nothing; one of runs of two
/// advises.
#[test]
fn long_runs_advise_nothing_and_short_runs_do() {
    let a = check((0..10).map(|i| (i * 9, 6)).collect(), None, 32, 16);
    assert_eq!(a.issued, 0, "{a:?}");
    assert!(a.suppressed_sequential > 0, "{a:?}");
    let a = check((0..10).map(|i| (i * 9, 2)).collect(), None, 32, 16);
    assert!(a.issued > 0, "{a:?}");
    assert_eq!(a.suppressed_sequential, 0, "{a:?}");
}

/// Blocks of the relations of the tests below: 16 times the pool, so that most blocks a
/// random stream names are not in it (a block in the pool is never advised).
const BIG: u32 = 4096;

/// A subsystem on `sync` with a pool of `pool` buffers, `budget` and `distance`, and a
/// relation of `blocks` blocks, each filled with its number's low byte.
fn subsystem(
    blocks: u32,
    pool: u64,
    budget: i64,
    distance: u32,
) -> (tempfile::TempDir, Aio, std::path::PathBuf) {
    let d = dir();
    let path = d.path().join("rel");
    let data: Vec<u8> = (0..blocks as usize * BLOCK_SIZE)
        .map(|i| (i / BLOCK_SIZE) as u8)
        .collect();
    std::fs::write(&path, data).unwrap();
    let aio = start_with(IoMethodKind::Sync, |s| {
        s.io_advice_budget = budget;
        s.effective_io_concurrency = distance;
        s.buffer_pool_size = pool;
    });
    (d, aio, path)
}

/// The subsystem of the tests below: a relation of `BIG` blocks, a pool of 256.
fn small(budget: i64, distance: u32) -> (tempfile::TempDir, Aio, std::path::PathBuf) {
    subsystem(BIG, 256, budget, distance)
}

/// Random blocks, forever.
fn random_blocks(salt: u32) -> impl Iterator<Item = u32> {
    (0..u32::MAX).map(move |i| (i.wrapping_mul(2_654_435_761) ^ salt) % BIG)
}

/// At distance 1 (`effective_io_concurrency = 1`) a stream still advises. Guards against the
/// newest block's run being judged only after that block was read, so that nothing was ever
/// advised at distance 1.
#[test]
fn a_stream_at_distance_one_advises() {
    let (_d, aio, path) = small(16, 1);
    let me = aio.register_issuer("one").unwrap();
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    let stream = ReadStream::new(&me, &rel, random_blocks(0).take(500), Default::default());
    assert_eq!(stream.advice_distance(), 1);
    for b in stream {
        b.unwrap();
    }
    let a = aio.advice_totals();
    assert!(a.issued > 0, "{a:?}");
}

/// A stream whose distance the budget pushed down to 1 (another stream held it) grows it
/// again once the budget has room. Guards against a distance stuck at 1 for good: no block
/// advised, so no probe, so no decision to grow.
#[test]
fn the_distance_grows_back_once_the_budget_has_room() {
    let (_d, aio, path) = small(2, 16);
    let (ia, ib) = (
        aio.register_issuer("a").unwrap(),
        aio.register_issuer("b").unwrap(),
    );
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    let mut a = ReadStream::new(&ia, &rel, random_blocks(0), Default::default());
    let mut b = ReadStream::new(&ib, &rel, random_blocks(12_345), Default::default());
    let mut steps = 0;
    while a.advice_distance() > 1 && steps < 200_000 {
        a.next_buffer().unwrap().unwrap();
        b.next_buffer().unwrap().unwrap();
        steps += 1;
    }
    assert_eq!(a.advice_distance(), 1, "pushed down to 1 in {steps} steps");
    drop(b);
    for _ in 0..50_000 {
        a.next_buffer().unwrap().unwrap();
    }
    assert!(a.advice_distance() > 1, "after {steps} shared steps");
    drop(a);
    assert_eq!(aio.advice_budget()[0].in_use, 0);
}

/// Blocks past the relation's end are not advised (the stream reports them), and a block
/// named again right after itself is advised once. Guards against budget spent on blocks
/// that do not exist, refusing the real ones, and one block charged once per repeat.
#[test]
fn no_advice_past_the_end_or_for_a_repeat() {
    let (_d, aio, path) = small(2, 16);
    let me = aio.register_issuer("edges").unwrap();
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    let past = [10_000, 20_000, 10, 30_000, 20, 40_000, 30];
    let got: Vec<bool> = ReadStream::new(&me, &rel, past, Default::default())
        .map(|b| b.is_ok())
        .collect();
    assert_eq!(got, [false, false, true, false, true, false, true]);
    let a = aio.advice_totals();
    assert_eq!(
        a.issued + a.refused_by_budget,
        3,
        "only the real blocks: {a:?}"
    );
    aio.reset_stats();
    for b in ReadStream::new(&me, &rel, [50u32; 20], Default::default()) {
        b.unwrap();
    }
    let a = aio.advice_totals();
    assert!(a.issued <= 1, "{a:?}");
    assert!(aio.advice_budget()[0].peak <= 2);
}
