//! `Shared::describe` (a part of `Shared` kept apart: words for errors, not the protocol).
//!
//! Describing an I/O's failure in words: [`Shared::describe`] turns a handle's distilled
//! result into an [`IoError`] naming op, file (or unlink path), offset, length and errno, with
//! a callback's own message and hint where one applies. Any thread may call it while the
//! handle is complete and not yet recycled (the issuer at reclaim, the completer for an I/O
//! whose result goes to a ticket).

use super::error::{DIRECT_HINT, FOREIGN_FILE_HINT, IoError};
use super::files::NO_FILE;
use super::op::Op;
use super::result::{ERROR_DATA_IMPOSSIBLE, ERROR_DATA_PANICKED, IoResult};
use super::shared::Shared;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Shared {
    /// The failure (or short transfer) of handle `idx` with result `result`, in words.
    /// `foreign`: the path of a `File` of another subsystem the I/O was asked on.
    pub(crate) fn describe(
        &self,
        idx: u32,
        result: IoResult,
        foreign: Option<&Arc<std::path::Path>>,
    ) -> IoError {
        let s = self.slot(idx);
        let r = Ordering::Relaxed;
        let file = s.file.load(r);
        let op = s.op();
        let (path, new_path) = self.paths_of(idx, foreign);
        let errno = result.errno().unwrap_or(0);
        let direct = file != NO_FILE && self.files.slots[file as usize].direct.load(r);
        let first = s.first_block.load(r);
        let nblocks = s.nblocks.load(r);
        let cb = (result.callback_id != 0)
            .then(|| self.callbacks.get(result.callback_id))
            .flatten();
        // A callback that panicked made no result of its own to describe: say so, without
        // asking it (its `report` would read the marker as its own error data).
        let fault = match result.error_data {
            ERROR_DATA_PANICKED => Some("panicked"),
            ERROR_DATA_IMPOSSIBLE => Some("returned a result the I/O cannot have"),
            _ => None,
        };
        if let (Some(cb), Some(fault)) = (cb, fault) {
            let base = IoResult {
                callback_id: 0,
                error_data: ERROR_DATA_PANICKED,
                ..result
            };
            let mut e = self.describe(idx, base, foreign);
            e.detail = Some(format!("its {} callback {fault} (see the log)", cb.name()).into());
            return e;
        }
        let (detail, message, invalid_pages) = match cb {
            Some(cb) => self.callback_words(idx, cb.as_ref(), &result),
            None => (None, None, 0),
        };
        let detail = detail.or_else(|| self.executor_detail(idx, result));
        // A relation's segment numbers its blocks across the relation, as md.c's messages do
        // (`could not read blocks 20..20 in file "base/5/16421.1"`); the handle holds them in
        // the file's own numbering.
        let blocks = (first != crate::handle::slot::NO_BLOCK)
            .then(|| (self.files.segment_base(file).saturating_add(first), nblocks));
        IoError {
            op,
            path,
            new_path,
            offset: s.offset.load(r),
            length: s.length.load(r),
            // What the result says came (a callback may have changed the kernel's count).
            transferred: result.result.max(0) as u64,
            errno,
            blocks,
            detail: detail.map(String::into_boxed_str),
            message: message.map(String::into_boxed_str),
            invalid_pages,
            hint: if foreign.is_some() {
                Some(FOREIGN_FILE_HINT)
            } else {
                // (Only a transfer's EINVAL can be O_DIRECT's alignment, and only if something
                // is off the 4 KiB every device takes: one aligned buffer at an aligned offset
                // is refused for another reason, such as an offset past what a file can hold.
                // Several buffers may each be off, which the slot does not record.)
                let unaligned =
                    (s.offset.load(r) | s.length.load(r)) % 4096 != 0 || s.iov_count.load(r) > 1;
                (errno == libc::EINVAL && direct && op.transfers_data() && unaligned)
                    .then_some(DIRECT_HINT)
            },
        }
    }

    /// What handle `idx`'s callback says of its result: `report` (the detail), `message` and
    /// `invalid_pages`.
    ///
    /// An embedder's words are its code, run here on whatever thread describes the I/O (a
    /// worker, a reaper, a ticket's waiter): a panic in them must not unwind through the
    /// completion protocol, which left handles half-recycled (found by a caller-side attack,
    /// 2026-12-07). Each hook that panics is left out, logged, and named in the detail. They
    /// run inside the completion protocol too (a notice being delivered, a completion under
    /// way): waits and new issuers there are refused.
    fn callback_words(
        &self,
        idx: u32,
        cb: &dyn crate::handle::callback::HandleCallbacks,
        result: &IoResult,
    ) -> (Option<String>, Option<String>, u32) {
        let s = self.slot(idx);
        let file = s.file.load(Ordering::Relaxed);
        let mut panicked: Vec<&str> = Vec::new();
        let mut guarded = |hook: &'static str, f: &mut dyn FnMut()| {
            let _inside = crate::handle::callback::InCallback::enter();
            if catch_unwind(AssertUnwindSafe(f)).is_err() {
                tracing::error!(
                    callback = cb.name(),
                    io_id = idx,
                    "the {hook} of a callback panicked; describing the I/O without it"
                );
                panicked.push(hook);
            }
        };
        let (relation, base) = self.files.relation(file);
        let first = match s.first_block.load(Ordering::Relaxed) {
            crate::handle::slot::NO_BLOCK => 0,
            first => first,
        };
        let target = crate::handle::callback::ReportTarget {
            relation: &relation,
            first_block: base + first,
            nblocks: s.nblocks.load(Ordering::Relaxed),
        };
        let (mut detail, mut message, mut invalid_pages) = (None, None, 0);
        guarded("report", &mut || detail = Some(cb.report(result)));
        guarded("message", &mut || message = cb.message(result, &target));
        guarded("invalid_pages", &mut || {
            invalid_pages = cb.invalid_pages(result)
        });
        if !panicked.is_empty() {
            let said = detail.map(|d| format!("{d}; ")).unwrap_or_default();
            let hooks = panicked.join(" and ");
            detail = Some(format!(
                "{said}its {} callback's {hooks} panicked (see the log)",
                cb.name()
            ));
        }
        (detail, message, invalid_pages)
    }

    /// The path an I/O's error names (for unlink and rename, the path it was given; for a
    /// rename, also the new one), and the new path of a rename.
    fn paths_of(
        &self,
        idx: u32,
        foreign: Option<&Arc<std::path::Path>>,
    ) -> (Arc<std::path::Path>, Option<Box<std::path::PathBuf>>) {
        let s = self.slot(idx);
        let op = s.op();
        let path_at = |p: *const libc::c_char| {
            use std::os::unix::ffi::OsStrExt;
            // SAFETY: an unlink's or rename's paths are parked with the I/O's memory (in its
            // issuer, or in its notice) until the handle is recycled, and the caller describes
            // a handle that is complete and not yet recycled.
            let bytes = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
            Arc::<std::path::Path>::from(std::path::Path::new(std::ffi::OsStr::from_bytes(bytes)))
        };
        let path_ptr = s.path.load(Ordering::Relaxed) as *const libc::c_char;
        let new_path = (op == Op::Rename).then(|| {
            // SAFETY: a rename's two paths are stored back to back (as above).
            let to = path_at(unsafe { dbaio_sys::second_path(path_ptr) });
            Box::new(to.to_path_buf())
        });
        let path = if op.on_path() {
            path_at(path_ptr)
        } else if let Some(p) = foreign {
            Arc::clone(p)
        } else {
            self.files.path(s.file.load(Ordering::Relaxed))
        };
        (path, new_path)
    }

    /// What went wrong in executing the I/O rather than in the I/O itself, if anything: the
    /// executing thread panicked, its worker process died, or io_uring refused it.
    fn executor_detail(&self, idx: u32, result: IoResult) -> Option<String> {
        let s = self.slot(idx);
        let errno = result.errno().unwrap_or(0);
        if result.panicked() {
            Some("the thread executing it panicked (see the log)".to_string())
        } else if result.worker_lost() {
            // A worker killed after its system call changed the file still counts as lost:
            // the change may have happened (as after a device error).
            Some(format!(
                "worker process {} died while executing it, and so did the two before it{}",
                match crate::handle::slot::Executor::decode(s.executor.load(Ordering::Relaxed)) {
                    crate::handle::slot::Executor::Worker(w) => w.to_string(),
                    _ => "?".to_string(),
                },
                if s.op().changes_file() {
                    "; whether it changed the file is unknown"
                } else {
                    ""
                }
            ))
        } else if result.submit_failed() {
            let os = std::io::Error::from_raw_os_error(errno).to_string();
            let os = os.split(" (os error").next().unwrap_or(&os).to_string();
            Some(format!(
                "io_uring_enter refused to submit it: {os} (errno {errno})"
            ))
        } else {
            None
        }
    }
}
