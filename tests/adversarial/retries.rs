//! Transient failures (EAGAIN, EINTR injected on a third of the I/Os, retried up to 16
//! times) while other threads wait on the same I/Os: the retry runs outside any lock, on
//! whichever thread completed the failed attempt. Guards against a waiter that sleeps for a
//! completion the retry will never post where it looks (a hang or a 100 ms stall).

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::{FaultAction, FaultRule, OpenOptions};
use std::sync::Arc;

const FILE_LEN: u64 = 4 << 20;

fn driver(mut ctx: Ctx, path: std::path::PathBuf, board: Arc<Board>) {
    let me = ctx.aio.register_issuer("retried").unwrap();
    let f = ctx
        .aio
        .open(&path, &OpenOptions::read().direct(ctx.rng.one_in(2)))
        .unwrap();
    while ctx.running() {
        ctx.at("staging");
        me.begin_batch().unwrap();
        let ios = board.start_reads(&mut ctx.rng, &me, &f, FILE_LEN, 8);
        me.end_batch();
        ctx.at("wait_for_completions");
        let n = 1 + ctx.rng.below(ios.len() as u64) as u32;
        ctx.timed(|| me.wait_for_completions(n));
        ctx.count_wait();
        for (off, io) in ios {
            ctx.at("redeeming");
            let c = ctx.timed(|| me.wait(io));
            check_pages(&c.into_buf(), off);
            ctx.count_completions(1);
        }
    }
}

fn foreign(mut ctx: Ctx, board: Arc<Board>) {
    while ctx.running() {
        let Some(w) = board.next(ctx.rng.next()) else {
            std::thread::yield_now();
            continue;
        };
        ctx.at("Aio::wait on a retried I/O");
        ctx.foreign_wait(w);
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |_| {});
    let path = attack.data_file("data", FILE_LEN);
    attack.aio.seed_faults(7);
    attack
        .aio
        .inject_fault(FaultRule::new(FaultAction::Errno(libc::EAGAIN)).probability(0.3));
    attack
        .aio
        .inject_fault(FaultRule::new(FaultAction::Errno(libc::EINTR)).probability(0.1));
    let board = Arc::new(Board::default());
    for k in 0..2 {
        let (p, b) = (path.clone(), Arc::clone(&board));
        attack.spawn(&format!("driver {k}"), move |ctx| driver(ctx, p, b));
    }
    for k in 0..2 {
        let b = Arc::clone(&board);
        attack.spawn(&format!("foreign {k}"), move |ctx| foreign(ctx, b));
    }
    attack.run("retries");
}

every_column!(scenario);
