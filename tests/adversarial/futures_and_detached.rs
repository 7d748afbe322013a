//! Tickets awaited as futures on a tokio runtime, detached I/Os with error callbacks, and
//! groups of tickets — the completions nobody waits for, which the io_uring watcher reaps —
//! while a driver thread waits on its own I/Os and foreign threads wait on the same ones.
//! Guards against a future never woken (its completion left unreaped when a reaper let the
//! ring go as it arrived), and an error callback never called.

use crate::board::Board;
use crate::every_column;
use crate::harness::{Attack, Column, Ctx, check_pages};
use dbaio::{IoBuf, IoGroup, OpenOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const FILE_LEN: u64 = 4 << 20;

fn async_reader(mut ctx: Ctx, path: std::path::PathBuf, board: Arc<Board>) {
    let f = ctx.aio.open(&path, &OpenOptions::read()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    while ctx.running() {
        ctx.at("awaiting tickets as futures");
        let seed = ctx.rng.next();
        let n = rt.block_on(async {
            let tasks: Vec<_> = (0..8u64)
                .map(|t| {
                    let (aio, f, board) = (ctx.aio.clone(), f.clone(), Arc::clone(&board));
                    tokio::spawn(async move {
                        let off = (seed.wrapping_add(t * 7919) % (FILE_LEN / 4096)) * 4096;
                        let ticket = aio
                            .with_issuer(|me| {
                                me.acquire()
                                    .map(|h| h.read(&f, off, IoBuf::new(4096)).into_ticket())
                            })
                            .unwrap()
                            .unwrap();
                        board.publish(ticket.wait_ref());
                        let c = ticket.await;
                        check_pages(&c.into_buf(), off);
                    })
                })
                .collect();
            let mut n = 0;
            for t in tasks {
                t.await.unwrap();
                n += 1;
            }
            n
        });
        ctx.count_completions(n);
        ctx.count_wait();
    }
}

fn detacher(mut ctx: Ctx, path: std::path::PathBuf, errors: Arc<AtomicU64>) {
    let me = ctx.aio.register_issuer("detacher").unwrap();
    let f = ctx.aio.open(&path, &OpenOptions::read()).unwrap();
    let mut called = 0u64;
    while ctx.running() {
        ctx.at("detaching reads past the end (each fails)");
        for _ in 0..4 {
            let e = Arc::clone(&errors);
            me.acquire()
                .unwrap()
                .read(&f, FILE_LEN + ctx.rng.below(64) * 4096, IoBuf::new(4096))
                .on_error(move |_| {
                    e.fetch_add(1, Ordering::SeqCst);
                });
            called += 1;
        }
        ctx.at("a group of tickets");
        let group = IoGroup::new();
        for _ in 0..4 {
            let off = ctx.rng.below(FILE_LEN / 4096) * 4096;
            group.push(
                me.acquire()
                    .unwrap()
                    .read(&f, off, IoBuf::new(4096))
                    .into_ticket(),
            );
        }
        ctx.timed(|| group.wait()).unwrap();
        ctx.count_wait();
        ctx.count_completions(4);
    }
    ctx.at("waiting for every error callback");
    drop(me);
    // Every detached failure reaches its callback, once; none is lost with nobody waiting.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while errors.load(Ordering::SeqCst) < called {
        assert!(
            std::time::Instant::now() < end,
            "{} of {called} error callbacks ran",
            errors.load(Ordering::SeqCst)
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(errors.load(Ordering::SeqCst), called);
}

fn foreign(mut ctx: Ctx, board: Arc<Board>) {
    while ctx.running() {
        let Some(w) = board.next(ctx.rng.next()) else {
            std::thread::yield_now();
            continue;
        };
        ctx.at("Aio::wait on a future's I/O");
        ctx.foreign_wait(w);
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |_| {});
    let path = attack.data_file("data", FILE_LEN);
    let board = Arc::new(Board::default());
    let (p, b) = (path.clone(), Arc::clone(&board));
    attack.spawn("async reader", move |ctx| async_reader(ctx, p, b));
    let errors = Arc::new(AtomicU64::new(0));
    let p = path.clone();
    attack.spawn("detacher", move |ctx| detacher(ctx, p, errors));
    let b = Arc::clone(&board);
    attack.spawn("foreign waiter", move |ctx| foreign(ctx, b));
    attack.run("futures_and_detached");
}

every_column!(scenario);
