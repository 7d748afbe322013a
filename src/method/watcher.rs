//! A thread that sleeps in `epoll` on a set of descriptors and calls `reap(key)` when one
//! becomes readable (for a descriptor watched once, `reap` says whether to watch it once
//! more). io_uring uses it for the rings of issuers whose I/Os must complete with
//! nobody waiting (a ticket awaited as a future, a detached I/O with an error callback): a
//! ring's descriptor is readable while completions wait to be reaped.
//!
//! A descriptor is watched either for good ([`Watcher::watch`]: edge-triggered, one wakeup
//! per arrival of completions, until the watcher stops) or once ([`Watcher::watch_once`]:
//! one wakeup when it is or becomes readable, then not again until asked again). A
//! descriptor added while already readable is reported at once. Its sleep is bounded by the
//! safety net, like every wait for a completion: when it runs out, every descriptor watched
//! for good is reaped once (what that finds is not counted as a missed wake: a completion
//! that arrives as the sleep ends looks the same). It stops, and is joined, on drop.

use crate::handle::bell::SAFETY_NET;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// The key that means "stop".
const STOP: u64 = u64::MAX;

pub(crate) struct Watcher {
    epoll: Arc<OwnedFd>,
    stop: OwnedFd,
    /// How each key is in the set, and its descriptor (indexed by key; grown on demand
    /// under the lock).
    added: Arc<parking_lot::Mutex<Vec<(Mode, RawFd)>>>,
    thread: Option<JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
    /// The process that started the thread.
    owner: dbaio_sys::Owner,
}

/// How a descriptor is in the epoll set (with the descriptor, to re-arm a one-shot).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Absent,
    Once,
    Always,
}

/// A descriptor closed on drop.
struct OwnedFd(RawFd);

impl Drop for OwnedFd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor; nobody uses it after this.
        unsafe { libc::close(self.0) };
    }
}

fn check(r: libc::c_int) -> std::io::Result<libc::c_int> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn ctl(epoll: RawFd, op: libc::c_int, fd: RawFd, key: u64, flags: u32) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events: flags,
        u64: key,
    };
    // SAFETY: `ev` is a valid event for the duration of the call.
    check(unsafe { libc::epoll_ctl(epoll, op, fd, &mut ev) }).map(|_| ())
}

fn add(epoll: RawFd, fd: RawFd, key: u64, flags: u32) -> std::io::Result<()> {
    ctl(epoll, libc::EPOLL_CTL_ADD, fd, key, flags)
}

impl Watcher {
    /// Starts the thread `name`, which calls `reap(key)` for each readable descriptor, and
    /// for each one watched for good when its sleep runs into the safety net. For a
    /// descriptor watched once, `reap` returning true watches it once more.
    pub(crate) fn start(
        name: &str,
        reap: Box<dyn Fn(u32) -> bool + Send + 'static>,
    ) -> std::io::Result<Watcher> {
        // SAFETY: plain system calls; the descriptors are wrapped at once.
        let epoll = OwnedFd(check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?);
        // SAFETY: as above.
        let stop = OwnedFd(check(unsafe {
            libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
        })?);
        add(epoll.0, stop.0, STOP, libc::EPOLLIN as u32)?;
        let epoll = Arc::new(epoll);
        let stopping = Arc::new(AtomicBool::new(false));
        let added = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (ep, st, ad) = (
            Arc::clone(&epoll),
            Arc::clone(&stopping),
            Arc::clone(&added),
        );
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || run(&ep, &st, &ad, &*reap))?;
        Ok(Watcher {
            owner: dbaio_sys::Owner::here(),
            epoll,
            stop,
            added,
            thread: Some(thread),
            stopping,
        })
    }

    /// Watches `fd` under `key` from now on (once per key; later calls do nothing).
    pub(crate) fn watch(&self, key: u32, fd: RawFd) {
        self.set_mode(key, fd, Mode::Always);
    }

    /// Reports `fd` under `key` once, when it is or becomes readable; then no more until
    /// asked again (a descriptor watched for good stays so).
    pub(crate) fn watch_once(&self, key: u32, fd: RawFd) {
        self.set_mode(key, fd, Mode::Once);
    }

    fn set_mode(&self, key: u32, fd: RawFd, mode: Mode) {
        let mut added = self.added.lock();
        let k = key as usize;
        if added.len() <= k {
            added.resize(k + 1, (Mode::Absent, -1));
        }
        let now = added[k].0;
        if now == Mode::Always {
            return;
        }
        let flags = match mode {
            Mode::Always => libc::EPOLLIN | libc::EPOLLET,
            _ => libc::EPOLLIN | libc::EPOLLONESHOT,
        } as u32;
        let op = if now == Mode::Absent {
            libc::EPOLL_CTL_ADD
        } else {
            libc::EPOLL_CTL_MOD
        };
        match ctl(self.epoll.0, op, fd, u64::from(key), flags) {
            Ok(()) => added[k] = (mode, fd),
            Err(e) => tracing::warn!(
                "could not watch descriptor {fd}: {e}; its I/Os complete when someone waits"
            ),
        }
    }
}

fn run(
    epoll: &OwnedFd,
    stopping: &AtomicBool,
    added: &parking_lot::Mutex<Vec<(Mode, RawFd)>>,
    reap: &dyn Fn(u32) -> bool,
) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
    let limit = SAFETY_NET.as_millis() as libc::c_int;
    loop {
        // SAFETY: `events` has room for the 16 entries we pass.
        let n = unsafe { libc::epoll_wait(epoll.0, events.as_mut_ptr(), 16, limit) };
        if n == 0 {
            if stopping.load(Ordering::Acquire) {
                return;
            }
            let always: Vec<u32> = (added.lock().iter().enumerate())
                .filter(|&(_, &(m, _))| m == Mode::Always)
                .map(|(k, _)| k as u32)
                .collect();
            for key in always {
                let _ = reap(key);
            }
            continue;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::error!("the io_uring watcher stops: epoll_wait failed: {e}");
            return;
        }
        for ev in &events[..n as usize] {
            let key = ev.u64;
            if key == STOP || stopping.load(Ordering::Acquire) {
                return;
            }
            if reap(key as u32) {
                rearm_once(epoll.0, added, key as u32);
            }
        }
    }
}

/// Watches `key` once more if it is still watched once (not for good meanwhile).
fn rearm_once(epoll: RawFd, added: &parking_lot::Mutex<Vec<(Mode, RawFd)>>, key: u32) {
    let added = added.lock();
    if let Some(&(Mode::Once, fd)) = added.get(key as usize) {
        let flags = (libc::EPOLLIN | libc::EPOLLONESHOT) as u32;
        if let Err(e) = ctl(epoll, libc::EPOLL_CTL_MOD, fd, u64::from(key), flags) {
            tracing::warn!("could not watch descriptor {fd} again: {e}");
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // In a child made by fork the thread is not there: joining would wait for ever.
        if self.owner.in_forked_child() {
            std::mem::forget(self.thread.take());
            return;
        }
        self.stopping.store(true, Ordering::Release);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from `one` to our eventfd.
        unsafe { libc::write(self.stop.0, (&one as *const u64).cast(), 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
