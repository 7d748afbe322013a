//! The worker pool: threads pulling [`Request`]s from one bounded queue, as many as the load
//! needs between a minimum and a maximum ([`PoolSize`]).
//!
//! **Wakeups.** Every worker has its own futex word and one bit in the `idle` mask. A worker
//! that finds the queue empty sets its bit, re-checks the queue, and only then sleeps on its
//! word; a submitter, after queueing, takes the lowest set bit (`fetch_and` decides who owns
//! a bit), bumps that worker's word and wakes it: one worker per submission, however many
//! requests it queued. A worker that takes a request and still sees more queued than are
//! coming wakes up to `WAKE_FANOUT` (2) more, so the pool fills in a few steps (PostgreSQL's
//! fan-out). Waking one and letting the woken wake the rest costs the submitter one system
//! call per batch, and a worker that drains a batch faster than another could get up saves
//! that other's sleep and wake altogether. The SeqCst
//! operations on both sides make the lost-wakeup race impossible (each side sees the other's
//! write: Dekker's pattern). A busy pool costs a submitter one load of `idle`, no system call.
//! Waking the *lowest* idle worker concentrates work on low-numbered workers, so the ones above
//! them stay idle when they are not needed, and can leave.
//!
//! **Sizing.** Time is cut into windows at least the launch interval long. A wake is *met* if
//! it finds an idle worker for every request beyond those the coming workers will take, and
//! *short* if not; a short wake at the end of a window that was not calm (more than three
//! short wakes for each met one, `tally.rs`) starts one more worker, unless the pool is at its
//! maximum. A worker that sleeps
//! for the idle timeout without being woken leaves, unless the pool is at its minimum. A
//! fixed pool is one whose minimum and maximum are equal.
//!
//! A worker that panics while executing a request (or while posting its completion) reports
//! the request to the sink as panicked, so it is never left hanging, starts a replacement
//! thread with its number, and ends.

use crate::tally::WakeTally;
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use dbaio_sys::futex;
use dbaio_sys::{Request, perform};
use parking_lot::Mutex;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicIsize, AtomicU8, AtomicU32, AtomicU64, Ordering, fence,
};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most workers one pool can have (one bit each in the idle mask).
pub const MAX_WORKERS: u32 = 64;

/// Receives completions. Called on the worker thread that executed the request.
pub trait CompletionSink: Send + Sync + 'static {
    /// The request carrying `user_data` finished with `result` (bytes or `-errno`), executed by
    /// worker number `worker` (0-based).
    fn complete(&self, worker: u32, user_data: u64, result: i32);

    /// Called when a worker pops a request, before executing it: the sink may rewrite it (for
    /// example to reopen its file in another process), or return false to drop it unexecuted
    /// (the submitter side took it back and ran it, and said so with
    /// [`WorkerPool::taken_back`]; no completion is posted). The default keeps it.
    fn prepare(&self, _worker: u32, _req: &mut Request) -> bool {
        true
    }

    /// The worker executing the request carrying `user_data` panicked before its completion
    /// was posted: fail it (the worker is replaced).
    fn panicked(&self, worker: u32, user_data: u64);
}

/// How many workers a pool runs, and how fast that changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSize {
    /// Workers that always run (started with the pool, never leave for idleness).
    pub min: u32,
    /// The most workers that run at once.
    pub max: u32,
    /// A worker above the minimum that has had nothing to do for this long leaves.
    pub idle_timeout: Duration,
    /// The shortest time between two worker starts while the queue backs up.
    pub launch_interval: Duration,
}

impl PoolSize {
    /// Exactly `n` workers, always.
    pub fn fixed(n: u32) -> PoolSize {
        PoolSize {
            min: n,
            max: n,
            idle_timeout: Duration::MAX,
            launch_interval: Duration::ZERO,
        }
    }

    fn is_fixed(&self) -> bool {
        self.min == self.max
    }
}

/// One running worker, as [`WorkerPool::snapshot`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerRow {
    /// The worker's number (what the sink is told).
    pub id: u32,
    /// Its thread id (`gettid`), 0 until the thread has started.
    pub tid: i32,
    /// Executing a request now.
    pub busy: bool,
    /// Requests it executed (since this thread started in the slot).
    pub done: u64,
}

/// The whole pool at one moment, as [`WorkerPool::snapshot`] and [`PoolObserver`] give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSnapshot {
    /// The sizing the pool runs with.
    pub size: PoolSize,
    /// Requests queued and not yet picked up, those the submitter side took back left out.
    pub queued: usize,
    /// Workers started because requests waited for one, so far.
    pub grown: u32,
    /// Workers that left after the idle timeout, so far.
    pub retired: u32,
    /// Workers replaced after a panic, so far.
    pub replaced: u32,
    /// Every running worker.
    pub workers: Vec<WorkerRow>,
    /// Workers the pool counts as running, the number its sizing and retiring go by (equal
    /// to `workers.len()` but for a moment while one starts or leaves).
    pub live: u32,
    /// Worker processes (`WorkerRow::tid` is then a pid), not threads.
    pub processes: bool,
    /// I/Os run in the embedder instead, because a process could not reach their memory.
    pub local: u64,
    /// I/Os queued again because the worker process executing them died.
    pub requeued: u64,
    /// Worker processes: times an embedder thread waiting for its I/Os slept to its 100 ms
    /// safety limit although one of them had completed — a wake-up the pool missed. 0
    /// unless the wake protocol (`process/wake.rs`) is wrong.
    pub missed_wakes: u64,
    /// Worker processes: closes whose wait for a worker to close its descriptor of the file
    /// reached its second (the worker stopped, or in a very long I/O). A close after one
    /// does not wait for that worker again until it has swept; one waiting at the same time
    /// stops when the first gives up, and is not counted.
    pub close_waits_expired: u64,
}

/// Reads a pool's [`PoolSnapshot`] without keeping the pool alive (for a view that lives in
/// a structure the pool's own sink points at).
#[derive(Clone)]
pub struct PoolObserver(Observed);

#[derive(Clone)]
enum Observed {
    Threads(Weak<Shared>),
    Processes(crate::process::ProcessObserver),
}

impl PoolObserver {
    /// The pool now, or None once it has been dropped.
    pub fn snapshot(&self) -> Option<PoolSnapshot> {
        match &self.0 {
            Observed::Threads(w) => w.upgrade().map(|s| snapshot(&s)),
            Observed::Processes(p) => p.snapshot(),
        }
    }

    /// The requests worker processes have taken — executing, or executed with the result
    /// not yet completed in the embedder — as (handle slot, generation's low half, worker
    /// number), in slot order: the embedder's own table cannot show that until it completes the result.
    /// Empty for worker threads, which say so in the sink's `prepare`.
    pub fn taken(&self) -> Vec<(u32, u32, u32)> {
        match &self.0 {
            Observed::Threads(_) => Vec::new(),
            Observed::Processes(p) => p.taken(),
        }
    }

    /// Tests only: how long after an embedder thread's drain the process pool's completer
    /// leaves posted results to that thread (1 ms; threads ignore it), counting a drain
    /// now. A test makes it long so that only the embedder's own polls, waits and watched
    /// futures can complete a result.
    #[doc(hidden)]
    pub fn set_drainer_window(&self, window: std::time::Duration) {
        if let Observed::Processes(p) = &self.0 {
            p.set_drainer_window(window);
        }
    }

    /// Tests only: the process pool's completer naps and sleeps until someone wakes it
    /// (true), with no timer of its own. Threads ignore it.
    #[doc(hidden)]
    pub fn hold_completer_timers(&self, hold: bool) {
        if let Observed::Processes(p) = &self.0 {
            p.hold_completer_timers(hold);
        }
    }

    /// Tests only: worker processes that decide to retire stop themselves at step `at` of
    /// retiring (see `Header::hold_at_retire`); None: they do not. Threads ignore it.
    #[doc(hidden)]
    pub fn hold_retiring_workers(&self, at: Option<crate::process::RetireStep>) {
        if let Observed::Processes(p) = &self.0 {
            p.hold_retiring_workers(at);
        }
    }
}

impl From<crate::process::ProcessObserver> for PoolObserver {
    fn from(p: crate::process::ProcessObserver) -> PoolObserver {
        PoolObserver(Observed::Processes(p))
    }
}

const ABSENT: u8 = 0;
const STARTING: u8 = 1;
const IDLE: u8 = 2;
const BUSY: u8 = 3;

/// One worker's place: its futex word and what the view shows of it.
struct Slot {
    /// Bumped by whoever takes this worker's idle bit, then woken.
    word: AtomicU32,
    state: AtomicU8,
    tid: AtomicI32,
    done: AtomicU64,
}

struct Shared {
    queue: ArrayQueue<Request>,
    /// Queue entries whose request the submitter side took back ([`WorkerPool::taken_back`])
    /// and no worker has yet popped and dropped: `queued` leaves them out. May be off by one
    /// or two for a moment (a worker can drop an entry before its taker counts it), so it
    /// informs the view only, never a wake (which goes by the queue itself).
    taken_back: CachePadded<AtomicIsize>,
    /// Bit `i` set: worker `i` is idle (asleep or about to be) and may be taken and woken.
    idle: CachePadded<AtomicU64>,
    /// Workers started and not yet left.
    running: CachePadded<AtomicU32>,
    slots: Box<[CachePadded<Slot>]>,
    size: PoolSize,
    /// Start of the present sizing window, in ns since `born`. The pool grows at
    /// the end of a window of at least the launch interval that was not calm.
    window_start: AtomicU64,
    /// How the wakes of this window went (calm or not).
    tally: WakeTally,
    /// Workers woken and not yet back at the queue (they will each take a
    /// request). May dip below 0 for a moment (a worker can notice its wake before the
    /// waker counts it); read as at least 0.
    on_the_way: AtomicI32,
    /// Workers that finished a request and have not yet looked at the queue again (each will
    /// take a request if one is there, without a wake). Counted like `on_the_way`.
    returning: CachePadded<AtomicI32>,

    born: Instant,
    /// Workers run under `SCHED_BATCH`.
    batch_scheduling: bool,
    stop: AtomicBool,
    sink: Arc<dyn CompletionSink>,
    name: String,
    /// Each slot's thread, to join before the slot is reused and on drop. Starting a worker
    /// holds this lock: starts are rare and never race for a slot.
    threads: Mutex<Vec<Option<JoinHandle<()>>>>,
    /// Workers replaced after a panic.
    replaced: AtomicU32,
    /// Workers started because the queue backed up.
    grown: AtomicU32,
    /// Workers that left after the idle timeout.
    retired: AtomicU32,
}

/// A pool of I/O worker threads. Dropping it drains the queue and joins the threads.
pub struct WorkerPool {
    shared: Arc<Shared>,
    /// The process that started the threads.
    owner: dbaio_sys::Owner,
}

impl WorkerPool {
    /// Starts `size.min` threads named `{name}-{i}` with a queue of `queue_size` requests; more
    /// start, up to `size.max`, when requests wait for a worker. With `batch_scheduling` each
    /// worker runs under `SCHED_BATCH` ([`dbaio_sys::sched::run_as_batch`]).
    pub fn start(
        size: PoolSize,
        queue_size: usize,
        name: &str,
        sink: Arc<dyn CompletionSink>,
        batch_scheduling: bool,
    ) -> io::Result<Self> {
        if size.min == 0 || size.min > size.max || size.max > MAX_WORKERS || queue_size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a worker pool needs 1 <= min <= max <= {MAX_WORKERS} workers and a queue \
                     (asked: {} .. {} workers, {queue_size} entries)",
                    size.min, size.max
                ),
            ));
        }
        let slots = (0..size.max)
            .map(|_| {
                CachePadded::new(Slot {
                    word: AtomicU32::new(0),
                    state: AtomicU8::new(ABSENT),
                    tid: AtomicI32::new(0),
                    done: AtomicU64::new(0),
                })
            })
            .collect();
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(queue_size),
            taken_back: CachePadded::new(AtomicIsize::new(0)),
            idle: CachePadded::new(AtomicU64::new(0)),
            running: CachePadded::new(AtomicU32::new(0)),
            slots,
            size,
            window_start: AtomicU64::new(0),
            tally: WakeTally::default(),
            on_the_way: AtomicI32::new(0),
            returning: CachePadded::new(AtomicI32::new(0)),

            born: Instant::now(),
            batch_scheduling,
            stop: AtomicBool::new(false),
            sink,
            name: name.to_string(),
            threads: Mutex::new((0..size.max).map(|_| None).collect()),
            replaced: AtomicU32::new(0),
            grown: AtomicU32::new(0),
            retired: AtomicU32::new(0),
        });
        let pool = WorkerPool {
            shared,
            owner: dbaio_sys::Owner::here(),
        };
        for _ in 0..size.min {
            launch(&pool.shared)?;
        }
        Ok(pool)
    }

    /// Workers running now.
    pub fn workers(&self) -> u32 {
        self.shared.running.load(Ordering::Relaxed)
    }

    /// Workers replaced after a panic, so far.
    pub fn replaced(&self) -> u32 {
        self.shared.replaced.load(Ordering::Relaxed)
    }

    /// Workers started because requests waited for one, so far.
    pub fn grown(&self) -> u32 {
        self.shared.grown.load(Ordering::Relaxed)
    }

    /// Requests queued and not yet picked up by a worker (entries taken back left out).
    pub fn queued(&self) -> usize {
        self.shared.queued()
    }

    /// How many entries the queue holds at most.
    pub fn queue_capacity(&self) -> usize {
        self.shared.queue.capacity()
    }

    /// Pops the oldest queue entry, for a submitter that found the queue full and looks for
    /// entries of requests taken back to drop (see [`WorkerPool::dropped_taken_back`]); a
    /// live one it pops must be queued again or run by the caller.
    pub fn pop_oldest(&self) -> Option<Request> {
        self.shared.queue.pop()
    }

    /// A taken-back request's entry, popped by the submitter side (not a worker) and dropped.
    pub fn dropped_taken_back(&self) {
        self.shared.taken_back.fetch_sub(1, Ordering::Relaxed);
    }

    /// The submitter side took back a request it had queued (the sink's `prepare` will drop
    /// its entry): counted so that `queued` leaves the entry out. Call once per request taken
    /// back; call [`WorkerPool::untaken_back`] for one taken back that never reached the queue.
    pub fn taken_back(&self) {
        self.shared.taken_back.fetch_add(1, Ordering::Relaxed);
    }

    /// Undoes one [`WorkerPool::taken_back`]: the request's push failed, so no entry of it
    /// will be popped and dropped.
    pub fn untaken_back(&self) {
        self.shared.taken_back.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every running worker (number, thread id, busy or idle, requests done) and the pool's
    /// counters.
    pub fn snapshot(&self) -> PoolSnapshot {
        snapshot(&self.shared)
    }

    /// A handle that reads [`WorkerPool::snapshot`] while the pool lives, without keeping it
    /// alive.
    pub fn observer(&self) -> PoolObserver {
        PoolObserver(Observed::Threads(Arc::downgrade(&self.shared)))
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

    /// Wakes the lowest-numbered idle worker after `queued` requests were queued, if the queue
    /// holds more than the workers already on their way will take (woken earlier, or just done
    /// with a request, and not yet back at the queue: each takes one). One wake per
    /// submission: the woken worker wakes more if it still sees a backlog (the module's
    /// "Wakeups"). May start one more worker if too few were idle for the submission (see
    /// the module's "Sizing").
    pub fn wake(&self, queued: u32) {
        if queued == 0 {
            return;
        }
        let s = &*self.shared;
        fence(Ordering::SeqCst);
        // No worker idle and a pool that cannot grow (fixed, or at its maximum): there is no
        // wake to give and nothing to tally, so the counts below are not read (they are
        // written by busy workers; reading them costs a busy pool a miss per submission).
        // Dekker with a worker going idle all the same: it sets its bit, then looks.
        if !s.can_grow() && s.idle.load(Ordering::SeqCst) == 0 {
            return;
        }
        let on_the_way = s.on_the_way.load(Ordering::SeqCst).max(0) as u32;
        let returning = s.returning.load(Ordering::SeqCst).max(0) as u32;
        // The queue may hold earlier requests too; the workers coming take those first.
        let backlog = s.queue.len() as u32;
        // The requests of this submission that no coming worker will take.
        let need = queued.min(backlog.saturating_sub(on_the_way + returning));
        // Idle workers before the wake (once woken, a worker may wake others at once), for
        // the tally of a pool that sizes itself; a fixed one tallies nothing.
        let idle = (!s.size.is_fixed()).then(|| s.idle.load(Ordering::SeqCst).count_ones());
        // One wake at most, however many were queued.
        let woken = wake_idle(s, need.min(1));
        let Some(idle) = idle else {
            return;
        };
        // Met if the pool had an idle worker for each: the woken one, and those that it
        // (and those it wakes) will wake.
        if woken < need.min(1) || idle < need {
            s.tally.short();
            maybe_grow(&self.shared);
        } else {
            s.tally.met();
        }
    }
}

/// Takes and wakes up to `want` idle workers, lowest-numbered first; returns how many.
fn wake_idle(s: &Shared, want: u32) -> u32 {
    let mut woken = 0;
    while woken < want {
        let mask = s.idle.load(Ordering::SeqCst);
        if mask == 0 {
            break;
        }
        let bit = mask & mask.wrapping_neg();
        if s.idle.fetch_and(!bit, Ordering::SeqCst) & bit != 0 {
            s.on_the_way.fetch_add(1, Ordering::SeqCst);
            let slot = &s.slots[bit.trailing_zeros() as usize];
            slot.word.fetch_add(1, Ordering::SeqCst);
            futex::wake_private(&slot.word, 1);
            woken += 1;
        }
    }
    woken
}

impl Shared {
    /// A self-sizing pool below its maximum: one that may start another worker.
    fn can_grow(&self) -> bool {
        !self.size.is_fixed() && self.running.load(Ordering::Relaxed) < self.size.max
    }

    /// Queue entries a worker will run: the queue's length less those taken back.
    fn queued(&self) -> usize {
        let taken_back = self.taken_back.load(Ordering::Relaxed).max(0) as usize;
        self.queue.len().saturating_sub(taken_back)
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // In a child made by fork the threads are not there: joining would wait for ever.
        if self.owner.in_forked_child() {
            return;
        }
        let s = &*self.shared;
        s.stop.store(true, Ordering::SeqCst);
        for slot in s.slots.iter() {
            slot.word.fetch_add(1, Ordering::SeqCst);
            futex::wake_private(&slot.word, u32::MAX);
        }
        // A panicking worker may start a replacement while we join: repeat until none is left.
        loop {
            let threads: Vec<JoinHandle<()>> = s
                .threads
                .lock()
                .iter_mut()
                .filter_map(Option::take)
                .collect();
            if threads.is_empty() {
                break;
            }
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

fn snapshot(s: &Shared) -> PoolSnapshot {
    let mut workers = Vec::new();
    for (id, slot) in s.slots.iter().enumerate() {
        let state = slot.state.load(Ordering::Relaxed);
        if state == ABSENT {
            continue;
        }
        workers.push(WorkerRow {
            id: id as u32,
            tid: slot.tid.load(Ordering::Relaxed),
            busy: state == BUSY,
            done: slot.done.load(Ordering::Relaxed),
        });
    }
    PoolSnapshot {
        size: s.size,
        queued: s.queued(),
        grown: s.grown.load(Ordering::Relaxed),
        retired: s.retired.load(Ordering::Relaxed),
        replaced: s.replaced.load(Ordering::Relaxed),
        workers,
        live: s.running.load(Ordering::Relaxed),
        processes: false,
        local: 0,
        requeued: 0,
        missed_wakes: 0,
        close_waits_expired: 0,
    }
}

/// Called when a wake found too few idle workers. At the end of a sizing window (at least the
/// launch interval long) that was not calm ([`WakeTally`]), starts one more worker, unless the
/// pool is at its maximum. A queue that backs up now and then (a worker still on its way back
/// to idle when the next request comes) does not grow the pool; one that stays backed up
/// grows it by one worker per interval.
fn maybe_grow(shared: &Arc<Shared>) {
    let s = &**shared;
    if s.size.is_fixed() || s.running.load(Ordering::Relaxed) >= s.size.max || s.queue.is_empty() {
        return;
    }
    let now = (s.born.elapsed().as_nanos() as u64).max(1);
    let start = s.window_start.load(Ordering::Relaxed);
    let interval = s.size.launch_interval.as_nanos() as u64;
    if now.saturating_sub(start) < interval {
        return;
    }
    // One submitter closes the window; the others go on.
    if s.window_start
        .compare_exchange(start, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    if s.tally.close() {
        return; // the window was calm: enough of its wakes found enough workers
    }
    match launch(shared) {
        Ok(true) => {
            s.grown.fetch_add(1, Ordering::Relaxed);
        }
        Ok(false) => {}
        // The pool runs at its present size; requests still complete.
        Err(e) => eprintln!("dbaio-workers: could not start another worker: {e}"),
    }
}

/// Starts a worker in the lowest free slot; false if the pool is at its maximum.
fn launch(shared: &Arc<Shared>) -> io::Result<bool> {
    let mut threads = shared.threads.lock();
    if shared.running.load(Ordering::SeqCst) >= shared.size.max {
        return Ok(false);
    }
    let Some(id) = shared
        .slots
        .iter()
        .position(|s| s.state.load(Ordering::SeqCst) == ABSENT)
    else {
        return Ok(false);
    };
    // The slot's previous thread has left (it marked the slot absent on its way out).
    if let Some(old) = threads[id].take() {
        let _ = old.join();
    }
    let slot = &shared.slots[id];
    slot.state.store(STARTING, Ordering::SeqCst);
    slot.done.store(0, Ordering::Relaxed);
    slot.tid.store(0, Ordering::Relaxed);
    shared.running.fetch_add(1, Ordering::SeqCst);
    match spawn_worker(shared, id as u32) {
        Ok(t) => {
            threads[id] = Some(t);
            Ok(true)
        }
        Err(e) => {
            shared.running.fetch_sub(1, Ordering::SeqCst);
            slot.state.store(ABSENT, Ordering::SeqCst);
            Err(e)
        }
    }
}

fn spawn_worker(shared: &Arc<Shared>, id: u32) -> io::Result<JoinHandle<()>> {
    let s = Arc::clone(shared);
    std::thread::Builder::new()
        .name(format!("{}-{id}", shared.name))
        .spawn(move || worker_main(&s, id))
}

/// How a popped request went.
enum Ran {
    Executed,
    /// The sink dropped it (someone else ran it).
    Skipped,
    /// The worker panicked; the request has been reported as panicked.
    Panicked,
}

fn run(shared: &Shared, id: u32, mut req: Request) -> Ran {
    let user_data = req.user_data;
    let done = catch_unwind(AssertUnwindSafe(|| {
        if !shared.sink.prepare(id, &mut req) {
            return false;
        }
        // SAFETY: `try_submit`'s contract keeps the request's memory valid until `complete`
        // below has run.
        let result = unsafe { perform(&req) };
        // Counted before the completion is posted: whoever it wakes sees the count. Only this
        // worker writes it, so a load and a store (no locked read-modify-write).
        let done = &shared.slots[id as usize].done;
        done.store(done.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        shared.sink.complete(id, req.user_data, result);
        true
    }));
    match done {
        Ok(true) => Ran::Executed,
        Ok(false) => {
            // A taken-back request's entry, dropped: no longer left out of `queued`.
            shared.taken_back.fetch_sub(1, Ordering::Relaxed);
            Ran::Skipped
        }
        Err(_) => {
            // The sink decides whether the request still needs failing (it may have completed).
            let _ = catch_unwind(AssertUnwindSafe(|| shared.sink.panicked(id, user_data)));
            Ran::Panicked
        }
    }
}

fn worker_main(shared: &Arc<Shared>, id: u32) {
    let slot = &shared.slots[id as usize];
    // SAFETY: gettid has no preconditions and cannot fail.
    slot.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    if shared.batch_scheduling {
        // A policy the kernel refuses (none should) leaves the worker as it was: it still runs.
        let _ = dbaio_sys::sched::run_as_batch();
    }
    let bit = 1u64 << id;
    let timeout = (!shared.size.is_fixed()).then_some(shared.size.idle_timeout);
    // Whom this worker is counted by until its next look at the queue: `on_the_way` (a
    // submitter woke it) or `returning` (it finished a request).
    let mut coming = Coming::No;
    loop {
        if let Some(req) = shared.queue.pop() {
            coming.arrived(shared);
            slot.state.store(BUSY, Ordering::Relaxed);
            pass_wake_on(shared);
            match run(shared, id, req) {
                Ran::Executed | Ran::Skipped => {}
                Ran::Panicked => return replace(shared, id),
            }
            // Counted only where the count can change a decision: with no worker idle no wake
            // is given whatever it says, and a pool that cannot grow tallies nothing. Not
            // counting only ever wakes more, never fewer, so no wake is lost by it; and a pool
            // kept busy (every worker running reads) pays no shared write per request for it.
            if shared.idle.load(Ordering::Relaxed) != 0 || shared.can_grow() {
                shared.returning.fetch_add(1, Ordering::SeqCst);
                coming = Coming::Returning;
            }
            continue;
        }
        slot.state.store(IDLE, Ordering::Relaxed);
        let seen = slot.word.load(Ordering::SeqCst);
        // Visible as idle before no longer counted as returning: a submitter that queued a
        // request sees one or the other, or this worker sees its request below.
        shared.idle.fetch_or(bit, Ordering::SeqCst);
        coming.arrived(shared);
        fence(Ordering::SeqCst);
        let stopping = shared.stop.load(Ordering::SeqCst);
        if !shared.queue.is_empty() || stopping {
            // Not going to sleep: take the bit back (if a submitter took it first, its
            // wake finds this worker awake; harmless).
            if shared.idle.fetch_and(!bit, Ordering::SeqCst) & bit == 0 {
                coming = Coming::Woken;
            }
            if stopping && shared.queue.is_empty() {
                coming.arrived(shared);
                slot.state.store(ABSENT, Ordering::SeqCst);
                return;
            }
            continue;
        }
        // A pool at its minimum cannot shrink: sleep without a timer (and its wakeup).
        let timeout = timeout.filter(|_| shared.running.load(Ordering::Relaxed) > shared.size.min);
        let slept_from = timeout.map(|_| Instant::now());
        futex::wait_private(&slot.word, seen, timeout);
        // Each idle spell ends here or above, once: woken if a submitter cleared the bit.
        if shared.idle.fetch_and(!bit, Ordering::SeqCst) & bit == 0 {
            coming = Coming::Woken;
            continue; // back at the queue, as the waker expects
        }
        if shared.stop.load(Ordering::SeqCst) {
            continue; // drain what is left, then leave
        }
        let idle_long = slept_from.is_some_and(|t| t.elapsed() >= shared.size.idle_timeout);
        if idle_long && retire(shared, id) {
            return;
        }
    }
}

/// Called by a worker that has just taken a request: more waiting than workers on their way
/// to it, it passes the wake on, to up to `WAKE_FANOUT` more idle workers (a submitter wakes
/// one). (The idle mask first: it rarely changes while the pool is busy, the queue's ends
/// change with every request.) A backlog with no worker idle does not grow the pool here:
/// tried when the queue's length still counted the entries of I/Os a waiter took back, it
/// gave a pool at depth 8 up to 10 workers (the wake goes by the queue's length still: the
/// count of taken-back entries may be off for a moment, and must not cost a wake).
fn pass_wake_on(shared: &Shared) {
    if shared.idle.load(Ordering::Relaxed) == 0 || shared.queue.is_empty() {
        return;
    }
    let left = shared.queue.len() as i64;
    let on_the_way = i64::from(shared.on_the_way.load(Ordering::SeqCst).max(0))
        + i64::from(shared.returning.load(Ordering::SeqCst).max(0));
    if left > on_the_way {
        wake_idle(
            shared,
            (left - on_the_way).min(i64::from(crate::WAKE_FANOUT)) as u32,
        );
    }
}

/// Which count has a worker as coming to the queue (to take a request without a wake).
enum Coming {
    No,
    /// Woken by a submitter: counted in `on_the_way`.
    Woken,
    /// Finished a request: counted in `returning`.
    Returning,
}

impl Coming {
    /// The worker has looked at the queue (and taken a request, or is visible as idle): it
    /// leaves the count it was in.
    fn arrived(&mut self, shared: &Shared) {
        match std::mem::replace(self, Coming::No) {
            Coming::No => {}
            Coming::Woken => {
                shared.on_the_way.fetch_sub(1, Ordering::SeqCst);
            }
            Coming::Returning => {
                shared.returning.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Leaves the pool after the idle timeout, unless that would take it below its minimum.
fn retire(shared: &Shared, id: u32) -> bool {
    let mut running = shared.running.load(Ordering::SeqCst);
    loop {
        if running <= shared.size.min {
            return false;
        }
        match shared.running.compare_exchange(
            running,
            running - 1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => break,
            Err(now) => running = now,
        }
    }
    shared.retired.fetch_add(1, Ordering::Relaxed);
    shared.slots[id as usize]
        .state
        .store(ABSENT, Ordering::SeqCst);
    true
}

/// A panicked worker's last act: start a thread to take its place (unless the pool stops).
fn replace(shared: &Arc<Shared>, id: u32) {
    shared.replaced.fetch_add(1, Ordering::Relaxed);
    if shared.stop.load(Ordering::SeqCst) {
        shared.slots[id as usize]
            .state
            .store(ABSENT, Ordering::SeqCst);
        return;
    }
    // The slot stays taken and `running` unchanged: the replacement is this worker again.
    shared.slots[id as usize]
        .state
        .store(STARTING, Ordering::SeqCst);
    match spawn_worker(shared, id) {
        Ok(t) => {
            // This thread's own handle sits in the slot; keep both so that drop joins both.
            let mut threads = shared.threads.lock();
            let old = threads[id as usize].replace(t);
            drop(threads);
            if let Some(old) = old {
                // This very thread: cannot join itself; detach it (it returns right after).
                drop(old);
            }
        }
        Err(e) => {
            // The pool runs one worker short; requests still complete (the others take them,
            // or the issuer runs what does not fit).
            shared.running.fetch_sub(1, Ordering::SeqCst);
            shared.slots[id as usize]
                .state
                .store(ABSENT, Ordering::SeqCst);
            eprintln!("dbaio-workers: could not replace worker {id}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Each request takes `delay` (slept in `prepare`), then fails fast (fadvise on fd -1).
    struct SlowSink {
        delay: Duration,
        done: AtomicUsize,
    }

    impl CompletionSink for SlowSink {
        fn prepare(&self, _worker: u32, _req: &mut Request) -> bool {
            std::thread::sleep(self.delay);
            true
        }
        fn complete(&self, _worker: u32, _user_data: u64, _result: i32) {
            self.done.fetch_add(1, Ordering::SeqCst);
        }
        fn panicked(&self, _worker: u32, _user_data: u64) {}
    }

    fn request(user_data: u64) -> Request {
        Request {
            op: dbaio_sys::Op::FadviseWillneed,
            fd: -1,
            file: u32::MAX,
            offset: 0,
            len: 0,
            iov: std::ptr::null(),
            iovcnt: 0,
            path: std::ptr::null(),
            user_data,
        }
    }

    fn pool(size: PoolSize, delay_ms: u64) -> (WorkerPool, Arc<SlowSink>) {
        let sink = Arc::new(SlowSink {
            delay: Duration::from_millis(delay_ms),
            done: AtomicUsize::new(0),
        });
        let p = WorkerPool::start(size, 1024, "test-worker", sink.clone(), false).unwrap();
        (p, sink)
    }

    /// Submits `n` requests one by one (a backlog when they are slow) and waits for them,
    /// returning the most workers seen running.
    fn run_backlog(p: &WorkerPool, sink: &SlowSink, n: usize) -> u32 {
        let before = sink.done.load(Ordering::SeqCst);
        let mut most = p.workers();
        for i in 0..n {
            // SAFETY: the request names no memory (fd -1, no iovecs, no path).
            unsafe { p.try_submit(request(i as u64)) }.unwrap();
            p.wake(1);
            most = most.max(p.workers());
        }
        while sink.done.load(Ordering::SeqCst) < before + n {
            most = most.max(p.workers());
            std::thread::sleep(Duration::from_millis(1));
        }
        most
    }

    fn sizing(min: u32, max: u32, idle_ms: u64, launch_ms: u64) -> PoolSize {
        PoolSize {
            min,
            max,
            idle_timeout: Duration::from_millis(idle_ms),
            launch_interval: Duration::from_millis(launch_ms),
        }
    }

    #[test]
    fn pool_grows_when_requests_wait_and_never_past_its_maximum() {
        let (p, sink) = pool(sizing(1, 4, 60_000, 0), 5);
        assert_eq!(p.workers(), 1);
        let most = run_backlog(&p, &sink, 40);
        assert!(most <= 4, "ran {most} workers with a maximum of 4");
        assert_eq!(
            p.workers(),
            4,
            "a backlog of 40 slow requests grows 1 worker to 4"
        );
        assert_eq!(p.snapshot().grown, 3);
        assert_eq!(p.snapshot().workers.len(), 4);
    }

    /// A submission of many requests wakes one worker (which wakes the others), but is met
    /// only if the pool had an idle worker for each: a batch larger than the idle workers is
    /// a short wake, which grows a self-sizing pool, as one request at a time beyond them is.
    /// (An hour-long launch interval keeps the window open, so its counts can be read;
    /// workers taking the batch only ever count short wakes.)
    #[test]
    fn a_batch_larger_than_the_idle_workers_is_a_short_wake() {
        // 100 ms a request: the batch cannot drain before its wake, however late that is.
        let (p, sink) = pool(sizing(2, 8, 60_000, 3_600_000), 100);
        let deadline = Instant::now() + Duration::from_secs(30);
        // Both workers asleep (idle bits set, and in the futex: a worker re-checks the queue
        // after setting its bit), nothing queued or on its way.
        let asleep = |tid: i32| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan"))
                .is_ok_and(|w| w.contains("futex"))
        };
        while p.shared.idle.load(Ordering::SeqCst).count_ones() < 2
            || !p
                .snapshot()
                .workers
                .iter()
                .all(|w| w.tid > 0 && asleep(w.tid))
        {
            assert!(Instant::now() < deadline, "the workers never went to sleep");
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 0..8 {
            // SAFETY: the request names no memory (fd -1, no iovecs, no path).
            unsafe { p.try_submit(request(i)) }.unwrap();
        }
        p.wake(8);
        let (met, short) = p.shared.tally.counts();
        assert_eq!(met, 0, "a batch of 8 met by 2 idle workers (short {short})");
        assert!(short >= 1);
        while sink.done.load(Ordering::SeqCst) < 8 {
            assert!(Instant::now() < deadline, "the batch never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn idle_workers_leave_after_the_timeout_but_never_below_the_minimum() {
        let (p, sink) = pool(sizing(2, 6, 50, 0), 5);
        run_backlog(&p, &sink, 40);
        let grown = p.snapshot().grown;
        assert!(grown > 0, "the backlog grew the pool");
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.workers() > 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(p.workers(), 2, "idle workers left, down to the minimum");
        std::thread::sleep(Duration::from_millis(200));
        let s = p.snapshot();
        assert_eq!(s.workers.len(), 2, "never below the minimum: {s:?}");
        assert_eq!(s.retired, grown);
        // The pool still works and grows again, reusing the freed slots.
        run_backlog(&p, &sink, 40);
        assert!(p.snapshot().workers.iter().all(|w| w.id < 6));
    }

    #[test]
    fn the_launch_interval_limits_how_fast_the_pool_grows() {
        let (p, sink) = pool(sizing(1, 8, 60_000, 3_600_000), 2);
        run_backlog(&p, &sink, 40);
        assert_eq!(
            p.snapshot().grown,
            0,
            "a backlog must last an hour-long window first"
        );
        assert_eq!(p.workers(), 1);
    }

    #[test]
    fn a_fixed_pool_keeps_its_size() {
        let (p, sink) = pool(PoolSize::fixed(3), 2);
        let most = run_backlog(&p, &sink, 30);
        assert_eq!(most, 3);
        let s = p.snapshot();
        assert_eq!((s.workers.len(), s.grown, s.retired), (3, 0, 0));
        let done: u64 = s.workers.iter().map(|w| w.done).sum();
        assert_eq!(
            done, 30,
            "every request counted once, by the worker that ran it"
        );
        // Every thread records its id when it first runs (on a loaded machine, perhaps only
        // after the others have run every request).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !p.snapshot().workers.iter().all(|w| w.tid > 0) {
            assert!(Instant::now() < deadline, "a worker thread never ran");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn bad_sizes_are_errors_not_panics() {
        let sink = Arc::new(SlowSink {
            delay: Duration::ZERO,
            done: AtomicUsize::new(0),
        });
        for size in [PoolSize::fixed(0), sizing(3, 2, 1, 1), PoolSize::fixed(65)] {
            let e = WorkerPool::start(size, 16, "t", sink.clone(), false)
                .err()
                .unwrap();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
        assert!(WorkerPool::start(PoolSize::fixed(1), 0, "t", sink, false).is_err());
    }

    /// The wake protocol loses no request: many submitters each with one request in flight
    /// (the depth-1 pattern in which a submission meets a worker still returning from the last
    /// one), fast requests, on a pool that grows and shrinks under them, on fixed pools (whose
    /// busy workers do not count themselves returning) and on a self-sizing pool at its
    /// maximum. A lost wake leaves a request queued with every worker asleep: the watchdog
    /// fails the test then instead of letting it hang.
    #[test]
    fn no_request_waits_with_every_worker_asleep() {
        for size in [
            sizing(1, 3, 1, 0),
            PoolSize::fixed(1),
            PoolSize::fixed(2),
            sizing(1, 2, 60_000, 0),
        ] {
            no_request_waits_on(size);
        }
    }

    fn no_request_waits_on(size: PoolSize) {
        const SUBMITTERS: u64 = 4;
        const EACH: u64 = 5_000;
        let (p, sink) = pool(size, 0);
        let p = Arc::new(p);
        let deadline = Instant::now() + Duration::from_secs(60);
        let stuck = move |sink: &SlowSink, p: &WorkerPool| {
            assert!(
                Instant::now() < deadline,
                "a request waited 60 s with the pool ({size:?}) asleep: {} done, {} queued",
                sink.done.load(Ordering::SeqCst),
                p.queued()
            );
        };
        let submitters: Vec<_> = (0..SUBMITTERS)
            .map(|t| {
                let p = Arc::clone(&p);
                let sink = Arc::clone(&sink);
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let target = sink.done.load(Ordering::SeqCst);
                        // SAFETY: the request names no memory (fd -1, no iovecs, no path).
                        unsafe { p.try_submit(request(t * 1_000_000 + i)) }.unwrap();
                        p.wake(1);
                        // Wait for some completion after ours was queued (ours or another's).
                        let mut spins = 0u32;
                        while sink.done.load(Ordering::SeqCst) == target {
                            std::hint::spin_loop();
                            spins = spins.wrapping_add(1);
                            if spins % 65_536 == 0 {
                                stuck(&sink, &p);
                            }
                        }
                    }
                })
            })
            .collect();
        for s in submitters {
            s.join().unwrap();
        }
        while sink.done.load(Ordering::SeqCst) < (SUBMITTERS * EACH) as usize {
            stuck(&sink, &p);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(p.queued(), 0);
    }

    /// Panics in a pool that grows and shrinks: each panicking worker is replaced in its slot,
    /// every other request completes, every panicked one is reported, the pool never passes
    /// its maximum and still shrinks back to its minimum.
    #[test]
    fn a_self_sizing_pool_replaces_panicked_workers_and_still_shrinks() {
        struct Panicky {
            done: AtomicUsize,
            panicked: AtomicUsize,
        }
        impl CompletionSink for Panicky {
            fn prepare(&self, _worker: u32, req: &mut Request) -> bool {
                std::thread::sleep(Duration::from_micros(200));
                assert!(req.user_data % 7 != 3, "an executor bug");
                true
            }
            fn complete(&self, _worker: u32, _user_data: u64, _result: i32) {
                self.done.fetch_add(1, Ordering::SeqCst);
            }
            fn panicked(&self, _worker: u32, _user_data: u64) {
                self.panicked.fetch_add(1, Ordering::SeqCst);
            }
        }
        let sink = Arc::new(Panicky {
            done: AtomicUsize::new(0),
            panicked: AtomicUsize::new(0),
        });
        let p = WorkerPool::start(
            sizing(1, 3, 20, 0),
            1024,
            "test-worker",
            sink.clone(),
            false,
        )
        .unwrap();
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let n = 700u64;
        let mut most = 0;
        for i in 0..n {
            // SAFETY: the request names no memory (fd -1, no iovecs, no path).
            unsafe { p.try_submit(request(i)) }.unwrap();
            p.wake(1);
            most = most.max(p.workers());
        }
        while sink.done.load(Ordering::SeqCst) + sink.panicked.load(Ordering::SeqCst) < n as usize {
            most = most.max(p.workers());
            std::thread::sleep(Duration::from_millis(1));
        }
        std::panic::set_hook(quiet);
        assert_eq!(sink.panicked.load(Ordering::SeqCst), 100);
        assert_eq!(sink.done.load(Ordering::SeqCst), 600);
        assert_eq!(p.replaced(), 100);
        assert!(
            most <= 3 && p.grown() >= 1,
            "most {most}, grown {}",
            p.grown()
        );
        let t = Instant::now();
        while p.workers() > 1 {
            assert!(t.elapsed() < Duration::from_secs(10), "{:?}", p.snapshot());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(p.snapshot().workers.len(), 1);
    }
}
