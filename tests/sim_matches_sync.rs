//! `io_method = sim` against the kernel: the same calls run on `sync` over real files (a
//! directory in the crate's target, where O_DIRECT works) and on `sim` over a fresh
//! `SimDisk`, and every call's outcome (bytes, data, errno), every open file's length after
//! each call, and at the end every file's contents must be the same. Targeted sequences
//! first, then generated programs of opens (buffered and O_DIRECT, read-only, create,
//! truncate; files, directories, paths under a file, trailing slashes), reads and writes
//! through handles, vectors and the slice helpers (at, across and past the end; empty;
//! unaligned), truncations, allocations, syncs, unlinks and renames
//! (`SIM_DIFF_CASES=N` runs N programs; 512 by default).
//!
//! What sim knowingly does otherwise is not generated: renaming a directory (sim answers
//! EXDEV), files past 4 GiB (`SIM_MAX_FILE_SIZE`: EFBIG), and unaligned O_DIRECT transfers
//! through a handle — ext4 reads a hole or an unwritten extent without looking at the
//! alignment (sim always refuses), and writes the aligned part of an unaligned write it
//! then refuses with EINVAL.
//!
//! Guards against (all found by differential testing, 2026-12-07): sim answering in another
//! order than the kernel (EINVAL before EBADF, before a zero-length transfer's 0, EFBIG or end
//! of file where the kernel refuses an end beyond `off_t`), opening a directory for writing,
//! truncation or O_DIRECT, a file named with a trailing slash, ENOENT for a path under a file,
//! a rename's errors out of the kernel's order; and the slice helpers' empty transfers and a
//! read-only O_DIRECT file's tail write (every method; also `conformance/slice_io`).

use dbaio::{Aio, AioError, File, IoBuf, Issuer, OpenOptions, Settings, SimDisk};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Fails the run instead of hanging: aborts the process after two minutes.
fn watchdog() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(120));
            eprintln!("sim_matches_sync: still running after 120 s: aborting");
            std::process::abort();
        });
    });
}

/// Where the real files go: the target directory's file system, which must take O_DIRECT
/// (None, said once, where it does not: the comparison is then skipped).
fn base_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let probe = tempfile::NamedTempFile::new_in(&dir).ok()?;
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(probe.path());
    if direct.is_err() {
        eprintln!(
            "sim_matches_sync: SKIPPED: {} refuses O_DIRECT",
            dir.display()
        );
        return None;
    }
    Some(dir)
}

/// Files open at once, by slot.
const SLOTS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum WHow {
    Handle,
    All,
    Slice,
    SliceMisaligned,
    Vec2,
}
#[derive(Clone, Copy, Debug)]
enum RHow {
    Handle,
    Exact,
    Into,
    ExactInto,
    IntoMisaligned,
    Vec2,
}

#[derive(Clone, Debug)]
enum Step {
    Open {
        slot: usize,
        name: &'static str,
        write: bool,
        create: bool,
        truncate: bool,
        direct: bool,
    },
    Close {
        slot: usize,
    },
    Write {
        slot: usize,
        off: u64,
        len: usize,
        seed: u8,
        how: WHow,
    },
    Read {
        slot: usize,
        off: u64,
        len: usize,
        how: RHow,
    },
    Truncate {
        slot: usize,
        len: u64,
    },
    Allocate {
        slot: usize,
        off: u64,
        len: u64,
    },
    Fsync {
        slot: usize,
    },
    Fdatasync {
        slot: usize,
    },
    Unlink {
        name: &'static str,
    },
    Rename {
        from: &'static str,
        to: &'static str,
    },
}

struct Side {
    files: Vec<Option<File>>,
    /// Whether each slot's file was opened O_DIRECT.
    direct: [bool; SLOTS],
    iss: Issuer,
    aio: Aio,
    disk: Option<SimDisk>,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Side {
    fn new(sim: bool, base: &Path) -> Side {
        let dir = tempfile::tempdir_in(base).unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::create_dir(root.join("d/e")).unwrap();
        let mut s = Settings::default();
        s.set("io_method", if sim { "sim" } else { "sync" })
            .unwrap();
        s.set("buffer_pool_size", "0").unwrap();
        let (aio, disk) = if sim {
            let disk = SimDisk::new(1);
            let mut b = Aio::builder(s);
            b.sim_disk(disk.clone());
            (b.start().unwrap(), Some(disk))
        } else {
            (Aio::start(s).unwrap(), None)
        };
        let iss = aio.register_issuer("diff").unwrap();
        Side {
            files: (0..SLOTS).map(|_| None).collect(),
            direct: [false; SLOTS],
            iss,
            aio,
            disk,
            root,
            _dir: dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        // Keep a trailing slash ("a/") as given.
        PathBuf::from(format!("{}/{}", self.root.display(), name))
    }

    /// True for a step sim knowingly answers otherwise than ext4 (see the file's head): a
    /// directory renamed; an unaligned O_DIRECT transfer through a handle.
    fn knowingly_different(&self, st: &Step) -> bool {
        // (A vector's two buffers are each half the length: each must be aligned too.)
        let unaligned = |slot: usize, off: u64, len: usize, vector: bool| {
            self.direct[slot]
                && self.files[slot].is_some()
                && (off % 512 != 0 || len % 512 != 0 || (vector && (len / 2) % 512 != 0))
        };
        match *st {
            Step::Rename { from, .. } => self.root.join(from).is_dir(),
            Step::Write {
                slot,
                off,
                len,
                how,
                ..
            } => {
                matches!(how, WHow::Handle | WHow::All | WHow::Vec2)
                    && unaligned(slot, off, len, matches!(how, WHow::Vec2))
            }
            Step::Read {
                slot,
                off,
                len,
                how,
            } => {
                matches!(how, RHow::Handle | RHow::Exact | RHow::Vec2)
                    && unaligned(slot, off, len, matches!(how, RHow::Vec2))
            }
            _ => false,
        }
    }

    fn step(&mut self, st: &Step) -> String {
        let out = self.step_inner(st);
        let lens: Vec<String> = self
            .files
            .iter()
            .map(|f| match f {
                None => "-".into(),
                Some(f) => match f.len() {
                    Ok(n) => n.to_string(),
                    Err(e) => format!("lenerr{:?}", e.raw_os_error()),
                },
            })
            .collect();
        format!("{out} | lens [{}]", lens.join(","))
    }

    fn step_inner(&mut self, st: &Step) -> String {
        match *st {
            Step::Open {
                slot,
                name,
                write,
                create,
                truncate,
                direct,
            } => {
                let o = OpenOptions {
                    write,
                    create,
                    truncate,
                    direct: Some(direct),
                    ..Default::default()
                };
                match self.aio.open(self.path(name), &o) {
                    Ok(f) => {
                        self.files[slot] = Some(f);
                        self.direct[slot] = direct;
                        "open ok".into()
                    }
                    Err(e) => {
                        self.files[slot] = None;
                        err_str(&e)
                    }
                }
            }
            Step::Close { slot } => {
                if let Some(f) = self.files[slot].take() {
                    self.iss.close(f);
                }
                "closed".into()
            }
            Step::Write {
                slot,
                off,
                len,
                seed,
                how,
            } => {
                let Some(f) = self.files[slot].as_ref() else {
                    return "nofile".into();
                };
                let data: Vec<u8> = (0..len)
                    .map(|i| seed.wrapping_add((i as u8).wrapping_mul(7)))
                    .collect();
                let iss = &self.iss;
                match how {
                    WHow::Handle => {
                        let io = iss
                            .acquire()
                            .unwrap()
                            .write(f, off, IoBuf::from_slice(&data));
                        let c = iss.wait(io);
                        comp_str(&c)
                    }
                    WHow::All => res(iss
                        .write_all_at(f, off, IoBuf::from_slice(&data))
                        .map(|_| ())),
                    WHow::Slice => {
                        let b = IoBuf::from_slice(&data);
                        res(iss.write_all_from(f, off, &b))
                    }
                    WHow::SliceMisaligned => {
                        let mut v = vec![0u8; len + 1];
                        v[1..].copy_from_slice(&data);
                        let b = IoBuf::from_slice(&v);
                        res(iss.write_all_from(f, off, &b[1..]))
                    }
                    WHow::Vec2 => {
                        let h = len / 2;
                        let bufs =
                            vec![IoBuf::from_slice(&data[..h]), IoBuf::from_slice(&data[h..])];
                        match iss.acquire().unwrap().writev(f, off, bufs) {
                            Ok(io) => comp_str(&iss.wait(io)),
                            Err(e) => err_str(&e),
                        }
                    }
                }
            }
            Step::Read {
                slot,
                off,
                len,
                how,
            } => {
                let Some(f) = self.files[slot].as_ref() else {
                    return "nofile".into();
                };
                let iss = &self.iss;
                match how {
                    RHow::Handle => {
                        let io = iss.acquire().unwrap().read(f, off, IoBuf::new(len));
                        let c = iss.wait(io);
                        let s = comp_str(&c);
                        let n = c.bytes();
                        let b = c.into_buf();
                        format!("{s} data {}", hex(&b[..n.min(b.len())]))
                    }
                    RHow::Exact => match iss.read_exact_at(f, off, IoBuf::new(len)) {
                        Ok(b) => format!("ok data {}", hex(&b)),
                        Err(e) => err_str(&e),
                    },
                    RHow::Into => {
                        let mut b = IoBuf::new(len);
                        match iss.read_into(f, off, &mut b) {
                            Ok(n) => format!("ok {n} data {}", hex(&b[..n])),
                            Err(e) => err_str(&e),
                        }
                    }
                    RHow::ExactInto => {
                        let mut b = IoBuf::new(len);
                        match iss.read_exact_into(f, off, &mut b) {
                            Ok(()) => format!("ok data {}", hex(&b)),
                            Err(e) => err_str(&e),
                        }
                    }
                    RHow::IntoMisaligned => {
                        let mut b = IoBuf::new(len + 1);
                        match iss.read_into(f, off, &mut b[1..]) {
                            Ok(n) => format!("ok {n} data {}", hex(&b[1..1 + n])),
                            Err(e) => err_str(&e),
                        }
                    }
                    RHow::Vec2 => {
                        let h = len / 2;
                        let bufs = vec![IoBuf::new(h), IoBuf::new(len - h)];
                        match iss.acquire().unwrap().readv(f, off, bufs) {
                            Ok(io) => {
                                let c = iss.wait(io);
                                let s = comp_str(&c);
                                let n = c.bytes();
                                let all: Vec<u8> =
                                    c.into_bufs().iter().flat_map(|b| b.to_vec()).collect();
                                format!("{s} data {}", hex(&all[..n.min(all.len())]))
                            }
                            Err(e) => err_str(&e),
                        }
                    }
                }
            }
            Step::Truncate { slot, len } => {
                let Some(f) = self.files[slot].as_ref() else {
                    return "nofile".into();
                };
                res(self.iss.ftruncate(f, len))
            }
            Step::Allocate { slot, off, len } => {
                let Some(f) = self.files[slot].as_ref() else {
                    return "nofile".into();
                };
                res(self.iss.fallocate(f, off, len))
            }
            Step::Fsync { slot } => {
                let Some(f) = self.files[slot].as_ref() else {
                    return "nofile".into();
                };
                res(self.iss.fsync(f))
            }
            Step::Fdatasync { slot } => {
                let Some(f) = self.files[slot].as_ref() else {
                    return "nofile".into();
                };
                res(self.iss.fdatasync(f))
            }
            Step::Unlink { name } => res(self.iss.unlink(&self.path(name))),
            Step::Rename { from, to } => res(self.iss.rename(&self.path(from), &self.path(to))),
        }
    }

    /// Every regular file under the root, by relative path, with its contents.
    fn contents(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        match &self.disk {
            Some(disk) => {
                for p in disk.files() {
                    if let Ok(rel) = p.strip_prefix(&self.root) {
                        out.insert(rel.display().to_string(), disk.contents(&p).unwrap());
                    }
                }
            }
            None => walk(&self.root, &self.root, &mut out),
        }
        out
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            out.insert(
                p.strip_prefix(root).unwrap().display().to_string(),
                std::fs::read(&p).unwrap(),
            );
        }
    }
}

fn hex(b: &[u8]) -> String {
    if b.len() > 64 {
        // a digest for long data
        let mut h: u64 = 0xcbf29ce484222325;
        for &x in b {
            h ^= x as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        return format!("len{}#{h:016x}", b.len());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn err_str(e: &AioError) -> String {
    match e {
        AioError::Io(io) => format!(
            "ERR errno {} kind {:?} transferred {}",
            io.errno,
            io.kind(),
            io.transferred
        ),
        AioError::Open { source, .. } => format!("ERR open errno {:?}", source.raw_os_error()),
        other => format!("ERR other {other}"),
    }
}

fn res(r: Result<(), AioError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => err_str(&e),
    }
}

fn comp_str(c: &dbaio::Completion) -> String {
    format!(
        "bytes {} partial {} eof {} fail {:?}",
        c.bytes(),
        c.is_partial(),
        c.is_end_of_file(),
        c.failure().map(|e| e.errno)
    )
}

/// Runs `steps` on both sides; Err(description) at the first difference (Ok where the
/// target directory refuses O_DIRECT). A `generated` program's steps that sim knowingly
/// answers otherwise are left out; a targeted sequence is compared whole.
fn diff(steps: &[Step], generated: bool) -> Result<(), String> {
    watchdog();
    let Some(base) = base_dir() else {
        return Ok(());
    };
    let mut real = Side::new(false, &base);
    let mut sim = Side::new(true, &base);
    let mut log = String::new();
    for (i, s) in steps.iter().enumerate() {
        if generated && real.knowingly_different(s) {
            log.push_str(&format!(
                "  {i}: {s:?} (not compared: sim knowingly differs)\n"
            ));
            continue;
        }
        let a = real.step(s);
        let b = sim.step(s);
        log.push_str(&format!("  {i}: {s:?}\n     sync: {a}\n     sim : {b}\n"));
        if a != b {
            return Err(format!("step {i} differs:\n{log}"));
        }
    }
    // Close everything before comparing contents.
    for slot in 0..SLOTS {
        real.step(&Step::Close { slot });
        sim.step(&Step::Close { slot });
    }
    let (ca, cb) = (real.contents(), sim.contents());
    if ca != cb {
        let da: BTreeMap<_, _> = ca.iter().map(|(k, v)| (k.clone(), hex(v))).collect();
        let db: BTreeMap<_, _> = cb.iter().map(|(k, v)| (k.clone(), hex(v))).collect();
        let mut firsts = String::new();
        for (k, va) in &ca {
            if let Some(vb) = cb.get(k) {
                if let Some(i) = (0..va.len().min(vb.len())).find(|&i| va[i] != vb[i]) {
                    firsts.push_str(&format!(
                        "  {k}: first difference at byte {i}: sync {:02x} sim {:02x}\n",
                        va[i], vb[i]
                    ));
                }
            }
        }
        log.push_str(&firsts);
        return Err(format!(
            "final contents differ:\n{log}  sync files: {da:?}\n  sim files : {db:?}"
        ));
    }
    Ok(())
}

fn expect_same(steps: &[Step]) {
    if let Err(e) = diff(steps, false) {
        panic!("{e}");
    }
}

fn open(slot: usize, name: &'static str, direct: bool) -> Step {
    Step::Open {
        slot,
        name,
        write: true,
        create: true,
        truncate: false,
        direct,
    }
}
/// A write of `len` bytes made from `seed` at `off` of slot `slot`'s file, by `how`.
fn write(slot: usize, off: u64, len: usize, seed: u8, how: WHow) -> Step {
    Step::Write {
        slot,
        off,
        len,
        seed,
        how,
    }
}
/// A read of `len` bytes at `off` of slot `slot`'s file, by `how`.
fn read(slot: usize, off: u64, len: usize, how: RHow) -> Step {
    Step::Read {
        slot,
        off,
        len,
        how,
    }
}
fn open_ro(slot: usize, name: &'static str, direct: bool) -> Step {
    Step::Open {
        slot,
        name,
        write: false,
        create: false,
        truncate: false,
        direct,
    }
}

// ---------------------------------------------------------------- targeted cases

#[test]
fn basic_buffered() {
    expect_same(&[
        open(0, "a", false),
        write(0, 0, 100, 1, WHow::Handle),
        write(0, 200, 10, 2, WHow::All),
        read(0, 150, 100, RHow::Handle),
        read(0, 150, 100, RHow::Exact),
        read(0, 150, 100, RHow::Into),
        read(0, 210, 100, RHow::Handle),
        read(0, 300, 100, RHow::Handle),
        write(0, 500, 0, 2, WHow::Handle),
        Step::Truncate { slot: 0, len: 5000 },
        Step::Truncate { slot: 0, len: 50 },
        Step::Allocate {
            slot: 0,
            off: 40,
            len: 100,
        },
        Step::Allocate {
            slot: 0,
            off: 0,
            len: 0,
        },
        Step::Fsync { slot: 0 },
        Step::Fdatasync { slot: 0 },
    ]);
}

#[test]
fn huge_read_near_i64_max() {
    expect_same(&[
        open(0, "a", false),
        read(0, i64::MAX as u64, 10, RHow::Handle),
    ]);
}

#[test]
fn huge_read_end_at_2_63() {
    expect_same(&[
        open(0, "a", false),
        read(0, (1u64 << 63) - 4096, 4096, RHow::Handle),
    ]);
}

#[test]
fn huge_write_near_i64_max() {
    expect_same(&[
        open(0, "a", false),
        write(0, i64::MAX as u64, 10, 1, WHow::Handle),
    ]);
}

#[test]
fn huge_u64_max() {
    expect_same(&[
        open(0, "a", false),
        read(0, u64::MAX, 10, RHow::Handle),
        write(0, u64::MAX, 10, 1, WHow::Handle),
        write(0, u64::MAX, 0, 1, WHow::Handle),
        Step::Truncate {
            slot: 0,
            len: u64::MAX,
        },
        Step::Allocate {
            slot: 0,
            off: u64::MAX,
            len: 1,
        },
        Step::Allocate {
            slot: 0,
            off: 1,
            len: u64::MAX,
        },
        Step::Allocate {
            slot: 0,
            off: i64::MAX as u64,
            len: 1,
        },
    ]);
}

#[test]
fn direct_zero_len_unaligned() {
    expect_same(&[
        open(0, "a", true),
        write(0, 4096, 4096, 1, WHow::Handle),
        write(0, 100, 0, 1, WHow::Handle),
    ]);
}

#[test]
fn direct_zero_len_read_unaligned() {
    expect_same(&[
        open(0, "a", true),
        write(0, 0, 8192, 1, WHow::Handle),
        read(0, 100, 0, RHow::Handle),
    ]);
}

#[test]
fn direct_unaligned() {
    expect_same(&[
        open(0, "a", true),
        write(0, 0, 8192, 1, WHow::Handle),
        write(0, 100, 4096, 1, WHow::Handle),
        write(0, 0, 100, 1, WHow::Handle),
        read(0, 100, 4096, RHow::Handle),
        read(0, 0, 100, RHow::Handle),
        read(0, 8192, 100, RHow::Handle),
        read(0, 8200, 100, RHow::Handle),
        read(0, 4096, 8192, RHow::Handle),
    ]);
}

#[test]
fn direct_readonly_unaligned_write() {
    expect_same(&[
        open(0, "a", true),
        open_ro(1, "a", true),
        write(1, 100, 10, 1, WHow::Handle),
    ]);
}

#[test]
fn open_dir_for_write() {
    expect_same(&[Step::Open {
        slot: 0,
        name: "d",
        write: true,
        create: false,
        truncate: false,
        direct: false,
    }]);
}

#[test]
fn open_dir_create() {
    expect_same(&[open(0, "d", false)]);
}

#[test]
fn open_under_file() {
    expect_same(&[open(0, "a", false), open(1, "a/x", false)]);
}

#[test]
fn open_trailing_slash() {
    expect_same(&[open(0, "a", false), open_ro(1, "a/", false)]);
}

#[test]
fn dir_len() {
    expect_same(&[open_ro(0, "d", false)]);
}

#[test]
fn rename_missing_onto_dir() {
    expect_same(&[Step::Rename { from: "a", to: "d" }]);
}

#[test]
fn rename_dir_onto_file() {
    expect_same(&[
        open(0, "a", false),
        Step::Rename {
            from: "d/e",
            to: "a",
        },
    ]);
}

#[test]
fn rename_file_under_file() {
    expect_same(&[
        open(0, "a", false),
        open(1, "b", false),
        Step::Rename {
            from: "a",
            to: "b/x",
        },
    ]);
}

#[test]
fn unlink_under_file() {
    expect_same(&[open(0, "a", false), Step::Unlink { name: "a/x" }]);
}

#[test]
fn unlink_open_then_use() {
    expect_same(&[
        open(0, "a", false),
        write(0, 0, 100, 1, WHow::Handle),
        Step::Unlink { name: "a" },
        write(0, 50, 100, 2, WHow::Handle),
        read(0, 0, 200, RHow::Handle),
        Step::Truncate { slot: 0, len: 10 },
        Step::Fsync { slot: 0 },
        open(1, "a", false),
        write(1, 0, 3, 3, WHow::Handle),
    ]);
}

#[test]
fn direct_empty_slice_write() {
    expect_same(&[open(0, "a", true), write(0, 512, 0, 0, WHow::Slice)]);
}

#[test]
fn direct_slice_write_tail_only() {
    expect_same(&[open(0, "a", true), write(0, 1, 4096, 0, WHow::Slice)]);
}

#[test]
fn dir_ops() {
    expect_same(&[
        open_ro(0, ".", false),
        Step::Fsync { slot: 0 },
        Step::Fdatasync { slot: 0 },
        read(0, 0, 10, RHow::Handle),
        write(0, 0, 10, 0, WHow::Handle),
        Step::Truncate { slot: 0, len: 0 },
        Step::Allocate {
            slot: 0,
            off: 0,
            len: 10,
        },
        Step::Unlink { name: "d" },
        Step::Unlink { name: "nodir/a" },
        Step::Rename {
            from: "nodir/a",
            to: "b",
        },
        open(1, "a", false),
        Step::Rename { from: "a", to: "a" },
        Step::Rename {
            from: "a",
            to: "nodir/a",
        },
        Step::Rename {
            from: "a",
            to: "d/e",
        },
    ]);
}

#[test]
fn direct_readv_empty_segment() {
    expect_same(&[
        open(0, "a", true),
        write(0, 0, 8192, 3, WHow::Handle),
        read(0, 0, 8192, RHow::Vec2),
        read(0, 4096, 1, RHow::Vec2),
        write(0, 4096, 1, 3, WHow::Vec2),
    ]);
}

// ---------------------------------------------------------------- generated programs

fn offs() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(100),
        Just(511),
        Just(512),
        Just(4095),
        Just(4096),
        Just(4097),
        Just(8192),
        Just(10000),
        Just(16384),
    ]
}
fn lens() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(100),
        Just(512),
        Just(4096),
        Just(4097),
        Just(8192),
        Just(12288)
    ]
}
fn slot() -> impl Strategy<Value = usize> {
    0..SLOTS
}
/// Names: files, a directory, a file under a missing directory, a path under a file.
fn name() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just("a"),
        3 => Just("b"),
        2 => Just("d/a"),
        1 => Just("d"),
        1 => Just("nodir/a"),
        1 => Just("a/x"),
    ]
}
fn whow() -> impl Strategy<Value = WHow> {
    prop_oneof![
        Just(WHow::Handle),
        Just(WHow::All),
        Just(WHow::Slice),
        Just(WHow::SliceMisaligned),
        Just(WHow::Vec2)
    ]
}
fn rhow() -> impl Strategy<Value = RHow> {
    prop_oneof![
        Just(RHow::Handle),
        Just(RHow::Exact),
        Just(RHow::Into),
        Just(RHow::ExactInto),
        Just(RHow::IntoMisaligned),
        Just(RHow::Vec2)
    ]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (slot(), name(), any::<bool>(), any::<bool>(), prop::bool::weighted(0.15), any::<bool>()).prop_map(
            |(slot, name, write, create, truncate, direct)| Step::Open { slot, name, write, create, truncate, direct }),
        1 => slot().prop_map(|slot| Step::Close { slot }),
        6 => (slot(), offs(), lens(), any::<u8>(), whow())
            .prop_map(|(slot, off, len, seed, how)| Step::Write { slot, off, len, seed, how }),
        5 => (slot(), offs(), lens(), rhow()).prop_map(|(slot, off, len, how)| Step::Read { slot, off, len, how }),
        2 => (slot(), offs()).prop_map(|(slot, len)| Step::Truncate { slot, len }),
        2 => (slot(), offs(), offs()).prop_map(|(slot, off, len)| Step::Allocate { slot, off, len }),
        1 => slot().prop_map(|slot| Step::Fsync { slot }),
        1 => slot().prop_map(|slot| Step::Fdatasync { slot }),
        1 => name().prop_map(|name| Step::Unlink { name }),
        1 => (name(), name()).prop_map(|(from, to)| Step::Rename { from, to }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("SIM_DIFF_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    /// Generated programs of up to 24 steps over three file slots.
    #[test]
    fn generated_programs(steps in prop::collection::vec(step_strategy(), 1..25)) {
        if let Err(e) = diff(&steps, true) {
            prop_assert!(false, "{}", e);
        }
    }
}
