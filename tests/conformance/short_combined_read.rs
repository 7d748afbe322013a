//! A short read in a combined read is not an error for the blocks that came (issue 32, item
//! 5): a relation whose last block is torn (4 whole blocks and 100 bytes), read by a stream
//! at full distance so that blocks 0..5 go out as one readv, hands out blocks 0..3 and fails
//! only block 4 — with PostgreSQL's words, which count whole blocks: `could not read blocks
//! 4..4 in file "…": read only 0 of 8192 bytes`. Guards against the stream turning the
//! combined read's PARTIAL result into an error for every block it covered.

use crate::support::*;
use dbaio::{IoMethodKind, OpenOptions, ReadStream, ReadStreamOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("16404");
    let data: Vec<u8> = (0..4 * 8192 + 100).map(pattern_byte).collect();
    std::fs::write(&path, &data).unwrap();
    let aio = start(m);
    let me = aio.register_issuer("short-combined").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let rel = dbaio::Relation::from_file(f.clone()).unwrap();
    let opts = ReadStreamOptions {
        full: true,
        ..ReadStreamOptions::default()
    };
    let got: Vec<_> = ReadStream::new(&me, &rel, 0..5, opts).collect();
    assert_eq!(got.len(), 5);
    for (b, r) in got.iter().take(4).enumerate() {
        let buf = r.as_ref().unwrap_or_else(|e| panic!("block {b}: {e}"));
        assert_eq!(buf.block(), b as u32);
        assert_pattern(buf.page(), b as u64 * 8192);
    }
    let e = got[4].as_ref().err().expect("the torn block is an error");
    assert_eq!(e.block, 4);
    assert_eq!(
        e.error.to_string(),
        format!(
            "could not read blocks 4..4 in file \"{}\": read only 0 of 8192 bytes",
            path.display()
        )
    );
    drop(got);
    // One read covered all five blocks: the combining this guards is real.
    let stats: Vec<_> = aio.stats().into_iter().flat_map(|s| s.ops).collect();
    let bytes: u64 = stats
        .iter()
        .filter(|o| o.op == "readv")
        .map(|o| o.bytes)
        .sum();
    assert!(bytes >= 4 * 8192 + 100, "{stats:?}");
}

crate::for_every_method!(scenario);
