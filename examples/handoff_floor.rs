//! The least a synchronous-worker hand-off can cost, as threads and as processes, with no
//! dbaio code in it: a yardstick for the `worker` method's two kinds on this machine.
//!
//! Three workloads, each run alternately with threads (one address space, private futexes)
//! and with processes (sharing one memfd mapping, shared futexes):
//!
//! - `direct`: N participants each `pread` random 4 KiB blocks in a loop (fio's psync);
//! - `handoff`: one issuer keeps DEPTH reads queued in a shared table, N workers take them,
//!   `pread` them and post the result; the issuer sleeps until DEPTH/8 results are posted,
//!   requeues them and wakes idle workers (PostgreSQL's worker method, minus everything
//!   else: no callbacks, no handles, no introspection);
//! - `help`: `handoff`, and the issuer, rather than sleep, first runs the newest
//!   still-queued read itself (what dbaio's waiters do).
//!
//!     handoff_floor FILE [WORKERS (8)] [DEPTH (32)] [SECONDS (3)] [ROUNDS (5)]
//!
//! Environment: `WORKLOAD=direct|handoff|help` runs one workload only; `KIND=threads` or
//! `KIND=processes` one kind only; `EXEC=1` starts the worker processes as dbaio does, by
//! executing this program again (fork, then exec), instead of forking only; with it,
//! `REOPEN=1` has each worker open the file again through `/proc` (as dbaio's workers do)
//! and `BIGMAP=1` has the reads land in a 64 GiB shared memfd mapping (as dbaio's arena).
//!
//! FILE is read with O_DIRECT (a block device such as the CPU-bound loop device, or a file).
//! Prints reads per second per round and the medians' ratio, processes against threads
//! (docs/benchmarks.md, "Worker processes against a bare hand-off"). Linux only.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

const BLOCK: usize = 4096;

/// `BIGMAP=1`: reads land in a 64 GiB shared memfd mapping (as dbaio's arena) instead of the
/// table; its base in this process.
static BIG: std::sync::atomic::AtomicPtr<u8> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
const BIG_LEN: usize = 64 << 30;

fn map_big(fd: i32) -> *mut u8 {
    // SAFETY: a shared mapping of a sparse memfd, kept for the life of the process.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            BIG_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap big");
    p.cast()
}

/// Where slot `i`'s read lands.
fn buf(t: &Table, i: usize) -> *mut u8 {
    let big = BIG.load(Ordering::Relaxed);
    if big.is_null() {
        t.buffers[i].0.as_ptr().cast_mut()
    } else {
        // SAFETY: within the 64 GiB mapping (slots spread 1 MiB apart).
        unsafe { big.add(i << 20) }
    }
}
const MAX_DEPTH: usize = 256;
const QUEUED: u32 = 1;
const RUNNING: u32 = 2;
const DONE: u32 = 3;

#[repr(C, align(64))]
struct Slot {
    state: AtomicU32,
    offset: AtomicU64,
}

/// The shared table: in one anonymous shared mapping, so that forked workers see it too.
#[repr(C)]
struct Table {
    stop: AtomicU32,
    /// Total reads done by `direct` participants.
    reads: AtomicU64,
    _pad0: [u64; 6],
    /// Workers sleep on this word; bumped to wake them.
    worker_seq: AtomicU32,
    idle: AtomicU32,
    _pad1: [u64; 7],
    /// Results posted (the issuer sleeps on its low half).
    posts: AtomicU32,
    /// The post count the sleeping issuer waits for (`u32::MAX`: none).
    wake_at: AtomicU32,
    _pad2: [u64; 7],
    slots: [Slot; MAX_DEPTH],
    buffers: [Buf; MAX_DEPTH],
}

/// A block-aligned buffer (O_DIRECT).
#[repr(C, align(4096))]
struct Buf([u8; BLOCK]);

/// FUTEX_WAIT (`op`) while `word` holds `val`, no timeout; or FUTEX_WAKE of up to `val`.
fn futex(word: &AtomicU32, op: libc::c_int, val: u32, private: bool) {
    let flag = if private { libc::FUTEX_PRIVATE_FLAG } else { 0 };
    // SAFETY: a futex call on a live, aligned 32-bit word; no timeout, no second word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | flag,
            val,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, private: bool) {
    futex(word, libc::FUTEX_WAIT, expected, private);
}

fn futex_wake(word: &AtomicU32, n: u32, private: bool) {
    futex(word, libc::FUTEX_WAKE, n, private);
}

/// A random block-aligned offset below `blocks` blocks (xorshift).
fn next_offset(state: &mut u64, blocks: u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % blocks) * BLOCK as u64
}

fn pread(fd: i32, buf: *mut u8, offset: u64) {
    // SAFETY: `buf` is a BLOCK-byte, block-aligned buffer in the shared table, used by one
    // reader at a time.
    let n = unsafe { libc::pread(fd, buf.cast(), BLOCK, offset as libc::off_t) };
    assert_eq!(
        n,
        BLOCK as isize,
        "pread: {}",
        std::io::Error::last_os_error()
    );
}

/// A `direct` participant: reads until told to stop.
fn direct(t: &Table, fd: i32, me: usize, blocks: u64) {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ ((me as u64 + 1) * 0x1000_0001);
    let buf = t.buffers[me].0.as_ptr().cast_mut();
    let mut n = 0u64;
    while t.stop.load(Ordering::Relaxed) == 0 {
        pread(fd, buf, next_offset(&mut rng, blocks));
        n += 1;
    }
    t.reads.fetch_add(n, Ordering::Relaxed);
}

/// A `handoff` worker: takes queued reads, runs them, posts them; sleeps when none is queued.
fn worker(t: &Table, fd: i32, me: usize, depth: usize, private: bool) {
    let mut cursor = me * depth / 8;
    loop {
        let taken = (0..depth).map(|k| (cursor + k) % depth).find(|&i| {
            let s = &t.slots[i].state;
            s.load(Ordering::Relaxed) == QUEUED
                && s.compare_exchange(QUEUED, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        });
        if let Some(i) = taken {
            cursor = i + 1;
            let offset = t.slots[i].offset.load(Ordering::Relaxed);
            pread(fd, buf(t, i), offset);
            t.slots[i].state.store(DONE, Ordering::Release);
            let posted = t.posts.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
            fence(Ordering::SeqCst);
            let at = t.wake_at.load(Ordering::SeqCst);
            if at != u32::MAX && posted.wrapping_sub(at) < u32::MAX / 2 {
                t.wake_at.store(u32::MAX, Ordering::SeqCst);
                futex_wake(&t.posts, 1, private);
            }
            continue;
        }
        if t.stop.load(Ordering::SeqCst) != 0 {
            return;
        }
        let seen = t.worker_seq.load(Ordering::SeqCst);
        t.idle.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let any = t.slots[..depth]
            .iter()
            .any(|s| s.state.load(Ordering::SeqCst) == QUEUED);
        if !any && t.stop.load(Ordering::SeqCst) == 0 {
            futex_wait(&t.worker_seq, seen, private);
        }
        t.idle.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `help`: the issuer, about to sleep, runs the newest still-queued read itself; true if
/// it found one.
fn run_one_queued(t: &Table, fd: i32, depth: usize) -> bool {
    let Some(i) = (0..depth).rev().find(|&i| {
        t.slots[i]
            .state
            .compare_exchange(QUEUED, RUNNING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        return false;
    };
    let offset = t.slots[i].offset.load(Ordering::Relaxed);
    pread(fd, buf(t, i), offset);
    t.slots[i].state.store(DONE, Ordering::Release);
    t.posts.fetch_add(1, Ordering::SeqCst);
    true
}

/// The `handoff` issuer: keeps `depth` reads queued for `seconds`; returns reads done.
fn issuer(
    t: &Table,
    (fd, help): (i32, bool),
    depth: usize,
    blocks: u64,
    seconds: f64,
    private: bool,
) -> u64 {
    let need = (depth / 8).max(1) as u32;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for s in &t.slots[..depth] {
        s.offset
            .store(next_offset(&mut rng, blocks), Ordering::Relaxed);
        s.state.store(QUEUED, Ordering::Release);
    }
    fence(Ordering::SeqCst);
    t.worker_seq.fetch_add(1, Ordering::SeqCst);
    futex_wake(&t.worker_seq, i32::MAX as u32, private);
    let (start, mut reaped) = (Instant::now(), 0u32);
    let mut done = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        // Sleep until `need` results are posted beyond those reaped.
        let target = reaped.wrapping_add(need);
        t.wake_at.store(target, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        loop {
            let p = t.posts.load(Ordering::SeqCst);
            if p.wrapping_sub(target) < u32::MAX / 2 {
                break;
            }
            if help && run_one_queued(t, fd, depth) {
                continue;
            }
            futex_wait(&t.posts, p, private);
        }
        t.wake_at.store(u32::MAX, Ordering::SeqCst);
        // Requeue every posted result, then wake as many idle workers.
        let mut queued = 0;
        for s in &t.slots[..depth] {
            if s.state.load(Ordering::Acquire) == DONE {
                s.offset
                    .store(next_offset(&mut rng, blocks), Ordering::Relaxed);
                s.state.store(QUEUED, Ordering::Release);
                queued += 1;
            }
        }
        reaped = reaped.wrapping_add(queued);
        done += u64::from(queued);
        fence(Ordering::SeqCst);
        if t.idle.load(Ordering::SeqCst) > 0 {
            t.worker_seq.fetch_add(1, Ordering::SeqCst);
            futex_wake(&t.worker_seq, queued, private);
        }
    }
    done
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Direct,
    Handoff,
    /// `handoff`, and the issuer runs a queued read itself rather than sleep.
    Help,
}

/// Reads per second of one run.
fn run(
    file: &std::fs::File,
    workload: Workload,
    workers: usize,
    depth: usize,
    seconds: f64,
    processes: bool,
) -> f64 {
    let bytes = std::mem::size_of::<Table>();
    // The table lives in a memfd, so that workers started with `EXEC=1` (fork, then exec of
    // this program) can map it too.
    // SAFETY: memfd_create with a NUL-terminated name; ftruncate on the new descriptor.
    let memfd = unsafe { libc::memfd_create(c"handoff-table".as_ptr(), 0) };
    assert!(memfd >= 0, "memfd_create");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::ftruncate(memfd, bytes as libc::off_t) }, 0);
    let base = map_table(memfd);
    let mut big_fd = -1;
    if std::env::var_os("BIGMAP").is_some() && BIG.load(Ordering::Relaxed).is_null() {
        // SAFETY: memfd_create with a NUL-terminated name; ftruncate on it (sparse).
        big_fd = unsafe { libc::memfd_create(c"handoff-big".as_ptr(), 0) };
        assert!(big_fd >= 0);
        // SAFETY: ftruncate on the new descriptor (a sparse file).
        let sized = unsafe { libc::ftruncate(big_fd, BIG_LEN as libc::off_t) };
        assert_eq!(sized, 0);
        BIG.store(map_big(big_fd), Ordering::Relaxed);
    }
    // SAFETY: as above; the reference is dropped before the munmap.
    let t = unsafe { &*base.cast::<Table>() };
    t.wake_at.store(u32::MAX, Ordering::Relaxed);
    let fd = file.as_raw_fd();
    let blocks = file.metadata().map(|m| m.len()).unwrap_or(0).max(
        // A block device's metadata length is 0: ask its size.
        {
            // SAFETY: lseek on an open descriptor.
            let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
            end.max(0) as u64
        },
    ) / BLOCK as u64;
    assert!(blocks > 0, "the file is empty");
    let private = !processes;
    let body = |me: usize| match workload {
        Workload::Direct => direct(t, fd, me, blocks),
        Workload::Handoff | Workload::Help => worker(t, fd, me, depth, private),
    };
    let stop = |t: &Table| {
        t.stop.store(1, Ordering::SeqCst);
        t.worker_seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(&t.worker_seq, i32::MAX as u32, private);
    };
    // The issuer's part (reads it issued), or, for `direct`, the wait while workers read.
    let run_for = |seconds: f64| {
        if workload == Workload::Direct {
            std::thread::sleep(Duration::from_secs_f64(seconds));
            return 0;
        }
        issuer(
            t,
            (fd, workload == Workload::Help),
            depth,
            blocks,
            seconds,
            private,
        )
    };
    let start = Instant::now();
    let issued;
    if processes {
        let mut children = Vec::new();
        for me in 0..workers {
            // SAFETY: the child only runs `body` (atomics and system calls) and `_exit`s.
            match unsafe { libc::fork() } {
                0 if std::env::var_os("EXEC").is_some() => {
                    let exe = c"/proc/self/exe";
                    let env = std::ffi::CString::new(format!(
                        "HF_WORKER={me},{depth},{memfd},{fd},{}",
                        matches!(workload, Workload::Direct) as u8
                    ))
                    .unwrap();
                    let blocks_env = std::ffi::CString::new(format!("HF_BLOCKS={blocks}")).unwrap();
                    let argv = [exe.as_ptr(), std::ptr::null()];
                    let reopen = std::ffi::CString::new(format!(
                        "HF_REOPEN=/proc/{}/fd/{fd}",
                        std::process::id()
                    ))
                    .unwrap();
                    let big_env = std::ffi::CString::new(format!("HF_BIG={big_fd}")).unwrap();
                    let mut envp = vec![env.as_ptr(), blocks_env.as_ptr(), big_env.as_ptr()];
                    if std::env::var_os("REOPEN").is_some() {
                        envp.push(reopen.as_ptr());
                    }
                    envp.push(std::ptr::null());
                    // SAFETY: NUL-terminated strings and null-terminated arrays; the child
                    // only execs (or exits).
                    unsafe {
                        libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
                        libc::_exit(127)
                    };
                }
                0 => {
                    body(me);
                    // SAFETY: leaves the child without running the parent's destructors.
                    unsafe { libc::_exit(0) };
                }
                -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                pid => children.push(pid),
            }
        }
        issued = run_for(seconds);
        stop(t);
        for pid in children {
            // SAFETY: waits for a child of ours; status unused.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        }
    } else {
        issued = std::thread::scope(|s| {
            for me in 0..workers {
                s.spawn(move || body(me));
            }
            let issued = run_for(seconds);
            stop(t);
            issued
        });
    }
    let elapsed = start.elapsed().as_secs_f64();
    let reads = match workload {
        Workload::Direct => t.reads.load(Ordering::Relaxed),
        Workload::Handoff | Workload::Help => issued,
    };
    // SAFETY: the mapping made above; no participant uses it any more.
    unsafe { libc::munmap(base, bytes) };
    // SAFETY: our descriptor.
    unsafe { libc::close(memfd) };
    reads as f64 / elapsed
}

/// Maps the table's memfd.
fn map_table(memfd: i32) -> *mut libc::c_void {
    // SAFETY: a shared mapping of a memfd of the table's size (zeroed at creation: every
    // atomic 0, which is valid), unmapped by the caller after every participant is done.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            std::mem::size_of::<Table>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            memfd,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    base
}

/// `EXEC=1`: this process is a worker started by fork and exec; runs it and exits.
fn exec_worker() {
    let Ok(v) = std::env::var("HF_WORKER") else {
        return;
    };
    let n: Vec<i64> = v.split(',').map(|x| x.parse().unwrap()).collect();
    let blocks: u64 = std::env::var("HF_BLOCKS").unwrap().parse().unwrap();
    let (me, depth, memfd, fd, direct) = (
        n[0] as usize,
        n[1] as usize,
        n[2] as i32,
        n[3] as i32,
        n[4] != 0,
    );
    // SAFETY: the table's memfd, mapped for the rest of this process.
    let t = unsafe { &*map_table(memfd).cast::<Table>() };
    if let Some(b) = std::env::var("HF_BIG")
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    {
        if b >= 0 {
            BIG.store(map_big(b), Ordering::Relaxed);
        }
    }
    // `REOPEN=1`: a descriptor of its own, opened through /proc as dbaio's workers do.
    let fd = match std::env::var("HF_REOPEN") {
        Ok(path) => {
            let c = std::ffi::CString::new(path).unwrap();
            // SAFETY: a NUL-terminated path.
            unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECT) }
        }
        Err(_) => fd,
    };
    if direct {
        self::direct(t, fd, me, blocks);
    } else {
        worker(t, fd, me, depth, false);
    }
    // SAFETY: ends the worker.
    unsafe { libc::_exit(0) };
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    use std::os::unix::fs::OpenOptionsExt;
    exec_worker();
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: handoff_floor FILE [WORKERS] [DEPTH] [SECONDS] [ROUNDS]");
    let mut num = |d: f64| args.next().map_or(d, |a| a.parse().expect("a number"));
    let workers = num(8.0) as usize;
    let depth = num(32.0) as usize;
    let seconds = num(3.0);
    let rounds = num(5.0) as usize;
    assert!(
        (1..=64).contains(&workers) && workers <= MAX_DEPTH,
        "1 to 64 workers"
    );
    assert!((1..=MAX_DEPTH).contains(&depth), "depth 1 to {MAX_DEPTH}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("open FILE with O_DIRECT");
    // SAFETY: clears close-on-exec on our descriptor, for `EXEC=1` workers.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFD, 0) };
    let all = [
        (Workload::Direct, "direct"),
        (Workload::Handoff, "handoff"),
        (Workload::Help, "help"),
    ];
    let only = std::env::var("WORKLOAD").ok();
    for (workload, name) in all {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let (mut th, mut pr) = (Vec::new(), Vec::new());
        let kind = std::env::var("KIND").ok();
        for r in 0..rounds {
            let skip = |k: &str| kind.as_deref().is_some_and(|o| o != k);
            let a = if skip("threads") {
                1.0
            } else {
                run(&file, workload, workers, depth, seconds, false)
            };
            let b = if skip("processes") {
                1.0
            } else {
                run(&file, workload, workers, depth, seconds, true)
            };
            println!(
                "{name} round {}: threads {a:.0}/s, processes {b:.0}/s ({:.3})",
                r + 1,
                b / a
            );
            th.push(a);
            pr.push(b);
        }
        let (a, b) = (median(th), median(pr));
        println!(
            "{name}, {workers} workers, depth {depth}: medians threads {a:.0}/s, processes \
             {b:.0}/s, processes/threads {:.3}",
            b / a
        );
    }
}
