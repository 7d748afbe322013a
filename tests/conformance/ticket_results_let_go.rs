//! An I/O redeemed through a ticket (or detached) lets go of what it holds at its issuer's next
//! `acquire`, not when the issuer runs out of handles: a log writer that opens a segment,
//! writes it through a ticket, waits and drops it, twenty times with room for four open files,
//! never finds the file table full; a segment dropped and unlinked is closed (no `(deleted)`
//! descriptor keeps its space); and the statistics count every write once the next one is
//! acquired, whichever thread waited on the ticket.
//! Guards against: what a caller-side attack found (2026-12-07) — finished ticket I/Os were
//! reclaimed only when the issuer ran out of handles, so up to a handle's worth of dropped files
//! stayed open (`max_files = 4`: the fifth segment's open failed, on every method), deleted
//! segments kept their disk space, and `stats()` left the writes out.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start_with(m, |s| s.max_files = 4);
    let me = aio.register_issuer("wal").unwrap();
    for seg in 0..20u64 {
        let path = d.path().join(format!("seg{seg}"));
        let f = aio
            .open(&path, &OpenOptions::read_write())
            .unwrap_or_else(|e| panic!("segment {seg}: {e}"));
        let ticket = me
            .acquire()
            .unwrap()
            .write(&f, 0, IoBuf::from_slice(b"record"))
            .into_ticket();
        if seg % 2 == 0 {
            ticket.wait().check().unwrap();
        } else {
            // Redeemed on another thread.
            std::thread::spawn(move || ticket.wait().check().unwrap())
                .join()
                .unwrap();
        }
        drop(f);
        if m != IoMethodKind::Sim {
            std::fs::remove_file(&path).unwrap();
        }
    }
    // The last one is let go at the next acquire.
    drop(me.acquire().unwrap());
    let rows = aio.stats();
    let row = rows.iter().find(|r| r.issuer == "wal").unwrap();
    let writes = row.ops.iter().find(|o| o.op == "writev").map(|o| o.count);
    assert_eq!(writes, Some(20), "{row:?}");
    if m != IoMethodKind::Sim {
        let deleted = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.starts_with(d.path()))
            .collect::<Vec<_>>();
        assert!(deleted.is_empty(), "segments still open: {deleted:?}");
    }
}

crate::for_every_method!(scenario);
