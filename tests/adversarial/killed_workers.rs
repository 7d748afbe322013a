//! Worker processes SIGKILLed at random moments — while they execute, while they post, while
//! they retire from a self-sizing pool with a short idle timeout, while new ones start —
//! while issuers drive their queues and foreign threads wait on the same I/Os. (On the other
//! columns the same load runs without kills.) Guards against a wait stranded by a death: an
//! I/O requeued but its waiter asleep, a result posted by a worker that then died and never
//! woke anyone, a pool that counts a worker twice or never again.

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::OpenOptions;
use std::sync::Arc;

const FILE_LEN: u64 = 4 << 20;

fn driver(mut ctx: Ctx, path: std::path::PathBuf, board: Arc<Board>) {
    let me = ctx.aio.register_issuer("driver").unwrap();
    let f = ctx.aio.open(&path, &OpenOptions::read()).unwrap();
    while ctx.running() {
        ctx.at("staging");
        me.begin_batch().unwrap();
        let ios = board.start_reads(&mut ctx.rng, &me, &f, FILE_LEN, 16);
        me.end_batch();
        ctx.at("wait_for_completions");
        let n = 1 + ctx.rng.below(ios.len() as u64) as u32;
        ctx.timed(|| me.wait_for_completions(n));
        ctx.count_wait();
        for (off, io) in ios {
            ctx.at("redeeming");
            let c = ctx.timed(|| me.wait(io));
            // A read whose worker died three times fails, naming it; any other comes back
            // whole.
            match c.check() {
                Ok(()) => check_pages(&c.into_buf(), off),
                Err(e) => assert!(e.to_string().contains("died"), "{e}"),
            }
            ctx.count_completions(1);
        }
        // Idle for a moment now and then, so that the pool shrinks and workers retire.
        if ctx.rng.one_in(64) {
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    }
}

fn foreign(mut ctx: Ctx, board: Arc<Board>) {
    while ctx.running() {
        let Some(w) = board.next(ctx.rng.next()) else {
            std::thread::yield_now();
            continue;
        };
        ctx.at("Aio::wait");
        ctx.foreign_wait(w);
    }
}

fn killer(mut ctx: Ctx) {
    while ctx.running() {
        ctx.at("killing a worker process");
        std::thread::sleep(std::time::Duration::from_millis(5 + ctx.rng.below(20)));
        let Some(pool) = ctx.aio.worker_pool() else {
            continue;
        };
        if pool.workers.is_empty() {
            continue;
        }
        let w = &pool.workers[ctx.rng.below(pool.workers.len() as u64) as usize];
        // SAFETY: kill takes integers; the pid is one of this subsystem's worker processes
        // (a stale one at worst names no process, or a worker that already left).
        unsafe { libc::kill(w.tid, libc::SIGKILL) };
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |s| {
        // Every read must reach a worker (the file is cached: a hit would be read at submit).
        s.io_worker_try_cached = false;
        if s.io_workers == 0 {
            s.set("io_worker_idle_timeout", "5ms").unwrap();
        }
    });
    let path = attack.data_file("data", FILE_LEN);
    let board = Arc::new(Board::default());
    for k in 0..2 {
        let (p, b) = (path.clone(), Arc::clone(&board));
        attack.spawn(&format!("driver {k}"), move |ctx| driver(ctx, p, b));
    }
    let b = Arc::clone(&board);
    attack.spawn("foreign waiter", move |ctx| foreign(ctx, b));
    if column.processes() {
        attack.spawn("killer", killer);
    }
    attack.run("killed_workers");
}

every_column!(scenario);
