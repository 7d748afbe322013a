//! Read streams and single-block readers over the same relation through one buffer pool
//! small enough that blocks keep being evicted and read again: a stream's look-ahead waits
//! (`wait_any` inside the stream) race a second reader waiting on the same block's read
//! (`BufferIo`), and readers taking over failed reads. Guards against the issue-15 shape: a
//! stream's wait against a second reader of the same block (a hang), and stalls.

use crate::every_column;
use crate::harness::{Attack, Column, Ctx};
use dbaio::{OpenOptions, ReadStream, ReadStreamOptions, Relation};
use std::sync::Arc;

const BLOCKS: u32 = 2048;

fn streamer(mut ctx: Ctx, path: Arc<std::path::PathBuf>) {
    let me = ctx.aio.register_issuer("stream").unwrap();
    let direct = ctx.rng.one_in(2);
    let rel = Relation::open(&ctx.aio, &*path, &OpenOptions::read().direct(direct)).unwrap();
    while ctx.running() {
        ctx.at("streaming");
        let start = ctx.rng.below(u64::from(BLOCKS) - 64) as u32;
        let len = 1 + ctx.rng.below(64) as u32;
        let mut s = ReadStream::new(&me, &rel, start..start + len, ReadStreamOptions::default());
        let mut n = 0;
        while let Some(b) = ctx.timed(|| s.next_buffer()) {
            let b = b.unwrap();
            assert_eq!(
                b.page()[100],
                (b.block() % 251) as u8,
                "block {}",
                b.block()
            );
            n += 1;
        }
        assert_eq!(n, len);
        ctx.count_completions(u64::from(n));
        ctx.count_wait();
    }
}

fn reader(mut ctx: Ctx, path: Arc<std::path::PathBuf>) {
    let me = ctx.aio.register_issuer("reader").unwrap();
    let f = ctx.aio.open(&*path, &OpenOptions::read()).unwrap();
    while ctx.running() {
        ctx.at("read_block");
        let b = ctx.rng.below(u64::from(BLOCKS)) as u32;
        let buf = ctx.timed(|| me.read_block(&f, b)).unwrap();
        assert_eq!(buf.page()[100], (b % 251) as u8);
        ctx.count_foreign_wait();
    }
}

fn scenario(column: Column) {
    let mut attack = Attack::new(column, |s| {
        s.set("buffer_pool_size", "256").unwrap();
    });
    let path = attack.dir.path().join("rel");
    let mut data = vec![0u8; BLOCKS as usize * 8192];
    for (b, page) in data.chunks_mut(8192).enumerate() {
        page.fill((b % 251) as u8);
    }
    std::fs::write(&path, data).unwrap();
    let path = Arc::new(path);
    for k in 0..2 {
        let p = Arc::clone(&path);
        attack.spawn(&format!("streamer {k}"), move |ctx| streamer(ctx, p));
    }
    for k in 0..2 {
        let p = Arc::clone(&path);
        attack.spawn(&format!("reader {k}"), move |ctx| reader(ctx, p));
    }
    attack.run("buffer_readers");
}

every_column!(scenario);
