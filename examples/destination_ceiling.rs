//! The device ceiling for a read whose data must *stay* in memory: a raw `io-uring` loop
//! reading files front to back with O_DIRECT at a fixed size and depth, into a destination
//! region of a chosen size that it walks through in order and wraps around. With a region of
//! a few MiB it is fio's own pattern (fio reuses `iodepth` buffers); with a region as large as
//! the files it is what a buffer pool being prewarmed asks of the machine: every read lands in
//! memory no read has touched before. On a virtual machine the two can differ by a third
//! (docs/benchmarks.md, "Prewarm's ceiling is where the data lands").
//!
//!     destination_ceiling REGION_MB BS_KB DEPTH [huge] [fresh|background] FILE...
//!
//! `huge` maps the region with MAP_HUGETLB (as `huge_pages = on` does for the pool). The
//! region is faulted in before the clock starts, so page zeroing is not in the figure, unless
//! `fresh` is given: then the reads fault it in, as they do for a pool just mapped; or
//! `background`: a second thread faults it in front to back in 16 MiB steps
//! (MADV_POPULATE_WRITE) while the reads run, as the pool's prefault thread does. Prints the
//! reading time in ms and the rate.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Instant;

/// The command line: region, read size and depth, the region's options, the files.
struct Args {
    region_mb: usize,
    bs: usize,
    depth: usize,
    huge: bool,
    fresh: bool,
    background: bool,
    files: Vec<std::fs::File>,
}

const USAGE: &str =
    "usage: destination_ceiling REGION_MB BS_KB DEPTH [huge] [fresh|background] FILE...";

fn main() {
    let a = args();
    let len = ((a.region_mb << 20).max(a.bs * a.depth)).div_ceil(2 << 20) * (2 << 20);
    let base = map_region(len, a.huge);
    if !a.fresh && !a.background {
        // SAFETY: the whole mapping is ours and writable; touching it faults it in.
        unsafe { std::ptr::write_bytes(base.cast::<u8>(), 0, len) };
    }
    let prefault = a.background.then(|| prefault_behind(base as usize, len));
    let t0 = Instant::now();
    let bytes = read_all(&a, base, len);
    let s = t0.elapsed().as_secs_f64();
    let populated = prefault.map(|t| t.join().unwrap());
    println!(
        "{:.0} ms, {:.0} MB/s ({bytes} bytes, region {} MiB{}{}, {} KiB x {}){}",
        s * 1e3,
        bytes as f64 / s / 1e6,
        len >> 20,
        if a.huge { " huge" } else { "" },
        if a.fresh { " fresh" } else { "" },
        a.bs >> 10,
        a.depth,
        populated.map_or(String::new(), |d| format!(
            ", faulted in by a second thread in {} ms",
            d.as_millis()
        ))
    );
    // SAFETY: every read into the region has been reaped.
    unsafe { libc::munmap(base, len) };
}

/// Reads the command line (see the file's documentation), opening each file with O_DIRECT.
fn args() -> Args {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> usize { args.get(i).and_then(|v| v.parse().ok()).expect(USAGE) };
    let (region_mb, bs_kb, depth) = (num(0), num(1), num(2));
    let mut first_file = 3;
    let mut flag = |name: &str| {
        let given = args.get(first_file).is_some_and(|a| a == name);
        first_file += usize::from(given);
        given
    };
    let huge = flag("huge");
    let fresh = flag("fresh");
    let background = !fresh && flag("background");
    let files: Vec<std::fs::File> = args[first_file..]
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .unwrap_or_else(|e| panic!("open {p}: {e}"))
        })
        .collect();
    assert!(!files.is_empty(), "{USAGE}");
    Args {
        region_mb,
        bs: bs_kb << 10,
        depth,
        huge,
        fresh,
        background,
        files,
    }
}

/// An anonymous private mapping of `len` bytes, on huge pages if asked.
fn map_region(len: usize, huge: bool) -> *mut libc::c_void {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if huge { libc::MAP_HUGETLB } else { 0 };
    // SAFETY: a fresh anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    assert!(base != libc::MAP_FAILED, "mmap of {len} bytes failed");
    base
}

/// A thread faulting the region at `addr` in front to back (MADV_POPULATE_WRITE, 16 MiB at a
/// time) while the reads run, as the pool's prefault thread does; it returns how long it took.
fn prefault_behind(addr: usize, len: usize) -> std::thread::JoinHandle<std::time::Duration> {
    std::thread::spawn(move || {
        const STEP: usize = 16 << 20;
        let t = Instant::now();
        for off in (0..len).step_by(STEP) {
            // SAFETY: the range lies in the mapping, which is unmapped only after this thread
            // is joined; MADV_POPULATE_WRITE only faults pages in (data the reads put there
            // stays).
            let r = unsafe {
                libc::madvise(
                    (addr + off) as *mut libc::c_void,
                    STEP.min(len - off),
                    libc::MADV_POPULATE_WRITE,
                )
            };
            assert_eq!(r, 0, "MADV_POPULATE_WRITE (Linux 5.14 or later)");
        }
        t.elapsed()
    })
}

/// Reads every file front to back, `depth` reads of `bs` in flight, into the region at
/// `base` in order, wrapping around; returns the bytes read.
fn read_all(a: &Args, base: *mut libc::c_void, len: usize) -> u64 {
    let (bs, depth, files) = (a.bs, a.depth, &a.files);
    let mut ring = io_uring::IoUring::new(depth.next_power_of_two() as u32).unwrap();
    let sizes: Vec<u64> = files.iter().map(|f| f.metadata().unwrap().len()).collect();
    let (mut file, mut off, mut dest) = (0usize, 0u64, 0usize);
    let (mut in_flight, mut bytes) = (0usize, 0u64);
    loop {
        while in_flight < depth && file < files.len() {
            if sizes[file] == 0 {
                file += 1; // nothing to read (and a read of 0 bytes would look like a failure)
                continue;
            }
            let n = (sizes[file] - off).min(bs as u64) as u32;
            // SAFETY: `dest + bs <= len`, the region outlives the ring's reads (all reaped
            // before it is unmapped), and no two reads in flight share a range (depth * bs <=
            // len).
            let sqe = io_uring::opcode::Read::new(
                io_uring::types::Fd(files[file].as_raw_fd()),
                unsafe { base.cast::<u8>().add(dest) },
                n,
            )
            .offset(off)
            .build();
            // SAFETY: as above.
            unsafe { ring.submission().push(&sqe).expect("ring has room") };
            in_flight += 1;
            dest = if dest + 2 * bs <= len { dest + bs } else { 0 };
            off += u64::from(n);
            if off >= sizes[file] {
                (file, off) = (file + 1, 0);
            }
        }
        if in_flight == 0 {
            return bytes;
        }
        ring.submit_and_wait(1).unwrap();
        for cqe in ring.completion() {
            assert!(cqe.result() > 0, "read failed: {}", cqe.result());
            bytes += cqe.result() as u64;
            in_flight -= 1;
        }
    }
}
