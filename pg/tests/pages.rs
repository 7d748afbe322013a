//! Page verification against real PostgreSQL 18.6 pages (the workspace's tests/fixtures/pg18:
//! heap pages of pgbench_accounts, base/5/16403, and pg_class with its fsm and vm forks, from a
//! cluster made with `initdb -k`): every fixture page verifies with its block number, and
//! corrupting any byte, or moving the page to another block number, is caught.
//! Guards against: a checksum that agrees with itself but not with PostgreSQL.

use dbaio_pg::{PageCheck, PageHeader, pg_checksum_page, verify_page};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../tests/fixtures/pg18/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

const PAGES: &[(&str, u32)] = &[
    ("16403-block0.page", 0),
    ("16403-block1.page", 1),
    ("16403-block1000.page", 1000),
    ("1259-block0.page", 0),
    ("1259_fsm-block0.page", 0),
    ("1259_vm-block0.page", 0),
];

#[test]
fn real_pages_verify() {
    for &(name, blk) in PAGES {
        let p = fixture(name);
        let h = PageHeader::of(&p);
        assert!(!h.is_new(), "{name} is an initialised page");
        assert_eq!(
            pg_checksum_page(&p, blk),
            h.checksum,
            "{name}: checksum as PostgreSQL computed it"
        );
        assert_eq!(verify_page(&p, blk, true), PageCheck::Valid, "{name}");
    }
}

#[test]
fn corruption_is_caught() {
    for &(name, blk) in PAGES {
        let good = fixture(name);
        for pos in [0usize, 9, 24, 100, 4096, 8191] {
            let mut p = good.clone();
            p[pos] ^= 0x10;
            let check = verify_page(&p, blk, true);
            if pos == 9 {
                // The checksum field itself: the stored value no longer matches.
                assert!(
                    matches!(check, PageCheck::ChecksumFailure { .. }),
                    "{name} byte {pos}: {check:?}"
                );
            } else {
                assert!(
                    !check.is_valid(),
                    "{name}: flipping byte {pos} went unnoticed"
                );
            }
        }
        assert!(
            matches!(
                verify_page(&good, blk + 1, true),
                PageCheck::ChecksumFailure { .. }
            ),
            "{name} moved"
        );
    }
}
