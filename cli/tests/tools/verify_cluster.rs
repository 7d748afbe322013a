//! `dbaio verify` on a small cluster built from real PostgreSQL 18.6 pages (tests/fixtures/pg18)
//! placed at their true block numbers — including one page of segment `.1`, whose checksum
//! mixes in block 131072 + 12345 — with new (all-zero) pages between them, the files
//! pg_checksums skips, and a temporary directory. Clean: pg_checksums' counts and no finding.
//! Corrupted: exactly the corrupted blocks, with pg_checksums' message, calculated and stored
//! checksums. A cluster not shut down, or without checksums, is refused.

use crate::support::*;
use dbaio::IoMethodKind;
use dbaio_cli::checksums::{VerifyOptions, run};
use std::os::unix::fs::FileExt;
use std::path::Path;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../tests/fixtures/pg18/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn put(path: &Path, blocks: u64, pages: &[(u64, Vec<u8>)]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::create(path).unwrap();
    f.set_len(blocks * 8192).unwrap(); // sparse: the other blocks read as new, all-zero pages
    for (blk, page) in pages {
        f.write_all_at(page, blk * 8192).unwrap();
    }
}

fn cluster(root: &Path) {
    std::fs::create_dir_all(root.join("global")).unwrap();
    std::fs::write(root.join("global/pg_control"), fixture("pg_control")).unwrap();
    std::fs::write(root.join("global/pg_filenode.map"), [7u8; 512]).unwrap();
    let rel = root.join("base/5/16403");
    put(
        &rel,
        1001,
        &[
            (0, fixture("16403-block0.page")),
            (1, fixture("16403-block1.page")),
            (1000, fixture("16403-block1000.page")),
        ],
    );
    put(
        &root.join("base/5/16403.1"),
        12346,
        &[(12345, fixture("16403.1-block12345.page"))],
    );
    put(
        &root.join("base/5/1259"),
        1,
        &[(0, fixture("1259-block0.page"))],
    );
    put(
        &root.join("base/5/1259_fsm"),
        1,
        &[(0, fixture("1259_fsm-block0.page"))],
    );
    put(
        &root.join("base/5/1259_vm"),
        1,
        &[(0, fixture("1259_vm-block0.page"))],
    );
    std::fs::write(root.join("base/5/PG_VERSION"), b"18\n").unwrap();
    std::fs::write(root.join("base/5/pg_internal.init"), [1u8; 100]).unwrap();
    std::fs::create_dir_all(root.join("base/pgsql_tmp")).unwrap();
    std::fs::write(root.join("base/pgsql_tmp/pgsql_tmp123.0"), [1u8; 100]).unwrap();
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let root = d.path().join("pgdata");
    cluster(&root);
    let opts = VerifyOptions {
        settings: dbaio::Settings {
            io_method: m,
            io_workers: 2,
            ..dbaio::Settings::default()
        },
        depth: 8,
        direct: true,
        given: Vec::new(),
    };
    let r = run(&root, &opts).unwrap();
    assert_eq!(
        (
            r.files_scanned,
            r.blocks_scanned,
            r.bad_checksums,
            r.data_checksum_version
        ),
        (5, 1001 + 12346 + 3, 0, 1)
    );
    assert!(r.summary().starts_with("Checksum operation completed\nFiles scanned:   5\nBlocks scanned:  13350\nBad checksums:  0\n"));

    // Corrupt block 1000 of the first segment and block 12345 of the second.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("base/5/16403"))
        .unwrap();
    f.write_all_at(&[0xEE], 1000 * 8192 + 4000).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("base/5/16403.1"))
        .unwrap();
    f.write_all_at(&[0xEE], 12345 * 8192 + 77).unwrap();
    let r = run(&root, &opts).unwrap();
    assert_eq!(r.bad_checksums, 2);
    let got: Vec<(String, u32)> = r
        .failures
        .iter()
        .map(|f| (f.file.rsplit('/').next().unwrap().to_string(), f.block))
        .collect();
    assert_eq!(
        got,
        [("16403".to_string(), 1000), ("16403.1".to_string(), 12345)]
    );
    let f = &r.failures[1];
    assert_eq!(
        f.found,
        u16::from_le_bytes(
            fixture("16403.1-block12345.page")[8..10]
                .try_into()
                .unwrap()
        )
    );
    assert_eq!(
        f.message(),
        format!(
            "checksum verification failed in file \"{}\", block 12345: calculated checksum {:X} but block contains {:X}",
            root.join("base/5/16403.1").display(),
            f.calculated,
            f.found
        )
    );

    // Refusals, with pg_checksums' words: a control file changed and re-sealed with its CRC…
    let original = fixture("pg_control");
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let crc_off = (64..1020)
        .step_by(4)
        .find(|&o| crc.checksum(&original[..o]) == at(&original, o))
        .unwrap();
    let sealed = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut c = original.clone();
        edit(&mut c);
        let sum = crc.checksum(&c[..crc_off]);
        c[crc_off..crc_off + 4].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(root.join("global/pg_control"), &c).unwrap();
    };
    sealed(&|c| c[16] = 6); // DB_IN_PRODUCTION
    assert_eq!(run(&root, &opts).unwrap_err(), "cluster must be shut down");
    sealed(&|c| c[crc_off - 40..crc_off - 36].copy_from_slice(&0u32.to_le_bytes()));
    assert_eq!(
        run(&root, &opts).unwrap_err(),
        "data checksums are not enabled in cluster"
    );
    // …and one whose CRC no longer matches.
    let mut torn = original.clone();
    torn[16] = 6;
    std::fs::write(root.join("global/pg_control"), &torn).unwrap();
    assert!(
        run(&root, &opts)
            .unwrap_err()
            .starts_with("calculated CRC checksum does not match value stored in control file")
    );
}

crate::for_every_method!(scenario);
