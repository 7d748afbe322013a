//! Signals delivered to issuers while they sleep (in the kernel, on a futex, in a system
//! call), with a handler installed without `SA_RESTART`, so every sleep can return EINTR —
//! while other threads wait on the same I/Os. Guards against a wait that treats an
//! interrupted sleep as progress it did not make, or that a signal sends back to sleep for
//! ever.

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::OpenOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

const FILE_LEN: u64 = 4 << 20;

extern "C" fn on_signal(_: libc::c_int) {}

fn install_handler() {
    // SAFETY: a zeroed sigaction with a handler that does nothing, no SA_RESTART: valid.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
}

fn driver(mut ctx: Ctx, path: std::path::PathBuf, board: Arc<Board>, tid: Arc<AtomicI32>) {
    // SAFETY: gettid has no preconditions.
    tid.store(unsafe { libc::gettid() }, Ordering::SeqCst);
    let me = ctx.aio.register_issuer("signalled").unwrap();
    let f = ctx
        .aio
        .open(&path, &OpenOptions::read().direct(true))
        .unwrap();
    while ctx.running() {
        ctx.at("staging");
        me.begin_batch().unwrap();
        let ios = board.start_reads(&mut ctx.rng, &me, &f, FILE_LEN, 8);
        ctx.at("wait_for_completions");
        let n = 1 + ctx.rng.below(ios.len() as u64) as u32;
        ctx.timed(|| me.wait_for_completions(n));
        ctx.count_wait();
        me.end_batch();
        for (off, io) in ios {
            ctx.at("redeeming");
            let c = ctx.timed(|| me.wait(io));
            check_pages(&c.into_buf(), off);
            ctx.count_completions(1);
        }
    }
    tid.store(0, Ordering::SeqCst);
}

fn foreign(mut ctx: Ctx, board: Arc<Board>, tid: Arc<AtomicI32>) {
    // SAFETY: gettid has no preconditions.
    tid.store(unsafe { libc::gettid() }, Ordering::SeqCst);
    while ctx.running() {
        let Some(w) = board.next(ctx.rng.next()) else {
            std::thread::yield_now();
            continue;
        };
        ctx.at("Aio::wait");
        ctx.foreign_wait(w);
    }
    tid.store(0, Ordering::SeqCst);
}

fn signaller(ctx: Ctx, tids: Vec<Arc<AtomicI32>>) {
    let mut k = 0usize;
    while ctx.running() {
        ctx.at("signalling");
        let tid = tids[k % tids.len()].load(Ordering::SeqCst);
        if tid > 0 {
            // SAFETY: tgkill takes integers; the thread's handler does nothing, and a thread
            // that ended has cleared its id first (a stale id at worst gets ESRCH).
            unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR1) };
        }
        k += 1;
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

fn scenario(column: Column) {
    install_handler();
    let mut attack = Attack::new(column, |_| {});
    let path = attack.data_file("data", FILE_LEN);
    let board = Arc::new(Board::default());
    let tids: Vec<_> = (0..4).map(|_| Arc::new(AtomicI32::new(0))).collect();
    for (k, tid) in tids.iter().enumerate() {
        let (b, t) = (Arc::clone(&board), Arc::clone(tid));
        if k < 2 {
            let p = path.clone();
            attack.spawn(&format!("driver {k}"), move |ctx| driver(ctx, p, b, t));
        } else {
            attack.spawn(&format!("foreign {k}"), move |ctx| foreign(ctx, b, t));
        }
    }
    attack.spawn("signaller", move |ctx| signaller(ctx, tids));
    attack.run("signals");
}

every_column!(scenario);
