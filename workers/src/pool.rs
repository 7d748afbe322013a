//! The worker pool: `n` threads pulling [`Request`]s from one bounded queue.
//!
//! Wakeups follow an event-count protocol so that a busy pool costs no system calls: a worker
//! that finds the queue empty announces itself in `sleepers`, re-checks the queue, and only then
//! sleeps on the `epoch` futex; a submitter that sees sleepers bumps `epoch` and wakes as many
//! as it queued requests. The SeqCst fences on both sides make the lost-wakeup race impossible
//! (each side sees the other's write: Dekker's pattern).
//!
//! A worker that panics while executing a request (or while posting its completion) reports
//! the request to the sink as panicked, so it is never left hanging, starts a replacement
//! thread with its number, and ends.

use crate::futex;
use crate::request::{Request, perform};
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
use std::thread::JoinHandle;

/// Receives completions. Called on the worker thread that executed the request.
pub trait CompletionSink: Send + Sync + 'static {
    /// The request carrying `user_data` finished with `result` (bytes or `-errno`), executed by
    /// worker number `worker` (0-based).
    fn complete(&self, worker: u32, user_data: u64, result: i32);

    /// Called when a worker pops a request, before executing it: the sink may rewrite it (for
    /// example to reopen its file in another process), or return false to drop it unexecuted
    /// (someone else already ran it; no completion is posted). The default keeps it.
    fn prepare(&self, _worker: u32, _req: &mut Request) -> bool {
        true
    }

    /// The worker executing the request carrying `user_data` panicked before its completion
    /// was posted: fail it (the worker is replaced).
    fn panicked(&self, worker: u32, user_data: u64);
}

struct Shared {
    queue: ArrayQueue<Request>,
    sleepers: CachePadded<AtomicU32>,
    epoch: CachePadded<AtomicU32>,
    stop: AtomicBool,
    sink: Arc<dyn CompletionSink>,
    name: String,
    /// Every thread started, replacements included, to join on drop.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Workers replaced after a panic.
    replaced: AtomicU32,
}

/// A pool of I/O worker threads. Dropping it drains the queue and joins the threads.
pub struct WorkerPool {
    shared: Arc<Shared>,
    workers: u32,
}

impl WorkerPool {
    /// Starts `workers` threads named `{name}-{i}` with a queue of `queue_size` requests.
    pub fn start(
        workers: u32,
        queue_size: usize,
        name: &str,
        sink: Arc<dyn CompletionSink>,
    ) -> io::Result<Self> {
        assert!(workers > 0, "a worker pool needs at least one worker");
        assert!(
            queue_size > 0,
            "a worker pool needs a queue of at least one entry"
        );
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(queue_size),
            sleepers: CachePadded::new(AtomicU32::new(0)),
            epoch: CachePadded::new(AtomicU32::new(0)),
            stop: AtomicBool::new(false),
            sink,
            name: name.to_string(),
            threads: Mutex::new(Vec::with_capacity(workers as usize)),
            replaced: AtomicU32::new(0),
        });
        let pool = WorkerPool { shared, workers };
        for i in 0..workers {
            spawn_worker(&pool.shared, i)?;
        }
        Ok(pool)
    }

    /// Number of worker threads.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// Workers replaced after a panic, so far.
    pub fn replaced(&self) -> u32 {
        self.shared.replaced.load(Ordering::Relaxed)
    }

    /// Requests queued and not yet picked up by a worker.
    pub fn queued(&self) -> usize {
        self.shared.queue.len()
    }

    /// Queues `req`, or hands it back when the queue is full (the caller then runs it itself).
    /// Call [`WorkerPool::wake`] after a batch of submissions.
    ///
    /// # Safety
    ///
    /// The memory that `req`'s pointers name must stay valid, and must not be accessed in a way
    /// that conflicts with the operation, until the sink has received the completion for
    /// `req.user_data`.
    pub unsafe fn try_submit(&self, req: Request) -> Result<(), Request> {
        self.shared.queue.push(req)
    }

    /// Wakes up to `queued` sleeping workers after requests were queued.
    pub fn wake(&self, queued: u32) {
        fence(Ordering::SeqCst);
        let sleepers = self.shared.sleepers.load(Ordering::SeqCst);
        if sleepers > 0 && queued > 0 {
            self.shared.epoch.fetch_add(1, Ordering::SeqCst);
            futex::wake(&self.shared.epoch, queued.min(sleepers));
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        futex::wake(&self.shared.epoch, u32::MAX);
        // A worker may start a replacement while we join: take the list until it stays empty.
        loop {
            let threads = std::mem::take(&mut *self.shared.threads.lock());
            if threads.is_empty() {
                break;
            }
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

/// Starts worker thread `id`.
fn spawn_worker(shared: &Arc<Shared>, id: u32) -> io::Result<()> {
    let s = Arc::clone(shared);
    let t = std::thread::Builder::new()
        .name(format!("{}-{id}", shared.name))
        .spawn(move || worker_main(&s, id))?;
    shared.threads.lock().push(t);
    Ok(())
}

/// Executes `req` and posts its completion. False if the worker panicked doing so (the
/// request has then been reported as panicked).
fn run(shared: &Shared, id: u32, mut req: Request) -> bool {
    let user_data = req.user_data;
    let done = catch_unwind(AssertUnwindSafe(|| {
        if !shared.sink.prepare(id, &mut req) {
            return;
        }
        // SAFETY: `try_submit`'s contract keeps the request's memory valid until `complete`
        // below has run.
        let result = unsafe { perform(&req) };
        shared.sink.complete(id, req.user_data, result);
    }));
    if done.is_err() {
        // The sink decides whether the request still needs failing (it may have completed).
        let _ = catch_unwind(AssertUnwindSafe(|| shared.sink.panicked(id, user_data)));
        return false;
    }
    true
}

fn worker_main(shared: &Arc<Shared>, id: u32) {
    loop {
        if let Some(req) = shared.queue.pop() {
            if !run(shared, id, req) {
                return replace(shared, id);
            }
            continue;
        }
        let seen = shared.epoch.load(Ordering::SeqCst);
        shared.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(req) = shared.queue.pop() {
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            if !run(shared, id, req) {
                return replace(shared, id);
            }
            continue;
        }
        if shared.stop.load(Ordering::SeqCst) {
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        futex::wait(&shared.epoch, seen, None);
        shared.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A panicked worker's last act: start a thread to take its place (unless the pool stops).
fn replace(shared: &Arc<Shared>, id: u32) {
    shared.replaced.fetch_add(1, Ordering::Relaxed);
    if shared.stop.load(Ordering::SeqCst) {
        return;
    }
    if let Err(e) = spawn_worker(shared, id) {
        // The pool runs one worker short; requests still complete (the others take them, or
        // the issuer runs what does not fit).
        eprintln!("dbaio-workers: could not replace worker {id}: {e}");
    }
}
