//! A combined read lands in one contiguous piece of memory even when the pool has been
//! recycled: after one scan has used every buffer once, a second scan's 16-block reads still
//! go into 16 adjacent buffers (the pool prefers the buffer right after the previous block's,
//! when it was used at most once). Guards against: reads scattered over clock-sweep victims,
//! which a virtio disk served markedly slower per request (docs/benchmarks.md, "Checksum
//! verification").

use crate::support::*;
use dbaio::{IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions, Relation};

/// Scans `blocks` blocks of `rel` and returns (reads, places where a block's page does not
/// directly follow the previous block's).
fn scan(me: &dbaio::Issuer, rel: &Relation, blocks: u32) -> (u64, u64) {
    let opts = ReadStreamOptions {
        sequential: true,
        ..ReadStreamOptions::default()
    };
    let mut s = ReadStream::new(me, rel, 0..blocks, opts);
    let (mut prev, mut breaks, mut next) = (None::<usize>, 0, 0);
    while let Some(b) = s.next_buffer() {
        let b = b.unwrap();
        assert_eq!(b.block(), next);
        assert_pattern(b.page(), u64::from(next) * 8192);
        let at = b.page().as_ptr() as usize;
        if prev.is_some_and(|p| p + 8192 != at) {
            breaks += 1;
        }
        prev = Some(at);
        next += 1;
    }
    assert_eq!(next, blocks);
    (s.stats().ios, breaks)
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let first = data_file(&d, "first", 1024 * 8192);
    let second = data_file(&d, "second", 1024 * 8192);
    let aio = start_with(m, |s| {
        s.buffer_pool_size = 256;
        s.max_issuers = 2;
    });
    let me = aio.register_issuer("scan").unwrap();
    let open = OpenOptions::read().direct(true);
    let a = Relation::open(&aio, &first, &open).unwrap();
    let b = Relation::open(&aio, &second, &open).unwrap();
    // The first scan uses every buffer of the pool, several times over.
    scan(&me, &a, 1024);
    let (reads, breaks) = scan(&me, &b, 1024);
    assert!(reads >= 64, "1024 blocks in reads of at most 16: {reads}");
    // Each read may start anywhere, but inside a read the pages are adjacent.
    assert!(
        breaks < reads,
        "{breaks} breaks in {reads} reads: reads were scattered over the pool"
    );
    aio.check_buffer_mapping().unwrap();
}

crate::for_every_method!(scenario);
