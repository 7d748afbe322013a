//! `dbaio prewarm` (the library half) on every method: given a relation's first segment it
//! follows `.1` and `.2`, brings every block into the pool, and reports files, blocks and
//! bytes that match the files; with `--verify-checksums` a corrupted real PostgreSQL page is
//! counted and named in PostgreSQL's words while every other block is still prewarmed; the
//! same on a pool advised to use transparent huge pages.

use crate::support::*;
use dbaio::IoMethodKind;
use dbaio_cli::prewarm::{PrewarmOptions, run};
use std::os::unix::fs::FileExt;

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("16403");
    let page0 = std::fs::read(format!(
        "{}/../tests/fixtures/pg18/16403-block0.page",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    for (name, blocks) in [("16403", 100u64), ("16403.1", 100), ("16403.2", 37)] {
        let f = std::fs::File::create(d.path().join(name)).unwrap();
        f.set_len(blocks * 8192).unwrap(); // new, all-zero pages
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&page0, 0)
        .unwrap();
    let mut settings = settings(m);
    settings.buffer_pool_size = 0; // sized to fit
    let mut opts = PrewarmOptions {
        files: vec![path.clone()],
        settings,
        direct: true,
        verify_checksums: true,
        segment_blocks: 100,
        keep_max_issuers: false,
    };
    let r = run(&opts).unwrap();
    assert_eq!((r.files, r.blocks, r.bytes), (3, 237, 237 * 8192), "{r:?}");
    assert_eq!((r.checksum_failures, r.errors.len()), (0, 0), "{r:?}");
    assert!(r.reads < 237 / 4, "reads are combined: {r:?}");
    assert_eq!(r.io_method, m.name());

    // A flipped byte in block 0: counted, named, and the other 236 blocks still prewarmed.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[page0[4000] ^ 1], 4000)
        .unwrap();
    let r = run(&opts).unwrap();
    assert_eq!((r.blocks, r.checksum_failures), (236, 1), "{r:?}");
    assert_eq!(
        r.errors,
        [format!(
            "invalid page in block 0 of relation \"{}\"",
            path.display()
        )]
    );
    opts.verify_checksums = false;
    assert_eq!(run(&opts).unwrap().blocks, 237);

    // The same on a pool advised to use transparent huge pages (4 KiB pages where the kernel
    // refuses the advice): only the backing changes.
    opts.settings.transparent_huge_pages = true;
    opts.verify_checksums = true;
    let r = run(&opts).unwrap();
    assert_eq!((r.blocks, r.checksum_failures), (236, 1), "{r:?}");
}

crate::for_every_method!(scenario);
