//! PostgreSQL's checksum accounting (issue 15, item 9): a page with a bad header *and* a bad
//! checksum counts as a checksum failure (it did not before); a read that zeroes one page and
//! ignores another's checksum failure says both, in PostgreSQL's words; and `read_block`'s
//! checksum failures are counted for the issuer as streams' are.
//! Guards against: a page failing both the header check and the checksum counted as no checksum
//! failure (or as two); a combined read's log line naming only the zeroed page or only the ignored
//! failure; and `read_block`'s checksum failures missing from the issuer's count.

use crate::support::*;
use dbaio::{IoMethodKind, OpenOptions, PageVerification, ReadStream, ReadStreamOptions, Relation};
use std::os::unix::fs::FileExt;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/pg18/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("16403");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(4 * 8192).unwrap();
    let good = [fixture("16403-block0.page"), fixture("16403-block1.page")];
    f.write_all_at(&good[0], 0).unwrap();
    f.write_all_at(&good[1], 8192).unwrap();
    // Block 2: block 0's page, moved (checksum fails) and with an unknown flag bit (header
    // bad too). Block 3: block 1's page, moved (checksum fails, header sane).
    let mut bad_both = good[0].clone();
    bad_both[10] |= 0x80;
    f.write_all_at(&bad_both, 2 * 8192).unwrap();
    f.write_all_at(&good[1], 3 * 8192).unwrap();
    drop(f);

    let aio = start(m);
    let me = aio.register_issuer("accounting").unwrap();
    let file = aio.open(&path, &OpenOptions::read()).unwrap();
    me.set_page_verification(PageVerification::ERROR);
    let e = me.read_block(&file, 2).err().expect("block 2 is invalid");
    assert_eq!(
        e.to_string(),
        format!("invalid page in block 2 of relation \"{}\"", path.display())
    );
    assert_eq!(
        me.checksum_failures(),
        1,
        "bad header and bad checksum: one failure"
    );
    assert!(me.read_block(&file, 3).is_err());
    assert_eq!(me.checksum_failures(), 2);
    assert!(me.read_block(&file, 0).is_ok());
    assert_eq!(me.checksum_failures(), 2);
    me.close(file);

    // One read of blocks 0..3: block 2 zeroed, block 3's failure ignored.
    let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
    me.set_page_verification(PageVerification {
        verify: true,
        zero_on_error: true,
        ignore_checksum_failure: true,
    });
    let logs = capture_logs(|| {
        let opts = ReadStreamOptions {
            full: true,
            ..ReadStreamOptions::default()
        };
        let mut s = ReadStream::new(&me, &rel, 0..4, opts);
        let mut n = 0;
        for b in s.by_ref() {
            let b = b.unwrap();
            if b.block() == 2 {
                assert!(b.page().iter().all(|&x| x == 0), "zeroed");
            }
            n += 1;
        }
        assert_eq!(n, 4);
        assert_eq!(s.stats().checksum_failures, 2);
        assert_eq!(s.stats().zeroed_pages, 1);
    });
    assert!(
        logs.contains(&format!(
            "zeroing 1 page(s) and ignoring 2 checksum failure(s) among blocks 0..3 of relation \"{}\"",
            path.display()
        )),
        "{logs}"
    );
    assert_eq!(me.checksum_failures(), 4);
}

crate::for_every_method!(scenario);
