//! A mesh: every thread is an issuer that starts reads, writes and fsyncs, publishes their
//! wait references, and waits on the others' (and its own) at random — `Aio::wait`,
//! `Issuer::wait_ref`, `wait_any` — while issuers exit and new ones register in their place
//! and `with_issuer` threads come and go. Guards against any wait that depends on a thread
//! that has moved on (a hang), and against waits ended by a safety-net timeout.

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::{IoBuf, OpenOptions};
use std::sync::Arc;

const FILE_LEN: u64 = 4 << 20;

fn member(
    mut ctx: Ctx,
    read_path: std::path::PathBuf,
    write_path: std::path::PathBuf,
    k: u64,
    board: Arc<Board>,
) {
    let region = k * (1 << 20);
    while ctx.running() {
        // An issuer lives for a few dozen rounds, then exits with I/Os in flight.
        ctx.at("registering");
        let me = ctx.aio.register_issuer("mesh").unwrap();
        let direct = ctx.rng.one_in(2);
        let rf = ctx
            .aio
            .open(&read_path, &OpenOptions::read().direct(direct))
            .unwrap();
        let wf = ctx
            .aio
            .open(&write_path, &OpenOptions::read_write())
            .unwrap();
        let rounds = 8 + ctx.rng.below(40);
        for _ in 0..rounds {
            if !ctx.running() {
                break;
            }
            let batch = ctx.rng.one_in(2);
            if batch {
                me.begin_batch().unwrap();
            }
            let mut reads = Vec::new();
            for _ in 0..1 + ctx.rng.below(6) {
                let off = ctx.rng.below(FILE_LEN / 4096) * 4096;
                let io = me.acquire().unwrap().read(&rf, off, IoBuf::new(4096));
                board.publish(io.wait_ref());
                reads.push((off, io));
            }
            if ctx.rng.one_in(2) {
                let off = region + ctx.rng.below(256) * 4096;
                let io = me
                    .acquire()
                    .unwrap()
                    .write(&wf, off, IoBuf::from_slice(&[k as u8; 4096]));
                board.publish(io.wait_ref());
                io.detach();
            }
            if ctx.rng.one_in(8) {
                let io = me.acquire().unwrap().fsync(&wf);
                board.publish(io.wait_ref());
                drop(io);
            }
            if batch && ctx.rng.one_in(2) {
                me.end_batch();
            }
            // Someone else's I/O (or our own, staged or not) first.
            if let Some(w) = board.next(ctx.rng.next()) {
                ctx.at("waiting on a published I/O");
                if ctx.rng.one_in(2) {
                    ctx.timed(|| ctx.aio.wait(w)).unwrap();
                } else {
                    ctx.timed(|| me.wait_ref(w)).unwrap();
                }
                ctx.count_foreign_wait();
            }
            ctx.at("wait_any");
            ctx.timed(|| me.wait_any());
            ctx.count_wait();
            if me.in_batch() {
                me.end_batch();
            }
            for (off, io) in reads {
                ctx.at("redeeming its reads");
                let c = ctx.timed(|| me.wait(io));
                check_pages(&c.into_buf(), off);
                ctx.count_completions(1);
            }
        }
        ctx.at("exiting its issuer");
        drop(me);
    }
}

fn drifter(mut ctx: Ctx, board: Arc<Board>) {
    // A thread with no issuer of its own until `with_issuer` makes one; waits on the board.
    while ctx.running() {
        if let Some(w) = board.next(ctx.rng.next()) {
            ctx.at("Aio::wait from a thread without an issuer");
            ctx.foreign_wait(w);
        }
        if ctx.rng.one_in(16) {
            ctx.at("a with_issuer thread comes and goes");
            let aio = ctx.aio.clone();
            let b = Arc::clone(&board);
            std::thread::spawn(move || {
                aio.with_issuer(|me| {
                    if let Some(w) = b.pick(3) {
                        me.wait_ref(w).unwrap();
                    }
                })
                .unwrap();
            })
            .join()
            .unwrap();
        }
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |_| {});
    let read_path = attack.data_file("data", FILE_LEN);
    let write_path = attack.dir.path().join("w");
    std::fs::write(&write_path, vec![0u8; 4 << 20]).unwrap();
    let board = Arc::new(Board::default());
    for k in 0..4 {
        let (r, w, b) = (read_path.clone(), write_path.clone(), Arc::clone(&board));
        attack.spawn(&format!("member {k}"), move |ctx| member(ctx, r, w, k, b));
    }
    let b = Arc::clone(&board);
    attack.spawn("drifter", move |ctx| drifter(ctx, b));
    attack.run("mesh");
}

every_column!(scenario);
