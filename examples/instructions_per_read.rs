//! Instructions per 4 KiB read (issue 14, P7): dbaio's handle path on `sync` and `io_uring`
//! against the minimal loops it stands on — a raw `pread` loop and a raw `io-uring` loop
//! (push one read, submit and wait, reap). Every read hits the page cache (a 64 MiB file
//! written first), one at a time, into one reused 4 KiB-aligned buffer, at pseudo-random
//! block offsets, so that only the code path differs.
//!
//! Count its instructions at two read counts and divide the difference by the difference of
//! the counts, so that start-up cancels (docs/benchmarks.md, "Instructions per 4 KiB read";
//! `perf stat -e instructions` where the CPU's counters are visible, callgrind where not):
//!
//!     valgrind --tool=callgrind target/release/examples/instructions_per_read io_uring 30000
//!
//! Modes: `raw-pread`, `sync`, `sync-slice` (`read_exact_into` on the calling thread's
//! issuer), `raw-uring`, `io_uring`. Further arguments: `timing=off` sets `track_io_timing =
//! off` for dbaio's modes; `direct=FILE` reads 4 KiB blocks of an existing FILE with O_DIRECT
//! instead (every read goes to the device: the block layer and the driver are then part of
//! both sides; the file is only read).
//!
//! It also prints the process's CPU time (user + system, `getrusage`) per read over the
//! reading loop alone: where the CPU's instruction counters are not exposed, the ratio of
//! those times between a dbaio mode and its raw loop is the whole read's cost, kernel
//! included, that the instruction ratio stands for (docs/benchmarks.md).

use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::os::fd::AsRawFd;

const FILE_BLOCKS: u64 = 16384;
const BLOCK: usize = 4096;

fn offsets(n: u64, blocks: u64) -> impl Iterator<Item = u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % blocks) * BLOCK as u64
    })
}

/// What every mode reads: a file of `blocks` 4 KiB blocks (the hot file, or `direct=FILE`).
struct Target {
    file: std::fs::File,
    path: std::path::PathBuf,
    blocks: u64,
    options: OpenOptions,
    track_io_timing: bool,
}

/// What a mode's reading loop gives back: a byte of the last block (so the loop is not
/// optimised away) and the CPU time taken just before the loop (after the mode's set-up).
struct Loop {
    check: u64,
    cpu_before: f64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "sync".into());
    let n: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let dir = tempfile::tempdir_in(".").unwrap();
    let target = target(args, dir.path());
    let run = match mode.as_str() {
        "raw-pread" => raw_pread(&target, n),
        "raw-uring" => raw_uring(&target, n),
        "sync" => handle_reads(&target, n, IoMethodKind::Sync),
        "io_uring" => handle_reads(&target, n, IoMethodKind::IoUring),
        "sync-slice" => slice_reads(&target, n),
        other => panic!("unknown mode {other} (raw-pread, sync, sync-slice, raw-uring, io_uring)"),
    };
    let cpu_ns = (cpu_seconds() - run.cpu_before) * 1e9 / n as f64;
    println!(
        "{mode}: {n} reads (check {}), {cpu_ns:.0} ns of CPU per read",
        run.check
    );
}

/// The file to read, from the arguments after the count: `timing=off` runs dbaio's modes
/// with `track_io_timing = off` (PostgreSQL's default: no fine clock read on the I/O path);
/// `direct=FILE` reads FILE with O_DIRECT instead of a hot file written in `dir`.
fn target(args: impl Iterator<Item = String>, dir: &std::path::Path) -> Target {
    let mut track_io_timing = true;
    let mut direct: Option<std::path::PathBuf> = None;
    for a in args {
        match a.split_once('=') {
            Some(("timing", "off")) => track_io_timing = false,
            Some(("direct", f)) => direct = Some(f.into()),
            _ => panic!("unknown argument {a} (timing=off, direct=FILE)"),
        }
    }
    let (path, blocks) = match &direct {
        Some(f) => (f.clone(), device_or_file_len(f) / BLOCK as u64),
        None => {
            let path = dir.join("hot");
            std::fs::write(&path, vec![1u8; FILE_BLOCKS as usize * BLOCK]).unwrap();
            (path, FILE_BLOCKS)
        }
    };
    assert!(blocks > 0, "{} holds no whole 4 KiB block", path.display());
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = if direct.is_some() { libc::O_DIRECT } else { 0 };
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&path)
            .unwrap()
    };
    Target {
        file,
        path,
        blocks,
        options: OpenOptions::read().direct(direct.is_some()),
        track_io_timing,
    }
}

/// A bare `pread` loop.
fn raw_pread(t: &Target, n: u64) -> Loop {
    let buf = IoBuf::new(BLOCK);
    let p = buf.as_ptr() as *mut libc::c_void;
    let cpu_before = cpu_seconds();
    for off in offsets(n, t.blocks) {
        // SAFETY: `buf` is a live 4 KiB allocation nothing else uses.
        let r = unsafe { libc::pread(t.file.as_raw_fd(), p, BLOCK, off as libc::off_t) };
        assert_eq!(r, BLOCK as isize);
    }
    Loop {
        check: u64::from(buf[0]),
        cpu_before,
    }
}

/// A bare `io-uring` loop: push one read, submit and wait, reap.
fn raw_uring(t: &Target, n: u64) -> Loop {
    let mut ring = io_uring::IoUring::new(64).unwrap();
    let buf = IoBuf::new(BLOCK);
    let fd = io_uring::types::Fd(t.file.as_raw_fd());
    let cpu_before = cpu_seconds();
    for off in offsets(n, t.blocks) {
        let sqe = io_uring::opcode::Read::new(fd, buf.as_ptr() as *mut u8, BLOCK as u32)
            .offset(off)
            .build();
        // SAFETY: the buffer outlives the read, which is reaped before the next push.
        unsafe { ring.submission().push(&sqe).unwrap() };
        ring.submit_and_wait(1).unwrap();
        let cqe = ring.completion().next().unwrap();
        assert_eq!(cqe.result(), BLOCK as i32);
    }
    Loop {
        check: u64::from(buf[0]),
        cpu_before,
    }
}

/// A subsystem on `method` without a buffer pool, as the modes below read.
fn start(t: &Target, method: IoMethodKind) -> Aio {
    Aio::start(Settings {
        io_method: method,
        buffer_pool_size: 0,
        track_io_timing: t.track_io_timing,
        ..Settings::default()
    })
    .unwrap()
}

/// dbaio's handle path: acquire, read, wait, take the buffer back.
fn handle_reads(t: &Target, n: u64, method: IoMethodKind) -> Loop {
    let aio = start(t, method);
    let me = aio.register_issuer("instructions").unwrap();
    let f = aio.open(&t.path, &t.options).unwrap();
    let mut buf = IoBuf::new(BLOCK);
    let cpu_before = cpu_seconds();
    for off in offsets(n, t.blocks) {
        let io = me.acquire().unwrap().read(&f, off, buf);
        let c = me.wait(io);
        c.check().unwrap();
        buf = c.into_buf();
    }
    me.close(f);
    Loop {
        check: u64::from(buf[0]),
        cpu_before,
    }
}

/// The embedder's shortcut: `read_exact_into` a slice on the calling thread's issuer (the
/// inline path: two state transitions, no handle round trip).
fn slice_reads(t: &Target, n: u64) -> Loop {
    let aio = start(t, IoMethodKind::Sync);
    let f = aio.open(&t.path, &t.options).unwrap();
    let mut buf = IoBuf::new(BLOCK);
    // The thread's issuer is registered on its first use, outside the timed loop.
    aio.with_issuer(|_| ()).unwrap();
    let cpu_before = cpu_seconds();
    for off in offsets(n, t.blocks) {
        aio.with_issuer(|me| me.read_exact_into(&f, off, &mut buf[..]))
            .unwrap()
            .unwrap();
    }
    Loop {
        check: u64::from(buf[0]),
        cpu_before,
    }
}

/// User + system CPU time of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage of this process");
    t(u.user_time()) + t(u.system_time())
}

/// The length of a regular file or a block device (whose metadata says 0).
fn device_or_file_len(path: &std::path::Path) -> u64 {
    use std::io::{Seek, SeekFrom};
    std::fs::File::open(path)
        .and_then(|mut f| f.seek(SeekFrom::End(0)))
        .unwrap_or(0)
}
