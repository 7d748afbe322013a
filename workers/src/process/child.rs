//! The worker process: what runs after the embedder's program is executed again with
//! `DBAIO_IO_WORKER` in its environment (see `entry`, called before `main`).
//!
//! It maps the control segment (its standard input) and the shared arena (opened through
//! `/proc/<embedder>/fd/<n>`), then loops: take a queued request, execute it with the same
//! blocking executor the threads use, post the result, wake the embedder's completer. Files
//! are reopened through `/proc/<embedder>/fd/<n>` on first use and kept in a per-worker cache
//! until the embedder closes them. It dies with its embedder (`PR_SET_PDEATHSIG`) and leaves
//! by itself after the idle timeout when the pool is above its minimum.

use super::control::{
    COMPLETER_NAPPING, Control, DONE, FileCell, Layout, MAGIC, QUEUED, RUNNING, W_BUSY, W_IDLE,
    W_RETIRED, state_word,
};
use dbaio_sys::futex;
use nix::sys::signal::Signal;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

/// The environment variable that turns a start of the embedder's program into a worker.
pub const ENV: &str = "DBAIO_IO_WORKER";

/// Runs before `main` in every program that links dbaio: returns at once unless this process
/// was started as a worker, and then never returns.
pub(crate) fn entry() {
    // SAFETY: getenv with a NUL-terminated name; nothing modifies the environment this early.
    let v = unsafe { libc::getenv(c"DBAIO_IO_WORKER".as_ptr()) };
    if v.is_null() {
        return;
    }
    // SAFETY: getenv returned a valid NUL-terminated string.
    let arg = unsafe { std::ffi::CStr::from_ptr(v) }
        .to_string_lossy()
        .into_owned();
    let code = match run(&arg) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dbaio io worker: {e}");
            1
        }
    };
    // SAFETY: _exit ends the process without running the program's own initialisation or
    // atexit handlers, which belong to the embedder, not to its worker.
    unsafe { libc::_exit(code) }
}

struct Worker<'a> {
    ctl: &'a Control,
    id: u32,
    parent: i32,
    /// The arena and the regions, as mapped here.
    spaces: super::control::Spaces,
    /// File slot → (epoch, our descriptor).
    files: HashMap<u32, (u64, OwnedFd)>,
    close_seq: u32,
    cursor: usize,
    /// A self-sizing pool: this worker keeps its bit in `Header::coming`.
    sized: bool,
}

fn run(arg: &str) -> Result<(), String> {
    let mut parts = arg.split(':');
    let mut next = |what: &str| -> Result<i64, String> {
        parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("bad {ENV} value {arg:?} ({what})"))
    };
    let (id, parent) = (next("worker")? as u32, next("embedder pid")? as i32);
    // Die with the embedder's supervising thread; if it is gone already, leave.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| e.to_string())?;
    if nix::unistd::getppid().as_raw() != parent {
        return Ok(());
    }
    // Ctrl-C at a terminal signals the whole foreground process group: the embedder decides
    // what an interrupt means (finish, clean up, exit), and its workers go when it does.
    // SAFETY: ignoring SIGINT installs no handler code.
    let _ =
        unsafe { nix::sys::signal::signal(Signal::SIGINT, nix::sys::signal::SigHandler::SigIgn) };
    let name = CString::new(format!("dbaio-io-w{id}")).unwrap_or_default();
    let _ = nix::sys::prctl::set_name(&name);
    let ctl = map_control_segment(id)?;
    let spaces = match map_spaces(&ctl, parent) {
        Ok(spaces) => spaces,
        // A replacement started as the embedder exits finds its descriptors closed: not an
        // error anyone can act on (runs that killed workers printed one about 3 in 10).
        Err(_) if exiting(parent) => return Ok(()),
        Err(e) => return Err(e),
    };
    let h = ctl.header();
    let cell = &ctl.workers()[id as usize];
    cell.pid.store(std::process::id() as i32, Ordering::Relaxed);
    cell.done.store(0, Ordering::Relaxed);
    let mut w = Worker {
        ctl: &ctl,
        id,
        parent,
        spaces,
        files: HashMap::new(),
        close_seq: h.close_seq.load(Ordering::Acquire),
        cursor: id as usize * 64,
        sized: h.min.load(Ordering::Relaxed) < h.max.load(Ordering::Relaxed),
    };
    // It holds no descriptor yet: whatever was closed before now is swept (a closer may
    // wait for this cell, whose last value is its previous worker's).
    w.swept(w.close_seq);
    w.serve();
    Ok(())
}

/// Whether process `pid` is exiting or gone: its `PF_EXITING` flag (in `/proc/<pid>/stat`),
/// set before the kernel closes its descriptors, or no such process.
fn exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The fields after the command name, which is in parentheses and may hold anything:
    // state, ppid, pgrp, session, tty, tpgid, flags.
    let flags = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok());
    flags.is_none_or(|f| f & PF_EXITING != 0)
}

/// Maps the control segment, which is standard input, and checks it is one (its magic, and
/// a layout that fits the mapping and has a cell for worker `id`).
fn map_control_segment(id: u32) -> Result<Control, String> {
    // SAFETY: fd 0 was set up by the embedder as the segment's memfd; we take it over.
    let seg = unsafe { OwnedFd::from_raw_fd(0) };
    let len = nix::sys::stat::fstat(seg.as_raw_fd())
        .map_err(|e| format!("control segment: {e}"))?
        .st_size as usize;
    let base = dbaio_sys::arena::map_shared(seg.as_raw_fd(), len).map_err(|e| e.to_string())?;
    // SAFETY: a mapping of `len` bytes that lives until we exit; the header is read first to
    // learn the layout, and checked against the mapping's length.
    let probe = unsafe { Control::new(base.as_ptr(), Layout::new(0, 0)) };
    let h = probe.header();
    if h.magic.load(Ordering::Acquire) != MAGIC {
        return Err("the control segment is not a dbaio segment".into());
    }
    let layout = Layout::new(
        h.handles.load(Ordering::Relaxed),
        h.files.load(Ordering::Relaxed),
    );
    if layout.len > len || id >= crate::MAX_WORKERS {
        return Err("the control segment is smaller than its layout".into());
    }
    // SAFETY: as above, now with the segment's true layout, which fits the mapping.
    Ok(unsafe { Control::new(base.as_ptr(), layout) })
}

/// Maps the memory requests name — the shared arena, and each region registered in the
/// segment — through the embedder's descriptors (`/proc/<parent>/fd/<n>`).
fn map_spaces(ctl: &Control, parent: i32) -> Result<super::control::Spaces, String> {
    let h = ctl.header();
    let arena_len = h.arena_len.load(Ordering::Relaxed);
    let arena_path = format!("/proc/{parent}/fd/{}", h.arena_fd.load(Ordering::Relaxed));
    let arena = nix::fcntl::open(
        arena_path.as_str(),
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| format!("{arena_path}: {e}"))?;
    // SAFETY: open returned a fresh descriptor that we own.
    let arena = unsafe { OwnedFd::from_raw_fd(arena) };
    let arena_base = dbaio_sys::arena::map_shared(arena.as_raw_fd(), arena_len as usize)
        .map_err(|e| e.to_string())?;
    let mut spaces: super::control::Spaces =
        [(std::ptr::null_mut(), 0); dbaio_sys::arena::MAX_REGIONS + 1];
    spaces[0] = (arena_base.as_ptr(), arena_len);
    for (k, reg) in h.regions.iter().enumerate() {
        let len = reg[1].load(Ordering::Relaxed);
        if len == 0 {
            continue;
        }
        // A region whose pool has gone since this pool started cannot be mapped (its
        // descriptor is closed or reused); no request of this pool names it, so it is skipped.
        let path = format!("/proc/{parent}/fd/{}", reg[0].load(Ordering::Relaxed));
        let Ok(fd) = nix::fcntl::open(
            path.as_str(),
            nix::fcntl::OFlag::O_RDWR
                | nix::fcntl::OFlag::O_CLOEXEC
                | nix::fcntl::OFlag::O_NONBLOCK,
            nix::sys::stat::Mode::empty(),
        ) else {
            continue;
        };
        // SAFETY: open returned a fresh descriptor that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Ok(base) = dbaio_sys::arena::map_shared(fd.as_raw_fd(), len as usize) {
            spaces[k + 1] = (base.as_ptr(), len);
        }
    }
    Ok(spaces)
}

impl Worker<'_> {
    fn serve(&mut self) {
        let ctl = self.ctl;
        let h = ctl.header();
        let cell = &ctl.workers()[self.id as usize];
        let bit = 1u64 << self.id;
        let timeout = match h.idle_timeout_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        };
        cell.state.store(W_BUSY, Ordering::SeqCst);
        if h.batch_scheduling.load(Ordering::Relaxed) != 0 {
            // A policy the kernel refuses (none should) leaves the worker as it was.
            let _ = dbaio_sys::sched::run_as_batch();
        }
        // This worker's bit in `coming` is set while it is on its way to the queue (it posted
        // a result, or a submitter woke it); it leaves once it has taken a request or is
        // visible as idle. Only a self-sizing pool keeps the mask (`sized`).
        let arrived = || {
            if h.coming.load(Ordering::Relaxed) & bit != 0 {
                h.coming.fetch_and(!bit, Ordering::SeqCst);
            }
            if h.returning.load(Ordering::Relaxed) & bit != 0 {
                h.returning.fetch_and(!bit, Ordering::SeqCst);
            }
        };
        loop {
            self.sweep_files();
            if let Some(i) = ctl.queued().take_one(self.cursor) {
                self.cursor = i as usize + 1;
                arrived();
                super::pass_wake_on(ctl, self.sized);
                self.execute(i);
                // On its way back to the queue: submitters count it until its next look.
                // Set after the post and its wakes, so that a worker stopped (SIGSTOP) or
                // preempted holds a wake back only in the few instructions from here to
                // that look, not through its system calls (an attack stopped workers right
                // after their reads: the next read, only polled, waited for the rescue).
                // Only where the bit can change a decision: some worker idle, or a
                // self-sizing pool. With no one idle no wake is given whatever it says, and
                // not setting it only ever wakes more; so a fixed pool kept busy pays no
                // shared read-modify-write per request for it (as worker threads).
                if h.idle.load(Ordering::Relaxed) != 0 || self.sized {
                    h.returning.fetch_or(bit, Ordering::SeqCst);
                }
                continue;
            }
            if h.stop.load(Ordering::SeqCst) != 0 {
                return;
            }
            // Idle: advertise, look once more, then sleep until woken (Dekker with the
            // submitter's set-then-read of the idle mask).
            let seen = cell.word.load(Ordering::SeqCst);
            cell.state.store(W_IDLE, Ordering::Relaxed);
            h.idle.fetch_or(bit, Ordering::SeqCst);
            // Visible as idle before no longer counted as coming.
            arrived();
            fence(Ordering::SeqCst);
            // A file closed meanwhile counts too: its closer, which bumps `close_seq` before
            // it wakes the idle workers, may have found this one not idle yet.
            if ctl.queued().any()
                || h.stop.load(Ordering::SeqCst) != 0
                || h.close_seq.load(Ordering::SeqCst) != self.close_seq
            {
                h.idle.fetch_and(!bit, Ordering::SeqCst);
                cell.state.store(W_BUSY, Ordering::Relaxed);
                continue;
            }
            futex::wait(&cell.word, seen, timeout);
            if cell.word.load(Ordering::SeqCst) == seen {
                // Not woken: a timeout, a signal or a spurious return. Leave if idle long
                // enough and above the minimum.
                if h.idle.fetch_and(!bit, Ordering::SeqCst) & bit != 0
                    && timeout.is_some()
                    && self.retire()
                {
                    self.hold_at(super::RetireStep::MarkedRetired);
                    return;
                }
            }
            cell.state.store(W_BUSY, Ordering::Relaxed);
        }
    }

    /// Leaves the pool if it is above its minimum: clears this worker's bit in the live
    /// mask by compare-and-swap while more than the minimum are set (so two cannot both
    /// leave the last place above it). True if this worker is to exit. A kill after the
    /// swap finds the bit clear: the supervisor counts a retirement, not a death.
    fn retire(&self) -> bool {
        let h = self.ctl.header();
        let min = h.min.load(Ordering::Relaxed);
        let bit = 1u64 << self.id;
        let mut live = h.live.load(Ordering::SeqCst);
        if live & bit != 0 && live.count_ones() > min {
            self.hold_at(super::RetireStep::Leaving);
            live = h.live.load(Ordering::SeqCst);
        }
        while live & bit != 0 && live.count_ones() > min {
            match h
                .live
                .compare_exchange(live, live & !bit, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.hold_at(super::RetireStep::CountedOut);
                    self.ctl.workers()[self.id as usize]
                        .state
                        .store(W_RETIRED, Ordering::SeqCst);
                    return true;
                }
                Err(now) => live = now,
            }
        }
        false
    }

    /// Tests only: stops this process (SIGSTOP, until a test continues or kills it) if the
    /// embedder asked retiring workers to stop at `step`.
    fn hold_at(&self, step: super::RetireStep) {
        if self.ctl.header().hold_at_retire.load(Ordering::SeqCst) == step as u32 {
            // SAFETY: raise takes a signal number; SIGSTOP stops only this process.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
    }

    /// Executes request `i` if it is still queued and posts its result (counting this worker
    /// as coming to the queue before the post can wake anyone).
    fn execute(&mut self, i: u32) {
        let ctl = self.ctl;
        let c = &ctl.reqs()[i as usize];
        if c.state
            .compare_exchange(
                QUEUED,
                state_word(RUNNING, self.id),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return; // taken back by a waiter, or a stale bit
        }
        let result = self.perform(i);
        if self.sized {
            ctl.header()
                .coming
                .fetch_or(1u64 << self.id, Ordering::SeqCst);
        }
        c.result.store(result, Ordering::Relaxed);
        c.state.store(state_word(DONE, self.id), Ordering::SeqCst);
        ctl.done().set(i);
        // Only this worker writes its count: no locked add.
        let done = &ctl.workers()[self.id as usize].done;
        done.store(done.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let h = ctl.header();
        if super::wake::Wake::of(h).posted() {
            return; // a waiter completes it
        }
        // Dekker with the completer's store-then-check of the done bitmap (either it sees
        // our bit or we see how it sleeps), and with a watcher's store of `watched` then
        // load of the state. A napping completer is left to nap while an embedder thread
        // drains (it completes this result on its next wait), unless someone watches this
        // result or no embedder thread has drained for the window: it is then woken.
        fence(Ordering::SeqCst);
        let watched = c.watched.load(Ordering::SeqCst) != 0;
        if watched {
            h.watched_posted.store(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        } else if h.completer_sleeping.load(Ordering::SeqCst) == COMPLETER_NAPPING
            && h.since_drained() < h.drainer_window_ns.load(Ordering::Relaxed)
        {
            return;
        }
        if h.completer_sleeping.swap(0, Ordering::SeqCst) != 0 {
            h.done_seq.fetch_add(1, Ordering::SeqCst);
            futex::wake(&h.done_seq, 1);
        }
    }

    fn perform(&mut self, i: u32) -> i32 {
        let c = &self.ctl.reqs()[i as usize];
        let r = Ordering::Relaxed;
        match self.fd(c.file.load(r), c.epoch.load(r)) {
            // SAFETY: `self.spaces` are mappings that live as long as this process; the
            // embedder keeps the request's buffers untouched until its completion posts.
            Ok(fd) => unsafe { c.execute(fd, &self.spaces) },
            Err(e) => -e,
        }
    }

    /// Our descriptor for file slot `file` at `epoch`, reopened from the embedder's on first
    /// use.
    fn fd(&mut self, file: u32, epoch: u64) -> Result<RawFd, i32> {
        if let Some((e, fd)) = self.files.get(&file) {
            if *e == epoch {
                return Ok(fd.as_raw_fd());
            }
        }
        let cell: &FileCell = self.ctl.files().get(file as usize).ok_or(libc::EBADF)?;
        // The I/O holds a reference to the file, so the slot cannot change under us.
        if cell.epoch.load(Ordering::Acquire) != epoch {
            return Err(libc::EBADF);
        }
        let flags = cell.flags.load(Ordering::Relaxed)
            & (libc::O_ACCMODE | libc::O_DIRECT | libc::O_DSYNC | libc::O_SYNC | libc::O_NOATIME);
        let path = CString::new(format!(
            "/proc/{}/fd/{}",
            self.parent,
            cell.fd.load(Ordering::Relaxed)
        ))
        .map_err(|_| libc::EINVAL)?;
        // SAFETY: a NUL-terminated path and integer flags.
        let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        // SAFETY: open returned a fresh descriptor that we own.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        self.files.insert(file, (epoch, owned));
        Ok(fd)
    }

    /// Closes descriptors of files the embedder has closed since we last looked.
    fn sweep_files(&mut self) {
        let seq = self.ctl.header().close_seq.load(Ordering::Acquire);
        if seq == self.close_seq {
            return;
        }
        self.close_seq = seq;
        let files = self.ctl.files();
        self.files.retain(|&slot, (epoch, _)| {
            files
                .get(slot as usize)
                .is_some_and(|c| c.epoch.load(Ordering::Acquire) == *epoch)
        });
        self.swept(seq);
    }

    /// Tells closers this worker holds no descriptor of a file closed up to `seq`.
    fn swept(&self, seq: u32) {
        let h = self.ctl.header();
        self.ctl.workers()[self.id as usize]
            .swept
            .store(seq, Ordering::SeqCst);
        // Dekker with `ProcessPool::file_closed`: it counts itself a waiter, then looks at
        // the cells; this stores the cell, then looks for waiters. One sees the other.
        if h.close_waiters.load(Ordering::SeqCst) != 0 {
            h.swept_seq.fetch_add(1, Ordering::SeqCst);
            futex::wake(&h.swept_seq, u32::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exiting;

    #[test]
    fn a_live_embedder_is_not_exiting_and_an_exited_or_absent_one_is() {
        assert!(!exiting(std::process::id() as i32));
        // A child that has exited and is not yet reaped: a zombie keeps PF_EXITING.
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id() as i32;
        let id = nix::sys::wait::Id::Pid(nix::unistd::Pid::from_raw(pid));
        let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
        nix::sys::wait::waitid(id, flags).expect("waitid");
        assert!(exiting(pid), "a zombie is exiting");
        child.wait().expect("reap");
        assert!(exiting(i32::MAX), "no such process");
    }
}
