//! Other threads wait on an issuer's I/Os while the issuer drives its own queue with
//! `wait_any` / `wait_for_completions(k)` over staged batches — buffered and O_DIRECT, some
//! I/Os dropped in flight, some turned into tickets redeemed elsewhere. Guards against the
//! io_uring issuer asleep in the kernel for completions a foreign waiter reaped or ran itself
//! (a hang), and waits ended only by a safety-net timeout (100 ms stalls).

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::{IoBuf, OpenOptions};
use std::sync::Arc;

const FILE_LEN: u64 = 8 << 20;

fn issuer_loop(ctx: Ctx, path: std::path::PathBuf, board: Arc<Board>, direct: bool) {
    let mut ctx = ctx;
    let me = ctx.aio.register_issuer("driver").unwrap();
    let f = ctx
        .aio
        .open(&path, &OpenOptions::read().direct(direct))
        .unwrap();
    let pages = FILE_LEN / 4096;
    while ctx.running() {
        ctx.at("staging a batch");
        me.begin_batch().unwrap();
        let k = 1 + ctx.rng.below(12) as usize;
        let mut ios = Vec::with_capacity(k);
        for _ in 0..k {
            let off = ctx.rng.below(pages) * 4096;
            let len = if ctx.rng.one_in(4) { 16384 } else { 4096 };
            let off = off.min(FILE_LEN - len);
            let io = me
                .acquire()
                .unwrap()
                .read(&f, off, IoBuf::new(len as usize));
            board.publish(io.wait_ref());
            ios.push((off, io));
        }
        if ctx.rng.one_in(3) {
            me.end_batch();
        }
        // Hand one over as a ticket, drop one in flight.
        if ctx.rng.one_in(3) {
            let (_, io) = ios.swap_remove(ctx.rng.below(ios.len() as u64) as usize);
            board.hand_over(io.into_ticket());
        }
        if !ios.is_empty() && ctx.rng.one_in(4) {
            let (_, io) = ios.swap_remove(ctx.rng.below(ios.len() as u64) as usize);
            drop(io);
        }
        let want = 1 + ctx.rng.below(ios.len().max(1) as u64) as u32;
        ctx.at("wait_for_completions");
        ctx.timed(|| {
            if want == 1 {
                me.wait_any();
            } else {
                me.wait_for_completions(want);
            }
        });
        ctx.count_wait();
        if me.in_batch() {
            me.end_batch();
        }
        // Redeem what is done, then the rest.
        ctx.at("redeeming");
        let mut rest = Vec::new();
        for (off, io) in ios {
            if io.is_done() {
                let c = me.wait(io);
                check_pages(&c.into_buf(), off);
                ctx.count_completions(1);
            } else {
                rest.push((off, io));
            }
        }
        for (off, io) in rest {
            ctx.at("waiting for one of its own");
            let c = ctx.timed(|| me.wait(io));
            ctx.count_wait();
            check_pages(&c.into_buf(), off);
            ctx.count_completions(1);
        }
    }
}

fn foreign_loop(ctx: Ctx, board: Arc<Board>) {
    let mut ctx = ctx;
    while ctx.running() {
        if let Some(t) = board.take_ticket() {
            ctx.at("redeeming a ticket");
            let off = t.wait_ref();
            let c = ctx.timed(|| t.wait());
            let _ = off;
            c.check().unwrap();
            ctx.count_foreign_wait();
            continue;
        }
        let Some(w) = board.next(ctx.rng.next()) else {
            std::thread::yield_now();
            continue;
        };
        match ctx.rng.below(4) {
            0 => {
                ctx.at("check_done polling");
                while ctx.running() && !ctx.aio.check_done(w).unwrap() {
                    std::hint::spin_loop();
                }
            }
            _ => {
                ctx.at("Aio::wait on a foreign I/O");
                ctx.foreign_wait(w);
            }
        }
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |_| {});
    let path = attack.data_file("data", FILE_LEN);
    let board = Arc::new(Board::default());
    for (k, direct) in [false, true].into_iter().enumerate() {
        let (p, b) = (path.clone(), Arc::clone(&board));
        attack.spawn(&format!("driver {k}"), move |ctx| {
            issuer_loop(ctx, p, b, direct)
        });
    }
    for k in 0..2 {
        let b = Arc::clone(&board);
        attack.spawn(&format!("foreign waiter {k}"), move |ctx| {
            foreign_loop(ctx, b)
        });
    }
    attack.run("foreign_wait_on_batches");
}

every_column!(scenario);
