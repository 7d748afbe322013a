//! The simulated disk as the handle layer's [`Storage`]: opening files on it (copying in a
//! real file the first time its path is opened), and executing a request against it — with
//! the seeded faults the settings ask for: EIO on read and write, ENOSPC, short transfers,
//! latent sector errors, bit rot and misdirected writes. See `docs/design.md`, "The
//! simulated disk".

use super::disk::{
    Change, DiskState, Entry, SECTOR, SimDisk, SimFile, disk_path, reopen, stand_in,
};
use super::rng::Rng;
use crate::handle::settings::Settings;
use crate::handle::storage::{OpenMode, Storage};
use dbaio_sys::{Op, Request};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a short transfer on an O_DIRECT file may stop: `dbaio::DIRECT_ALIGN`, the alignment
/// the slice layer reads and writes O_DIRECT files in (a layer above this one, so not
/// imported; `tests/sim.rs` checks the two agree). The kernel ends a short O_DIRECT transfer
/// on a block boundary (or at the end of the file), never mid-block.
const DIRECT_BLOCK: u64 = 4096;

/// The fault probabilities, from the `sim_fault_*` settings.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Faults {
    read_error: f64,
    write_error: f64,
    no_space: f64,
    short: f64,
    latent: f64,
    bit_rot: f64,
    misdirect: f64,
}

impl Faults {
    pub(super) fn from(s: &Settings) -> Faults {
        Faults {
            read_error: s.sim_fault_read_error,
            write_error: s.sim_fault_write_error,
            no_space: s.sim_fault_no_space,
            short: s.sim_fault_short,
            latent: s.sim_fault_latent,
            bit_rot: s.sim_fault_bit_rot,
            misdirect: s.sim_fault_misdirect,
        }
    }
}

/// What a descriptor handed out by [`SimStore::open`] stands for.
#[derive(Clone, Debug)]
enum Opened {
    File {
        path: PathBuf,
        /// The file's identity ([`SimFile::ino`]).
        ino: u64,
        write: bool,
        direct: bool,
    },
    Dir {
        path: PathBuf,
    },
}

/// One subsystem's view of a simulated disk: its descriptors, its fault draws.
pub(crate) struct SimStore {
    pub(crate) disk: SimDisk,
    faults: Faults,
    /// The subsystem's draws (faults, latencies), seeded by `sim_seed`.
    pub(super) rng: Mutex<Rng>,
    open: Mutex<HashMap<RawFd, Opened>>,
    /// The simulated clock, in nanoseconds: moved on only by the method
    /// (`SimMethod::complete_next`), under its queue's lock; read by the I/O clock.
    pub(super) clock_ns: AtomicU64,
}

impl SimStore {
    pub(super) fn new(disk: SimDisk, settings: &Settings) -> SimStore {
        SimStore {
            disk,
            faults: Faults::from(settings),
            rng: Mutex::new(Rng::new(settings.sim_seed)),
            open: Mutex::new(HashMap::new()),
            clock_ns: AtomicU64::new(0),
        }
    }

    fn crashed(&self) -> bool {
        self.disk.inner.crashed.load(Ordering::SeqCst)
    }

    /// True with probability `p`, from the subsystem's draws.
    fn chance(&self, p: f64) -> bool {
        self.rng.lock().chance(p)
    }

    fn draw(&self, n: u64) -> u64 {
        self.rng.lock().below(n)
    }

    /// The bytes a short transfer of `n` (> 1) bytes at `offset` moves: any count below `n`
    /// on a buffered file; on an O_DIRECT file one that ends on a [`DIRECT_BLOCK`] boundary
    /// inside the range, as the kernel's do — all `n` if none falls inside (a transfer that
    /// crosses no boundary is never short). One draw either way, as before O_DIRECT was told
    /// apart: the file's mode changes where the cut falls, never which draw a later fault
    /// gets.
    fn short_count(&self, offset: u64, n: u64, direct: bool) -> u64 {
        if !direct {
            return 1 + self.draw(n - 1);
        }
        // The boundaries `b` with `offset < b < offset + n`, in blocks: `first..=last`.
        let first = offset / DIRECT_BLOCK + 1;
        let last = (offset + n - 1) / DIRECT_BLOCK;
        let choices = (last + 1).saturating_sub(first);
        let pick = self.draw(choices.max(1));
        if choices == 0 {
            return n;
        }
        (first + pick) * DIRECT_BLOCK - offset
    }
}

fn err(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

thread_local! {
    /// While this thread executes a simulated I/O: its store and the I/O's due time, the
    /// simulated moment it completes at (see [`SimStore::executing_at`]).
    static EXECUTING_AT: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

impl SimStore {
    /// Runs `f` — the execution of one popped I/O — at simulated time `due`: its completion
    /// is stamped with the time it was due, not with the clock when this thread got to it.
    /// With several threads, another may move the clock on by thousands of completions
    /// while this one is off its CPU between the pop and the completion (a caller-side
    /// attack saw latencies of 1.5 s, and 39 s with slow outliers, drawn at most 5 ms).
    pub(super) fn executing_at<R>(&self, due: u64, f: impl FnOnce() -> R) -> R {
        struct Restore((usize, u64));
        impl Drop for Restore {
            fn drop(&mut self) {
                EXECUTING_AT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(EXECUTING_AT.with(|c| c.replace((self as *const _ as usize, due))));
        f()
    }
}

impl Storage for SimStore {
    fn clock_ns(&self) -> Option<u64> {
        let (store, due) = EXECUTING_AT.with(std::cell::Cell::get);
        if store == self as *const _ as usize {
            return Some(due);
        }
        Some(self.clock_ns.load(Ordering::Relaxed))
    }

    /// Errors as the kernel's lookup and open give them (sim opened a directory for writing,
    /// and a file named with a trailing slash, and said ENOENT under a file: found by
    /// differential testing against `sync`).
    fn open(&self, raw: &Path, mode: OpenMode) -> std::io::Result<OwnedFd> {
        if name_too_long(raw) {
            return Err(err(libc::ENAMETOOLONG));
        }
        let path = &disk_path(raw);
        let _io = self.disk.inner.gate.read();
        if self.crashed() {
            return Err(err(libc::EIO));
        }
        let mut st = self.disk.inner.state.lock();
        if under_a_file(&st, path) {
            return Err(err(libc::ENOTDIR));
        }
        let opened = if st.files.contains_key(path) || import(&mut st, path)? {
            if spelled_as_dir(raw) {
                return Err(err(libc::ENOTDIR));
            }
            let f = st.files.get_mut(path).expect("present");
            if mode.truncate {
                f.change(Change::Resize { len: 0 });
            }
            Opened::File {
                path: path.to_path_buf(),
                ino: f.ino,
                write: mode.write,
                direct: mode.direct,
            }
        } else if is_dir(&st, path) {
            if mode.write || mode.truncate {
                return Err(err(libc::EISDIR));
            }
            if mode.direct {
                return Err(err(libc::EINVAL)); // no O_DIRECT on a directory
            }
            st.dirs.insert(path.to_path_buf());
            Opened::Dir {
                path: path.to_path_buf(),
            }
        } else if mode.create {
            if spelled_as_dir(raw) {
                return Err(err(libc::EISDIR)); // O_CREAT makes no directory
            }
            create(&mut st, path)?;
            Opened::File {
                path: path.to_path_buf(),
                ino: st.files[path].ino,
                write: true,
                direct: mode.direct,
            }
        } else {
            return Err(err(libc::ENOENT));
        };
        let fd = match &opened {
            Opened::File { ino, .. } => {
                let fd = match st.stand_ins.get(ino) {
                    Some(s) => reopen(s)?,
                    None => {
                        let s = stand_in()?;
                        let fd = reopen(&s)?;
                        st.stand_ins.insert(*ino, s);
                        fd
                    }
                };
                *st.descriptors.entry(*ino).or_insert(0) += 1;
                fd
            }
            Opened::Dir { .. } => stand_in()?,
        };
        self.open.lock().insert(fd.as_raw_fd(), opened);
        Ok(fd)
    }

    unsafe fn perform(&self, req: &Request) -> i32 {
        let (raw, power_goes) = {
            // Whole before a crash, or not at all (see `DiskInner::gate`).
            let _io = self.disk.inner.gate.read();
            if self.crashed() {
                (-libc::EIO, false)
            } else {
                // SAFETY: the caller guarantees the request's iovecs and path (contract).
                let raw = unsafe { self.execute(req) };
                let tripped = self.disk.count_io();
                if tripped {
                    // From now on every other I/O sees the crash; the image is taken once
                    // those already under way are done.
                    self.disk.inner.crashed.store(true, Ordering::SeqCst);
                }
                (raw, tripped)
            }
        };
        let raw = if power_goes {
            self.disk.crash();
            -libc::EIO // the power went before the completion came back
        } else {
            raw
        };
        let len = if req.op.transfers_data() {
            // SAFETY: as above.
            unsafe { iov_len(req) }
        } else {
            req.len
        };
        self.disk
            .inner
            .state
            .lock()
            .record(req.op as u8, req.offset, len, raw);
        raw
    }

    fn len(&self, fd: RawFd) -> std::io::Result<u64> {
        let opened = self.open.lock().get(&fd).cloned();
        let mut st = self.disk.inner.state.lock();
        match opened {
            Some(Opened::File { path, ino, .. }) => st
                .file_mut(&path, ino)
                .map(|f| f.visible.len() as u64)
                .ok_or_else(|| err(libc::ENOENT)),
            Some(Opened::Dir { .. }) => Ok(4096), // an ext4 directory's first block
            None => Err(err(libc::EBADF)),
        }
    }

    fn closing(&self, fd: RawFd) {
        let closed = self.open.lock().remove(&fd);
        if let Some(Opened::File { ino, .. }) = closed {
            let mut st = self.disk.inner.state.lock();
            // The last descriptor on an orphan closes, in any subsystem on the disk: the
            // file is gone.
            if let Some(n) = st.descriptors.get_mut(&ino) {
                *n -= 1;
                if *n == 0 {
                    st.descriptors.remove(&ino);
                    st.stand_ins.remove(&ino);
                    st.orphans.remove(&ino);
                }
            }
        }
    }
}

impl SimStore {
    /// Executes `req` on the disk (not crashed).
    ///
    /// # Safety
    ///
    /// The request's iovecs (and, for an unlink, its path) are valid for the call.
    unsafe fn execute(&self, req: &Request) -> i32 {
        if req.op.on_path() {
            // SAFETY: the caller guarantees a NUL-terminated path, two back to back for a
            // rename (contract).
            let path = unsafe { path_at(req.path) };
            if name_too_long(&path.0) {
                return -libc::ENAMETOOLONG;
            }
            if req.op == Op::Rename {
                // SAFETY: as above.
                let to = unsafe { path_at(dbaio_sys::second_path(req.path)) };
                if name_too_long(&to.0) {
                    return -libc::ENAMETOOLONG;
                }
                return self.rename(path, to);
            }
            return self.unlink(path);
        }
        let Some(opened) = self.open.lock().get(&req.fd).cloned() else {
            return -libc::EBADF;
        };
        if let Opened::File { write, .. } = opened
            && req.op.transfers_data()
        {
            // SAFETY: as for this function.
            if let Some(answer) = unsafe { transfer_checks(req, write) } {
                return answer;
            }
        }
        // SAFETY: as for this function.
        if let Some(refused) = unsafe { beyond_the_limits(req) } {
            return refused;
        }
        let (path, ino, write, direct) = match opened {
            Opened::File {
                path,
                ino,
                write,
                direct,
            } => (path, ino, write, direct),
            // SAFETY: as for this function.
            Opened::Dir { path } => return unsafe { self.dir_op(req, &path) },
        };
        // As O_DIRECT on a real file: a transfer not aligned is refused — except a read at or
        // past the end, which finds nothing to read before it looks at alignment.
        if direct
            && req.op.transfers_data()
            // SAFETY: as for this function.
            && !unsafe { aligned(req) }
            && !(req.op == Op::Readv && self.len_of(&path, ino) <= req.offset)
        {
            return -libc::EINVAL;
        }
        match req.op {
            // SAFETY: as for this function.
            Op::Readv => unsafe { self.read(&path, ino, direct, req) },
            Op::Writev if !write => -libc::EBADF,
            // SAFETY: as for this function.
            Op::Writev => unsafe { self.write(&path, ino, direct, req) },
            Op::Fsync | Op::Fdatasync => self.with_file(&path, ino, |f| {
                f.sync();
                0
            }),
            Op::FadviseWillneed => 0,
            Op::Fallocate if !write => -libc::EBADF,
            Op::Fallocate if self.chance(self.faults.no_space) => -libc::ENOSPC,
            Op::Fallocate => {
                let end = req.offset.saturating_add(req.len);
                self.with_file(&path, ino, |f| {
                    if (f.visible.len() as u64) < end {
                        f.change(Change::Resize { len: end });
                    }
                    0
                })
            }
            Op::Ftruncate if !write => -libc::EINVAL,
            Op::Ftruncate => self.with_file(&path, ino, |f| {
                f.change(Change::Resize { len: req.len });
                0
            }),
            _ => -libc::EINVAL,
        }
    }

    /// The length of the file at `path` (0 if it went away).
    fn len_of(&self, path: &Path, ino: u64) -> u64 {
        let mut st = self.disk.inner.state.lock();
        st.file_mut(path, ino).map_or(0, |f| f.visible.len() as u64)
    }

    /// Runs `f` on the file opened as `ino` at `path` (ENOENT if the disk forgot it).
    fn with_file(&self, path: &Path, ino: u64, f: impl FnOnce(&mut SimFile) -> i32) -> i32 {
        let mut st = self.disk.inner.state.lock();
        match st.file_mut(path, ino) {
            Some(file) => f(file),
            None => -libc::ENOENT,
        }
    }

    /// An op on a directory: a sync makes the entries in it durable (files made in it
    /// stay, files removed from it stay removed).
    ///
    /// # Safety
    ///
    /// The request's iovecs are valid for the call.
    unsafe fn dir_op(&self, req: &Request, dir: &Path) -> i32 {
        match req.op {
            Op::Fsync | Op::Fdatasync => {
                let mut st = self.disk.inner.state.lock();
                let mut now_durable = Vec::new();
                for (p, f) in st.files.iter_mut() {
                    // A renamed file's moves are one change of the namespace, as a journaling
                    // file system commits them: a sync of any directory it left or entered
                    // since its durable name makes its current name durable. Before, only the
                    // sync of every such directory did, and a crash could put the file back
                    // under a name removed from a directory synced since (found by a
                    // caller-side crash model, 2026-12-07).
                    let moved = matches!(f.entry, Entry::Renamed { .. });
                    if f.pending_dirs.remove(dir) && (moved || f.pending_dirs.is_empty()) {
                        f.pending_dirs.clear();
                        f.entry = Entry::Durable;
                        now_durable.push(p.clone());
                    }
                }
                // A file a rename replaced is gone for good once its directory is synced:
                // the entry there now (the file that took the name, durable in this
                // directory even while the directory it came from waits for a sync; or
                // nothing, the newcomer gone too) is what the media holds. Before, a
                // newcomer still waiting for its old directory let the replaced file come
                // back at a crash under a name whose directory was synced (found by the
                // crash-namespace model, 2026-12-07).
                let settled: Vec<PathBuf> = st
                    .replaced
                    .keys()
                    .filter(|p| now_durable.contains(*p) || p.parent() == Some(dir))
                    .cloned()
                    .collect();
                for p in settled {
                    let old = st.replaced.remove(&p).expect("listed");
                    forget(&mut st, old);
                }
                let mut gone = Vec::new();
                for (p, f) in st.removed.iter_mut() {
                    // Likewise a removal: a sync of any directory the file's pending moves
                    // and its unlink touched makes it gone for good.
                    if f.pending_dirs.remove(dir) {
                        gone.push(p.clone());
                    }
                }
                for p in gone {
                    let f = st.removed.remove(&p).expect("listed");
                    forget(&mut st, f);
                }
                0
            }
            Op::FadviseWillneed => 0,
            // As the kernel's order of checks has it for a directory (opened read-only):
            // a read finds a directory, a write or an allocation a descriptor not open for
            // writing, a truncation no regular file.
            // (A read of nothing reads nothing before it would find a directory.)
            // SAFETY: the caller guarantees the iovecs (contract).
            Op::Readv if unsafe { iov_len(req) } == 0 => 0,
            Op::Readv => -libc::EISDIR,
            Op::Writev | Op::Fallocate => -libc::EBADF,
            _ => -libc::EINVAL,
        }
    }

    /// `unlink(path)`: the file leaves the namespace now; until its directory is synced a
    /// crash may bring it back.
    fn unlink(&self, (path, as_dir): (PathBuf, bool)) -> i32 {
        let path = path.as_path();
        if [Path::new("/proc"), Path::new("/sys"), Path::new("/dev")]
            .iter()
            .any(|p| path.starts_with(p))
        {
            // Kernel files are not the disk's to remove: refused as the kernel refuses them
            // (to root as not permitted, to others for want of write permission).
            // SAFETY: geteuid has no preconditions.
            return if unsafe { libc::geteuid() } == 0 {
                -libc::EPERM
            } else {
                -libc::EACCES
            };
        }
        let mut st = self.disk.inner.state.lock();
        if under_a_file(&st, path) {
            return -libc::ENOTDIR;
        }
        if is_dir(&st, path) {
            return -libc::EISDIR;
        }
        if !st.files.contains_key(path) && !import(&mut st, path).unwrap_or(false) {
            return -libc::ENOENT;
        }
        if as_dir {
            return -libc::ENOTDIR;
        }
        let f = st.files.remove(path).expect("present");
        st.tombstones.insert(path.to_path_buf());
        leave_namespace(&mut st, path, f);
        0
    }

    /// `rename(from, to)`: the file takes the new name now, replacing a file there; until
    /// the directories involved are synced a crash leaves it under one of the two names
    /// (and a file it replaced comes back with the old name).
    ///
    /// Errors in the kernel's order (sim checked for directories first, found by
    /// differential testing against `sync`). A directory is not renamed: EXDEV, what a
    /// file system answers a rename it cannot make in place (the disk files each file under
    /// its full path; docs/design.md).
    fn rename(
        &self,
        (from, from_as_dir): (PathBuf, bool),
        (to, to_as_dir): (PathBuf, bool),
    ) -> i32 {
        let (from, to) = (from.as_path(), to.as_path());
        let mut st = self.disk.inner.state.lock();
        // The two parents are looked up first, the source's first.
        if let Some(e) = parent_error(&st, from).or_else(|| parent_error(&st, to)) {
            return e;
        }
        let parent = to.parent().unwrap_or(Path::new("/"));
        let from_dir = is_dir(&st, from);
        if !from_dir && !st.files.contains_key(from) && !import(&mut st, from).unwrap_or(false) {
            return -libc::ENOENT;
        }
        if !st.files.contains_key(to) && !is_dir(&st, to) {
            let _ = import(&mut st, to);
        }
        if from != to && from.starts_with(to) {
            return -libc::ENOTEMPTY; // onto a directory it lies in
        }
        let to_file = st.files.contains_key(to);
        if from_dir {
            return if to_file {
                -libc::ENOTDIR
            } else {
                -libc::EXDEV
            };
        }
        if is_dir(&st, to) {
            return -libc::EISDIR;
        }
        if from_as_dir || to_as_dir {
            return -libc::ENOTDIR;
        }
        if from == to {
            return 0;
        }
        // What was at `to` (imported above if it was a real file) leaves the namespace (a
        // crash may bring it back).
        if let Some(old) = st.files.remove(to) {
            if old.entry == Entry::Durable {
                if let Some(older) = st.replaced.insert(to.to_path_buf(), old) {
                    forget(&mut st, older);
                }
            } else {
                leave_namespace(&mut st, to, old);
            }
        }
        let mut f = st.files.remove(from).expect("present");
        let earlier = std::mem::take(&mut f.pending_dirs);
        let (durable_name, pending) = match std::mem::replace(&mut f.entry, Entry::New) {
            Entry::Durable => (Some(from.to_path_buf()), [dir_of(from)].into()),
            // Renamed again: the directories still to sync are those of the first rename
            // not synced since, and this one's. (They were recomputed from the durable name,
            // so a directory synced after the file left it counted again, and a crash could
            // put the file back under a name removed for good: found by a caller-side
            // model check.)
            Entry::Renamed { from } => (Some(from), earlier),
            Entry::New => (None, BTreeSet::new()),
        };
        f.pending_dirs = pending;
        f.pending_dirs.insert(parent.to_path_buf());
        match durable_name {
            // Back under the name the media has: nothing to sync.
            Some(name) if name == to => {
                f.entry = Entry::Durable;
                f.pending_dirs.clear();
            }
            Some(name) => f.entry = Entry::Renamed { from: name },
            None => {}
        }
        st.tombstones.insert(from.to_path_buf());
        st.tombstones.remove(to);
        st.insert_file(to, f);
        0
    }

    /// A read: the bytes reads see, or a fault (a short one on an O_DIRECT file — `direct` —
    /// ends on a block boundary: [`SimStore::short_count`]).
    ///
    /// # Safety
    ///
    /// The request's iovecs are valid and writable for the call.
    unsafe fn read(&self, path: &Path, ino: u64, direct: bool, req: &Request) -> i32 {
        if self.chance(self.faults.read_error) {
            return -libc::EIO;
        }
        let (short, latent, rot) = (
            self.chance(self.faults.short),
            self.chance(self.faults.latent),
            self.chance(self.faults.bit_rot),
        );
        let mut st = self.disk.inner.state.lock();
        let Some(f) = st.file_mut(path, ino) else {
            return -libc::ENOENT;
        };
        // SAFETY: as for this function.
        let want = unsafe { iov_len(req) };
        let avail = (f.visible.len() as u64).saturating_sub(req.offset);
        let mut n = want.min(avail);
        if n == 0 {
            return 0;
        }
        let sectors = req.offset / SECTOR..=(req.offset + n - 1) / SECTOR;
        if latent {
            let pick = sectors.start() + self.draw(sectors.end() - sectors.start() + 1);
            f.latent.insert(pick);
        }
        if f.latent.range(sectors).next().is_some() {
            return -libc::EIO;
        }
        if rot {
            // A bit of the media flips: this read and every later one see it.
            let at = (req.offset + self.draw(n)) as usize;
            let bit = 1u8 << self.draw(8);
            f.visible[at] ^= bit;
            if at < f.durable.len() {
                f.durable[at] ^= bit;
            }
        }
        if short && n > 1 {
            n = self.short_count(req.offset, n, direct);
        }
        let start = req.offset as usize;
        // SAFETY: as for this function.
        unsafe { scatter(req, &f.visible[start..start + n as usize]) };
        n as i32
    }

    /// A write into the cache, or a fault: refused (EIO, ENOSPC), short (on an O_DIRECT file
    /// — `direct` — ending on a block boundary: [`SimStore::short_count`]), or — the lie —
    /// put at a wrong offset and reported done.
    ///
    /// # Safety
    ///
    /// The request's iovecs are valid for the call.
    unsafe fn write(&self, path: &Path, ino: u64, direct: bool, req: &Request) -> i32 {
        if self.chance(self.faults.write_error) {
            return -libc::EIO;
        }
        if self.chance(self.faults.no_space) {
            return -libc::ENOSPC;
        }
        // SAFETY: as for this function.
        let mut data = unsafe { gather(req) };
        let full = data.len();
        if self.chance(self.faults.short) && full > 1 {
            data.truncate(self.short_count(req.offset, full as u64, direct) as usize);
        }
        let reported = data.len();
        let mut offset = req.offset;
        if self.chance(self.faults.misdirect) {
            let shift = 4096 * (1 + self.draw(4));
            offset = if self.draw(2) == 0 || offset < shift {
                offset + shift
            } else {
                offset - shift
            };
        }
        let mut st = self.disk.inner.state.lock();
        let Some(f) = st.file_mut(path, ino) else {
            return -libc::ENOENT;
        };
        if data.is_empty() {
            // As `pwrite` of nothing: no change, the length neither (an empty write past
            // the end grew the file, and at 1 TiB aborted the process allocating it: found
            // by a caller-side attack).
            return 0;
        }
        {
            let first = offset / SECTOR;
            let last = (offset + data.len() as u64 - 1) / SECTOR;
            let rewritten: Vec<u64> = f.latent.range(first..=last).copied().collect();
            for s in rewritten {
                f.latent.remove(&s);
            }
        }
        f.change(Change::Write { offset, data });
        reported as i32
    }
}

/// Copies real file `path` in (durable) the first time it is opened; false if there is
/// none, or the disk removed it.
fn import(st: &mut DiskState, path: &Path) -> std::io::Result<bool> {
    if st.tombstones.contains(path) || !path.is_file() {
        return Ok(false);
    }
    let contents = std::fs::read(path)?;
    st.insert_file(path, SimFile::new(contents, true)?);
    Ok(true)
}

/// A file whose name `path` went (unlinked, or replaced by a rename): its durable entry, if
/// it has one (at `path`, or at the name it was renamed from), may come back at a crash
/// until its directory is synced; a file with none is gone.
fn leave_namespace(st: &mut DiskState, path: &Path, mut f: SimFile) {
    let durable_name = match &f.entry {
        Entry::Durable => path.to_path_buf(),
        Entry::Renamed { from } => from.clone(),
        Entry::New => return forget(st, f),
    };
    // Gone for good once its directory is synced, and, for a renamed file, the directories
    // its rename still waits for (one synced since the file left it counts no more).
    if f.entry == Entry::Durable {
        f.pending_dirs.clear();
    }
    f.pending_dirs.insert(dir_of(path));
    if let Some(old) = st.removed.insert(durable_name, f) {
        forget(st, old);
    }
}

/// The path at `p`: as the disk names it (`disk_path`), and whether it was spelled as a
/// directory (a trailing `/`, which `disk_path` drops).
///
/// # Safety
///
/// `p` is a valid NUL-terminated string.
unsafe fn path_at(p: *const libc::c_char) -> (PathBuf, bool) {
    // SAFETY: the caller guarantees the string (contract).
    let c = unsafe { std::ffi::CStr::from_ptr(p) };
    let raw = Path::new(std::ffi::OsStr::from_bytes(c.to_bytes()));
    (disk_path(raw), spelled_as_dir(raw))
}

/// True if `raw` ends in `/` or `/.`: the kernel then wants a directory (ENOTDIR for a file).
fn spelled_as_dir(raw: &Path) -> bool {
    let b = raw.as_os_str().as_bytes();
    b.len() > 1 && (b.ends_with(b"/") || b.ends_with(b"/."))
}

/// True if a directory `path` lies under is a file: the kernel's lookup stops there
/// (ENOTDIR; sim said ENOENT, found by differential testing against `sync`).
fn under_a_file(st: &DiskState, path: &Path) -> bool {
    path.ancestors().skip(1).any(|a| {
        st.files.contains_key(a)
            || (!st.dirs.contains(a) && !st.tombstones.contains(a) && a.is_file())
    })
}

/// The directory `path` is in.
fn dir_of(path: &Path) -> PathBuf {
    path.parent().unwrap_or(Path::new("/")).to_path_buf()
}

/// What the kernel's lookup of `path`'s parent directory answers, if not a directory: a file
/// on the way (ENOTDIR), or nothing there (ENOENT).
fn parent_error(st: &DiskState, path: &Path) -> Option<i32> {
    if under_a_file(st, path) {
        return Some(-libc::ENOTDIR);
    }
    (!is_dir(st, &dir_of(path))).then_some(-libc::ENOENT)
}

/// True if `path` is a directory, on the disk or (not yet seen by it) on the real file
/// system.
fn is_dir(st: &DiskState, path: &Path) -> bool {
    st.dirs.contains(path) || (!st.files.contains_key(path) && path.is_dir())
}

/// A file that left the namespace for good: kept as an orphan while a descriptor is open on
/// it (in any subsystem on the disk: only the acting one's were counted, and a second
/// subsystem's read of a file the first unlinked and closed failed with ENOENT, found by a
/// caller-side attack), else dropped.
fn forget(st: &mut DiskState, f: SimFile) {
    if st.descriptors.contains_key(&f.ino) {
        st.orphans.insert(f.ino, f);
    }
}

/// A new empty file at `path`, its entry not yet durable.
fn create(st: &mut DiskState, path: &Path) -> std::io::Result<()> {
    let parent = dir_of(path);
    if !is_dir(st, &parent) {
        return Err(err(libc::ENOENT));
    }
    st.tombstones.remove(path);
    // A durable file unlinked from this name stays in `removed`: until the directory is
    // synced a crash may undo both the unlink and this creation, and bring it back (it was
    // forgotten here: found by a caller-side attack).
    let mut f = SimFile::new(Vec::new(), false)?;
    f.pending_dirs.insert(parent);
    st.insert_file(path, f);
    Ok(())
}

/// The bytes `req`'s iovecs cover.
///
/// # Safety
///
/// `req.iov` points at `req.iovcnt` valid iovecs.
unsafe fn iov_len(req: &Request) -> u64 {
    if req.iov.is_null() {
        return 0;
    }
    // SAFETY: the caller guarantees the iovecs (contract).
    unsafe { std::slice::from_raw_parts(req.iov, req.iovcnt as usize) }
        .iter()
        .map(|v| v.iov_len as u64)
        .sum()
}

/// Whether `req` meets O_DIRECT's alignment: offset, and each buffer's address and length,
/// multiples of the sector.
///
/// # Safety
///
/// `req.iov` points at `req.iovcnt` valid iovecs.
unsafe fn aligned(req: &Request) -> bool {
    if req.offset % SECTOR != 0 {
        return false;
    }
    if req.iov.is_null() {
        return true;
    }
    // SAFETY: the caller guarantees the iovecs (contract).
    unsafe { std::slice::from_raw_parts(req.iov, req.iovcnt as usize) }
        .iter()
        .all(|v| v.iov_base as u64 % SECTOR == 0 && v.iov_len as u64 % SECTOR == 0)
}

/// Copies `bytes` into `req`'s iovecs, in order.
///
/// # Safety
///
/// `req.iov` points at valid, writable iovecs covering at least `bytes.len()` bytes.
unsafe fn scatter(req: &Request, mut bytes: &[u8]) {
    // SAFETY: the caller guarantees the iovecs (contract).
    let iovs = unsafe { std::slice::from_raw_parts(req.iov, req.iovcnt as usize) };
    for v in iovs {
        if bytes.is_empty() {
            break;
        }
        let n = v.iov_len.min(bytes.len());
        // SAFETY: `v` names `v.iov_len` writable bytes (contract); `n` is within both.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.iov_base.cast(), n) };
        bytes = &bytes[n..];
    }
}

/// The bytes `req`'s iovecs hold, in order.
///
/// # Safety
///
/// `req.iov` points at valid, readable iovecs.
/// The largest file the simulated disk holds. Its files live in memory (what reads see, and
/// what the media holds), so one that would grow past this is refused with `EFBIG`, as a
/// file system refuses a file beyond its largest (ext4's is 16 TiB).
pub const SIM_MAX_FILE_SIZE: u64 = 4 << 30;

/// What the kernel answers a read or write on a regular file before the file system looks
/// at it, in the kernel's order: an offset beyond `off_t` (EINVAL), a write on a descriptor
/// not open for writing (EBADF), nothing to transfer (0, wherever it is — unaligned on an
/// O_DIRECT file too), an end beyond `off_t` (EINVAL). None: the file system's checks come
/// next (size limits, O_DIRECT alignment). Before, sim answered EINVAL for unaligned zero-length transfers and for a
/// write on a read-only O_DIRECT file, end of file for a read past `off_t` and EFBIG for such
/// a write (found by differential testing against `sync`).
///
/// # Safety
///
/// The request's iovecs are valid for the call.
unsafe fn transfer_checks(req: &Request, write: bool) -> Option<i32> {
    if req.offset_out_of_range() {
        return Some(-libc::EINVAL); // `preadv`'s first check: a negative position
    }
    if req.op == Op::Writev && !write {
        return Some(-libc::EBADF);
    }
    // SAFETY: the caller guarantees the iovecs (contract).
    let len = unsafe { iov_len(req) };
    if len == 0 {
        return Some(0);
    }
    match req.offset.checked_add(len) {
        Some(end) if end <= dbaio_sys::MAX_OFFSET => None,
        _ => Some(-libc::EINVAL),
    }
}

/// What the kernel would refuse before looking at the file: an offset or size beyond `off_t`
/// (`EINVAL`; a read or write at offset -1 must not be taken for "at the position"), an
/// empty fallocate or one whose length is beyond `off_t` (`EINVAL`), a file grown past
/// [`SIM_MAX_FILE_SIZE`] (`EFBIG`).
///
/// # Safety
///
/// The request's iovecs are valid for the call.
unsafe fn beyond_the_limits(req: &Request) -> Option<i32> {
    let end = match req.op {
        _ if req.offset_out_of_range() => return Some(-libc::EINVAL),
        Op::Writev => {
            // SAFETY: the caller guarantees the iovecs (contract).
            let iovs = unsafe { std::slice::from_raw_parts(req.iov, req.iovcnt as usize) };
            let len = iovs.iter().map(|v| v.iov_len as u64).sum::<u64>();
            if len == 0 {
                return None;
            }
            req.offset.checked_add(len)
        }
        Op::Fallocate
            if req.len == 0
                || req.len > dbaio_sys::MAX_OFFSET
                || req.offset > dbaio_sys::MAX_OFFSET =>
        {
            return Some(-libc::EINVAL);
        }
        Op::Fallocate => req.offset.checked_add(req.len),
        Op::Ftruncate if req.len > dbaio_sys::MAX_OFFSET => return Some(-libc::EINVAL),
        // (The kernel takes any offset for advice, only not a length beyond `off_t`.)
        Op::FadviseWillneed if req.len > dbaio_sys::MAX_OFFSET => return Some(-libc::EINVAL),
        Op::Ftruncate => Some(req.len),
        _ => return None,
    };
    match end {
        Some(end) if end <= SIM_MAX_FILE_SIZE => None,
        _ => Some(-libc::EFBIG),
    }
}

unsafe fn gather(req: &Request) -> Vec<u8> {
    // SAFETY: the caller guarantees the iovecs (contract).
    let iovs = unsafe { std::slice::from_raw_parts(req.iov, req.iovcnt as usize) };
    let mut out = Vec::with_capacity(iovs.iter().map(|v| v.iov_len).sum());
    for v in iovs {
        // SAFETY: `v` names `v.iov_len` readable bytes (contract).
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(v.iov_base.cast(), v.iov_len) });
    }
    out
}

use std::os::unix::ffi::OsStrExt;

/// True for a path the kernel refuses with ENAMETOOLONG: a name longer than ext4's 255
/// bytes, or a path of `PATH_MAX` bytes or more (sim opened a 300-byte name: found by a
/// caller-side attack, 2026-12-08).
fn name_too_long(path: &Path) -> bool {
    path.as_os_str().len() >= libc::PATH_MAX as usize
        || path.components().any(|c| c.as_os_str().len() > 255)
}
