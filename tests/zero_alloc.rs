//! No allocation after start on the submit/complete path: a counting global allocator sees
//! zero heap allocations per I/O in steady state, on every method (reads, writes, fsync, in
//! and out of batch mode, waited and detached; and through the buffer pool: a read stream with
//! combining and eviction, single-block hits and misses). Guards against: hidden Vec/Box/String work in
//! acquire, start, submit, completion, wait or reclaim — in the issuer or in worker threads.
//!
//! It runs without libtest's harness (`harness = false` in `Cargo.toml`): the counter counts
//! every thread of the process, and the harness's own thread allocates while a test runs
//! (the notice it prints when a test passes 60 s, which a loaded machine can reach here).
//! An allocation in a counted window is reported with the thread and size of the first one.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{
    Aio, IoBuf, IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation, Settings,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// The first allocation counted since [`counting`]: its thread (`gettid`, 0 for none yet)
/// and its size.
static FIRST_TID: AtomicI32 = AtomicI32::new(0);
static FIRST_SIZE: AtomicU64 = AtomicU64::new(0);

fn count(l: Layout) {
    if ALLOCS.fetch_add(1, Ordering::Relaxed) == 0 {
        // SAFETY: gettid has no arguments and cannot fail.
        FIRST_TID.store(unsafe { libc::gettid() }, Ordering::Relaxed);
        FIRST_SIZE.store(l.size() as u64, Ordering::Relaxed);
    }
}

/// Starts a counted window.
fn counting() {
    ALLOCS.store(0, Ordering::SeqCst);
}

/// The allocations since [`counting`], and where the first came from (a thread's name
/// read from `/proc` after the window, so reading it is not counted).
fn counted() -> (u64, String) {
    let n = ALLOCS.load(Ordering::SeqCst);
    let tid = FIRST_TID.load(Ordering::SeqCst);
    let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "a thread gone since".into());
    let first = format!(
        "the first on thread {tid} ({name}), {} bytes",
        FIRST_SIZE.load(Ordering::SeqCst)
    );
    (n, first)
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(Layout::from_size_align(n, l.align()).unwrap_or(l));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn steady_state(m: IoMethodKind) {
    steady_state_with(m, |s| s.io_workers = 3);
}

/// The self-sizing worker pool: once it has grown to its maximum, I/O allocates nothing (a
/// worker start allocates; it happens only while the pool grows).
fn steady_state_once_the_pool_has_grown() {
    steady_state_with(IoMethodKind::Worker, |s| {
        s.io_workers = 0;
        s.io_min_workers = 1;
        s.io_max_workers = 4;
        s.io_worker_launch_interval = 0;
    });
}

fn steady_state_with(m: IoMethodKind, tweak: impl FnOnce(&mut Settings)) {
    if m == IoMethodKind::IoUring && !skips::io_uring_column("zero_alloc steady state") {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // A fixed pool by default: a self-sizing one allocates when it starts a worker thread
    // (at most once per io_worker_launch_interval while I/Os wait for a worker), which is not
    // per I/O; `steady_state_once_the_pool_has_grown` covers that case.
    let mut s = Settings {
        io_method: m,
        max_issuers: 4,
        ..Settings::default()
    };
    tweak(&mut s);
    let aio = Aio::start(s).unwrap();
    let me = aio.register_issuer("alloc").unwrap();
    let f = aio
        .open(dir.path().join("d"), &OpenOptions::read_write())
        .unwrap();
    let mut bufs: Vec<IoBuf> = (0..16).map(|_| IoBuf::new(4096)).collect();
    let mut ios = Vec::with_capacity(16);
    let burst = |bufs: &mut Vec<IoBuf>, ios: &mut Vec<_>, write: bool| {
        me.begin_batch().unwrap();
        for i in 0..16u64 {
            let h = me.acquire().unwrap();
            let b = bufs.pop().unwrap();
            ios.push(if write {
                h.write(&f, i * 4096, b)
            } else {
                h.read(&f, i * 4096, b)
            });
        }
        me.end_batch();
        while let Some(io) = ios.pop() {
            let c = me.wait(io);
            c.check().unwrap();
            bufs.push(c.into_buf());
        }
    };
    let round = |bufs: &mut Vec<IoBuf>, ios: &mut Vec<_>, write: bool| {
        burst(bufs, ios, write);
        me.wait(me.acquire().unwrap().fdatasync(&f))
            .check()
            .unwrap();
        // Detached I/O: the buffer comes back through no one; use a tiny stack-free op.
        drop(me.acquire().unwrap().fadvise_willneed(&f, 0, 4096));
        me.wait_any();
        me.reclaim_finished();
    };
    for _ in 0..20 {
        round(&mut bufs, &mut ios, true);
        round(&mut bufs, &mut ios, false);
    }
    if let Some(pool) = aio.worker_pool().filter(|p| p.min < p.max) {
        // Bursts of 16 find too few idle workers: the pool grows to its maximum. (Not `round`:
        // its single fsync finds a worker idle, and a sizing window with a satisfied wake does
        // not grow the pool. Writes, not reads: the file is cached, and cached reads run in
        // the issuer at submit, `io_worker_try_cached`.)
        let mut rounds = 0;
        while aio.worker_pool().unwrap().workers.len() < pool.max as usize {
            burst(&mut bufs, &mut ios, true);
            rounds += 1;
            assert!(rounds < 100_000, "the pool never grew to {}", pool.max);
        }
        // A new thread allocates as it starts (before it records its thread id): let the last
        // one settle, then let every worker have taken I/O.
        while aio
            .worker_pool()
            .unwrap()
            .workers
            .iter()
            .any(|w| w.tid == 0)
        {
            std::thread::yield_now();
        }
        for _ in 0..20 {
            round(&mut bufs, &mut ios, true);
            round(&mut bufs, &mut ios, false);
        }
    }
    counting();
    for _ in 0..200 {
        round(&mut bufs, &mut ios, true);
        round(&mut bufs, &mut ios, false);
    }
    let (allocs, first) = counted();
    eprintln!(
        "zero_alloc on {m}: {allocs} allocations over {} I/Os",
        200 * 2 * 18
    );
    assert_eq!(allocs, 0, "{m}: heap allocations on the I/O path; {first}");
}

/// The buffer-pool path: a read stream cycling over 512 blocks through a 256-buffer pool
/// (every block a miss, combined reads, eviction), and single-block reads (hits and misses).
fn buffer_pool_steady_state(m: IoMethodKind, dir: &tempfile::TempDir) {
    let s = Settings {
        io_method: m,
        max_issuers: 4,
        io_workers: 3,
        buffer_pool_size: 256,
        ..Settings::default()
    };
    let aio = Aio::start(s).unwrap();
    let me = aio.register_issuer("pool").unwrap();
    let path = dir.path().join("rel");
    std::fs::write(&path, vec![0u8; 512 * 8192]).unwrap();
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    let file = rel.segments()[0].clone();
    let mut stream = ReadStream::new(&me, &rel, (0..512u32).cycle(), ReadStreamOptions::default());
    // Blocks never adjacent (every third, wrapping): each one a candidate for readahead
    // advice, which this stream gives (throttled, the default) on the buffered file.
    let mut advised = ReadStream::new(
        &me,
        &rel,
        (0..u32::MAX).map(|i| (i * 3) % 512),
        ReadStreamOptions::default(),
    );
    let mut step = |n: u32| {
        for i in 0..n {
            drop(stream.next_buffer().unwrap().unwrap());
            drop(advised.next_buffer().unwrap().unwrap());
            drop(me.read_block(&file, (i * 7) % 512).unwrap()); // hit or miss
            drop(me.read_block(&file, (i * 7) % 512).unwrap()); // hit
        }
    };
    step(2048);
    counting();
    step(10240);
    let (allocs, first) = counted();
    let advice = aio.advice_totals();
    eprintln!(
        "zero_alloc on {m}: {allocs} allocations over 2 x 10240 stream blocks ({} advised) and 20480 block reads",
        advice.issued
    );
    assert!(advice.issued > 0, "{m}: the scattered stream gave advice");
    assert_eq!(
        allocs, 0,
        "{m}: heap allocations on the buffer-pool path; {first}"
    );
}

/// The one test's name, as libtest would list it.
const NAME: &str = "zero_allocations_per_io_every_method";

/// One test, run by `main` on the only thread that is not the library's. It answers the
/// arguments `cargo test` passes on as libtest would: `--list`, a name filter, `--ignored`
/// (it is not ignored); the other flags change nothing here.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{NAME}: test");
        return;
    }
    // Filters, and the values of the flags that take one (`--skip` names a filter too).
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skips.extend(it.next()),
            "--test-threads" | "--color" | "--format" | "--logfile" | "--shuffle-seed" | "-Z" => {
                it.next();
            }
            f if !f.starts_with('-') => filters.push(f),
            _ => {}
        }
    }
    let filtered_out = args.iter().any(|a| a == "--ignored")
        || (!filters.is_empty() && !filters.iter().any(|f| NAME.contains(f)))
        || skips.iter().any(|f| NAME.contains(f.as_str()));
    if filtered_out {
        println!("test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out");
        return;
    }
    zero_allocations_per_io_every_method();
    // The line `.ci/run` sums, as libtest would print it.
    println!("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}

fn zero_allocations_per_io_every_method() {
    for m in IoMethodKind::ALL {
        steady_state(m);
        if m != IoMethodKind::IoUring || skips::io_uring_column("zero_alloc buffer pool") {
            let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            buffer_pool_steady_state(m, &dir);
        }
    }
    steady_state_once_the_pool_has_grown();
}
