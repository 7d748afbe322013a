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

use dbaio::{Advice, IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation};
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
    let d = dir();
    let path = d.path().join("rel");
    let data: Vec<u8> = (0..BLOCKS as usize * BLOCK_SIZE)
        .map(|i| (i / BLOCK_SIZE) as u8)
        .collect();
    std::fs::write(&path, data).unwrap();
    let aio = start_with(IoMethodKind::Sync, |s| {
        s.io_advice_budget = budget;
        s.effective_io_concurrency = distance;
        s.buffer_pool_size = 512;
    });
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
