//! [`SimDisk`]: the simulated disk's files — what the media holds, what the volatile cache
//! holds on top of it, which directory entries are durable — and [`SimDisk::crash`], which
//! turns the cache into what a power loss leaves: each write not yet synced dropped, kept or
//! torn at sector granularity, each directory entry not yet synced kept or lost, by seeded
//! choice. See `docs/design.md`, "The simulated disk".

use super::rng::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The sector: the unit a torn write keeps or loses, and of latent sector errors.
pub const SECTOR: u64 = 512;

/// A change to a file's contents since its last sync, replayed (or not) at a crash.
#[derive(Clone, Debug)]
pub(super) enum Change {
    /// Bytes written at an offset.
    Write { offset: u64, data: Vec<u8> },
    /// The length set (ftruncate, or a fallocate that extended it).
    Resize { len: u64 },
}

/// A file's directory entry as the media holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// Durable at the file's path (it was there at start, or its directories were synced).
    Durable,
    /// Made since, not yet durable: a crash keeps or loses it.
    New,
    /// Renamed from `from`, where its entry is durable; the rename is not yet durable: a
    /// crash leaves it at one of the two, never both, never neither.
    Renamed { from: PathBuf },
}

/// One simulated file.
pub(super) struct SimFile {
    /// What reads see: the media with every change since the last sync applied.
    pub visible: Vec<u8>,
    /// What the media holds: the contents at the last sync.
    pub durable: Vec<u8>,
    /// The changes since the last sync, in order.
    pub unsynced: Vec<Change>,
    /// Sectors that read as EIO until they are written again (latent sector errors).
    pub latent: BTreeSet<u64>,
    /// Where the file's directory entry stands on the media (see [`Entry`]).
    pub entry: Entry,
    /// Directories still to be synced before the entry is durable where the file is now
    /// (its directory; for a rename, the old one too). Empty for a durable entry.
    pub pending_dirs: BTreeSet<PathBuf>,
    /// The file's identity apart from its path (an inode number): a descriptor opened on
    /// it keeps reaching it after an unlink or a new file at the same path.
    pub ino: u64,
}

/// The next inode number (identities only: never part of a digest).
fn next_ino() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl SimFile {
    pub(super) fn new(contents: Vec<u8>, entry_durable: bool) -> std::io::Result<SimFile> {
        Ok(SimFile {
            durable: if entry_durable {
                contents.clone()
            } else {
                Vec::new()
            },
            visible: contents,
            unsynced: Vec::new(),
            latent: BTreeSet::new(),
            entry: if entry_durable {
                Entry::Durable
            } else {
                Entry::New
            },
            pending_dirs: BTreeSet::new(),
            ino: next_ino(),
        })
    }

    /// Applies `change` to what reads see and remembers it until the next sync.
    pub(super) fn change(&mut self, change: Change) {
        apply(&mut self.visible, &change);
        self.unsynced.push(change);
    }

    /// A sync: the media now holds what reads see.
    pub(super) fn sync(&mut self) {
        self.durable = self.visible.clone();
        self.unsynced.clear();
    }
}

/// Applies `change` to `bytes`.
fn apply(bytes: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, data } => {
            let (start, end) = (*offset as usize, *offset as usize + data.len());
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[start..end].copy_from_slice(data);
        }
        Change::Resize { len } => bytes.resize(*len as usize, 0),
    }
}

/// A descriptor that stands for a simulated file or directory: an anonymous memfd, never
/// read or written.
pub(super) fn stand_in() -> std::io::Result<OwnedFd> {
    // SAFETY: the name is a valid NUL-terminated string; memfd_create returns a new
    // descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"dbaio-sim-file".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// What the disk holds, under one lock.
pub(super) struct DiskState {
    /// Files by path.
    pub files: BTreeMap<PathBuf, SimFile>,
    /// Files removed since their directory was last synced, by the path of their durable
    /// entry: at a crash each may come back.
    pub removed: BTreeMap<PathBuf, SimFile>,
    /// Files whose path a rename took, not yet durable: at a crash each comes back if the
    /// rename is undone.
    pub replaced: BTreeMap<PathBuf, SimFile>,
    /// Files unlinked (or whose path a new file took) while a descriptor is open on them:
    /// still read, written and synced through it, as an unlinked inode is; gone at a crash
    /// and when the last such descriptor closes.
    pub orphans: BTreeMap<u64, SimFile>,
    /// Descriptors open on each file, by identity, counted across every subsystem on the
    /// disk: an unlinked file lives on as an orphan while any is open.
    pub descriptors: BTreeMap<u64, u32>,
    /// Per file with a descriptor open, by identity: a real descriptor standing for it,
    /// which each open reopens (a fresh open file description), so byte-range locks behave
    /// as on a real file. Made at the first open and closed with the last descriptor: one
    /// held per file for the disk's life cost an engine's test the process's descriptor
    /// limit after about a thousand files (found by a caller-side attack, 2026-12-08).
    pub stand_ins: BTreeMap<u64, OwnedFd>,
    /// Paths the disk removed: never copied in from the real file system again.
    pub tombstones: BTreeSet<PathBuf>,
    /// Directories known to the disk (made for files in them, or opened).
    pub dirs: BTreeSet<PathBuf>,
    /// Draws for the crash (seeded with the disk).
    pub rng: Rng,
    /// A running hash of every I/O result the disk gave (op, offset, length, result).
    pub results_digest: u64,
}

pub(super) struct DiskInner {
    pub state: parking_lot::Mutex<DiskState>,
    /// Set by [`SimDisk::crash`]: every later I/O of a subsystem on this disk fails.
    pub crashed: AtomicBool,
    /// Held shared by each I/O from its look at `crashed` to its last change to the disk,
    /// and exclusively by a crash while it sets `crashed` and takes the image: an I/O is
    /// either whole in the image or sees the crash — never reported done yet missing from
    /// it (an fsync that succeeded after the image was taken would look like lost data).
    pub gate: parking_lot::RwLock<()>,
    /// What the crash left (set once, by the first crash).
    pub image: parking_lot::Mutex<Option<SimDisk>>,
    /// I/Os executed on the disk so far, by every subsystem on it.
    pub ios: AtomicU64,
    /// The number of the I/O after which an armed crash happens (0: none armed).
    pub crash_at: AtomicU64,
    pub seed: u64,
}

/// A simulated disk in memory, for `io_method = sim`: give it to
/// [`AioBuilder::sim_disk`](crate::AioBuilder::sim_disk) (or let `Aio::start` make one seeded
/// by `sim_seed`), run the engine, [`SimDisk::crash`] it at any moment, and start a new `Aio`
/// on what survived. Cheap to clone: every clone is the same disk.
///
/// Writes reach a volatile cache; a file's data reaches the media only when the file is
/// synced (`fsync`, `fdatasync`), and its directory entry (its creation or removal) only
/// when its directory is synced (open the directory and `fsync` it). A path the disk does
/// not hold but the real file system does is copied in when first opened (as durable), so
/// existing test data works; nothing is ever written back.
///
/// Its files live in memory, so none may grow past 4 GiB (a write or resize beyond is EFBIG,
/// as a file system refuses a file past its largest); a directory cannot be renamed (EXDEV).
/// Otherwise every call answers as on ext4 (`tests/sim_matches_sync.rs` checks it call by
/// call), but that an unaligned O_DIRECT read of a hole is refused, as of data.
#[derive(Clone)]
pub struct SimDisk {
    pub(super) inner: Arc<DiskInner>,
}

impl SimDisk {
    /// An empty disk whose crash choices draw from `seed`.
    pub fn new(seed: u64) -> SimDisk {
        SimDisk {
            inner: Arc::new(DiskInner {
                state: parking_lot::Mutex::new(DiskState {
                    files: BTreeMap::new(),
                    removed: BTreeMap::new(),
                    replaced: BTreeMap::new(),
                    orphans: BTreeMap::new(),
                    descriptors: BTreeMap::new(),
                    stand_ins: BTreeMap::new(),
                    tombstones: BTreeSet::new(),
                    dirs: BTreeSet::new(),
                    rng: Rng::new(seed ^ 0x00c0_ffee),
                    results_digest: 0,
                }),
                crashed: AtomicBool::new(false),
                gate: parking_lot::RwLock::new(()),
                image: parking_lot::Mutex::new(None),
                ios: AtomicU64::new(0),
                crash_at: AtomicU64::new(0),
                seed,
            }),
        }
    }

    /// The seed it was made with.
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// A power loss: from now on every I/O of a subsystem on this disk fails with EIO (its
    /// I/Os in flight fail as they complete; the engine above sees errors, as a process
    /// cut off from its disk would), and the disk returned holds what the media held: for
    /// each file, its last synced contents, then each later write dropped, kept, or torn
    /// (each 512-byte sector of it kept or not), by seeded choice, in order; each directory
    /// entry not synced since made or removed kept or lost. A file's moves since its durable
    /// name are one change, as a journaling file system commits them: a sync of any directory
    /// they left or entered makes the file's current name durable (and an unlink after them,
    /// final). Latent sector errors stay. Start
    /// a new `Aio` on the returned disk to recover. A disk crashes once: a later call returns
    /// the same image.
    pub fn crash(&self) -> SimDisk {
        let mut image = self.inner.image.lock();
        if let Some(after) = &*image {
            return after.clone();
        }
        let _no_io = self.inner.gate.write();
        self.inner.crashed.store(true, Ordering::SeqCst);
        let after = self.image();
        *image = Some(after.clone());
        after
    }

    /// Arms a crash right after the `n`th I/O from now (`n` ≥ 1; counting every I/O any
    /// subsystem executes on this disk): that I/O reaches the volatile cache, then the power
    /// goes, and it and every later I/O fail with EIO — the engine learns of the crash as a
    /// process cut off from its disk would, in the middle of whatever it was doing. The image
    /// is then [`SimDisk::crash_image`]. This is how a test crashes "at a random I/O": count
    /// a run's I/Os with [`SimDisk::ios`], pick one by seed, arm, rerun.
    pub fn crash_after(&self, n: u64) {
        let at = self.inner.ios.load(Ordering::SeqCst) + n.max(1);
        self.inner.crash_at.store(at, Ordering::SeqCst);
    }

    /// What the crash left, once the disk has crashed (armed or called); None before.
    pub fn crash_image(&self) -> Option<SimDisk> {
        self.inner.image.lock().clone()
    }

    /// I/Os executed on the disk so far, by every subsystem on it.
    pub fn ios(&self) -> u64 {
        self.inner.ios.load(Ordering::SeqCst)
    }

    /// Counts one I/O executed; true if it is the one an armed crash follows.
    pub(super) fn count_io(&self) -> bool {
        let n = self.inner.ios.fetch_add(1, Ordering::SeqCst) + 1;
        n == self.inner.crash_at.load(Ordering::SeqCst)
    }

    /// The media after a power loss (see [`SimDisk::crash`]).
    fn image(&self) -> SimDisk {
        let mut st = self.inner.state.lock();
        let next_seed = st.rng.next();
        let after = SimDisk::new(next_seed);
        let mut out = after.inner.state.lock();
        // Durable entries first, then renames (each at one of its two names), then new
        // entries where a name is still free; then what the namespace lost since its last
        // sync may come back where nothing took the name.
        let names: Vec<PathBuf> = st.files.keys().cloned().collect();
        for path in &names {
            if st.files[path].entry == Entry::Durable {
                let survived = survivor(&mut st, path);
                out.insert_file(path, survived);
            }
        }
        let mut renamed = Vec::new();
        for path in &names {
            if let Entry::Renamed { from } = &st.files[path].entry {
                // Arrived for good once its new directory is synced: there it stays (the
                // directory it left may still show it too, but that name is another file's
                // only if that file's own rename put it there).
                let dir = path.parent().unwrap_or(Path::new("/"));
                let arrived = !st.files[path].pending_dirs.contains(dir);
                let names = [from.clone(), path.clone()];
                let [first, second] = names;
                let drawn = if arrived {
                    [second.clone(), second]
                } else if st.rng.below(2) == 0 {
                    [first, second]
                } else {
                    [second, first]
                };
                renamed.push((path.clone(), drawn));
            }
        }
        let choices: Vec<[PathBuf; 2]> = renamed.iter().map(|(_, c)| c.clone()).collect();
        for (name, i) in place_renamed(&choices, |p| out.files.contains_key(p)) {
            let survived = survivor(&mut st, &renamed[i].0);
            out.insert_file(&name, survived);
        }
        for path in &names {
            if st.files[path].entry == Entry::New
                && st.rng.below(2) == 0
                && !out.files.contains_key(path)
            {
                let survived = survivor(&mut st, path);
                out.insert_file(path, survived);
            }
        }
        let removed: Vec<PathBuf> = st.removed.keys().cloned().collect();
        for path in removed {
            if st.rng.below(2) == 0 && !out.files.contains_key(&path) {
                out.files
                    .insert(path.clone(), media_copy(&st.removed[&path]));
            }
        }
        for (path, old) in &st.replaced {
            if !out.files.contains_key(path) {
                out.files.insert(path.clone(), media_copy(old));
            }
        }
        out.dirs = st.dirs.clone();
        out.tombstones = st
            .tombstones
            .iter()
            .filter(|p| !out.files.contains_key(*p))
            .cloned()
            .collect();
        drop(out);
        after
    }

    /// A hash of every file's path and contents as reads see them, and of every I/O result
    /// the disk gave: two runs of the same seed and the same calls give the same digest.
    pub fn digest(&self) -> u64 {
        let st = self.inner.state.lock();
        let mut h = Fnv::new();
        h.u64(st.results_digest);
        for (path, f) in &st.files {
            h.bytes(path.as_os_str().as_encoded_bytes());
            h.bytes(&f.visible);
        }
        h.finish()
    }

    /// The paths of every file on the disk.
    pub fn files(&self) -> Vec<PathBuf> {
        self.inner.state.lock().files.keys().cloned().collect()
    }

    /// What a read of `path` would see now (None: no such file).
    pub fn contents(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let st = self.inner.state.lock();
        st.files
            .get(&disk_path(path.as_ref()))
            .map(|f| f.visible.clone())
    }

    /// Puts a file on the disk, durable (as if it had been there at start).
    pub fn insert(&self, path: impl AsRef<Path>, contents: Vec<u8>) -> std::io::Result<()> {
        let f = SimFile::new(contents, true)?;
        self.inner
            .state
            .lock()
            .insert_file(&disk_path(path.as_ref()), f);
        Ok(())
    }
}

/// The name the disk files `path` under: absolute (a relative path from the current
/// directory, as `open(2)` takes it) with `.` and `..` resolved by name, so that every
/// spelling of a path reaches one file (`d/sub/../f` and `d/f` were two files, and a relative
/// path could not be created: found by a caller-side attack). The disk has no symbolic
/// links, so resolving `..` by name is what the kernel would do on it.
pub(super) fn disk_path(path: &Path) -> PathBuf {
    use std::path::Component;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl DiskState {
    /// The file with identity `ino` that was opened at `path`: there still, or renamed
    /// since, or unlinked or replaced and not yet forgotten (a crash may bring it back), or
    /// an orphan.
    pub(super) fn file_mut(&mut self, path: &Path, ino: u64) -> Option<&mut SimFile> {
        if self.files.get(path).is_some_and(|f| f.ino == ino) {
            return self.files.get_mut(path);
        }
        let DiskState {
            files,
            removed,
            replaced,
            orphans,
            ..
        } = self;
        let elsewhere = files.values_mut().chain(removed.values_mut());
        if let Some(f) = elsewhere
            .chain(replaced.values_mut())
            .find(|f| f.ino == ino)
        {
            return Some(f);
        }
        orphans.get_mut(&ino)
    }

    /// Adds `file` at `path`, and its directories.
    pub(super) fn insert_file(&mut self, path: &Path, file: SimFile) {
        let mut dir = path.parent();
        while let Some(d) = dir {
            self.dirs.insert(d.to_path_buf());
            dir = d.parent();
        }
        self.files.insert(path.to_path_buf(), file);
    }

    /// Folds one I/O result into the results digest.
    pub(super) fn record(&mut self, op: u8, offset: u64, len: u64, raw: i32) {
        let mut h = Fnv(self.results_digest ^ 0xcbf2_9ce4_8422_2325);
        h.u64(u64::from(op));
        h.u64(offset);
        h.u64(len);
        h.u64(raw as u64);
        self.results_digest = h.finish();
    }
}

/// Where renamed files lie after a crash: file `i` under one of `choices[i]` (its durable
/// name and its new one, in the order a coin drew), no two under one name, none under a
/// name `taken` (a durable entry's). Drawn names conflict in chains of renames (a rotation
/// through a temporary name: both of a file's names may be drawn by others), so this is a
/// matching, by augmenting paths: a file whose names are held moves a holder to its other
/// name. One always exists — every file under its new name — so no file is ever lost (a
/// rotation of three files lost one in a quarter of seeds before: found by a caller-side
/// attack). Returns name → file, in name order.
fn place_renamed(
    choices: &[[PathBuf; 2]],
    taken: impl Fn(&Path) -> bool,
) -> BTreeMap<PathBuf, usize> {
    fn augment(
        i: usize,
        choices: &[[PathBuf; 2]],
        taken: &dyn Fn(&Path) -> bool,
        owner: &mut BTreeMap<PathBuf, usize>,
        seen: &mut BTreeSet<PathBuf>,
    ) -> bool {
        for name in &choices[i] {
            if taken(name) || !seen.insert(name.clone()) {
                continue;
            }
            let free = match owner.get(name) {
                None => true,
                Some(&j) => augment(j, choices, taken, owner, seen),
            };
            if free {
                owner.insert(name.clone(), i);
                return true;
            }
        }
        false
    }
    let mut owner = BTreeMap::new();
    for i in 0..choices.len() {
        let placed = augment(i, choices, &taken, &mut owner, &mut BTreeSet::new());
        debug_assert!(
            placed,
            "every renamed file under its new name is a matching"
        );
    }
    owner
}

/// A file as the media holds it after a crash, for one whose unsynced changes all went with
/// its entry (unlinked, or replaced by a rename): its durable contents.
fn media_copy(old: &SimFile) -> SimFile {
    SimFile {
        latent: old.latent.clone(),
        ..SimFile::new(old.durable.clone(), true).expect("a stand-in descriptor")
    }
}

/// What file `path` holds after a crash: its media contents, then each unsynced change
/// dropped, kept or torn by seeded choice.
fn survivor(st: &mut DiskState, path: &Path) -> SimFile {
    let (durable, unsynced, latent) = {
        let f = &st.files[path];
        (f.durable.clone(), f.unsynced.clone(), f.latent.clone())
    };
    let mut bytes = durable;
    for change in &unsynced {
        match st.rng.below(3) {
            0 => {}
            1 => apply(&mut bytes, change),
            _ => tear(&mut bytes, change, &mut st.rng),
        }
    }
    SimFile {
        latent,
        ..SimFile::new(bytes, true).expect("a stand-in descriptor")
    }
}

/// Applies `change` in part: each sector of a write, or the new length, by a coin.
fn tear(bytes: &mut Vec<u8>, change: &Change, rng: &mut Rng) {
    let Change::Write { offset, data } = change else {
        if rng.below(2) == 0 {
            apply(bytes, change);
        }
        return;
    };
    let mut at = 0usize;
    while at < data.len() {
        // Sectors of the file, not of the write: a write at an odd offset tears on the
        // device's boundaries.
        let file_off = *offset as usize + at;
        let sector_end = (file_off / SECTOR as usize + 1) * SECTOR as usize;
        let n = (sector_end - file_off).min(data.len() - at);
        if rng.below(2) == 0 {
            apply(
                bytes,
                &Change::Write {
                    offset: file_off as u64,
                    data: data[at..at + n].to_vec(),
                },
            );
        }
        at += n;
    }
}

/// FNV-1a, 64 bits: a stable hash for digests (std's hasher is seeded per process).
pub(super) struct Fnv(u64);

impl Fnv {
    pub(super) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub(super) fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self.u64(b.len() as u64);
    }
    pub(super) fn u64(&mut self, v: u64) {
        for x in v.to_le_bytes() {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    pub(super) fn finish(&self) -> u64 {
        self.0
    }
}

/// Reopens `stand_in` as a fresh open file description (for byte-range locks).
pub(super) fn reopen(stand_in: &OwnedFd) -> std::io::Result<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", stand_in.as_raw_fd()))
        .expect("no NUL in a number");
    // SAFETY: a valid NUL-terminated path; open returns a new descriptor or -1.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}
