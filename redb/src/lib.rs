//! `dbaio-redb`: redb's [`StorageBackend`] on dbaio. Every read, write, resize and sync of a
//! redb database goes through a dbaio subsystem, on whatever method it runs (`sync`, `worker`,
//! `io_uring`), buffered or O_DIRECT — so the engine's I/O shows in the aios view, the
//! statistics and fault injection like any other.
//!
//! How it uses dbaio (the embedding guide, `docs/embedding.md`, walks through it):
//!
//! - **Any thread.** redb calls the backend from whatever thread runs a transaction; each
//!   call uses that thread's own issuer ([`Aio::with_issuer`]), so no pool of issuers and no
//!   lock, and the view names the thread.
//! - **Reads** go straight into redb's buffer ([`Issuer::read_exact_into`](dbaio::Issuer)),
//!   executed on the calling thread (no hand-off: redb waits for every read at once).
//!   Unaligned O_DIRECT reads go through an aligned bounce buffer.
//! - **Write-behind.** `write` copies the data into an aligned buffer, starts the write and
//!   returns; the write's [`Ticket`] is kept until `sync_data` (redb's commit) waits for all
//!   of them and reports the first failure, then runs `fdatasync`. A read or write that
//!   overlaps a write still in flight waits for it first, so redb always reads what it
//!   wrote. How deep is [`BackendOptions::write_behind`]: by default behind on O_DIRECT
//!   files and on the spot (no copy, on the calling thread) on buffered ones.
//! - **Durable creation.** `open` fsyncs the file's directory (once per open), so a database
//!   file it created is not lost by a power loss after its first durable commit.
//! - **Locks** are open-file-description byte-range locks on the data file (`F_OFD_SETLK`),
//!   so redb's multi-process modes work and the locks go with the file.
//!
//! Errors come back as `std::io::Error` with the op, file, offset and errno in the message.
//!
//! [`crash_sim`] is a crash-consistency harness for redb on this backend over dbaio's
//! simulated disk (`io_method = sim`), run by the `crash_sim` example and `tests/crash_sim.rs`.

pub mod crash_sim;

use dbaio::{Aio, File, IoBuf, OpenOptions, Ticket};
use parking_lot::Mutex;
use redb::{BackendError, StorageBackend};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a [`DbaioBackend`] opens its file and how far it writes behind.
#[derive(Clone, Debug, Default)]
pub struct BackendOptions {
    /// Open the file with O_DIRECT (the engine's own cache is the only cache).
    pub direct: bool,
    /// Whether `write` returns before the write is done.
    pub write_behind: WriteBehind,
    /// **Unsafe: loses committed data on a power loss.** `sync_data` still waits for the
    /// writes in flight (and reports their failures) but issues no `fdatasync`, and `open`
    /// does not fsync the file's directory. It exists to prove that a crash harness can fail
    /// (the `crash_sim` example's `--unsafe-skip-fsync` control run); never set it for data
    /// you want back.
    pub unsafe_skip_sync: bool,
}

/// Whether `write` starts the write and returns ([`Ticket`]s collected by `sync_data`), or
/// writes and waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteBehind {
    /// Behind (256 deep) on an O_DIRECT file, where each write waits for the device; on the
    /// spot on a buffered file, where a write is a copy into the page cache and doing it on
    /// the calling thread is cheapest (measured: docs/embedding.md).
    #[default]
    Auto,
    /// Every write waits.
    Off,
    /// At most this many writes in flight; beyond that the oldest is waited for.
    Depth(usize),
}

impl WriteBehind {
    /// Writes allowed in flight for a file opened `direct` or not (0: none).
    pub fn depth(self, direct: bool) -> usize {
        match self {
            WriteBehind::Auto if direct => 256,
            WriteBehind::Auto | WriteBehind::Off => 0,
            WriteBehind::Depth(n) => n,
        }
    }
}

impl std::str::FromStr for WriteBehind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(WriteBehind::Auto),
            "off" => Ok(WriteBehind::Off),
            n => n.parse().map(WriteBehind::Depth).map_err(|_| {
                format!("invalid write-behind \"{s}\": expected auto, off or a depth")
            }),
        }
    }
}

/// A write started and not yet waited for.
struct PendingWrite {
    /// The end of the byte range it covers (for O_DIRECT widened to whole blocks: a
    /// read-modify-write of a neighbour touches the block); the start is its key.
    end: u64,
    ticket: Ticket,
}

/// The writes in flight, which never overlap one another (a write waits for the ones it
/// overlaps before it starts), by start offset; their order of issue; and buffers of
/// finished writes kept for reuse.
#[derive(Default)]
struct Pending {
    by_start: BTreeMap<u64, PendingWrite>,
    /// What the backend did (kept here, under the lock every counted step already holds).
    stats: BackendStats,
    /// Start offsets in the order the writes were issued (an entry whose write was already
    /// waited for is skipped).
    order: VecDeque<u64>,
    free: Vec<IoBuf>,
}

/// Buffers kept for reuse.
const FREE_BUFFERS: usize = 64;

/// Writes that start in the file's first 4 KiB (redb's database header, 320 bytes at offset
/// 0, and its neighbourhood) are never written behind (see `write`).
const HEADER_BLOCK: u64 = 4096;

impl Pending {
    fn len(&self) -> usize {
        self.by_start.len()
    }

    fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// Removes and returns the writes overlapping `start..end`.
    fn take_overlapping(&mut self, start: u64, end: u64) -> Vec<PendingWrite> {
        let mut keys = Vec::new();
        if let Some((&k, w)) = self.by_start.range(..start).next_back()
            && w.end > start
        {
            keys.push(k);
        }
        keys.extend(self.by_start.range(start..end).map(|(&k, _)| k));
        keys.into_iter()
            .filter_map(|k| self.by_start.remove(&k))
            .collect()
    }

    /// Removes and returns every write, oldest first.
    fn take_all(&mut self) -> Vec<PendingWrite> {
        let mut out = Vec::with_capacity(self.by_start.len());
        while let Some(w) = self.take_oldest() {
            out.push(w);
        }
        out
    }

    /// Removes and returns the oldest write.
    fn take_oldest(&mut self) -> Option<PendingWrite> {
        while let Some(k) = self.order.pop_front() {
            if let Some(w) = self.by_start.remove(&k) {
                return Some(w);
            }
        }
        None
    }

    /// A buffer holding `data`: a free one if one fits, else a new one.
    fn buffer(&mut self, data: &[u8]) -> IoBuf {
        let n = data.len();
        match self
            .free
            .iter()
            .position(|b| b.capacity() >= n && b.capacity() <= n.saturating_mul(4))
        {
            Some(k) => {
                let mut b = self.free.swap_remove(k);
                b.set_len(n);
                b.copy_from_slice(data);
                b
            }
            None => IoBuf::from_slice(data),
        }
    }

    fn recycle(&mut self, buf: IoBuf) {
        if self.free.len() < FREE_BUFFERS {
            self.free.push(buf);
        }
    }
}

/// Counters of what the backend did (for benchmarks and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Writes started behind (not waited for by `write`).
    pub writes_behind: u64,
    /// Writes done on the spot (write-behind off, or an unaligned O_DIRECT write).
    pub writes_inline: u64,
    /// `sync_data` calls.
    pub syncs: u64,
    /// Writes still in flight when `sync_data` was called, summed over the calls.
    pub in_flight_at_sync: u64,
    /// The most writes in flight at one `sync_data`.
    pub max_in_flight_at_sync: u64,
    /// Times a read or write waited for an overlapping write in flight.
    pub overlap_waits: u64,
}

/// redb's storage on a dbaio file. `Send + Sync`; see the crate documentation.
pub struct DbaioBackend {
    aio: Aio,
    file: File,
    opts: BackendOptions,
    /// Writes allowed in flight (0: every write waits).
    depth: usize,
    pending: Mutex<Pending>,
    /// Locks this backend took, to release at close.
    locks: Mutex<Vec<(u64, u64)>>,
    /// The length the file will have once the writes in flight are done.
    len_hint: AtomicU64,
}

impl std::fmt::Debug for DbaioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbaioBackend")
            .field("file", &self.file.path())
            .field("io_method", &self.aio.io_method())
            .field("opts", &self.opts)
            .finish()
    }
}

impl DbaioBackend {
    /// Opens (creating if missing) `path` through `aio`, then fsyncs the directory holding
    /// it, so that a file this open created survives a power loss once redb's first durable
    /// commit has returned (without it the new directory entry may be lost with every commit
    /// in the file). Done at every open, not only when the file was created: it is one fsync,
    /// and it also makes durable an entry created by a process that died before syncing it.
    pub fn open(aio: &Aio, path: impl AsRef<Path>, opts: BackendOptions) -> io::Result<Self> {
        let path = path.as_ref();
        let file = aio.open(path, &OpenOptions::read_write().direct(opts.direct))?;
        if !opts.unsafe_skip_sync {
            sync_directory_of(aio, path)?;
        }
        let len = file.len()?;
        Ok(DbaioBackend {
            aio: aio.clone(),
            file,
            depth: opts.write_behind.depth(opts.direct),
            opts,
            pending: Mutex::new(Pending::default()),
            locks: Mutex::new(Vec::new()),
            len_hint: AtomicU64::new(len),
        })
    }

    /// What the backend has done so far.
    pub fn stats(&self) -> BackendStats {
        self.pending.lock().stats
    }

    /// The dbaio file under the database.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The range a write or read of `len` bytes at `offset` occupies for overlap checks.
    fn span(&self, offset: u64, len: usize) -> (u64, u64) {
        let end = offset + len as u64;
        if self.opts.direct {
            let a = dbaio::DIRECT_ALIGN;
            (offset - offset % a, end.next_multiple_of(a))
        } else {
            (offset, end)
        }
    }

    /// Waits for the writes in flight that overlap `start..end` (all of them for `None`),
    /// returning the first failure (the others are logged).
    fn settle(&self, pending: &mut Pending, range: Option<(u64, u64)>) -> io::Result<()> {
        let writes = match range {
            None => pending.take_all(),
            Some((s, e)) => pending.take_overlapping(s, e),
        };
        if range.is_some() && !writes.is_empty() {
            pending.stats.overlap_waits += 1;
        }
        let mut first: Option<io::Error> = None;
        for w in writes {
            if let Err(e) = self.finish(pending, w) {
                match first {
                    None => first = Some(e),
                    Some(_) => tracing::warn!("{e}"),
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Waits for one write; a short one is finished on the spot. Its buffer is kept.
    fn finish(&self, pending: &mut Pending, w: PendingWrite) -> io::Result<()> {
        let c = w.ticket.wait();
        if c.is_partial() {
            let done = c.bytes();
            let offset = c.offset() + done as u64;
            let buf = c.into_buf();
            self.write_now(offset, &buf[done..])?;
            pending.recycle(buf);
            return Ok(());
        }
        c.check()?;
        pending.recycle(c.into_buf());
        Ok(())
    }

    /// Writes and waits, on the calling thread.
    fn write_now(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.aio
            .with_issuer(|iss| iss.write_all_from(&self.file, offset, data))??;
        Ok(())
    }

    fn note_len(&self, end: u64) {
        self.len_hint.fetch_max(end, Ordering::Relaxed);
    }

    /// Turns a redb lock range into an OFD lock's start and length (0: to infinity).
    fn lock_span(start: Bound<u64>, end: Bound<u64>) -> (u64, u64) {
        let s = match start {
            Bound::Unbounded => 0,
            Bound::Included(s) => s,
            Bound::Excluded(s) => s + 1,
        };
        let len = match end {
            Bound::Unbounded => 0,
            Bound::Included(e) => e + 1 - s,
            Bound::Excluded(e) => e - s,
        };
        (s, len)
    }

    fn take_lock(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
        exclusive: bool,
        wait: bool,
    ) -> Result<bool, BackendError> {
        let (s, len) = Self::lock_span(start, end);
        let got = if wait {
            self.file.lock_range(s, len, exclusive).map(|()| true)
        } else {
            self.file.try_lock_range(s, len, exclusive)
        }
        .map_err(BackendError::Io)?;
        if got {
            self.locks.lock().push((s, len));
        }
        Ok(got)
    }
}

/// Opens the directory holding `path` through `aio` and fsyncs it: its entries (a file just
/// created in it) become durable.
fn sync_directory_of(aio: &Aio, path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = aio.open(dir, &OpenOptions::read().direct(false))?;
    aio.with_issuer(|iss| iss.fsync(&dir))??;
    Ok(())
}

impl StorageBackend for DbaioBackend {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.file.len()?.max(self.len_hint.load(Ordering::Relaxed)))
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        // Without write-behind no write is ever in flight here: no lock to take.
        if self.depth > 0 {
            let mut pending = self.pending.lock();
            if !pending.is_empty() {
                let span = self.span(offset, out.len());
                self.settle(&mut pending, Some(span))?;
            }
        }
        self.aio
            .with_issuer(|iss| iss.read_exact_into(&self.file, offset, out))??;
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut pending = self.pending.lock();
        self.settle(&mut pending, None)?;
        self.aio
            .with_issuer(|iss| iss.ftruncate(&self.file, len))??;
        self.len_hint.store(len, Ordering::Relaxed);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut pending = self.pending.lock();
        {
            let n = pending.len() as u64;
            let st = &mut pending.stats;
            st.syncs += 1;
            st.in_flight_at_sync += n;
            st.max_in_flight_at_sync = st.max_in_flight_at_sync.max(n);
        }
        self.settle(&mut pending, None)?;
        if self.opts.unsafe_skip_sync {
            return Ok(());
        }
        self.aio.with_issuer(|iss| iss.fdatasync(&self.file))??;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        if data.is_empty() {
            return Ok(());
        }
        let (start, end) = self.span(offset, data.len());
        let mut pending = self.pending.lock();
        if !pending.is_empty() {
            self.settle(&mut pending, Some((start, end)))?;
        }
        self.note_len(offset + data.len() as u64);
        let a = dbaio::DIRECT_ALIGN;
        let unaligned = self.opts.direct
            && (!offset.is_multiple_of(a) || !(data.len() as u64).is_multiple_of(a));
        // The header (redb's first bytes) is written on the spot: in the multi-process modes
        // redb writes it under its byte-range lock and counts on the bytes being in the file
        // when the lock goes, and the commit's last header write comes after its last
        // `sync_data` — behind, another handle on the file read the old header and built on
        // it, and acknowledged commits were lost (found by a caller-side attack, 2026-12-08).
        if self.depth == 0 || unaligned || offset < HEADER_BLOCK {
            // A read-modify-write reads the file: it runs now, under the lock, so no write
            // in flight can touch its blocks.
            pending.stats.writes_inline += 1;
            return self.write_now(offset, data);
        }
        let buf = pending.buffer(data);
        let ticket = self.aio.with_issuer(|iss| {
            iss.acquire()
                .map(|h| h.write(&self.file, offset, buf).into_ticket())
        })??;
        pending.by_start.insert(start, PendingWrite { end, ticket });
        pending.order.push_back(start);
        pending.stats.writes_behind += 1;
        let mut first = None;
        while pending.len() > self.depth {
            let w = pending.take_oldest().expect("not empty");
            if let Err(e) = self.finish(&mut pending, w) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn close(&self) -> Result<(), io::Error> {
        let r = {
            let mut pending = self.pending.lock();
            self.settle(&mut pending, None)
        };
        for (s, len) in self.locks.lock().drain(..) {
            let _ = self.file.unlock_range(s, len);
        }
        r
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.take_lock(start, end, true, false)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.take_lock(start, end, false, false)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.take_lock(start, end, true, true).map(|_| ())
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.take_lock(start, end, false, true).map(|_| ())
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        // Letting a lock go publishes what was written under it (another handle, in this
        // process or another, reads the file once it takes the lock): the writes behind
        // are finished first.
        // A write that failed is reported, but the lock goes all the same: kept, it would
        // hold every other handle off the file.
        let settled = {
            let mut pending = self.pending.lock();
            if pending.is_empty() {
                Ok(())
            } else {
                self.settle(&mut pending, None)
            }
        };
        let (s, len) = Self::lock_span(start, end);
        self.file.unlock_range(s, len).map_err(BackendError::Io)?;
        self.locks.lock().retain(|&l| l != (s, len));
        settled.map_err(BackendError::Io)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        let (s, len) = Self::lock_span(start, end);
        self.file
            .is_range_locked_elsewhere(s, len)
            .map_err(BackendError::Io)
    }
}

impl Drop for DbaioBackend {
    fn drop(&mut self) {
        // redb calls close; if it did not (a panic), the writes still finish before the
        // buffers go (each ticket's memory lives until its I/O is done), and failures are
        // logged.
        let mut pending = self.pending.lock();
        if let Err(e) = self.settle(&mut pending, None) {
            tracing::warn!("a write of a dropped redb backend failed: {e}");
        }
    }
}
