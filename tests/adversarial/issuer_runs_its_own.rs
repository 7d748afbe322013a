//! Waits on I/Os that never enter the method's queue or ring because their issuer runs them
//! itself: buffered writes to ext4 under io_uring (the file system cannot do them without
//! blocking), SYNCHRONOUS reads, fsyncs, and slice I/O on the inline path — with other
//! threads waiting on each. Guards against a waiter that sleeps in the kernel (or on the
//! wrong word) for an I/O that will never post a completion there: a 100 ms stall per wait.

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::{HandleFlags, IoBuf, OpenOptions};
use std::sync::Arc;

fn writer(
    mut ctx: Ctx,
    path: std::path::PathBuf,
    data: std::path::PathBuf,
    k: u64,
    board: Arc<Board>,
) {
    let me = ctx.aio.register_issuer("writer").unwrap();
    let wf = ctx.aio.open(&path, &OpenOptions::read_write()).unwrap();
    let rf = ctx.aio.open(&data, &OpenOptions::read()).unwrap();
    let region = k * (1 << 20);
    let mut page = vec![0u8; 4096];
    while ctx.running() {
        ctx.at("issuer-run write");
        let off = region + ctx.rng.below(256) * 4096;
        let io = me
            .acquire()
            .unwrap()
            .write(&wf, off, IoBuf::from_slice(&[k as u8 + 1; 4096]));
        board.publish(io.wait_ref());
        if ctx.rng.one_in(2) {
            drop(io);
        } else {
            ctx.timed(|| me.wait(io)).check().unwrap();
            ctx.count_completions(1);
        }
        ctx.at("synchronous read");
        let off = ctx.rng.below(256) * 4096;
        let mut h = me.acquire().unwrap();
        h.set_flags(HandleFlags::SYNCHRONOUS);
        board.publish(h.wait_ref());
        let io = h.read(&rf, off, IoBuf::new(4096));
        let c = ctx.timed(|| me.wait(io));
        check_pages(&c.into_buf(), off);
        ctx.count_completions(1);
        if ctx.rng.one_in(8) {
            ctx.at("fsync");
            let io = me.acquire().unwrap().fsync(&wf);
            board.publish(io.wait_ref());
            ctx.timed(|| me.wait(io)).check().unwrap();
        }
        ctx.at("slice read");
        let off = ctx.rng.below(256) * 4096;
        me.read_exact_into(&rf, off, &mut page).unwrap();
        check_pages(&page, off);
        ctx.count_wait();
    }
}

fn watcher(mut ctx: Ctx, board: Arc<Board>) {
    while ctx.running() {
        let Some(w) = board.next(ctx.rng.next()) else {
            std::thread::yield_now();
            continue;
        };
        ctx.at("waiting on an issuer-run I/O");
        ctx.foreign_wait(w);
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |_| {});
    let data = attack.data_file("data", 1 << 20);
    let path = attack.dir.path().join("w");
    std::fs::write(&path, vec![0u8; 2 << 20]).unwrap();
    let board = Arc::new(Board::default());
    for k in 0..2 {
        let (p, d, b) = (path.clone(), data.clone(), Arc::clone(&board));
        attack.spawn(&format!("writer {k}"), move |ctx| writer(ctx, p, d, k, b));
    }
    for k in 0..2 {
        let b = Arc::clone(&board);
        attack.spawn(&format!("watcher {k}"), move |ctx| watcher(ctx, b));
    }
    attack.run("issuer_runs_its_own");
}

every_column!(scenario);
