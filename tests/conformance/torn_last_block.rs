//! A read of less than one block is an error, said once: a relation file whose last block is
//! torn (2 × 8192 + 100 bytes), a block past the end, and a persistent short-read fault each
//! make `read_block` fail with PostgreSQL's `could not read blocks N..N …: read only 0 of 8192
//! bytes` (it counts whole blocks), and a read stream yields that error for the block and
//! goes on. Guards against: the
//! partial result taken for success, the buffer marked failed and read again in a loop that
//! never returns (issue 15, item 7).

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoMethodKind, Op, OpenOptions, ReadStream, ReadStreamOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("16403");
    let mut data: Vec<u8> = (0..2 * 8192 + 100).map(pattern_byte).collect();
    data[8192 * 2..].fill(7);
    std::fs::write(&path, &data).unwrap();
    let aio = start(m);
    let a2 = aio.clone();
    let p2 = path.clone();
    within(60, "reads of a torn last block", move || {
        let me = a2.register_issuer("torn").unwrap();
        let f = a2.open(&p2, &OpenOptions::read()).unwrap();
        assert_pattern(me.read_block(&f, 1).unwrap().page(), 8192);
        let e = me
            .read_block(&f, 2)
            .err()
            .expect("a torn block is an error");
        assert_eq!(
            e.to_string(),
            format!(
                "could not read blocks 2..2 in file \"{}\": read only 0 of 8192 bytes",
                p2.display()
            )
        );
        let e = me
            .read_block(&f, 3)
            .err()
            .expect("past the end is an error");
        assert!(e.to_string().ends_with("read only 0 of 8192 bytes"), "{e}");
        // Asked again, the same answer (not a success, not a hang).
        assert!(me.read_block(&f, 2).is_err());

        // A persistent short read of a whole block.
        a2.inject_fault(
            FaultRule::new(FaultAction::Short(100))
                .op(Op::Readv)
                .on_file(&f)
                .offsets(0..1),
        );
        let e = me
            .read_block(&f, 0)
            .err()
            .expect("a short read is an error");
        assert!(e.to_string().ends_with("read only 0 of 8192 bytes"), "{e}");
        a2.clear_faults();

        // A stream hands out the whole blocks, the torn one's error, and ends.
        let rel = dbaio::Relation::from_file(f.clone()).unwrap();
        assert_eq!(rel.nblocks(), 2, "whole blocks only");
        let blocks: Vec<_> =
            ReadStream::new(&me, &rel, 0..3, ReadStreamOptions::default()).collect();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0].as_ref().unwrap().block(), 0);
        assert_eq!(blocks[1].as_ref().unwrap().block(), 1);
        let e = blocks[2].as_ref().err().unwrap();
        assert_eq!(e.block, 2);
        assert!(e.to_string().contains("read only 0 of 8192 bytes"), "{e}");
        drop(blocks);
        let reads: u64 = a2
            .stats()
            .iter()
            .flat_map(|s| &s.ops)
            .filter(|o| o.op == "readv")
            .map(|o| o.count)
            .sum();
        assert!(
            reads < 20,
            "each failing read was tried once, not in a loop: {reads}"
        );
    });
}

crate::for_every_method!(scenario);
