//! What a context switch costs between processes against between threads, on this machine:
//! N participants pass a token around a ring, each sleeping on its own futex word until the
//! one before wakes it, all pinned to CPU 0 so that every pass is one switch. Run once with
//! threads (private futexes, one address space) and once with processes (shared futexes in a
//! shared mapping, N address spaces), it shows what worker processes pay per switch that
//! worker threads do not (docs/benchmarks.md, "Worker processes and the cost of a switch").
//!
//!     switch_cost [PARTICIPANTS (9)] [PASSES PER PARTICIPANT (50000)]
//!
//! Prints microseconds per switch for each, and their ratio. (Linux only; no dbaio code.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// One futex word per participant, each on its own cache line.
#[repr(C, align(64))]
struct Word(AtomicU32);

fn futex(word: &AtomicU32, op: libc::c_int, val: u32) {
    // SAFETY: a futex call on a live, aligned 32-bit word; no timeout, no second word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Participant `me` of `words.len()`: waits for its token, passes it on, `passes` times.
fn play(words: &[Word], me: usize, passes: u32, private: bool) {
    pin_to_cpu0();
    let flag = if private { libc::FUTEX_PRIVATE_FLAG } else { 0 };
    let next = &words[(me + 1) % words.len()].0;
    let mine = &words[me].0;
    for _ in 0..passes {
        while mine.swap(0, Ordering::AcqRel) == 0 {
            futex(mine, libc::FUTEX_WAIT | flag, 0);
        }
        next.store(1, Ordering::Release);
        futex(next, libc::FUTEX_WAKE | flag, 1);
    }
}

/// Microseconds per switch with `n` participants, as threads or as processes.
fn run(n: usize, passes: u32, processes: bool) -> f64 {
    let bytes = n * std::mem::size_of::<Word>();
    // SAFETY: a fresh anonymous shared mapping, zeroed by the kernel (all words 0), unmapped
    // below after every participant is done.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    // SAFETY: the mapping holds `n` zeroed words (AtomicU32 of 0 is valid) and outlives the
    // slice, which is dropped before the munmap.
    let words = unsafe { std::slice::from_raw_parts(base.cast::<Word>(), n) };
    words[0].0.store(1, Ordering::Release);
    let start = Instant::now();
    if processes {
        let mut children = Vec::new();
        for me in 1..n {
            // SAFETY: the child only runs `play` (atomics and system calls) and `_exit`s.
            match unsafe { libc::fork() } {
                0 => {
                    play(words, me, passes, false);
                    // SAFETY: leaves the child without running the parent's destructors.
                    unsafe { libc::_exit(0) };
                }
                -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                pid => children.push(pid),
            }
        }
        play(words, 0, passes, false);
        for pid in children {
            // SAFETY: waits for a child of ours; status unused.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        }
    } else {
        std::thread::scope(|s| {
            for me in 1..n {
                s.spawn(move || play(words, me, passes, true));
            }
            play(words, 0, passes, true);
        });
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / (n as f64 * f64::from(passes));
    // SAFETY: the mapping made above; no participant uses it any more.
    unsafe { libc::munmap(base, bytes) };
    us
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(9, |a| a.parse().expect("participants"));
    let passes: u32 = args.next().map_or(50_000, |a| a.parse().expect("passes"));
    assert!((2..=64).contains(&n), "2 to 64 participants");
    let threads = run(n, passes, false);
    let processes = run(n, passes, true);
    println!(
        "{n} participants, one CPU: threads {threads:.2} us per switch, processes \
         {processes:.2} us ({:.2}x)",
        processes / threads
    );
}
