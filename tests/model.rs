//! A model-based property test of the public API (issue 15, item 11): random programs of 1–4
//! issuers (driven from one thread, as an event loop would) acquire, start reads, writes and
//! fsyncs over overlapping block ranges of two files, batch and submit, wait on their own
//! I/Os, have other threads wait on them, wait for any, drop them in flight, close files,
//! unlink, and arm seeded faults — on every method. Each result is checked against an
//! in-memory model of the files:
//!
//! - every write is a *version* of the blocks it covers, with when it started and when its
//!   completion was observed (a failed or detached write may or may not have reached the
//!   file: an injected error hides a write that did happen);
//! - every byte a read returns (up to what it reports) comes from a version of its block that
//!   started before the read was observed to finish and was not certainly overwritten before
//!   the read started (by a write observed to succeed, which started after that version was
//!   observed to finish and was itself observed to finish before the read started). Byte by
//!   byte, not block by block: Linux does not make a buffered read atomic against a
//!   concurrent write of the same page;
//! - every started I/O completes exactly once, a foreign wait returns, nothing hangs (a
//!   watchdog), the aios view is empty at the end, and the files hold a candidate of every
//!   block.
//!
//! Guards against: any interleaving of the API's operations that loses, duplicates, tears or
//! reorders data or completions, or hangs.
//!
//! The default suite runs a few hundred programs per method; `cargo test --release --test
//! model -- --ignored` runs 10,000 per method. proptest shrinks a failure to a minimal program
//! and saves it in `tests/model.proptest-regressions`, which replays it first from then on.

#[path = "conformance/support.rs"]
#[allow(dead_code)]
mod support;

use dbaio::{
    Aio, FaultAction, FaultRule, InFlight, IoBuf, IoMethodKind, IoWorkerKind, Issuer, Op,
    OpenOptions, Settings, Status,
};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::PathBuf;

const BLOCK: u64 = 4096;
/// Blocks per file.
const BLOCKS: u8 = 16;
const FILES: usize = 2;
/// I/Os a program keeps unredeemed per issuer (below the 8 handles each has).
const MAX_OUT: usize = 6;

#[derive(Clone, Debug)]
enum Step {
    Read {
        issuer: u8,
        file: u8,
        block: u8,
        n: u8,
    },
    Write {
        issuer: u8,
        file: u8,
        block: u8,
        n: u8,
    },
    Fsync {
        issuer: u8,
        file: u8,
    },
    Batch {
        issuer: u8,
    },
    Submit {
        issuer: u8,
    },
    WaitOwn {
        issuer: u8,
        k: u8,
    },
    WaitForeign {
        issuer: u8,
        k: u8,
    },
    WaitAny {
        issuer: u8,
    },
    Drop {
        issuer: u8,
        k: u8,
    },
    Close {
        issuer: u8,
        file: u8,
    },
    Unlink {
        issuer: u8,
        exists: bool,
    },
    Fault {
        op: u8,
        kind: u8,
        percent: u8,
    },
    ClearFaults,
}

fn step() -> impl Strategy<Value = Step> {
    let i = 0u8..4;
    let f = 0u8..FILES as u8;
    prop_oneof![
        6 => (i.clone(), f.clone(), 0..BLOCKS, 1u8..4)
            .prop_map(|(issuer, file, block, n)| Step::Read { issuer, file, block, n }),
        6 => (i.clone(), f.clone(), 0..BLOCKS, 1u8..4)
            .prop_map(|(issuer, file, block, n)| Step::Write { issuer, file, block, n }),
        1 => (i.clone(), f.clone()).prop_map(|(issuer, file)| Step::Fsync { issuer, file }),
        2 => i.clone().prop_map(|issuer| Step::Batch { issuer }),
        1 => i.clone().prop_map(|issuer| Step::Submit { issuer }),
        5 => (i.clone(), any::<u8>()).prop_map(|(issuer, k)| Step::WaitOwn { issuer, k }),
        2 => (i.clone(), any::<u8>()).prop_map(|(issuer, k)| Step::WaitForeign { issuer, k }),
        1 => i.clone().prop_map(|issuer| Step::WaitAny { issuer }),
        1 => (i.clone(), any::<u8>()).prop_map(|(issuer, k)| Step::Drop { issuer, k }),
        1 => (i.clone(), f).prop_map(|(issuer, file)| Step::Close { issuer, file }),
        1 => (i, any::<bool>()).prop_map(|(issuer, exists)| Step::Unlink { issuer, exists }),
        1 => (0u8..3, 0u8..3, 10u8..50)
            .prop_map(|(op, kind, percent)| Step::Fault { op, kind, percent }),
        1 => Just(Step::ClearFaults),
    ]
}

fn program() -> impl Strategy<Value = (u8, u64, Vec<Step>)> {
    (1u8..=4, any::<u64>(), prop::collection::vec(step(), 1..60))
}

/// The bytes of version `v` of file `f` at `offset` (version 0: the data the file starts
/// with). Different versions differ in almost every byte.
fn byte(f: usize, v: u32, offset: u64) -> u8 {
    let h = (u64::from(v) << 40 ^ (f as u64) << 36 ^ offset).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 56) as u8
}

struct Version {
    id: u32,
    start: u64,
    /// When its completion was observed (None: not yet, or never for a detached write).
    done: Option<u64>,
    /// Observed to succeed in full (so it certainly reached the file).
    ok: bool,
}

/// Every version a block has had.
struct BlockModel {
    versions: Vec<Version>,
}

impl BlockModel {
    /// The versions a read that started at `start` and was observed to finish at `end` may
    /// have seen.
    fn visible(&self, start: u64, end: u64) -> BTreeSet<u32> {
        let overwritten = |v: &Version| {
            v.done.is_some_and(|vd| {
                self.versions
                    .iter()
                    .any(|w| w.ok && w.done.is_some_and(|wd| wd < start) && vd < w.start)
            })
        };
        self.versions
            .iter()
            .filter(|v| v.start < end && !overwritten(v))
            .map(|v| v.id)
            .collect()
    }
}

enum Kind {
    Read {
        file: usize,
        block: u64,
        n: u64,
    },
    Write {
        file: usize,
        block: u64,
        n: u64,
        version: u32,
    },
    Fsync,
    Unlink {
        existed: bool,
    },
}

struct Out<'a> {
    io: InFlight<'a>,
    kind: Kind,
    start: u64,
}

struct Model {
    blocks: Vec<Vec<BlockModel>>,
    seq: u64,
    next_version: u32,
}

impl Model {
    fn tick(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A write's completion was observed: `ok` if it succeeded in full.
    fn write_done(&mut self, file: usize, block: u64, n: u64, version: u32, ok: bool) {
        let now = self.tick();
        for b in block..block + n {
            let bm = &mut self.blocks[file][b as usize];
            for v in bm.versions.iter_mut().filter(|v| v.id == version) {
                v.done = Some(now);
                v.ok = ok;
            }
        }
    }

    /// Every write of `version`s (detached ones) is known to have finished, outcome unknown.
    fn finished_unknown(&mut self, file: usize, versions: &[u32]) {
        let now = self.tick();
        for bm in &mut self.blocks[file] {
            for v in bm.versions.iter_mut() {
                if versions.contains(&v.id) && v.done.is_none() {
                    v.done = Some(now);
                }
            }
        }
    }
}

/// Checks `data` (a read at `block` of `file` that started at `start` and was observed to
/// finish at `end`, `bytes` of it valid) against the model.
fn check_read(
    model: &Model,
    file: usize,
    block: u64,
    data: &[u8],
    bytes: usize,
    start: u64,
    end: u64,
) {
    for (k, chunk) in data[..bytes].chunks(BLOCK as usize).enumerate() {
        let b = block + k as u64;
        let allowed = model.blocks[file][b as usize].visible(start, end);
        let off = b * BLOCK;
        // Byte by byte: Linux does not make a buffered read atomic against a write of the
        // same page, so a read that overlaps a write may see some bytes of each.
        for (i, &x) in chunk.iter().enumerate() {
            assert!(
                allowed.iter().any(|&v| x == byte(file, v, off + i as u64)),
                "byte {i} of block {b} of file {file} is {x:#x}, in none of the versions \
                 {allowed:?}"
            );
        }
    }
}

fn settings(m: IoMethodKind, kind: IoWorkerKind) -> Settings {
    Settings {
        io_method: m,
        io_worker_kind: kind,
        io_max_concurrency: 8,
        max_issuers: 8,
        max_files: 16,
        buffer_pool_size: 256,
        io_workers: 2,
        ..Settings::default()
    }
}

fn run(m: IoMethodKind, kind: IoWorkerKind, issuers: u8, seed: u64, steps: Vec<Step>) {
    let d = support::dir();
    let paths: Vec<PathBuf> = (0..FILES).map(|f| d.path().join(format!("f{f}"))).collect();
    for (f, p) in paths.iter().enumerate() {
        let data: Vec<u8> = (0..u64::from(BLOCKS) * BLOCK)
            .map(|o| byte(f, 0, o))
            .collect();
        std::fs::write(p, data).unwrap();
    }
    let scratch = d.path().join("scratch");
    let aio = Aio::start(settings(m, kind)).unwrap();
    aio.seed_faults(seed);
    let files: Vec<_> = paths
        .iter()
        .map(|p| aio.open(p, &OpenOptions::read_write()).unwrap())
        .collect();
    let ids: Vec<Issuer> = (0..issuers)
        .map(|k| aio.register_issuer(&format!("model{k}")).unwrap())
        .collect();
    let mut outs: Vec<Vec<Out<'_>>> = (0..issuers).map(|_| Vec::new()).collect();
    // Writes dropped in flight, per issuer and file: finished once their issuer closes the
    // file or goes away.
    let mut detached: Vec<Vec<Vec<u32>>> = (0..issuers).map(|_| vec![Vec::new(); FILES]).collect();
    let mut model = Model {
        blocks: (0..FILES)
            .map(|_| {
                (0..BLOCKS)
                    .map(|_| BlockModel {
                        versions: vec![Version {
                            id: 0,
                            start: 0,
                            done: Some(0),
                            ok: true,
                        }],
                    })
                    .collect()
            })
            .collect(),
        seq: 1,
        next_version: 1,
    };
    let mut faults_armed = false;

    for s in steps {
        let who = |i: u8| (i % issuers) as usize;
        match s {
            Step::Read {
                issuer,
                file,
                block,
                n,
            }
            | Step::Write {
                issuer,
                file,
                block,
                n,
            } => {
                let i = who(issuer);
                if outs[i].len() >= MAX_OUT {
                    continue;
                }
                let (file, block) = (file as usize, u64::from(block));
                let n = u64::from(n).min(u64::from(BLOCKS) - block);
                let me = &ids[i];
                let start = model.tick();
                let h = me.acquire().unwrap();
                let (io, kind) = if matches!(s, Step::Read { .. }) {
                    let io = h.read(
                        &files[file],
                        block * BLOCK,
                        IoBuf::new((n * BLOCK) as usize),
                    );
                    (io, Kind::Read { file, block, n })
                } else {
                    let version = model.next_version;
                    model.next_version += 1;
                    let data: Vec<u8> = (block * BLOCK..(block + n) * BLOCK)
                        .map(|o| byte(file, version, o))
                        .collect();
                    for b in block..block + n {
                        model.blocks[file][b as usize].versions.push(Version {
                            id: version,
                            start,
                            done: None,
                            ok: false,
                        });
                    }
                    let io = h.write(&files[file], block * BLOCK, IoBuf::from_slice(&data));
                    (
                        io,
                        Kind::Write {
                            file,
                            block,
                            n,
                            version,
                        },
                    )
                };
                outs[i].push(Out { io, kind, start });
            }
            Step::Fsync { issuer, file } => {
                let i = who(issuer);
                if outs[i].len() >= MAX_OUT {
                    continue;
                }
                let start = model.tick();
                let io = ids[i].acquire().unwrap().fsync(&files[file as usize]);
                outs[i].push(Out {
                    io,
                    kind: Kind::Fsync,
                    start,
                });
            }
            Step::Batch { issuer } => {
                let me = &ids[who(issuer)];
                if me.in_batch() {
                    me.end_batch();
                } else {
                    me.begin_batch().unwrap();
                }
            }
            Step::Submit { issuer } => ids[who(issuer)].submit_staged(),
            Step::WaitOwn { issuer, k } => {
                let i = who(issuer);
                if !outs[i].is_empty() {
                    let at = k as usize % outs[i].len();
                    let o = outs[i].remove(at);
                    observe(&mut model, o, &ids[i], faults_armed);
                }
            }
            Step::WaitForeign { issuer, k } => {
                let i = who(issuer);
                if !outs[i].is_empty() {
                    let o = &outs[i][k as usize % outs[i].len()];
                    let w = o.io.wait_ref();
                    let a = aio.clone();
                    std::thread::spawn(move || a.wait(w))
                        .join()
                        .unwrap()
                        .expect("a foreign wait returns");
                    assert!(o.io.is_done(), "complete after a foreign wait");
                }
            }
            Step::WaitAny { issuer } => ids[who(issuer)].wait_any(),
            Step::Drop { issuer, k } => {
                let i = who(issuer);
                if !outs[i].is_empty() {
                    let at = k as usize % outs[i].len();
                    let o = outs[i].remove(at);
                    if let Kind::Write { file, version, .. } = o.kind {
                        detached[i][file].push(version);
                    }
                    drop(o.io);
                }
            }
            Step::Close { issuer, file } => {
                let i = who(issuer);
                let f = file as usize;
                ids[i].close(files[f].clone());
                // Every I/O of this issuer on the file is complete now.
                let versions = std::mem::take(&mut detached[i][f]);
                model.finished_unknown(f, &versions);
                for o in &outs[i] {
                    let on_file = match &o.kind {
                        Kind::Read { file, .. } | Kind::Write { file, .. } => *file == f,
                        _ => false,
                    };
                    if on_file {
                        assert!(o.io.is_done(), "close waited for the issuer's I/Os on it");
                    }
                }
            }
            Step::Unlink { issuer, exists } => {
                let i = who(issuer);
                if outs[i].len() >= MAX_OUT {
                    continue;
                }
                if exists {
                    std::fs::write(&scratch, b"x").unwrap();
                } else {
                    let _ = std::fs::remove_file(&scratch);
                }
                let me = &ids[i];
                // Unlink at once (not left staged) so the scratch file is ours alone.
                let c = std::ffi::CString::new(scratch.to_str().unwrap()).unwrap();
                let start = model.tick();
                let io = me.acquire().unwrap().unlink(c);
                let o = Out {
                    io,
                    kind: Kind::Unlink { existed: exists },
                    start,
                };
                observe(&mut model, o, me, faults_armed);
            }
            Step::Fault { op, kind, percent } => {
                let op = [Op::Readv, Op::Writev, Op::Fsync][op as usize];
                let action = [
                    FaultAction::Errno(libc::EIO),
                    FaultAction::Short(1000),
                    FaultAction::Errno(libc::EAGAIN),
                ][kind as usize];
                aio.inject_fault(
                    FaultRule::new(action)
                        .op(op)
                        .probability(f64::from(percent) / 100.0),
                );
                faults_armed = true;
            }
            Step::ClearFaults => {
                aio.clear_faults();
                // An I/O that started under a rule may still be hit: stay lenient.
            }
        }
    }
    // Redeem everything, then let every issuer go (draining what was dropped in flight).
    for (i, me) in ids.iter().enumerate() {
        if me.in_batch() {
            me.end_batch();
        }
        for o in std::mem::take(&mut outs[i]) {
            observe(&mut model, o, me, faults_armed);
        }
    }
    drop(outs);
    drop(ids);
    for (f, per_issuer) in detached
        .iter()
        .flat_map(|d| d.iter().enumerate())
        .collect::<Vec<_>>()
    {
        model.finished_unknown(f, per_issuer);
    }
    aio.shutdown();
    assert!(
        aio.aios().is_empty(),
        "nothing is left in the view: {:?}",
        aio.aios()
    );
    drop(files);
    for (f, p) in paths.iter().enumerate() {
        let data = std::fs::read(p).unwrap();
        for b in 0..u64::from(BLOCKS) {
            let chunk = &data[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize];
            let now = model.tick();
            let ids = model.blocks[f][b as usize].visible(now, now);
            assert!(
                chunk
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| ids.iter().any(|&v| x == byte(f, v, b * BLOCK + i as u64))),
                "at the end, block {b} of file {f} holds none of the versions {ids:?}"
            );
        }
    }
}

/// Redeems `o` and checks its result against the model. Without armed faults nothing
/// fails and nothing is short.
fn observe(model: &mut Model, o: Out<'_>, me: &Issuer, faults: bool) {
    let c = me.wait(o.io);
    let r = c.result();
    if !faults {
        assert!(
            matches!(r.status, Status::Ok) || matches!(o.kind, Kind::Unlink { existed: false }),
            "an I/O failed with no fault armed: {r:?} {:?}",
            c.check().err().map(|e| e.to_string())
        );
    }
    match o.kind {
        Kind::Read { file, block, n } => {
            if matches!(r.status, Status::Ok | Status::Partial) {
                let bytes = c.bytes();
                assert!(bytes <= (n * BLOCK) as usize);
                let buf = c.into_buf();
                let end = model.seq + 1;
                check_read(model, file, block, &buf, bytes, o.start, end);
            }
            model.tick();
        }
        Kind::Write {
            file,
            block,
            n,
            version,
        } => {
            let ok = r.status == Status::Ok;
            model.write_done(file, block, n, version, ok);
        }
        Kind::Fsync => {
            model.tick();
        }
        Kind::Unlink { existed } => {
            if existed {
                c.check().expect("unlinking an existing file");
            } else {
                assert_eq!(c.check().unwrap_err().errno, libc::ENOENT);
            }
            model.tick();
        }
    }
}

/// Runs one program on `m`, failing (not hanging) if it takes more than a minute.
fn check(m: IoMethodKind, issuers: u8, seed: u64, steps: Vec<Step>) {
    support::within(60, "a model program", move || {
        run(m, IoWorkerKind::Thread, issuers, seed, steps)
    });
}

/// Runs one program on the worker method with worker processes.
fn check_processes(issuers: u8, seed: u64, steps: Vec<Step>) {
    support::within(60, "a model program", move || {
        run(
            IoMethodKind::Worker,
            IoWorkerKind::Process,
            issuers,
            seed,
            steps,
        )
    });
}

/// Whether the io_uring column can run: asked (and a skip printed, or a failure under
/// `DBAIO_REQUIRE_IO_URING`) once per test, not once per generated program.
fn io_uring_available(test: &str) -> bool {
    static ASKED: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());
    if let Some(&(_, ok)) = ASKED.lock().unwrap().iter().find(|(t, _)| t == test) {
        return ok;
    }
    let ok = support::io_uring_column(test);
    ASKED.lock().unwrap().push((test.to_string(), ok));
    ok
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn model_sync((issuers, seed, steps) in program()) {
        check(IoMethodKind::Sync, issuers, seed, steps);
    }

    #[test]
    fn model_worker((issuers, seed, steps) in program()) {
        check(IoMethodKind::Worker, issuers, seed, steps);
    }

    #[test]
    fn model_worker_process((issuers, seed, steps) in program()) {
        check_processes(issuers, seed, steps);
    }

    #[test]
    fn model_io_uring((issuers, seed, steps) in program()) {
        if io_uring_available("model_io_uring") {
            check(IoMethodKind::IoUring, issuers, seed, steps);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    #[ignore = "long: 10,000 programs per method"]
    fn model_sync_long((issuers, seed, steps) in program()) {
        check(IoMethodKind::Sync, issuers, seed, steps);
    }

    #[test]
    #[ignore = "long: 10,000 programs per method"]
    fn model_worker_long((issuers, seed, steps) in program()) {
        check(IoMethodKind::Worker, issuers, seed, steps);
    }

    #[test]
    #[ignore = "long: 10,000 programs per method"]
    fn model_worker_process_long((issuers, seed, steps) in program()) {
        check_processes(issuers, seed, steps);
    }

    #[test]
    #[ignore = "long: 10,000 programs per method"]
    fn model_io_uring_long((issuers, seed, steps) in program()) {
        if io_uring_available("model_io_uring_long") {
            check(IoMethodKind::IoUring, issuers, seed, steps);
        }
    }
}
