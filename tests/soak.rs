//! Soak (`--ignored`; run by hand, see docs/reliability.md): ten million mixed I/Os — reads,
//! writes, a few fsyncs — on every method (the worker method with threads and with worker
//! processes), from two issuer threads each keeping 16 in flight,
//! in and out of batch mode, some dropped in flight, with faults armed (EIO, short reads,
//! transient EAGAIN). At the end the aios view is empty and the process has the descriptors
//! it started with; on each method, resident memory grew less than 1% between the end of a
//! warm-up (the first tenth of its I/Os) and the end of its run.
//! Guards against: leaks (descriptors, memory, rows left in the view) and rare hangs or lost
//! completions that short runs do not reach.
//!
//!     cargo test --release --test soak -- --ignored --nocapture

#[path = "common/skips.rs"]
mod skips;

use dbaio::{
    Aio, FaultAction, FaultRule, IoBuf, IoMethodKind, IoWorkerKind, Op, OpenOptions, Settings,
};
use std::time::Instant;

const TOTAL: u64 = 10_000_000;

/// Open descriptors, except the shared buffer arena's memfd: once worker processes have
/// started, the arena stays for the life of the process (buffers allocated from it outlive
/// any one subsystem), and so does its one descriptor.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path()).map_or(true, |t| {
                !t.to_string_lossy().starts_with("/memfd:dbaio-arena")
            })
        })
        .count()
}

fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// One issuer's share: `n` I/Os at depth 16. Returns (ios, errors).
fn churn(aio: &Aio, file: &dbaio::File, name: &str, n: u64, seed: u64) -> (u64, u64) {
    let me = aio.register_issuer(name).unwrap();
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut pending = Vec::with_capacity(16);
    let (mut done, mut errors, mut started) = (0u64, 0u64, 0u64);
    let data = [0x5au8; 4096];
    while done < n {
        let batch = rnd() % 4 == 0;
        if batch {
            me.begin_batch().unwrap();
        }
        while pending.len() < 16 && started < n {
            let r = rnd();
            let off = (r >> 8) % 2048 * 4096;
            let h = me.acquire().unwrap();
            let io = match r % 100 {
                0 => h.fsync(file),
                1..=25 => h.write(file, off, IoBuf::from_slice(&data)),
                _ => h.read(file, off, IoBuf::new(4096)),
            };
            started += 1;
            if r % 97 == 0 {
                drop(io); // detached: finishes on its own
                done += 1;
            } else {
                pending.push(io);
            }
        }
        if batch {
            me.end_batch();
        }
        me.wait_any();
        let mut k = 0;
        while k < pending.len() {
            if pending[k].is_done() {
                let c = me.wait(pending.swap_remove(k));
                if c.check().is_err() {
                    errors += 1;
                }
                done += 1;
            } else {
                k += 1;
            }
        }
    }
    for io in pending {
        if me.wait(io).check().is_err() {
            errors += 1;
        }
    }
    (done, errors)
}

#[test]
#[ignore = "soak: ten million I/Os, about two minutes"]
fn ten_million_ios() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("soak");
    std::fs::write(&path, vec![0x5au8; 8 << 20]).unwrap();
    let fds_before = open_fds();
    let mut methods: Vec<_> = IoMethodKind::ALL
        .into_iter()
        .filter(|&m| m != IoMethodKind::IoUring || skips::io_uring_column("ten_million_ios"))
        .map(|m| (m, IoWorkerKind::Thread, m.to_string()))
        .collect();
    methods.push((
        IoMethodKind::Worker,
        IoWorkerKind::Process,
        "worker (processes)".to_string(),
    ));
    let per_method = TOTAL / methods.len() as u64;
    let mut total = 0;
    for (i, (method, kind, m)) in methods.iter().enumerate() {
        let t0 = Instant::now();
        let aio = Aio::start(Settings {
            io_method: *method,
            io_worker_kind: *kind,
            max_issuers: 4,
            ..Settings::default()
        })
        .unwrap();
        aio.seed_faults(7 + i as u64);
        aio.inject_fault(
            FaultRule::new(FaultAction::Errno(libc::EIO))
                .op(Op::Readv)
                .probability(0.001),
        );
        aio.inject_fault(
            FaultRule::new(FaultAction::Short(1000))
                .op(Op::Readv)
                .probability(0.001),
        );
        aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EAGAIN)).probability(0.01));
        let file = aio.open(&path, &OpenOptions::read_write()).unwrap();
        // An issuer slot's stats are allocated the first time the slot is used (at most
        // `max_issuers` of them: bounded, not a leak). A phase's issuers may take other slots
        // than the last one's (a slot whose issuer left I/Os in flight is not free yet), so
        // every slot is used once before the RSS is read after the warm-up; before this, the
        // measured phase allocated two slots' stats and read as growth (+256 kB on sync).
        drop(
            (0..4)
                .map(|k| aio.register_issuer(&format!("slot{k}")).unwrap())
                .collect::<Vec<_>>(),
        );
        let phase = |n: u64, seed: u64| -> Vec<(u64, u64)> {
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..2u64)
                    .map(|t| {
                        let (aio, file) = (&aio, &file);
                        s.spawn(move || churn(aio, file, &format!("soak{t}"), n / 2, seed + t))
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        let warm_up = per_method / 10;
        let mut results = phase(warm_up, 1);
        let rss_warm = rss_kb();
        results.extend(phase(per_method - warm_up, 11));
        let rss_end = rss_kb();
        drop(file);
        aio.shutdown();
        assert!(
            aio.aios().is_empty(),
            "on {m}: the view is empty at the end"
        );
        let faults = aio.faults_injected();
        drop(aio);
        let ios: u64 = results.iter().map(|r| r.0).sum();
        let errors: u64 = results.iter().map(|r| r.1).sum();
        total += ios;
        eprintln!(
            "soak {m}: {ios} I/Os in {:.1} s, {errors} failed as injected ({faults} faults injected); RSS {rss_warm} kB after warm-up, {rss_end} kB at the end",
            t0.elapsed().as_secs_f64(),
        );
        assert!(
            rss_end as f64 <= rss_warm as f64 * 1.01,
            "on {m}: RSS grew more than 1% after warm-up: {rss_warm} -> {rss_end} kB"
        );
    }
    let fds_after = open_fds();
    eprintln!("soak: {total} I/Os; descriptors {fds_before} before, {fds_after} after");
    assert!(total >= TOTAL - 16);
    assert_eq!(fds_after, fds_before, "every descriptor is closed");
}
