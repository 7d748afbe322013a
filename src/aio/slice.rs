//! `Issuer`'s slice I/O (a part of `Issuer` kept apart: O_DIRECT bounce, read-modify-write).
//!
//! Slice I/O reads into a `&mut [u8]` and writes from a `&[u8]` the caller owns, waiting at
//! once — what an engine's `read(offset, &mut out)` / `write(offset, &data)` calls need. The
//! fast path under it is `inline.rs`.
//!
//! The I/O is executed in the calling thread ([`HandleFlags::SYNCHRONOUS`], as PostgreSQL's
//! `PGAIO_HF_SYNCHRONOUS`): it is waited for at once, so handing it to a worker or a ring
//! would only add a hand-off. It still goes through a handle (the aios view, statistics,
//! fault injection and error messages see it as any other).
//!
//! Memory: on a buffered file the slice itself is the I/O's memory (no copy). On an O_DIRECT
//! file a slice whose address, offset and length are all multiples of [`DIRECT_ALIGN`] is used
//! as is; otherwise the I/O goes through an aligned bounce buffer: a read reads the aligned
//! blocks that cover the range and copies out; a write reads the partial first and last
//! blocks, copies the data in and writes the whole aligned range (read-modify-write: at most
//! two extra block reads, plus a copy). A write that ends past the end of the file this way is
//! followed by an `ftruncate` back to the end it asked for, so the file's length is what the
//! caller wrote, as with a buffered file. Unaligned writes to one file are serialized with
//! each other (two read-modify-writes of one block would otherwise lose one of the writes).

use super::file::File;
use super::inline::Inline;
use super::io::InFlight;
use super::iobuf::IoBuf;
use super::issuer::Issuer;
use crate::handle::error::{AioError, IoError};
use crate::handle::op::HandleFlags;

/// The alignment O_DIRECT slice I/O uses: a multiple of every common logical block size.
pub const DIRECT_ALIGN: u64 = 4096;

/// Waits for an I/O when dropped, so that a panic between its start and its wait cannot free
/// the slice under it.
struct WaitOnDrop<'a> {
    issuer: &'a Issuer,
    io: Option<InFlight<'a>>,
}

impl WaitOnDrop<'_> {
    fn wait(mut self) -> crate::Completion {
        let io = self.io.take().expect("waited once");
        self.issuer.wait(io)
    }
}

impl Drop for WaitOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            let _ = self.issuer.wait(io);
        }
    }
}

fn aligned(v: u64) -> bool {
    v % DIRECT_ALIGN == 0
}

impl Issuer {
    /// Reads into `buf` at `offset` and waits; returns the bytes read, fewer than
    /// `buf.len()` only at end of file. On an O_DIRECT file a request off [`DIRECT_ALIGN`]
    /// (address, offset or length) reads the aligned blocks that cover it into a bounce
    /// buffer and copies out. A failure names the caller's request and the bytes read
    /// before it, not the part it met.
    pub fn read_into(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<usize, AioError> {
        if buf.is_empty() {
            return Ok(0); // nothing to read is nothing done (as `write_all_from`)
        }
        // A failure names the caller's request, not the part it met (the rest after a short
        // read, or the aligned blocks of an unaligned O_DIRECT read), as `write_all_from`.
        let asked = buf.len() as u64;
        let whole = |e: AioError| e.for_request(crate::Op::Readv, offset, asked);
        if file.is_direct() && !direct_ready(offset, buf.as_ptr(), buf.len()) {
            return self.read_bounced(file, offset, buf).map_err(whole);
        }
        let mut done = 0;
        while done < buf.len() {
            let n = self
                .read_once(file, offset + done as u64, &mut buf[done..])
                .map_err(whole)?;
            done += n;
            // A short O_DIRECT read that stops off the alignment ended at the end of the file
            // (where it stands now): reading on would start where O_DIRECT refuses to.
            let rest = &buf[done..];
            if n == 0
                || (file.is_direct()
                    && !direct_ready(offset + done as u64, rest.as_ptr(), rest.len()))
            {
                break;
            }
        }
        Ok(done)
    }

    /// Reads exactly `buf.len()` bytes at `offset` and waits; reaching the end of the file
    /// first is an error (`read only N of M bytes`).
    #[inline]
    pub fn read_exact_into(
        &self,
        file: &File,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), AioError> {
        if buf.is_empty() {
            return Ok(()); // nothing done, on every method and file (no system call)
        }
        // The common case, kept short: one inline read that fills the buffer (the inline path
        // declines an unaligned O_DIRECT request, which the general path bounces).
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: `buf` is borrowed mutably for this whole call, and the inline path runs
        // the I/O before it returns.
        let done = match unsafe { self.run_inline(file, offset, iov, false) } {
            Ok(n) if n == buf.len() => return Ok(()),
            Ok(0) => return Err(short_read(file, offset, buf.len(), 0).into()),
            Ok(n) => n,
            Err(Inline::Failed(e)) => return Err((*e).into()),
            Err(Inline::Declined) => 0,
        };
        self.read_exact_rest(file, offset, buf, done)
    }

    /// The rest of `read_exact_into` from `done` bytes on.
    #[inline(never)]
    fn read_exact_rest(
        &self,
        file: &File,
        offset: u64,
        buf: &mut [u8],
        done: usize,
    ) -> Result<(), AioError> {
        let n = done
            + self
                .read_into(file, offset + done as u64, &mut buf[done..])
                .map_err(|e| e.for_request(crate::Op::Readv, offset, buf.len() as u64))?;
        if n < buf.len() {
            return Err(short_read(file, offset, buf.len(), n).into());
        }
        Ok(())
    }

    /// Writes all of `data` at `offset` and waits, continuing short writes.
    ///
    /// On a buffered file, and on an O_DIRECT file when `offset`, `data`'s address and its
    /// length are multiples of [`DIRECT_ALIGN`], the slice is written as it is. Otherwise, on
    /// an O_DIRECT file, it is a read-modify-write of the aligned blocks that cover it (at
    /// most two block reads and a copy; unaligned writes to one file are serialized), and a
    /// file it extends is left exactly as long as asked.
    ///
    /// A failure names the caller's request — `offset`, `data.len()` and the bytes written
    /// before it (`…: No space left on device (errno 28); 61440 of the 65536 bytes were
    /// written`) — not the part it met. If the read of a block the read-modify-write keeps
    /// fails, that read's error is returned as it is (`could not read 4096 bytes at offset
    /// …`), and nothing was written.
    pub fn write_all_from(&self, file: &File, offset: u64, data: &[u8]) -> Result<(), AioError> {
        // Nothing to write is nothing done, on every file (an O_DIRECT file's read-modify-write
        // of an empty write at an unaligned offset extended the file to it).
        if data.is_empty() {
            return Ok(());
        }
        // A failure names the caller's request, not the part it met (the rest of a short
        // write, or a read-modify-write's aligned blocks), with the bytes written before it.
        let whole = |e: AioError| e.for_request(crate::Op::Writev, offset, data.len() as u64);
        if file.is_direct() && !direct_ready(offset, data.as_ptr(), data.len()) {
            return self.write_bounced(file, offset, data).map_err(whole);
        }
        let mut done = 0;
        while done < data.len() {
            done += self
                .write_once(file, offset + done as u64, &data[done..])
                .map_err(whole)?;
        }
        Ok(())
    }

    /// One read into `buf` (its memory used directly); bytes read.
    #[inline]
    fn read_once(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<usize, AioError> {
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: `buf` is borrowed mutably for this whole call, and the inline path runs
        // the I/O before it returns.
        match unsafe { self.run_inline(file, offset, iov, false) } {
            Ok(n) => return Ok(n),
            Err(Inline::Failed(e)) => return Err((*e).into()),
            Err(Inline::Declined) => {}
        }
        // SAFETY: as above; `run_full` waits for the I/O before it returns (also on
        // unwinding), so nothing else touches the memory while the I/O may write it.
        let c = unsafe { self.run_full(file, offset, iov, false) }?;
        // A short read is not a failure here: the caller reads on, and 0 means end of file.
        if c.is_partial() || c.is_end_of_file() {
            return Ok(c.bytes());
        }
        if let Some(e) = c.failure() {
            return Err(e.clone().into());
        }
        Ok(c.bytes())
    }

    /// One write from `data` (its memory used directly); bytes written (never 0).
    #[inline]
    fn write_once(&self, file: &File, offset: u64, data: &[u8]) -> Result<usize, AioError> {
        let iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // SAFETY: `data` is borrowed for this whole call and the I/O (which only reads it)
        // is over before the inline path returns.
        match unsafe { self.run_inline(file, offset, iov, true) } {
            Ok(n) => return Ok(n),
            Err(Inline::Failed(e)) => return Err((*e).into()),
            Err(Inline::Declined) => {}
        }
        // SAFETY: as above; `run_full` waits for the I/O before it returns, also on
        // unwinding.
        let c = unsafe { self.run_full(file, offset, iov, true) }?;
        if let Some(e) = c.failure() {
            return Err(e.clone().into());
        }
        if c.bytes() == 0 {
            return Err(c.check().expect_err("a write of 0 bytes is short").into());
        }
        Ok(c.bytes())
    }

    /// Runs one read (or write) of the memory `iov` names on this thread through a whole
    /// handle (when the inline path stepped aside), and waits.
    ///
    /// # Safety
    ///
    /// The memory must stay valid, and untouched by anyone else, for the whole call.
    #[inline(never)]
    unsafe fn run_full(
        &self,
        file: &File,
        offset: u64,
        iov: libc::iovec,
        write: bool,
    ) -> Result<crate::Completion, AioError> {
        let mut h = self.acquire()?;
        h.set_flags(HandleFlags::SYNCHRONOUS);
        let iov = [iov];
        // SAFETY: the caller keeps the memory valid and to itself until we return, and we
        // return only after the I/O is complete (`WaitOnDrop` waits on unwinding too).
        let io = unsafe {
            if write {
                h.writev_raw_held(file, offset, &iov)
            } else {
                h.readv_raw_held(file, offset, &iov)
            }
        };
        Ok(WaitOnDrop {
            issuer: self,
            io: Some(io),
        }
        .wait())
    }

    /// An unaligned O_DIRECT read: the covering aligned blocks into a bounce buffer.
    fn read_bounced(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<usize, AioError> {
        let start = offset - offset % DIRECT_ALIGN;
        let end = (offset + buf.len() as u64).next_multiple_of(DIRECT_ALIGN);
        let mut bounce = IoBuf::new((end - start) as usize);
        let got = self.read_into(file, start, &mut bounce)?;
        let skip = (offset - start) as usize;
        let n = got.saturating_sub(skip).min(buf.len());
        buf[..n].copy_from_slice(&bounce[skip..skip + n]);
        Ok(n)
    }

    /// An unaligned O_DIRECT write: read-modify-write of the covering aligned blocks. A last
    /// block that would reach past the end of the file is not padded: O_DIRECT would then
    /// extend the file past the bytes asked, and cutting it back (`ftruncate`) would also cut
    /// whatever another thread wrote past that point meanwhile — acknowledged data lost. Its
    /// bytes go through a buffered descriptor of the same file instead, which changes only
    /// them (the kernel keeps the page cache and O_DIRECT coherent; `fsync` covers both).
    /// Where that descriptor cannot be had (no `/proc`), or on a simulated disk, the block is
    /// padded and the file cut back, as before.
    fn write_bounced(&self, file: &File, offset: u64, data: &[u8]) -> Result<(), AioError> {
        if self.aio.shared.storage.is_none() && opened_read_only(file) {
            // As the kernel answers a write on it; the buffered twin (opened anew, for
            // writing) would otherwise have written a read-only file's tail past its end
            // (found by a caller-side attack, every method).
            let err = slice_error(file, crate::Op::Writev, offset, data.len() as u64, 0);
            return Err(IoError {
                errno: libc::EBADF,
                ..err
            }
            .into());
        }
        let _serial = file.rmw_lock();
        let end_asked = offset + data.len() as u64;
        let end = end_asked.next_multiple_of(DIRECT_ALIGN);
        let len = file
            .len()
            .map_err(|e| AioError::from(stat_error(file, e)))?;
        let last = end - DIRECT_ALIGN;
        let twin = (end > len.max(end_asked) && self.aio.shared.storage.is_none())
            .then(|| buffered_twin(file))
            .flatten();
        let Some(twin) = twin else {
            return self.write_bounced_blocks(file, offset, data, len);
        };
        let split = last.max(offset);
        let (head, tail) = data.split_at((split - offset) as usize);
        if !head.is_empty() {
            // Ends on a block boundary, at or before the end asked: pads nothing past it.
            self.write_bounced_blocks(file, offset, head, len)?;
        }
        std::os::unix::fs::FileExt::write_all_at(&twin, tail, split).map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let err = slice_error(file, crate::Op::Writev, split, tail.len() as u64, 0);
            AioError::from(IoError { errno, ..err })
        })
    }

    /// The read-modify-write of `data` at `offset` on the aligned blocks that cover it, the
    /// file `len` bytes long before it.
    fn write_bounced_blocks(
        &self,
        file: &File,
        offset: u64,
        data: &[u8],
        len: u64,
    ) -> Result<(), AioError> {
        let start = offset - offset % DIRECT_ALIGN;
        let end_asked = offset + data.len() as u64;
        let end = end_asked.next_multiple_of(DIRECT_ALIGN);
        let mut bounce = IoBuf::new((end - start) as usize);
        // The partial first and last blocks keep what is there (zeros past the end).
        let last = end - DIRECT_ALIGN;
        if !aligned(offset) && start < len {
            self.read_kept_block(file, start, &mut bounce[..DIRECT_ALIGN as usize], len)?;
        }
        if !aligned(end_asked) && last < len && (last != start || aligned(offset)) {
            let at = (last - start) as usize;
            self.read_kept_block(file, last, &mut bounce[at..], len)?;
        }
        let skip = (offset - start) as usize;
        bounce[skip..skip + data.len()].copy_from_slice(data);
        self.write_all_from(file, start, &bounce)?;
        if end > len.max(end_asked) {
            // Only on a simulated disk, or with no buffered twin (see `write_bounced`): the
            // aligned write went past the end asked; give the file the length a buffered
            // write would have left.
            let io = self.acquire()?.ftruncate(file, len.max(end_asked));
            self.wait(io).check()?;
        }
        Ok(())
    }
}

impl Issuer {
    /// Reads the block at `at` (one `DIRECT_ALIGN` block, `block`) whose bytes a
    /// read-modify-write keeps, in a file `len` bytes long: every byte of it the file holds
    /// must come, or the write would put zeros over them. A read that stops short of them
    /// (a short transfer, not the end of the file) is tried again, twice, then is an error
    /// (`read only N of M bytes`); before, the short count was taken as the end of the file
    /// and the rest of the block written back as zeros, reported done (found by a
    /// caller-side attack, 2026-12-07, on `sim` with `sim_fault_short`).
    fn read_kept_block(
        &self,
        file: &File,
        at: u64,
        block: &mut [u8],
        len: u64,
    ) -> Result<(), AioError> {
        let want = (len - at).min(block.len() as u64) as usize;
        let mut got = 0;
        for _ in 0..3 {
            got = self.read_into(file, at, block)?;
            if got >= want {
                return Ok(());
            }
        }
        Err(short_read(file, at, want, got).into())
    }
}

/// True if O_DIRECT can use this memory and range as they are.
fn direct_ready(offset: u64, ptr: *const u8, len: usize) -> bool {
    aligned(offset) && aligned(ptr as u64) && aligned(len as u64)
}

/// A buffered descriptor of `file`'s inode (a new open by `/proc/self/fd`, write-only, with
/// the file's O_DSYNC/O_SYNC flags); None where that open fails (no `/proc`, no write
/// permission on the inode).
fn buffered_twin(file: &File) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let fd = file.raw_fd();
    // SAFETY: F_GETFL only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(flags.max(0) & (libc::O_DSYNC | libc::O_SYNC))
        .open(format!("/proc/self/fd/{fd}"))
        .ok()
}

/// True if `file`'s descriptor was opened for reading only.
fn opened_read_only(file: &File) -> bool {
    // SAFETY: F_GETFL only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(file.raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_ACCMODE == libc::O_RDONLY
}

/// A slice I/O's error with no handle behind it: `op` of `length` bytes at `offset` of
/// `file`, `transferred` of them done.
fn slice_error(file: &File, op: crate::Op, offset: u64, length: u64, transferred: u64) -> IoError {
    IoError {
        op,
        path: file.path(),
        new_path: None,
        offset,
        length,
        transferred,
        errno: 0,
        blocks: None,
        detail: None,
        message: None,
        hint: None,
        invalid_pages: 0,
    }
}

fn short_read(file: &File, offset: u64, asked: usize, got: usize) -> IoError {
    slice_error(file, crate::Op::Readv, offset, asked as u64, got as u64)
}

fn stat_error(file: &File, e: std::io::Error) -> IoError {
    IoError {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        detail: Some(
            format!("could not get the file's length for a read-modify-write: {e}").into(),
        ),
        ..slice_error(file, crate::Op::Writev, 0, 0, 0)
    }
}
