//! Page verification at completion, on every method, with real PostgreSQL 18.6 pages
//! (tests/fixtures/pg18) at their true block numbers, one of them in segment `.1` (its checksum
//! mixes in block 131072 + 12345, so it verifies only under the relation's numbering). Clean pages
//! pass; then one page gets a flipped byte (a checksum failure) and an all-zero page gets a stray
//! byte (an invalid new page), and each mode does what PostgreSQL does: error (the read fails with
//! `2 invalid pages among blocks 0..7 of relation "…"`, the good pages of the same read are valid,
//! and a single-block read says `invalid page in block 3 of relation "…"`), zero-on-error (pages
//! zeroed, one warning), ignore-checksum-failure (the checksum-only page kept with a warning, the
//! invalid new page still an error), and off.
//! Guards against: a checksum computed with the segment's block number instead of the relation's; a
//! bad page passed, or the good pages of the same combined read failed with it; a mode that does
//! not do what PostgreSQL does (wrong words, pages not zeroed, a checksum failure not ignored or a
//! bad new page ignored with it); and a buffer that failed verification and cannot be read again,
//! or a buffer mapping left inconsistent.

use crate::support::*;
use dbaio::{
    Aio, IoMethodKind, Issuer, OpenOptions, PageVerification, ReadStream, ReadStreamOptions,
    Relation,
};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/pg18/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn put(path: &Path, blocks: u64, pages: &[(u64, &[u8])]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::create(path).unwrap();
    f.set_len(blocks * 8192).unwrap(); // sparse: the rest are new, all-zero pages
    for (blk, page) in pages {
        f.write_all_at(page, blk * 8192).unwrap();
    }
}

const SEG1_BLOCK: u32 = 131_072 + 12_345;

fn open(m: IoMethodKind, path: &Path) -> (Aio, Relation) {
    let aio = start_with(m, |s| s.buffer_pool_size = 256);
    let rel = Relation::open(&aio, path, &OpenOptions::read().direct(true)).unwrap();
    (aio, rel)
}

/// Streams `blocks`; Ok pages or error texts, by block.
fn stream(me: &Issuer, rel: &Relation, blocks: &[u32]) -> Vec<(u32, Result<Vec<u8>, String>)> {
    // Full distance from the start, so blocks 0..7 are one combined read.
    let full = ReadStreamOptions {
        full: true,
        ..ReadStreamOptions::default()
    };
    ReadStream::new(me, rel, blocks.to_vec(), full)
        .map(|b| match b {
            Ok(b) => (b.block(), Ok(b.page().to_vec())),
            Err(e) => (e.block, Err(e.to_string())),
        })
        .collect()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path: PathBuf = d.path().join("base/5/16403");
    let (b0, b1, b1000, b12345) = (
        fixture("16403-block0.page"),
        fixture("16403-block1.page"),
        fixture("16403-block1000.page"),
        fixture("16403.1-block12345.page"),
    );
    put(&path, 131_072, &[(0, &b0), (1, &b1), (1000, &b1000)]);
    let seg1 = d.path().join("base/5/16403.1");
    put(&seg1, 12_346, &[(12_345, &b12345)]);
    let rel_name = path.display().to_string();

    // Clean, error mode: every page valid, contents as written.
    let (aio, rel) = open(m, &path);
    let me = aio.register_issuer("verify").unwrap();
    me.set_page_verification(PageVerification::ERROR);
    let blocks: Vec<u32> = (0..8).chain([1000, SEG1_BLOCK]).collect();
    for (blk, r) in stream(&me, &rel, &blocks) {
        let page = r.unwrap_or_else(|e| panic!("block {blk}: {e}"));
        match blk {
            0 => assert_eq!(page, b0),
            1 => assert_eq!(page, b1),
            1000 => assert_eq!(page, b1000),
            SEG1_BLOCK => assert_eq!(page, b12345),
            _ => assert!(page.iter().all(|&b| b == 0)),
        }
    }
    // The segment's page verifies only as relation block 131072 + 12345.
    let alone = aio.open(&seg1, &OpenOptions::read()).unwrap();
    let e = me
        .read_block(&alone, 12_345)
        .err()
        .expect("wrong block number");
    assert_eq!(
        e.to_string(),
        format!(
            "invalid page in block 12345 of relation \"{}\"",
            seg1.display()
        )
    );
    drop((alone, me, rel, aio));

    // Corrupt: block 1 gets a flipped byte, new page 3 a stray byte.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[b1[5000] ^ 0x40], 8192 + 5000).unwrap();
    f.write_all_at(&[1], 3 * 8192 + 100).unwrap();
    drop(f);
    let eight: Vec<u32> = (0..8).collect();

    // Error mode: the combined read fails for blocks 1 and 3 only, with PostgreSQL's words.
    let (aio, rel) = open(m, &path);
    let me = aio.register_issuer("error").unwrap();
    me.set_page_verification(PageVerification::ERROR);
    let got = stream(&me, &rel, &eight);
    for (blk, r) in &got {
        match (blk, r) {
            (1 | 3, Err(e)) => assert_eq!(
                e,
                &format!(
                    "2 invalid pages among blocks 0..7 of relation \"{rel_name}\"\nDETAIL:  Block 1 held the first invalid page.\nHINT:  See the log for details about the other 1 invalid block(s)."
                )
            ),
            (1 | 3, Ok(_)) => panic!("block {blk} is invalid"),
            (_, r) => assert!(r.is_ok(), "block {blk}: {r:?}"),
        }
    }
    let e = me
        .read_block(rel.segments().first().unwrap(), 3)
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        format!("invalid page in block 3 of relation \"{rel_name}\"")
    );
    let dbaio::AioError::Io(io) = e else {
        panic!("an I/O error")
    };
    assert_eq!((io.invalid_pages, io.errno), (1, 0));
    // Its detail in words, not a debug dump of the packed verdicts (found by a caller-side
    // attack on the documentation, 2026-12-07: `ReadVerdicts { zeroed_any: false, … }`).
    assert_eq!(
        io.detail.as_deref(),
        Some("1 invalid page (0 checksum failures), the first at page 0 of the read")
    );
    // With verification off the same buffer is read again, and used as it is.
    me.set_page_verification(PageVerification::OFF);
    let p = me.read_block(rel.segments().first().unwrap(), 1).unwrap();
    assert_eq!(p.page()[5000], b1[5000] ^ 0x40);
    drop(p);
    aio.check_buffer_mapping().unwrap();
    drop((me, rel, aio));

    // Zero on error: both pages come back zeroed, with one warning for the read.
    let (aio, rel) = open(m, &path);
    let me = aio.register_issuer("zero").unwrap();
    me.set_page_verification(PageVerification::ZERO_ON_ERROR);
    let logs = capture_logs(|| {
        for (blk, r) in stream(&me, &rel, &eight) {
            let page = r.unwrap_or_else(|e| panic!("block {blk}: {e}"));
            if blk == 1 || blk == 3 {
                assert!(page.iter().all(|&b| b == 0), "block {blk} zeroed");
            }
        }
    });
    assert!(
        logs.contains(&format!(
            "zeroing out 2 invalid pages among blocks 0..7 of relation \"{rel_name}\""
        )),
        "{logs}"
    );
    drop((me, rel, aio));

    // Ignore checksum failures: block 1 kept as it is (one warning); block 3 still invalid.
    let (aio, rel) = open(m, &path);
    let me = aio.register_issuer("ignore").unwrap();
    me.set_page_verification(PageVerification::IGNORE_CHECKSUM_FAILURE);
    let seg0 = rel.segments().first().unwrap();
    let logs = capture_logs(|| {
        let p = me.read_block(seg0, 1).unwrap();
        assert_eq!(p.page()[5000], b1[5000] ^ 0x40);
    });
    assert!(
        logs.contains(&format!(
            "ignoring checksum failure in block 1 of relation \"{rel_name}\""
        )),
        "{logs}"
    );
    let e = me.read_block(seg0, 3).err().unwrap();
    assert!(e.to_string().starts_with("invalid page in block 3"), "{e}");
}

crate::for_every_method!(scenario);
