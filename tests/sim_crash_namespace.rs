//! The simulated disk's crash namespace against a reference model: random sequences of file
//! writes (fsynced or not), file fsyncs, unlinks, renames (within and across two directories,
//! over existing files, rotations), directory fsyncs and descriptors held across renames and
//! unlinks, then a crash (called, or armed at a random I/O); every image is checked against
//! what a journaling file system could leave, given which changes directory syncs made
//! durable: no file under two names, no durable file lost, no name holding content never
//! written to the file there, nothing back under a name whose removal was synced, no fsynced
//! sector older than its sync; the same seed gives the same image, and a new `Aio` on the
//! image reads what `SimDisk::contents` says. `SIM_NS_CASES=N` runs N programs per property
//! (512 by default).
//!
//! Guards against any crash image no file system could leave. Its first find (2026-12-07, in
//! one of a few hundred programs): a file moved twice, every directory synced since, came
//! back under its first name in about half of seeds; that exact sequence is guarded by `sim`
//! `a_file_moved_twice_stays_where_every_directory_was_synced`.

use dbaio::settings::{IoMethodKind, Settings};
use dbaio::{Aio, OpenOptions, SimDisk};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const L: usize = 1024; // two sectors
const MAGIC: u32 = 0xA7C1_2F11;
const NAMES: [&str; 6] = ["d1/a", "d1/b", "d1/c", "d2/a", "d2/b", "d1/t"];

static WATCHDOG: Once = Once::new();
static BEAT: AtomicU64 = AtomicU64::new(0);
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
/// Aborts if no case finished for ~60 s (a heartbeat per case).
fn watchdog() {
    BEAT.store(now_s(), Ordering::Relaxed);
    WATCHDOG.call_once(|| {
        std::thread::spawn(|| {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                if now_s().saturating_sub(BEAT.load(Ordering::Relaxed)) > 60 {
                    eprintln!("WATCHDOG: a case hung for 60 s, aborting");
                    std::process::abort();
                }
            }
        });
    });
}

/// Real, empty directories `d1` and `d2` under one temporary root (sim reads nothing from
/// them: it only sees that they exist).
fn root() -> &'static std::path::Path {
    static ROOT: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        for sub in ["d1", "d2"] {
            std::fs::create_dir(d.path().join(sub)).unwrap();
        }
        d
    })
    .path()
}

fn path(n: usize) -> PathBuf {
    root().join(NAMES[n])
}
fn dir_of(n: usize) -> u8 {
    if NAMES[n].starts_with("d1") { 1 } else { 2 }
}
fn dir_path(d: u8) -> PathBuf {
    root().join(format!("d{d}"))
}

#[derive(Clone, Debug)]
enum Step {
    /// Create (if free) or overwrite (if taken) `name` with new content; fsync if `sync`.
    Write {
        name: usize,
        sync: bool,
    },
    /// fsync the file at name (if any).
    FsyncFile {
        name: usize,
    },
    Unlink {
        name: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    /// 1: d1, 2: d2, 3: both.
    SyncDir {
        which: u8,
    },
    /// Open the file at name and keep the descriptor (it follows the file through renames
    /// and unlinks).
    Hold {
        name: usize,
    },
    /// New content through a held descriptor; fsync (or fdatasync) if `sync`.
    HeldWrite {
        k: usize,
        sync: bool,
        datasync: bool,
    },
    /// Close a held descriptor.
    Release {
        k: usize,
    },
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..NAMES.len(), any::<bool>()).prop_map(|(name, sync)| Step::Write { name, sync }),
        1 => (0..NAMES.len()).prop_map(|name| Step::FsyncFile { name }),
        2 => (0..NAMES.len()).prop_map(|name| Step::Unlink { name }),
        4 => (0..NAMES.len(), 0..NAMES.len()).prop_map(|(from, to)| Step::Rename { from, to }),
        3 => (1u8..=3).prop_map(|which| Step::SyncDir { which }),
    ]
}

fn step_strategy2() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => step_strategy(),
        1 => (0..NAMES.len()).prop_map(|name| Step::Hold { name }),
        2 => (0..4usize, any::<bool>(), any::<bool>()).prop_map(|(k, sync, datasync)| Step::HeldWrite { k, sync, datasync }),
        1 => (0..4usize).prop_map(|k| Step::Release { k }),
    ]
}

fn content(ino: u32, version: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(L);
    for s in 0..(L / 512) as u32 {
        for _ in 0..32 {
            v.extend_from_slice(&MAGIC.to_le_bytes());
            v.extend_from_slice(&ino.to_le_bytes());
            v.extend_from_slice(&version.to_le_bytes());
            v.extend_from_slice(&s.to_le_bytes());
        }
    }
    v
}

/// Sector → None (all zero) or Some((ino, version)); Err if garbage.
fn parse(bytes: &[u8]) -> Result<Vec<Option<(u32, u32)>>, String> {
    if bytes.len() > L {
        return Err(format!("length {} > {L}", bytes.len()));
    }
    let mut out = Vec::new();
    for (i, sec) in bytes.chunks(512).enumerate() {
        if sec.iter().all(|&b| b == 0) {
            out.push(None);
            continue;
        }
        if sec.len() != 512 {
            return Err(format!("partial sector {i} of len {} not zero", sec.len()));
        }
        let w = |o: usize| u32::from_le_bytes(sec[o..o + 4].try_into().unwrap());
        let (m, ino, ver, s) = (w(0), w(4), w(8), w(12));
        if m != MAGIC || s != i as u32 || !sec.chunks(16).all(|c| c == &sec[..16]) {
            return Err(format!("sector {i} garbage"));
        }
        out.push(Some((ino, ver)));
    }
    Ok(out)
}

#[derive(Clone, Debug, PartialEq)]
enum DepartKind {
    Unlink,
    RenamedAway,
    Replaced { by: u32 },
}

#[derive(Clone, Debug)]
#[allow(dead_code)]
struct Stay {
    name: usize,
    arrive_step: usize,
    arrive_dirs: Vec<u8>,
    depart: Option<(usize, Vec<u8>, DepartKind)>,
}

#[derive(Clone, Debug, Default)]
struct Ident {
    stays: Vec<Stay>,
    writes: Vec<u32>,
    durable_version: Option<u32>,
    last_written: Option<u32>,
    /// Directories still to sync before the entry is durable where the file is now (or its
    /// removal durable), accumulated as the sim's rustdoc describes.
    pending: BTreeSet<u8>,
    /// The name where its entry is durable (None: never durable, or durably removed).
    durable_name: Option<usize>,
}

#[derive(Default, Debug, Clone)]
struct Reference {
    idents: BTreeMap<u32, Ident>,
    at: BTreeMap<usize, u32>,
    dir_syncs: Vec<(usize, u8)>,
    next_ino: u32,
    next_ver: u32,
}

impl Reference {
    fn synced_after(&self, step: usize, dirs: &[u8]) -> bool {
        dirs.iter()
            .all(|d| self.dir_syncs.iter().any(|&(s, dd)| dd == *d && s > step))
    }
}

fn settings(seed: u64) -> Settings {
    Settings {
        io_method: IoMethodKind::Sim,
        sim_seed: seed,
        sim_latency_min: 1,
        sim_latency_max: 500,
        buffer_pool_size: 0,
        ..Settings::default()
    }
}

fn start(disk: &SimDisk, seed: u64) -> Aio {
    let mut b = Aio::builder(settings(seed));
    b.sim_disk(disk.clone());
    b.start().unwrap()
}

fn rw() -> OpenOptions {
    OpenOptions::read_write().direct(false)
}

/// Runs the steps on a fresh disk, builds the reference, crashes; returns (reference, image, log).
fn run(seed: u64, steps: &[Step]) -> (Reference, SimDisk, Vec<String>) {
    let (r, image, log, _) = run_armed(seed, steps, None);
    (r, image, log)
}

/// With `arm`: `crash_after(arm)`, stopping at the first failed I/O; returns its step too.
fn run_armed(
    seed: u64,
    steps: &[Step],
    arm: Option<u64>,
) -> (Reference, SimDisk, Vec<String>, Option<usize>) {
    let disk = SimDisk::new(seed);
    if let Some(k) = arm {
        disk.crash_after(k);
    }
    let mut failed = None;
    let mut held: Vec<(u32, dbaio::File)> = Vec::new();
    let aio = start(&disk, seed);
    let me = aio.register_issuer("ns").unwrap();
    let mut r = Reference {
        next_ino: 1,
        next_ver: 1,
        ..Default::default()
    };
    let mut log = Vec::new();
    'steps: for (i, st) in steps.iter().enumerate() {
        macro_rules! io {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => {
                        if arm.is_some() {
                            log.push(format!("{i}: I/O failed ({e})"));
                            failed = Some(i);
                            break 'steps;
                        }
                        panic!("step {i} {st:?}: {e}");
                    }
                }
            };
        }
        match *st {
            Step::Write { name, sync } => {
                let ver = r.next_ver;
                r.next_ver += 1;
                let ino = match r.at.get(&name) {
                    Some(&ino) => ino,
                    None => {
                        let ino = r.next_ino;
                        r.next_ino += 1;
                        r.idents.insert(
                            ino,
                            Ident {
                                stays: vec![Stay {
                                    name,
                                    arrive_step: i,
                                    arrive_dirs: vec![dir_of(name)],
                                    depart: None,
                                }],
                                pending: [dir_of(name)].into(),
                                ..Default::default()
                            },
                        );
                        r.at.insert(name, ino);
                        ino
                    }
                };
                let f = io!(aio.open(path(name), &rw()));
                io!(me.write_all_from(&f, 0, &content(ino, ver)));
                let id = r.idents.get_mut(&ino).unwrap();
                id.writes.push(ver);
                id.last_written = Some(ver);
                if sync {
                    io!(me.fsync(&f));
                    id.durable_version = Some(ver);
                }
                drop(f);
                log.push(format!(
                    "{i}: write {} ino {ino} ver {ver} sync {sync}",
                    NAMES[name]
                ));
            }
            Step::FsyncFile { name } => {
                if let Some(&ino) = r.at.get(&name) {
                    let f = io!(aio.open(path(name), &rw()));
                    io!(me.fsync(&f));
                    let id = r.idents.get_mut(&ino).unwrap();
                    id.durable_version = id.last_written;
                    log.push(format!("{i}: fsync {} ino {ino}", NAMES[name]));
                }
            }
            Step::Unlink { name } => {
                if let Some(ino) = r.at.remove(&name) {
                    io!(me.unlink(&path(name)));
                    let id = r.idents.get_mut(&ino).unwrap();
                    id.stays.last_mut().unwrap().depart =
                        Some((i, vec![dir_of(name)], DepartKind::Unlink));
                    id.pending.insert(dir_of(name));
                    log.push(format!("{i}: unlink {} ino {ino}", NAMES[name]));
                } else {
                    assert!(
                        me.unlink(&path(name)).is_err(),
                        "unlink of missing name succeeded"
                    );
                }
            }
            Step::Rename { from, to } => {
                let Some(&ino) = r.at.get(&from) else {
                    assert!(
                        me.rename(&path(from), &path(to)).is_err(),
                        "rename of missing name succeeded"
                    );
                    continue;
                };
                if from == to {
                    // rename(2) to itself: no-op.
                    io!(me.rename(&path(from), &path(to)));
                    log.push(format!("{i}: rename {} to itself", NAMES[from]));
                    continue;
                }
                io!(me.rename(&path(from), &path(to)));
                let dirs: Vec<u8> = {
                    let mut d = vec![dir_of(from), dir_of(to)];
                    d.dedup();
                    d
                };
                r.at.remove(&from);
                if let Some(victim) = r.at.insert(to, ino) {
                    let v = r.idents.get_mut(&victim).unwrap();
                    v.stays.last_mut().unwrap().depart =
                        Some((i, dirs.clone(), DepartKind::Replaced { by: ino }));
                    v.pending.extend(dirs.iter().copied());
                }
                let id = r.idents.get_mut(&ino).unwrap();
                id.stays.last_mut().unwrap().depart =
                    Some((i, dirs.clone(), DepartKind::RenamedAway));
                id.pending.extend(dirs.iter().copied());
                id.stays.push(Stay {
                    name: to,
                    arrive_step: i,
                    arrive_dirs: dirs,
                    depart: None,
                });
                log.push(format!(
                    "{i}: rename {} -> {} ino {ino}",
                    NAMES[from], NAMES[to]
                ));
            }
            Step::SyncDir { which } => {
                for d in [1u8, 2] {
                    if which & d != 0 {
                        let f = io!(aio.open(dir_path(d), &OpenOptions::read()));
                        io!(me.fsync(&f));
                        r.dir_syncs.push((i, d));
                        // A durable file's changes since its durable name are one journal
                        // transaction: a sync of any directory they touched commits them
                        // (sim since 5f1ad3a). A file never durable waits for every one.
                        for id in r.idents.values_mut() {
                            let was_durable = id.durable_name.is_some();
                            if id.pending.remove(&d) && (was_durable || id.pending.is_empty()) {
                                id.pending.clear();
                                let cur = id.stays.last().unwrap();
                                id.durable_name = if cur.depart.is_none() {
                                    Some(cur.name)
                                } else {
                                    None
                                };
                            }
                        }
                        log.push(format!("{i}: fsync dir d{d}"));
                    }
                }
            }
            Step::Hold { name } => {
                if let Some(&ino) = r.at.get(&name) {
                    if held.len() < 3 {
                        held.push((ino, io!(aio.open(path(name), &rw()))));
                        log.push(format!("{i}: hold {} ino {ino}", NAMES[name]));
                    }
                }
            }
            Step::HeldWrite { k, sync, datasync } => {
                if !held.is_empty() {
                    let (ino, f) = &held[k % held.len()];
                    let ino = *ino;
                    let ver = r.next_ver;
                    r.next_ver += 1;
                    let id = r.idents.get_mut(&ino).unwrap();
                    id.writes.push(ver);
                    id.last_written = Some(ver);
                    io!(me.write_all_from(f, 0, &content(ino, ver)));
                    if sync {
                        if datasync {
                            io!(me.fdatasync(f));
                        } else {
                            io!(me.fsync(f));
                        }
                        r.idents.get_mut(&ino).unwrap().durable_version = Some(ver);
                    }
                    log.push(format!(
                        "{i}: held write ino {ino} ver {ver} sync {sync} datasync {datasync}"
                    ));
                }
            }
            Step::Release { k } => {
                if !held.is_empty() {
                    let (ino, _) = held.remove(k % held.len());
                    log.push(format!("{i}: release ino {ino}"));
                }
            }
        }
    }
    drop(held);
    drop(me);
    IOS.with(|c| c.set(disk.ios()));
    let image = match arm {
        Some(_) => disk.crash_image().unwrap_or_else(|| disk.crash()),
        None => disk.crash(),
    };
    drop(aio);
    (r, image, log, failed)
}

fn snapshot(image: &SimDisk) -> BTreeMap<PathBuf, Vec<u8>> {
    image
        .files()
        .into_iter()
        .map(|p| {
            let c = image.contents(&p).expect("listed file has contents");
            (p, c)
        })
        .collect()
}

/// Checks the image against the reference; Err with the violations.
fn check(r: &Reference, snap: &BTreeMap<PathBuf, Vec<u8>>) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    // name index → Some(ino) | None (blank)
    let mut img: BTreeMap<usize, Option<u32>> = BTreeMap::new();
    for (p, bytes) in snap {
        let Some(n) = (0..NAMES.len()).find(|&n| &path(n) == p) else {
            errs.push(format!("unknown path in image: {}", p.display()));
            continue;
        };
        let secs = match parse(bytes) {
            Ok(s) => s,
            Err(e) => {
                errs.push(format!("{}: {e}", NAMES[n]));
                continue;
            }
        };
        let inos: BTreeSet<u32> = secs.iter().flatten().map(|&(i, _)| i).collect();
        if inos.len() > 1 {
            errs.push(format!(
                "{}: content of several files {inos:?} ({secs:?})",
                NAMES[n]
            ));
            continue;
        }
        let ino = inos.into_iter().next();
        img.insert(n, ino);
        match ino {
            Some(ino) => {
                let Some(id) = r.idents.get(&ino) else {
                    errs.push(format!("{}: unknown ino {ino}", NAMES[n]));
                    continue;
                };
                for (s, sec) in secs.iter().enumerate() {
                    match sec {
                        Some((_, v)) => {
                            if !id.writes.contains(v) {
                                errs.push(format!(
                                    "{}: sector {s} version {v} never written to ino {ino}",
                                    NAMES[n]
                                ));
                            }
                            if let Some(d) = id.durable_version {
                                if *v < d {
                                    errs.push(format!("{}: sector {s} version {v} older than fsynced {d} (ino {ino})", NAMES[n]));
                                }
                            }
                        }
                        None => {
                            if id.durable_version.is_some() {
                                errs.push(format!(
                                    "{}: sector {s} zero but ino {ino} fsynced",
                                    NAMES[n]
                                ));
                            }
                        }
                    }
                }
                if id.durable_version.is_some() && bytes.len() != L {
                    errs.push(format!(
                        "{}: length {} but ino {ino} fsynced at {L}",
                        NAMES[n],
                        bytes.len()
                    ));
                }
                // may ino be at n?
                let ok = id.durable_name == Some(n)
                    || id.stays.iter().any(|s| {
                        s.name == n
                            && match &s.depart {
                                None => true,
                                Some((st, dirs, _)) => !r.synced_after(*st, dirs),
                            }
                    });
                if !ok {
                    errs.push(format!(
                        "{}: holds ino {ino}, which cannot be there (stays {:?})",
                        NAMES[n], id.stays
                    ));
                }
            }
            None => {
                // blank: some never-fsynced file could be here
                let ok = r.idents.values().any(|id| {
                    id.durable_version.is_none() && id.durable_name == Some(n)
                        || id.stays.iter().any(|s| {
                            s.name == n
                                && s.depart
                                    .as_ref()
                                    .is_none_or(|(st, d, _)| !r.synced_after(*st, d))
                        })
                });
                if !ok {
                    errs.push(format!(
                        "{}: blank file no never-fsynced file could be",
                        NAMES[n]
                    ));
                }
            }
        }
    }
    // duplicates
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (&n, ino) in &img {
        if let Some(ino) = ino {
            if let Some(m) = seen.insert(*ino, n) {
                errs.push(format!(
                    "ino {ino} under two names: {} and {}",
                    NAMES[m], NAMES[n]
                ));
            }
        }
    }
    let present: BTreeSet<u32> = img.values().flatten().copied().collect();
    let holds = |n: usize, ino: u32| -> bool {
        match img.get(&n) {
            Some(Some(i)) => *i == ino,
            Some(None) => r.idents[&ino].durable_version.is_none(),
            None => false,
        }
    };
    for (&ino, id) in &r.idents {
        let cur = id.stays.last().unwrap();
        let linked = cur.depart.is_none();
        // durable entry where it is now
        if linked && id.pending.is_empty() && !holds(cur.name, ino) {
            errs.push(format!(
                "ino {ino} durable at {} (fsynced ver {:?}) but image has {:?} there",
                NAMES[cur.name],
                id.durable_version,
                img.get(&cur.name)
            ));
        }
        // never neither: linked and durable somewhere
        if let Some(durable) = id.durable_name
            && linked
            && !present.contains(&ino)
            && !(id.durable_version.is_none() && (holds(cur.name, ino) || holds(durable, ino)))
        {
            errs.push(format!(
                "ino {ino} (linked at {}, durable at {}) missing from image",
                NAMES[cur.name], NAMES[durable]
            ));
        }
        // replaced by a rename not yet durable: comes back unless the replacer holds the name
        if let Some((st, _, DepartKind::Replaced { by })) = &cur.depart {
            if !id.pending.is_empty() && id.durable_name == Some(cur.name) {
                let by_stay = r.idents[by]
                    .stays
                    .iter()
                    .find(|s| s.arrive_step == *st)
                    .unwrap();
                if by_stay.depart.is_none() && !holds(cur.name, ino) && !holds(cur.name, *by) {
                    errs.push(format!(
                        "{}: replaced ino {ino} (durable) by rename of ino {by}: image holds {:?}, neither",
                        NAMES[cur.name], img.get(&cur.name)
                    ));
                }
            }
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

fn full_check(seed: u64, steps: &[Step]) -> Result<(), String> {
    let (r, image, log) = run(seed, steps);
    let snap = snapshot(&image);
    let fmt = |errs: Vec<String>| {
        format!(
            "seed {seed}\nsteps:\n  {}\nimage: {:?}\nerrors:\n  {}",
            log.join("\n  "),
            describe(&snap),
            errs.join("\n  ")
        )
    };
    check(&r, &snap).map_err(fmt)?;
    // determinism
    let (_, image2, _) = run(seed, steps);
    let snap2 = snapshot(&image2);
    if snap != snap2 {
        return Err(fmt(vec![format!(
            "nondeterministic: second run gave {:?}",
            describe(&snap2)
        )]));
    }
    if image.digest() != image2.digest() {
        return Err(fmt(vec!["nondeterministic digest".into()]));
    }
    // a new Aio on the image reads what contents says
    let aio = start(&image, seed ^ 0x55);
    let me = aio.register_issuer("reader").unwrap();
    for (n, name) in NAMES.iter().enumerate() {
        let want = snap.get(&path(n));
        let got = match aio.open(path(n), &OpenOptions::read().direct(false)) {
            Ok(f) => {
                let len = f.len().unwrap() as usize;
                let mut buf = vec![0u8; len];
                if len > 0 {
                    me.read_exact_into(&f, 0, &mut buf)
                        .map_err(|e| fmt(vec![format!("read {}: {e}", name)]))?;
                }
                Some(buf)
            }
            Err(_) => None,
        };
        if got.as_ref() != want {
            return Err(fmt(vec![format!(
                "{}: reopened reads {:?} but contents says {:?}",
                name,
                got.map(|b| b.len()),
                want.map(|b| b.len())
            )]));
        }
    }
    Ok(())
}

fn describe(snap: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<String> {
    snap.iter()
        .map(|(p, b)| {
            let secs = parse(b).map(|s| format!("{s:?}")).unwrap_or_else(|e| e);
            format!(
                "{} len {} {}",
                p.display()
                    .to_string()
                    .trim_start_matches(&*root().display().to_string()),
                b.len(),
                secs
            )
        })
        .collect()
}

/// Both properties: `SIM_NS_CASES` programs (512 by default), no regression file.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("SIM_NS_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(512),
        max_shrink_iters: 5000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn crash_images_are_ones_a_file_system_could_leave(seed in 0u64..(i64::MAX as u64), steps in prop::collection::vec(step_strategy(), 1..20)) {
        watchdog();
        if let Err(e) = full_check(seed, &steps) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Runs fixed steps on seeds 0..n; returns how many images failed the check, and the first.
fn count_failures(steps: &[Step], n: u64) -> (u64, Option<String>) {
    watchdog();
    let mut bad = 0;
    let mut first = None;
    for seed in 0..n {
        let (r, image, log) = run(seed, steps);
        let snap = snapshot(&image);
        if let Err(e) = check(&r, &snap) {
            bad += 1;
            if first.is_none() {
                first = Some(format!(
                    "seed {seed}\n  {}\nimage {:?}\n  {}",
                    log.join("\n  "),
                    describe(&snap),
                    e.join("\n  ")
                ));
            }
        }
        BEAT.store(now_s(), Ordering::Relaxed);
    }
    (bad, first)
}

proptest! {
    #![proptest_config(config())]
    /// Held descriptors (orphans), fdatasync, and a crash armed at a random I/O.
    #[test]
    fn crashes_at_any_io_with_held_descriptors(seed in 0u64..(i64::MAX as u64), steps in prop::collection::vec(step_strategy2(), 1..20), pick in any::<u64>()) {
        watchdog();
        let k = 1 + pick % (ios_of(seed, &steps) + 1);
        let (_, image, log, failed) = run_armed(seed, &steps, Some(k));
        let snap = snapshot(&image);
        let mut variants: Vec<Vec<Step>> = Vec::new();
        match failed {
            None => variants.push(steps.clone()),
            Some(i) => {
                variants.push(steps[..i].to_vec());
                variants.push(steps[..=i].to_vec());
                let mut partial = steps[..i].to_vec();
                match steps[i] {
                    Step::Write { name, .. } => partial.push(Step::Write { name, sync: false }),
                    Step::HeldWrite { k, datasync, .. } => partial.push(Step::HeldWrite { k, sync: false, datasync }),
                    Step::SyncDir { which: 3 } => partial.push(Step::SyncDir { which: 1 }),
                    _ => {}
                }
                variants.push(partial);
            }
        }
        let mut errs = Vec::new();
        let mut ok = false;
        for v in &variants {
            let (r, _, _) = run(seed, v);
            match check(&r, &snap) {
                Ok(()) => { ok = true; break; }
                Err(e) => errs.push(e.join("; ")),
            }
        }
        prop_assert!(ok, "seed {seed} k {k}\n  {}\nimage {:?}\nerrors per variant:\n  {}", log.join("\n  "), describe(&snap), errs.join("\n  "));
        let (_, image2, _, _) = run_armed(seed, &steps, Some(k));
        prop_assert_eq!(snap, snapshot(&image2), "nondeterministic armed crash");
    }
}

/// I/Os a run of `steps` executes on its disk.
fn ios_of(seed: u64, steps: &[Step]) -> u64 {
    run_armed(seed, steps, None);
    IOS.with(|c| c.get())
}
thread_local! { static IOS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) }; }

/// A durable file unlinked (directory not synced), then new content fsynced through a
/// descriptor still open on it: if the unlink is undone, the file comes back with that content.
#[test]
fn an_undone_unlink_keeps_what_was_fsynced_through_an_open_descriptor() {
    use Step::*;
    let steps = [
        Write {
            name: 0,
            sync: true,
        }, // d1/a v1
        SyncDir { which: 1 },
        Hold { name: 0 },
        Unlink { name: 0 },
        HeldWrite {
            k: 0,
            sync: true,
            datasync: false,
        }, // v2, fsynced through the orphan
    ];
    let (bad, first) = count_failures(&steps, 200);
    assert_eq!(
        bad,
        0,
        "{bad}/200 seeds bad; first: {}",
        first.unwrap_or_default()
    );
}

/// The same with a rename replacing the held file instead of an unlink.
#[test]
fn an_undone_replacement_keeps_what_was_fsynced_through_an_open_descriptor() {
    use Step::*;
    let steps = [
        Write {
            name: 0,
            sync: true,
        }, // d1/a v1
        Write {
            name: 1,
            sync: true,
        }, // d1/b
        SyncDir { which: 1 },
        Hold { name: 0 },
        Rename { from: 1, to: 0 }, // d1/b replaces d1/a
        HeldWrite {
            k: 0,
            sync: true,
            datasync: true,
        }, // v3 into the replaced file
    ];
    let (bad, first) = count_failures(&steps, 200);
    assert_eq!(
        bad,
        0,
        "{bad}/200 seeds bad; first: {}",
        first.unwrap_or_default()
    );
}

/// A durable file moved to the other directory, the directory it left synced (which makes
/// the move durable, sim since 5f1ad3a), then moved back unsynced: a crash leaves it at its
/// second name or its third, never lost. Guards the reference model (found by a random seed
/// of the full suite, 2026-12-07: the model still waited for every directory a durable
/// file's moves touched, and called the sim's image, the file at its second name, a loss).
#[test]
fn a_move_made_durable_by_the_directory_it_left_then_moved_back() {
    use Step::*;
    let steps = [
        Write {
            name: 2,
            sync: false,
        }, // d1/c
        SyncDir { which: 3 },
        Rename { from: 2, to: 4 }, // d1/c -> d2/b
        SyncDir { which: 1 },
        Rename { from: 4, to: 0 }, // d2/b -> d1/a
    ];
    let (bad, first) = count_failures(&steps, 200);
    assert_eq!(
        bad,
        0,
        "{bad}/200 seeds bad; first: {}",
        first.unwrap_or_default()
    );
}
