//! What a small commit costs on each method: WRITES buffered 4 KiB writes at random offsets
//! of a 400 MB file, then one `fdatasync`, COMMITS times, through `Issuer::write_all_from` and
//! `Issuer::fdatasync` — and the same with plain `pwrite`/`fdatasync` calls as the yardstick,
//! and on io_uring with the sync through a handle (`acquire()?.fdatasync(&file)`, then
//! `wait`), which goes through the ring. The rows take turns, ROUNDS times, so the host's
//! drift falls on all of them alike.
//!
//!     commit_latency DIR [COMMITS (2000)] [WRITES (100)] [ROUNDS (3)]
//!
//! DIR should be on the file system of `loop-device.sh setup-fs` (no host cache, no throttled
//! syncs). Prints, per round and method, microseconds per commit spent writing and syncing
//! (docs/benchmarks.md, "Sixth session").

use dbaio::{Aio, IoMethodKind, OpenOptions, Settings};
use std::os::fd::AsRawFd;
use std::time::Instant;

const BLOCK: usize = 4096;
const BLOCKS: u64 = 100_000;

/// Microseconds per commit: (writing, syncing). `through_handle`: sync with
/// `acquire()?.fdatasync(&file)` and `wait` (through the method) rather than
/// `Issuer::fdatasync`.
fn run(
    method: Option<IoMethodKind>,
    through_handle: bool,
    path: &std::path::Path,
    commits: usize,
    writes: usize,
) -> (f64, f64) {
    let data = vec![7u8; BLOCK];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next_offset = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((x >> 33) % BLOCKS) * BLOCK as u64
    };
    let (mut writing, mut syncing) = (0f64, 0f64);
    match method {
        None => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .expect("open");
            let fd = f.as_raw_fd();
            for _ in 0..commits {
                let t = Instant::now();
                for _ in 0..writes {
                    let off = next_offset() as libc::off_t;
                    // SAFETY: `data` is a live buffer of BLOCK bytes.
                    let n = unsafe { libc::pwrite(fd, data.as_ptr().cast(), BLOCK, off) };
                    assert_eq!(n, BLOCK as isize, "pwrite");
                }
                let s = Instant::now();
                // SAFETY: an fd this function owns.
                assert_eq!(unsafe { libc::fdatasync(fd) }, 0, "fdatasync");
                writing += (s - t).as_secs_f64();
                syncing += s.elapsed().as_secs_f64();
            }
        }
        Some(m) => {
            let aio = Aio::start(Settings {
                io_method: m,
                ..Settings::default()
            })
            .expect("start");
            let me = aio.register_issuer("commit").expect("issuer");
            let f = aio
                .open(path, &OpenOptions::read_write().direct(false))
                .expect("open");
            for _ in 0..commits {
                let t = Instant::now();
                for _ in 0..writes {
                    me.write_all_from(&f, next_offset(), &data).expect("write");
                }
                let s = Instant::now();
                if through_handle {
                    let io = me.acquire().expect("acquire").fdatasync(&f);
                    me.wait(io).check().expect("fdatasync");
                } else {
                    me.fdatasync(&f).expect("fdatasync");
                }
                writing += (s - t).as_secs_f64();
                syncing += s.elapsed().as_secs_f64();
            }
        }
    }
    let n = commits as f64;
    (writing * 1e6 / n, syncing * 1e6 / n)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1) else {
        eprintln!("usage: commit_latency DIR [COMMITS (2000)] [WRITES (100)] [ROUNDS (3)]");
        std::process::exit(2);
    };
    let arg = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let (commits, writes, rounds) = (arg(2, 2000), arg(3, 100), arg(4, 3));
    let path = std::path::Path::new(dir).join("commit_latency.dat");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(BLOCKS * BLOCK as u64).expect("size");
    drop(f);
    let mut methods: Vec<(&str, Option<IoMethodKind>, bool)> = vec![
        ("pwrite+fdatasync", None, false),
        ("sync", Some(IoMethodKind::Sync), false),
        ("worker", Some(IoMethodKind::Worker), false),
    ];
    match dbaio::io_uring_available() {
        Ok(()) => {
            methods.push(("io_uring", Some(IoMethodKind::IoUring), false));
            methods.push(("io_uring, handle", Some(IoMethodKind::IoUring), true));
        }
        Err(why) => eprintln!("commit_latency: skipping io_uring: {why}"),
    }
    println!(
        "{commits} commits of {writes} x 4 KiB buffered writes and one fdatasync; us per commit"
    );
    for round in 0..rounds {
        for &(name, m, through_handle) in &methods {
            let (w, s) = run(m, through_handle, &path, commits, writes);
            println!("round {round} {name:17} writes {w:8.1}  fdatasync {s:8.1}");
        }
    }
    let _ = std::fs::remove_file(&path);
}
