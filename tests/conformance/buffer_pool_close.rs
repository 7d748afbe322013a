//! The buffer pool on every method, closing a file: a closed file's buffers are forgotten —
//! by a scan of the pool, or, for a small file in a large pool, by looking its blocks up —
//! so that another file reusing its slot in the file table never hits them, while a pin
//! taken before the close still holds its page. Guards against a stale hit: the new file
//! served the old file's bytes (caught in `dbaio verify`, which closes files as it goes).

use crate::support::*;
use dbaio::{IoMethodKind, OpenOptions};

/// A 4-block file of 0xee bytes.
fn other_file(d: &tempfile::TempDir) -> std::path::PathBuf {
    let other = d.path().join("other");
    std::fs::write(&other, vec![0xeeu8; 4 * 8192]).unwrap();
    other
}

/// A 256-block file read into a 32-buffer pool, then closed (too big for lookups: its
/// buffers are dropped by a scan); the next file opened reuses its slot and reads blocks 2
/// and 3 as its own 0xee bytes. Guards against buffers of a closed file left in the mapping.
fn a_closed_files_buffers_are_forgotten_by_a_scan(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "rel", 256 * 8192);
    let other = other_file(&d);
    let aio = start_with(m, |s| s.buffer_pool_size = 32);
    let me = aio.register_issuer("pool").unwrap();
    let a = aio.open(&path, &OpenOptions::read()).unwrap();
    assert_pattern(me.read_block(&a, 2).unwrap().page(), 2 * 8192);
    let kept = me.read_block(&a, 3).unwrap();
    drop(a);
    let b = aio.open(&other, &OpenOptions::read()).unwrap();
    for blk in [2, 3] {
        assert!(
            me.read_block(&b, blk)
                .unwrap()
                .page()
                .iter()
                .all(|&x| x == 0xee),
            "block {blk} is the new file's"
        );
    }
    assert_pattern(kept.page(), 3 * 8192); // a pin outlives its file's buffers being dropped
    drop((kept, b));
    aio.check_buffer_mapping().unwrap();
}

/// In a pool of 2048 buffers a 40-block file's buffers (under a 32nd of the pool) are dropped
/// by looking its blocks up, not by a scan: every one of them is gone once it is closed, and
/// the next file reads its own bytes. Guards against the lookup path missing blocks the scan
/// would have found.
fn a_small_files_buffers_are_forgotten_by_lookups_in_a_large_pool(m: IoMethodKind) {
    let d = dir();
    let other = other_file(&d);
    let aio = start_with(m, |s| s.buffer_pool_size = 2048);
    let me = aio.register_issuer("large").unwrap();
    let small = data_file(&d, "small", 40 * 8192);
    let a = aio.open(&small, &OpenOptions::read().direct(true)).unwrap();
    for blk in 0..40 {
        assert_pattern(
            me.read_block(&a, blk).unwrap().page(),
            u64::from(blk) * 8192,
        );
    }
    let kept = me.read_block(&a, 5).unwrap();
    assert_eq!(aio.check_buffer_mapping().unwrap(), 40);
    drop(a);
    assert_eq!(
        aio.check_buffer_mapping().unwrap(),
        0,
        "every block of the file dropped"
    );
    let b = aio.open(&other, &OpenOptions::read()).unwrap();
    for blk in 0..4 {
        let page = me.read_block(&b, blk).unwrap();
        assert!(
            page.page().iter().all(|&x| x == 0xee),
            "block {blk} is the new file's"
        );
    }
    assert_pattern(kept.page(), 5 * 8192);
    drop((kept, b));
    assert_eq!(aio.check_buffer_mapping().unwrap(), 0);
}

crate::for_every_method!(
    a_closed_files_buffers_are_forgotten_by_a_scan,
    a_small_files_buffers_are_forgotten_by_lookups_in_a_large_pool,
);
