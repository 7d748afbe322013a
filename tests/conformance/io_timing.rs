//! `track_io_timing = off` (under which the I/O paths read only the coarse clock): the statistics
//! still count every I/O and byte — on the handle path and on the inline path of slice I/O — but
//! record no time and no latency; with it on (the default) the same I/Os have a time. The data read
//! is right either way, and no I/O is left in the aios view.
//! Guards against: I/Os or bytes missing from the statistics with timing off, on the handle or the
//! inline path; time or latency recorded with timing off, or missing with it on; and the untimed
//! path returning wrong data or leaving a handle busy.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

const READS: u64 = 40;

/// Reads `READS` blocks through handles and `READS` through slices; the issuer's readv row.
fn read_both_ways(aio: &dbaio::Aio, path: &std::path::Path) -> dbaio::OpStatsRow {
    let me = aio.register_issuer("timing").unwrap();
    let f = aio.open(path, &OpenOptions::read()).unwrap();
    for k in 0..READS {
        let io = me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096));
        let buf = me.wait(io).into_buf();
        assert_pattern(&buf, k * 4096);
    }
    let mut out = vec![0u8; 4096];
    for k in 0..READS {
        me.read_exact_into(&f, k * 4096, &mut out).unwrap();
        assert_pattern(&out, k * 4096);
    }
    assert!(aio.aios().is_empty(), "{:?}", aio.aios());
    let _ = aio.waits();
    let rows = aio.stats();
    let row = rows.iter().find(|r| r.issuer == "timing").unwrap();
    row.ops.iter().find(|o| o.op == "readv").unwrap().clone()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "timed", 1 << 20);

    let off = start_with(m, |s| s.track_io_timing = false);
    let r = read_both_ways(&off, &path);
    assert_eq!(
        (r.count, r.bytes, r.errors),
        (2 * READS, 2 * READS * 4096, 0)
    );
    assert_eq!(
        r.time_us, 0.0,
        "no time recorded with track_io_timing off: {r:?}"
    );
    assert_eq!(r.lat_us.max, 0, "no latency recorded: {r:?}");
    drop(off);

    let on = start(m);
    let r = read_both_ways(&on, &path);
    assert_eq!(
        (r.count, r.bytes, r.errors),
        (2 * READS, 2 * READS * 4096, 0)
    );
    assert!(
        r.time_us > 0.0,
        "time recorded with track_io_timing on: {r:?}"
    );
    assert!(r.lat_us.max > 0, "latency recorded: {r:?}");
}

crate::for_every_method!(scenario);
