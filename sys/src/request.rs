//! Plain I/O requests and the blocking executor.
//!
//! A [`Request`] is plain old data so that it can sit in a bounded queue (and later in a shared
//! mapping). Its pointers (iovecs, path) belong to the submitter, which guarantees they stay
//! valid until the completion for the request has been posted.

use crate::Op;
use std::os::fd::RawFd;

/// One plain I/O request. `len` is the byte count for fadvise/fallocate and the new size for
/// ftruncate; read and write lengths come from the iovecs.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Request {
    /// The operation.
    pub op: Op,
    /// File descriptor (unused by `Unlink`).
    pub fd: RawFd,
    /// The embedder's file slot of `fd` (`u32::MAX`: none); worker processes, which cannot
    /// use `fd` itself, find their own descriptor by it.
    pub file: u32,
    /// File offset in bytes.
    pub offset: u64,
    /// Length for fadvise/fallocate, size for ftruncate.
    pub len: u64,
    /// The iovec array for readv/writev.
    pub iov: *const libc::iovec,
    /// Number of iovecs.
    pub iovcnt: u32,
    /// NUL-terminated path for `Unlink`; for `Rename`, the old path then the new one, each
    /// NUL-terminated, back to back ([`second_path`]).
    pub path: *const libc::c_char,
    /// Returned unchanged with the completion.
    pub user_data: u64,
}

/// The largest offset a read or write may name: `off_t` is signed. Beyond it `pread` and
/// `pwrite` fail with `EINVAL`, but `preadv2` and io_uring take offset -1 (`u64::MAX`) as
/// "at the file's position" — a read of whatever the position points at, reported as done —
/// so no request beyond it may reach either ([`Request::offset_out_of_range`]).
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// The most bytes one read or write system call moves (Linux's `MAX_RW_COUNT`, `INT_MAX`
/// rounded down to a page); a longer one comes back short. io_uring's single-buffer entries
/// carry a 32-bit length, so a longer buffer is offered as this many bytes.
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

impl Request {
    /// A read or write at an offset beyond [`MAX_OFFSET`]: fails with `EINVAL` (as `pread`
    /// does), on every method.
    pub fn offset_out_of_range(&self) -> bool {
        self.op.transfers_data() && self.offset > MAX_OFFSET
    }
}

// SAFETY: a Request is a description; the submitter guarantees (see `perform`'s contract)
// that the memory its pointers name stays valid and is not mutated until the completion is
// posted, so handing it to another thread cannot create a dangling access.
unsafe impl Send for Request {}

/// The second of two NUL-terminated paths stored back to back at `path` (a rename's new
/// path).
///
/// # Safety
///
/// `path` points to two NUL-terminated strings back to back.
pub unsafe fn second_path(path: *const libc::c_char) -> *const libc::c_char {
    // SAFETY: the first string is NUL-terminated and the second follows it (contract).
    unsafe { path.add(libc::strlen(path) + 1) }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Runs `f` until it stops failing with `EINTR`; returns the result or `-errno`.
fn retry_eintr(mut f: impl FnMut() -> isize) -> i32 {
    loop {
        let r = f();
        if r >= 0 {
            return r.min(i32::MAX as isize) as i32;
        }
        let e = errno();
        if e != libc::EINTR {
            return -e;
        }
    }
}

/// Executes `req` with a blocking system call and returns the raw result: bytes transferred for
/// readv/writev, 0 for the other ops, or `-errno`. `EINTR` is retried here.
///
/// # Safety
///
/// `req.iov` must point at `req.iovcnt` valid iovecs whose buffers are valid for the access
/// (writable for `Readv`), and `req.path` must be a valid NUL-terminated string for `Unlink`
/// (two back to back for `Rename`), all for the duration of the call.
pub unsafe fn perform(req: &Request) -> i32 {
    if req.offset_out_of_range() {
        return -libc::EINVAL;
    }
    let off = req.offset as libc::off_t;
    let (fd, iov, iovcnt, len) = (req.fd, req.iov, req.iovcnt as libc::c_int, req.len);
    match req.op {
        Op::Readv if iovcnt == 1 => {
            // SAFETY: the caller guarantees one valid, writable iovec (function contract).
            let v = unsafe { *iov };
            retry_eintr(|| {
                // SAFETY: iov_base/iov_len describe a writable buffer (function contract).
                unsafe { libc::pread(fd, v.iov_base, v.iov_len, off) }
            })
        }
        Op::Readv => retry_eintr(|| {
            // SAFETY: the caller guarantees `iovcnt` valid, writable iovecs (function contract).
            unsafe { libc::preadv(fd, iov, iovcnt, off) }
        }),
        Op::Writev if iovcnt == 1 => {
            // SAFETY: the caller guarantees one valid iovec (function contract).
            let v = unsafe { *iov };
            retry_eintr(|| {
                // SAFETY: iov_base/iov_len describe a readable buffer (function contract).
                unsafe { libc::pwrite(fd, v.iov_base, v.iov_len, off) }
            })
        }
        Op::Writev => retry_eintr(|| {
            // SAFETY: the caller guarantees `iovcnt` valid iovecs (function contract).
            unsafe { libc::pwritev(fd, iov, iovcnt, off) }
        }),
        Op::Fsync => retry_eintr(|| {
            // SAFETY: fsync only takes an integer fd.
            unsafe { libc::fsync(fd) as isize }
        }),
        Op::Fdatasync => retry_eintr(|| {
            // SAFETY: fdatasync only takes an integer fd.
            unsafe { libc::fdatasync(fd) as isize }
        }),
        Op::Unlink => retry_eintr(|| {
            // SAFETY: the caller guarantees a valid NUL-terminated path (function contract).
            unsafe { libc::unlink(req.path) as isize }
        }),
        Op::Rename => retry_eintr(|| {
            // SAFETY: the caller guarantees two valid NUL-terminated paths (function contract).
            unsafe {
                let to = second_path(req.path);
                libc::renameat(libc::AT_FDCWD, req.path, libc::AT_FDCWD, to) as isize
            }
        }),
        Op::FadviseWillneed => {
            // posix_fadvise returns the error number instead of setting errno.
            // SAFETY: only integers are passed.
            -unsafe { libc::posix_fadvise(fd, off, len as libc::off_t, libc::POSIX_FADV_WILLNEED) }
        }
        Op::Fallocate => retry_eintr(|| {
            // SAFETY: only integers are passed.
            unsafe { libc::fallocate(fd, 0, off, len as libc::off_t) as isize }
        }),
        Op::Ftruncate => retry_eintr(|| {
            // SAFETY: only integers are passed.
            unsafe { libc::ftruncate(fd, len as libc::off_t) as isize }
        }),
        Op::Invalid => -libc::EINVAL,
    }
}

/// What [`try_read_cached`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cached {
    /// The page cache held every byte asked for: the read is done, with this many bytes.
    Done(i32),
    /// Not all of it is cached (or the read ended short, or failed): a worker must run it.
    Miss,
    /// The file system does not take non-blocking reads (`EOPNOTSUPP`, as tmpfs): do not
    /// try this file again.
    Unsupported,
}

/// Tries a read without blocking (`preadv2` with `RWF_NOWAIT`): only what the page cache
/// holds is copied, and nothing waits for the device. Done only if every byte the iovecs
/// ask for came back; anything else (a short read, which may be the end of the file or
/// pages not cached, or an error) is a [`Cached::Miss`] for the blocking path to run again
/// and report properly. Not for O_DIRECT files, which would always miss.
///
/// # Safety
///
/// As [`perform`]: `req.iov` must point at `req.iovcnt` valid, writable iovecs for the
/// duration of the call.
pub unsafe fn try_read_cached(req: &Request) -> Cached {
    if req.op != Op::Readv || req.offset_out_of_range() {
        // (preadv2 would read at the file's position for offset -1: let `perform` refuse it.)
        return Cached::Miss;
    }
    // SAFETY: the caller guarantees `iovcnt` valid iovecs (function contract).
    let want: usize = unsafe { std::slice::from_raw_parts(req.iov, req.iovcnt as usize) }
        .iter()
        .map(|v| v.iov_len)
        .sum();
    // SAFETY: the iovecs describe writable buffers (function contract); the rest are integers.
    let r = unsafe {
        libc::preadv2(
            req.fd,
            req.iov,
            req.iovcnt as libc::c_int,
            req.offset as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    if r >= 0 && r as usize == want && want <= i32::MAX as usize {
        return Cached::Done(r as i32);
    }
    if r < 0 && errno() == libc::EOPNOTSUPP {
        return Cached::Unsupported;
    }
    Cached::Miss
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn read_request(fd: RawFd, iov: &libc::iovec, offset: u64) -> Request {
        Request {
            op: Op::Readv,
            fd,
            file: 0,
            offset,
            len: 0,
            iov,
            iovcnt: 1,
            path: std::ptr::null(),
            user_data: 0,
        }
    }

    /// A cached read is done whole with the file's bytes; one that runs past the end of the
    /// file (a short read) is a miss, never a partial "done"; other ops are never tried.
    #[test]
    fn cached_read_is_whole_or_a_miss() {
        let path = std::env::temp_dir().join(format!("dbaio-try-cached-{}", std::process::id()));
        let data: Vec<u8> = (0..12288u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; 8192];
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: `iov` names `buf`, alive and unused elsewhere for each call below.
        let whole = unsafe { try_read_cached(&read_request(f.as_raw_fd(), &iov, 0)) };
        if whole == Cached::Unsupported {
            eprintln!("SKIPPED cached_read_is_whole_or_a_miss: RWF_NOWAIT refused on {path:?}");
        } else {
            assert_eq!(whole, Cached::Done(8192));
            assert_eq!(&buf[..], &data[..8192]);
            // SAFETY: as above.
            let short = unsafe { try_read_cached(&read_request(f.as_raw_fd(), &iov, 8192)) };
            assert_eq!(
                short,
                Cached::Miss,
                "4096 of 8192 bytes is not a whole read"
            );
            let mut fsync = read_request(f.as_raw_fd(), &iov, 0);
            fsync.op = Op::Fsync;
            // SAFETY: as above (an fsync request is not executed at all).
            assert_eq!(unsafe { try_read_cached(&fsync) }, Cached::Miss);
        }
        std::fs::remove_file(&path).unwrap();
    }
}
