//! Readahead advice from read streams: 16 issuers streaming random blocks of files on two
//! devices (the test directory and `/dev/shm`, when that is another device) never have more
//! blocks advised and unread than `io_advice_budget` on either device, and give it all back;
//! a sequential stream advises nothing, runs of three blocks are advised and runs of six are
//! not; an O_DIRECT stream advises nothing; a stream dropped mid-scan and a stream whose reads fail give their budget back;
//! a block already in the buffer pool is not advised; `Advice::Off` advises nothing and
//! `Advice::Unthrottled` ignores the budget.
//! Guards against: more blocks advised than `io_advice_budget` on a device, one budget shared by
//! two devices, or budget leaked by a stream dropped mid-scan or whose reads failed; advice wasted
//! on a sequential run, on blocks already in the buffer pool or on an O_DIRECT file; and
//! `Advice::Off` still advising, or `Advice::Unthrottled` taking budget.

use crate::support::*;
use dbaio::{
    Advice, Aio, FaultAction, FaultRule, IoMethodKind, Op, OpenOptions, ReadStream,
    ReadStreamOptions, Relation,
};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

const BLOCKS: u32 = 256;
const BUDGET: i64 = 24;

/// Blocks 0, 3, 6, … (never consecutive), `n` of them, wrapping.
fn scattered(n: u32) -> impl Iterator<Item = u32> {
    (0..n).map(|i| (i * 3) % BLOCKS)
}

fn relation_file(dir: &std::path::Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, vec![7u8; BLOCKS as usize * 8192]).unwrap();
    p
}

fn in_use(aio: &Aio) -> u32 {
    aio.advice_budget().iter().map(|b| b.in_use).sum()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start_with(m, |s| {
        s.io_advice_budget = BUDGET;
        s.effective_io_concurrency = 64;
        s.max_issuers = 20;
        s.buffer_pool_size = 4096;
    });
    // A second device when there is one (tmpfs); else both halves share the first.
    let here = std::fs::metadata(d.path()).unwrap().dev();
    let shm = tempfile::tempdir_in("/dev/shm")
        .ok()
        .filter(|t| std::fs::metadata(t.path()).unwrap().dev() != here);
    // The simulated disk is one device, wherever its files' paths point.
    let devices = if shm.is_some() && m != IoMethodKind::Sim {
        2
    } else {
        1
    };
    if shm.is_none() {
        eprintln!("advice: /dev/shm is missing or on the same device: one device only");
    }
    let dirs: Vec<&std::path::Path> = std::iter::once(d.path())
        .chain(shm.as_ref().map(|t| t.path()))
        .collect();
    let paths: Vec<PathBuf> = (0..16)
        .map(|i| relation_file(dirs[i % dirs.len()], &format!("r{i}")))
        .collect();

    // 16 issuers at once, each streaming scattered blocks of its own file.
    std::thread::scope(|s| {
        for (i, p) in paths.iter().enumerate() {
            let aio = &aio;
            s.spawn(move || {
                let me = aio.register_issuer(&format!("advise-{i}")).unwrap();
                let rel = Relation::open(aio, p, &OpenOptions::read()).unwrap();
                for buf in ReadStream::new(&me, &rel, scattered(600), ReadStreamOptions::default())
                {
                    assert_eq!(buf.unwrap().page()[0], 7);
                    for b in aio.advice_budget() {
                        assert!(b.in_use <= b.limit, "budget exceeded: {b:?}");
                    }
                }
            });
        }
    });
    let budgets = aio.advice_budget();
    assert_eq!(budgets.len(), devices, "{budgets:?}");
    for b in &budgets {
        assert_eq!(b.limit, BUDGET as u32);
        assert!(b.peak <= b.limit, "peak over the budget: {b:?}");
        assert!(b.peak > 0, "advice was given on every device: {b:?}");
        assert_eq!(b.in_use, 0, "all given back: {b:?}");
    }
    let t = aio.advice_totals();
    assert!(t.issued > 0 && t.refused_by_budget > 0, "{t:?}");
    assert_eq!(t.suppressed_sequential, 0, "{t:?}");

    let me = aio.register_issuer("advice-checks").unwrap();
    let rel = Relation::open(&aio, &paths[0], &OpenOptions::read()).unwrap();
    let counted = |aio: &Aio| {
        aio.stats()
            .into_iter()
            .find(|r| r.issuer == "advice-checks")
            .unwrap()
            .advice
    };

    // Sequential: no advice at all, not even for the first blocks of the run.
    for buf in ReadStream::new(&me, &rel, 0..BLOCKS, ReadStreamOptions::default()) {
        buf.unwrap();
    }
    let a = counted(&aio);
    assert_eq!(a.issued, 0, "{a:?}");
    // (Blocks the stream's own look-ahead takes at once are never candidates.)
    assert!(a.suppressed_sequential > u64::from(BLOCKS) / 4, "{a:?}");

    // Blocks in the buffer pool already are never advised.
    aio.reset_stats();
    for buf in ReadStream::new(&me, &rel, scattered(300), ReadStreamOptions::default()) {
        buf.unwrap();
    }
    assert_eq!(counted(&aio).issued, 0, "{:?}", counted(&aio));

    // The rest on files not read yet (a block in the pool is not advised).
    let fresh = |name: &str| {
        Relation::open(&aio, relation_file(d.path(), name), &OpenOptions::read()).unwrap()
    };

    // Runs of three adjacent blocks among gaps are too short for the kernel's readahead:
    // advised, each once it ends. Runs of six are the kernel's: none of them is.
    // (Each on a fresh file, the first `run` blocks of every 8, counted alone.)
    let runs_of = |name: &str, run: u32| {
        aio.reset_stats();
        let rel = fresh(name);
        let blocks = (0..BLOCKS).filter(move |b| b % 8 < run);
        for buf in ReadStream::new(&me, &rel, blocks, ReadStreamOptions::default()) {
            buf.unwrap();
        }
        counted(&aio)
    };
    let a = runs_of("short-runs", 3);
    assert!(a.issued > 0, "{a:?}");
    assert_eq!(a.suppressed_sequential, 0, "{a:?}");
    let a = runs_of("long-runs", 6);
    assert_eq!(a.issued, 0, "{a:?}");
    assert!(a.suppressed_sequential > 0, "{a:?}");

    // Dropped mid-scan: the budget comes back.
    let rel = fresh("dropped");
    let mut stream = ReadStream::new(&me, &rel, scattered(600), ReadStreamOptions::default());
    // (Advice needs a free handle, and under load a worker may still hold them all: read on
    // until some is seen in use.)
    let mut seen = false;
    for _ in 0..500 {
        stream.next_buffer().unwrap().unwrap();
        if in_use(&aio) > 0 {
            seen = true;
            break;
        }
    }
    assert!(seen, "blocks advised ahead: {:?}", counted(&aio));
    drop(stream);
    assert_eq!(in_use(&aio), 0, "a dropped stream gives its budget back");

    // Reads that fail: the stream reports them, and the budget comes back.
    let rel = fresh("failing");
    aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EIO)).op(Op::Readv));
    let quiet = capture_logs(|| {
        let failed = ReadStream::new(&me, &rel, scattered(200), ReadStreamOptions::default())
            .filter(|b| b.is_err())
            .count();
        assert!(failed > 0);
    });
    drop(quiet);
    aio.clear_faults();
    assert_eq!(in_use(&aio), 0, "failed reads give their budget back");

    // Off: nothing; unthrottled: no budget taken.
    aio.reset_stats();
    let opts = |advice| ReadStreamOptions {
        advice,
        ..ReadStreamOptions::default()
    };
    let rel = fresh("off");
    for buf in ReadStream::new(&me, &rel, scattered(300), opts(Advice::Off)) {
        buf.unwrap();
    }
    assert_eq!(counted(&aio), dbaio::AdviceRow::default());
    let rel = fresh("unthrottled");
    let mut stream = ReadStream::new(&me, &rel, scattered(300), opts(Advice::Unthrottled));
    for _ in 0..10 {
        stream.next_buffer().unwrap().unwrap();
    }
    assert_eq!(in_use(&aio), 0, "unthrottled advice takes no budget");
    let a = counted(&aio);
    assert!(a.issued + a.refused_by_budget > BUDGET as u64, "{a:?}");
    drop(stream);

    // O_DIRECT: no advice at all.
    aio.reset_stats();
    let direct = Relation::open(
        &aio,
        relation_file(d.path(), "direct"),
        &OpenOptions::read().direct(true),
    )
    .unwrap();
    for buf in ReadStream::new(&me, &direct, scattered(300), ReadStreamOptions::default()) {
        buf.unwrap();
    }
    assert_eq!(
        counted(&aio),
        dbaio::AdviceRow::default(),
        "no advice under O_DIRECT"
    );
}

crate::for_every_method!(scenario);
