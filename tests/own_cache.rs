//! An engine that brings its own cache (`buffer_pool_size = 0`): the subsystem starts without
//! a 128 MB pool, handles per issuer no longer derive from the pool, slice I/O works, and the
//! buffer-pool entry points still work through the token pool instead of failing.
//! Guards against: a zero pool that fails to start, a handle count still derived from the
//! missing pool, and `read_block` left without buffers.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{Aio, IoMethodKind, OpenOptions, Settings};

#[test]
fn zero_pool_starts_and_serves_every_entry_point() {
    for m in IoMethodKind::ALL {
        if m == IoMethodKind::IoUring && !skips::io_uring_column("own_cache") {
            continue;
        }
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 64 << 10]).unwrap();
        let mut s = Settings {
            io_method: m,
            ..Settings::default()
        };
        s.set("buffer_pool_size", "0").unwrap();
        let aio = Aio::start(s).unwrap();
        assert_eq!(aio.settings().effective_io_max_concurrency(), 64);
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let mut out = vec![0u8; 8192];
        aio.with_issuer(|me| me.read_exact_into(&f, 8192, &mut out))
            .unwrap()
            .unwrap();
        assert!(out.iter().all(|&b| b == 7));
        let me = aio.register_issuer("blocks").unwrap();
        let page = me.read_block(&f, 3).unwrap();
        assert!(page.page().iter().all(|&b| b == 7), "on {m}");
    }
}
