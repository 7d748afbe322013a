//! Settings: PostgreSQL's AIO parameter names, units, defaults and ranges, plus dbaio's own.
//!
//! Every setting is one entry of the table in `table.rs` ([`PARAMETERS`]): name, type and
//! range, default, unit, context and description. Parsing from `name = value` text (`#`
//! comments, single quotes, units `B kB MB GB TB` and `us ms s min h d`; `text.rs`),
//! [`Settings::set`], the defaults, validation, the `SHOW`-style listing and
//! `docs/settings.md` all come from it. Every error reads like PostgreSQL's, with its DETAIL
//! and HINT lines. See `docs/settings.md` and `docs/design.md`, "Settings".

mod table;
mod text;

pub use table::{Context, Kind, PARAMETERS, Parameter, reference_table};
pub use text::Unit;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use text::{parse_choice, strip_comment, unquote};

/// Which I/O method executes I/Os (`io_method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoMethodKind {
    /// Execute every I/O synchronously in the issuer (the oracle).
    Sync,
    /// Hand I/Os to `io_workers` worker threads.
    Worker,
    /// Submit I/Os to a per-issuer io_uring.
    IoUring,
    /// Execute I/Os on a simulated disk in memory, with seeded latencies, faults and crashes
    /// (`SimDisk`): for an engine's own tests.
    Sim,
}

impl IoMethodKind {
    /// Every method that does real I/O, in the order tables show them (not `Sim`).
    pub const ALL: [IoMethodKind; 3] = [Self::Sync, Self::Worker, Self::IoUring];

    /// Every method, `Sim` last, in the order of the setting's values.
    pub const EVERY: [IoMethodKind; 4] = [Self::Sync, Self::Worker, Self::IoUring, Self::Sim];

    /// The setting's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Worker => "worker",
            Self::IoUring => "io_uring",
            Self::Sim => "sim",
        }
    }
}

impl fmt::Display for IoMethodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IoMethodKind {
    type Err = SettingsError;
    fn from_str(s: &str) -> Result<Self, SettingsError> {
        let names = Self::EVERY.map(Self::name);
        parse_choice("io_method", s, &names).map(|k| Self::EVERY[k])
    }
}

/// What to do when `io_method = io_uring` is refused by the kernel (`io_uring_fallback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoUringFallback {
    /// Fail to start, naming the cause (the default).
    Error,
    /// Start with the worker method and log a warning.
    Worker,
    /// Start with the sync method and log a warning.
    Sync,
}

/// Whether the buffer pool's memory is faulted in on a background thread
/// (`buffer_pool_prefault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPrefault {
    /// With worker processes only (the default): their faults in the shared mapping cost
    /// most; elsewhere the thread's faults slow the reads it races.
    Auto,
    /// Always.
    On,
    /// Never: pages are faulted in by the reads that first land in them.
    Off,
}

/// How `io_method = sim` draws an I/O's latency between `sim_latency_min` and
/// `sim_latency_max` (`sim_latency_distribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimLatency {
    /// Evenly (the default).
    Uniform,
    /// Most I/Os near the minimum and a few near the maximum, as a device's: the minimum
    /// plus an exponential draw whose mean is a quarter of the span, cut at the maximum.
    Exponential,
}

/// What the worker method's workers are (`io_worker_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoWorkerKind {
    /// Threads of the embedding process (the default).
    Thread,
    /// Separate processes over shared memory: a crash in one cannot corrupt the embedder,
    /// and a killed one is replaced with its I/Os executed again.
    Process,
}

/// Whether the buffer pool's pages use huge pages (`huge_pages`, as PostgreSQL's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugePages {
    /// Use reserved huge pages (`vm.nr_hugepages`) if there are enough, else normal pages
    /// (the default).
    Try,
    /// Use reserved huge pages or fail to start.
    On,
    /// Normal pages.
    Off,
}

/// A settings error, shaped like a PostgreSQL `ereport`: message, optional DETAIL and HINT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    /// The primary message, e.g. `invalid value for parameter "io_method": "uring"`.
    pub message: String,
    /// Optional DETAIL line.
    pub detail: Option<String>,
    /// Optional HINT line.
    pub hint: Option<String>,
}

impl SettingsError {
    fn new(message: String) -> Self {
        SettingsError {
            message,
            detail: None,
            hint: None,
        }
    }
    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(d) = &self.detail {
            write!(f, "\nDETAIL:  {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "\nHINT:  {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SettingsError {}

/// All settings. [`Settings::default`] gives PostgreSQL 18's defaults for the settings
/// PostgreSQL has, except `io_workers` (0, a pool that sizes itself; PostgreSQL 18: a fixed 3)
/// and `track_io_timing` (on; PostgreSQL: off). The pool-sizing settings have PostgreSQL 19's
/// names and defaults of their own (`io_min_workers` 1, `io_max_workers` 16); the rest are
/// dbaio's own (`io_worker_kind`'s `thread` among them). docs/settings.md lists every default.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `io_method` (default `worker`).
    pub io_method: IoMethodKind,
    /// `io_workers`: a fixed number of worker threads for the worker method (1..32), or 0
    /// (the default) for a pool that sizes itself between `io_min_workers` and
    /// `io_max_workers`.
    pub io_workers: u32,
    /// `io_worker_kind`: `thread` (default) or `process`.
    pub io_worker_kind: IoWorkerKind,
    /// `io_worker_program`: the program worker processes execute (default empty: the running
    /// program, which becomes a worker before its `main` because it links dbaio). Set it when
    /// the running program cannot be executed again as a worker (an interpreter that loads
    /// dbaio as a plugin); the `dbaio` command serves.
    pub io_worker_program: Option<PathBuf>,
    /// `io_min_workers`: workers a self-sizing pool always runs (1..32, default 1).
    pub io_min_workers: u32,
    /// `io_max_workers`: the most workers a self-sizing pool runs (1..32, default 16). With
    /// `io_workers = 0`, an `io_min_workers` above it is refused ([`Settings::validate`]).
    pub io_max_workers: u32,
    /// `io_worker_idle_timeout` in milliseconds: a worker above the minimum that has had
    /// nothing to do for this long leaves (default 60s).
    pub io_worker_idle_timeout: u32,
    /// `io_worker_launch_interval` in milliseconds: the shortest time between two worker
    /// starts while requests wait for a worker (default 10ms).
    pub io_worker_launch_interval: u32,
    /// `io_max_concurrency`: handles per issuer; -1 derives it from `buffer_pool_size`
    /// and `max_issuers` like PostgreSQL (clamped to 1..64).
    pub io_max_concurrency: i32,
    /// `effective_io_concurrency` (0..1000, default 16): read-stream I/O depth.
    pub effective_io_concurrency: u32,
    /// `maintenance_io_concurrency` (0..1000, default 16).
    pub maintenance_io_concurrency: u32,
    /// `io_combine_limit` in blocks (default 128kB).
    pub io_combine_limit: u32,
    /// `io_max_combine_limit` in blocks (default 128kB): sizes the per-handle iovec arrays.
    pub io_max_combine_limit: u32,
    /// `block_size` in bytes (dbaio's; 512..32kB, a power of two, default 8kB).
    pub block_size: u32,
    /// `buffer_pool_size` in blocks (dbaio's `shared_buffers`; default 128MB).
    pub buffer_pool_size: u64,
    /// `direct_io`: open data files with O_DIRECT (default off).
    pub direct_io: bool,
    /// `buffer_pool_prefault`: whether a background thread faults the pool's memory in
    /// from first use (default `auto`: with worker processes only).
    pub buffer_pool_prefault: PoolPrefault,
    /// `huge_pages`: the pool's pages from reserved huge pages (`try`, `on`, `off`).
    pub huge_pages: HugePages,
    /// `track_io_timing`: time every I/O (default on) for the statistics' latencies and the
    /// aios view's ages. Off, as PostgreSQL's default, the I/O paths read only the coarse
    /// clock (jiffy resolution, a quarter of the cost): the statistics count I/Os and bytes
    /// but no time, and ages are approximate. Two fine clock reads per I/O are what
    /// an engine reading page-cache hits through slice I/O notices (docs/settings.md).
    pub track_io_timing: bool,
    /// `transparent_huge_pages`: when the pool is not on reserved huge pages, advise the
    /// kernel to back it with transparent ones (`MADV_HUGEPAGE`; default off). Each read then
    /// lands in one physically contiguous piece; faulting them in costs more than 4 KiB pages
    /// when memory is scarce or the host must back it, so it pays for a pool that many reads
    /// go through, not for one that is filled once (see docs/settings.md).
    pub transparent_huge_pages: bool,
    /// `io_uring_fallback`: `error` (default), `worker` or `sync`.
    pub io_uring_fallback: IoUringFallback,
    /// `io_uring_registered_files`: register files with each ring (default on).
    pub io_uring_registered_files: bool,
    /// `io_uring_registered_buffers`: register the buffer pool's memory with each ring, so
    /// its reads and writes are fixed ones (default off: docs/settings.md says why).
    pub io_uring_registered_buffers: bool,
    /// `io_uring_registered_io_bufs`: `IoBuf`s made after an io_uring subsystem with this on
    /// started come from the registered-buffer slab, whose chunks each ring registers
    /// (default on: docs/settings.md).
    pub io_uring_registered_io_bufs: bool,
    /// `io_uring_spin`: microseconds a thread about to sleep for io_uring completions polls
    /// the ring first (0..10000, default 50; adaptive, see docs/design.md "Methods").
    pub io_uring_spin: u32,
    /// `io_worker_queue_size`: entries in the worker queue (16..65536, default 256).
    pub io_worker_queue_size: u32,
    /// `io_worker_try_cached`: with the worker method, a buffered (not O_DIRECT) read is
    /// first tried in the issuer without blocking (`preadv2` with `RWF_NOWAIT`); only a read
    /// the page cache cannot serve whole goes to a worker (default on). A page-cache hit then
    /// costs one system call instead of a hand-off and two wakeups; a file whose reads keep
    /// missing is tried only now and then (docs/settings.md).
    pub io_worker_try_cached: bool,
    /// `io_worker_batch_scheduling`: the worker method's workers run under `SCHED_BATCH`, so
    /// that a woken worker does not preempt the thread that woke it (default on; off: the
    /// normal policy, docs/settings.md).
    pub io_worker_batch_scheduling: bool,
    /// `max_issuers`: how many issuers may be registered at once (1..4096, default 64).
    pub max_issuers: u32,
    /// `max_files`: files open in the subsystem at once (1..1048576, default 1024).
    pub max_files: u32,
    /// `introspection_socket`: path of the owner-only unix socket serving the aios view
    /// (empty: none).
    pub introspection_socket: Option<PathBuf>,
    /// `io_advice_budget` in blocks: how many blocks read streams may have advised
    /// (`posix_fadvise(WILLNEED)`) and not yet read, per device, all issuers together
    /// (-1: auto, 16 streams at the full advice distance: 16 × the larger of the two I/O
    /// concurrencies, 256 .. 16384; 0: no advice).
    pub io_advice_budget: i64,
    /// `sim_seed`: the seed of everything `io_method = sim` draws (latencies, faults, the
    /// simulated disk's crash choices when the subsystem makes the disk).
    pub sim_seed: u64,
    /// `sim_latency_min`, in microseconds of simulated time.
    pub sim_latency_min: u32,
    /// `sim_latency_max`, in microseconds of simulated time.
    pub sim_latency_max: u32,
    /// `sim_latency_distribution`: how each simulated latency is drawn between the two.
    pub sim_latency_distribution: SimLatency,
    /// `sim_fault_read_error`: the chance a simulated read fails with EIO.
    pub sim_fault_read_error: f64,
    /// `sim_fault_write_error`: the chance a simulated write fails with EIO.
    pub sim_fault_write_error: f64,
    /// `sim_fault_no_space`: the chance a simulated write or fallocate fails with ENOSPC.
    pub sim_fault_no_space: f64,
    /// `sim_fault_short`: the chance a simulated read or write transfers fewer bytes.
    pub sim_fault_short: f64,
    /// `sim_fault_latent`: the chance a simulated read finds a sector gone bad, which reads
    /// as EIO until it is written again.
    pub sim_fault_latent: f64,
    /// `sim_fault_bit_rot`: the chance a simulated read finds a bit of the media flipped.
    pub sim_fault_bit_rot: f64,
    /// `sim_fault_misdirect`: the chance a simulated write lands at a wrong offset, reported
    /// done.
    pub sim_fault_misdirect: f64,
    /// `sim_fault_slow`: the chance a simulated I/O takes a hundred times its latency.
    pub sim_fault_slow: f64,
}

impl Default for Settings {
    /// Every setting at its default from the table (PostgreSQL 18's where it has one, with the
    /// exceptions [`Settings`] names).
    fn default() -> Self {
        let mut s = Settings::blank();
        for p in PARAMETERS {
            s.set(p.name, p.default)
                .unwrap_or_else(|e| panic!("the default of {} is valid: {e}", p.name));
        }
        s
    }
}

/// The largest `io_max_combine_limit`, in blocks (PostgreSQL's `PG_IOV_MAX`).
pub const MAX_IO_COMBINE_LIMIT: u32 = 128;
/// The largest `io_max_concurrency` (handles per issuer); the settings table's range.
pub const MAX_IO_CONCURRENCY: i64 = 1024;

/// One setting as [`Settings::show_all`] lists it (PostgreSQL's `pg_settings`, in short).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShownSetting {
    /// Its name.
    pub name: &'static str,
    /// Its value, as `SHOW` prints it (`128kB`, `60s`, `on`).
    pub setting: String,
    /// The unit of plain numbers (empty for none).
    pub unit: &'static str,
    /// The default, as a settings file writes it.
    pub default: &'static str,
    /// The valid values, in words.
    pub values: String,
    /// When it takes effect.
    pub context: &'static str,
    /// What it does.
    pub description: &'static str,
}

impl SettingsError {
    /// `unrecognized configuration parameter "name"`.
    fn unrecognized(name: &str) -> SettingsError {
        SettingsError::new(format!(
            "unrecognized configuration parameter \"{}\"",
            name.trim().to_ascii_lowercase()
        ))
    }
}

impl Settings {
    /// A struct to apply the defaults over (any values; `block_size` as the default, since
    /// block-unit defaults are read in blocks of it).
    fn blank() -> Settings {
        Settings {
            io_method: IoMethodKind::Worker,
            io_workers: 0,
            io_worker_kind: IoWorkerKind::Thread,
            io_worker_program: None,
            io_min_workers: 1,
            io_max_workers: 1,
            io_worker_idle_timeout: 1,
            io_worker_launch_interval: 0,
            io_max_concurrency: -1,
            effective_io_concurrency: 0,
            maintenance_io_concurrency: 0,
            io_combine_limit: 1,
            io_max_combine_limit: 1,
            block_size: 8192,
            buffer_pool_size: 0,
            direct_io: false,
            buffer_pool_prefault: PoolPrefault::Off,
            huge_pages: HugePages::Try,
            track_io_timing: false,
            transparent_huge_pages: false,
            io_uring_fallback: IoUringFallback::Error,
            io_uring_registered_files: false,
            io_uring_registered_buffers: false,
            io_uring_registered_io_bufs: false,
            io_uring_spin: 0,
            io_worker_queue_size: 16,
            io_worker_try_cached: false,
            io_worker_batch_scheduling: false,
            max_issuers: 1,
            max_files: 1,
            introspection_socket: None,
            io_advice_budget: -1,
            sim_seed: 0,
            sim_latency_min: 0,
            sim_latency_max: 0,
            sim_latency_distribution: SimLatency::Uniform,
            sim_fault_read_error: 0.0,
            sim_fault_write_error: 0.0,
            sim_fault_no_space: 0.0,
            sim_fault_short: 0.0,
            sim_fault_latent: 0.0,
            sim_fault_bit_rot: 0.0,
            sim_fault_misdirect: 0.0,
            sim_fault_slow: 0.0,
        }
    }

    /// Sets one parameter from its text form, as in a settings file. A failed `set` changes
    /// nothing.
    ///
    /// ```
    /// let mut s = dbaio::Settings::default();
    /// s.set("io_method", "io_uring").unwrap();
    /// let e = s.set("io_method", "uring").unwrap_err();
    /// assert_eq!(e.to_string(), "invalid value for parameter \"io_method\": \"uring\"\n\
    ///                            HINT:  Available values: sync, worker, io_uring, sim.");
    /// ```
    ///
    /// As in a file, the value may be single-quoted (`'sync'`, `'/run/my db.sock'`), its
    /// quotes doubled inside; a value that does not both start and end with a quote is
    /// taken as it is.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SettingsError> {
        let quoted = value.len() >= 2 && value.starts_with('\'') && value.ends_with('\'');
        match quoted.then(|| unquote(value)).flatten() {
            Some(inner) => self.set_unquoted(name, &inner),
            None => self.set_unquoted(name, value),
        }
    }

    /// [`Settings::set`] of a value whose quotes, if it had any, are gone.
    fn set_unquoted(&mut self, name: &str, value: &str) -> Result<(), SettingsError> {
        let p = Parameter::find(name).ok_or_else(|| SettingsError::unrecognized(name))?;
        let v = p.parse(value, self.block_size)?;
        p.store(self, v);
        Ok(())
    }

    /// The value of setting `name` as PostgreSQL's `SHOW` prints it (`128kB`, `60s`, `on`),
    /// or the PostgreSQL-style error for a name that is none.
    ///
    /// ```
    /// let s = dbaio::Settings::default();
    /// assert_eq!(s.show("io_combine_limit").unwrap(), "128kB");
    /// assert_eq!(s.show("io_worker_idle_timeout").unwrap(), "1min");
    /// ```
    pub fn show(&self, name: &str) -> Result<String, SettingsError> {
        let p = Parameter::find(name).ok_or_else(|| SettingsError::unrecognized(name))?;
        Ok(p.shown(self))
    }

    /// Every setting with its value, unit, default, valid values, context and description,
    /// in the table's order (PostgreSQL's `SHOW ALL` / `pg_settings`).
    pub fn show_all(&self) -> Vec<ShownSetting> {
        PARAMETERS
            .iter()
            .map(|p| ShownSetting {
                name: p.name,
                setting: p.shown(self),
                unit: p.unit(),
                default: p.default,
                values: p.values(),
                context: p.context.name(),
                description: p.description,
            })
            .collect()
    }

    /// Writes every setting as settings-file text (`name = value` per line), which
    /// [`Settings::parse`] reads back to the same settings.
    pub fn to_text(&self) -> String {
        PARAMETERS
            .iter()
            .map(|p| format!("{} = {}\n", p.name, p.text(self)))
            .collect()
    }

    /// Parses settings text (`name = value` per line, `#` comments, optional single quotes)
    /// over the defaults. `origin` names the text in errors (a file name, or `None`).
    ///
    /// ```
    /// let s = dbaio::Settings::parse("io_method = 'sync'  # the oracle\nio_combine_limit = 256kB\n", None).unwrap();
    /// assert_eq!(s.io_method, dbaio::IoMethodKind::Sync);
    /// assert_eq!(s.io_combine_limit, 32);
    /// ```
    pub fn parse(text: &str, origin: Option<&str>) -> Result<Settings, SettingsError> {
        let mut s = Settings::default();
        s.apply(text, origin)?;
        Ok(s)
    }

    /// Like [`Settings::parse`], over the current values. All or nothing: an error in any
    /// line leaves every setting as it was.
    pub fn apply(&mut self, text: &str, origin: Option<&str>) -> Result<(), SettingsError> {
        let mut next = self.clone();
        next.apply_lines(text, origin)?;
        *self = next;
        Ok(())
    }

    /// [`Settings::apply`]'s lines: every line's syntax first, then `block_size`, then the
    /// others in order (so an error leaves the earlier ones done). `block_size` goes first
    /// because the block-unit settings convert a memory unit with it: `io_combine_limit =
    /// 128kB` is 16 blocks of 8kB but 32 of 4kB, whichever line comes first in the file.
    fn apply_lines(&mut self, text: &str, origin: Option<&str>) -> Result<(), SettingsError> {
        let mut lines = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            if let Some(line) = setting_line(raw, i + 1, origin)? {
                lines.push(line);
            }
        }
        let block_size_first =
            |(name, _): &(&str, String)| !name.eq_ignore_ascii_case("block_size");
        lines.sort_by_key(block_size_first); // stable: the rest keep their order
        for (name, value) in &lines {
            self.set_unquoted(name, value)?;
        }
        Ok(())
    }

    /// Reads and parses a settings file over the defaults.
    pub fn from_file(path: &std::path::Path) -> Result<Settings, SettingsError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            SettingsError::new(format!(
                "could not open configuration file \"{}\": {e}",
                path.display()
            ))
        })?;
        Settings::parse(&text, Some(&path.display().to_string()))
    }

    /// Checks every value as [`Settings::set`] would, and the combinations: for settings
    /// built in code, which never went through `set`. [`Aio::start`](crate::Aio::start) calls
    /// it, so a bad value is a PostgreSQL-style error there, never a panic later.
    ///
    /// ```
    /// let s = dbaio::Settings { io_workers: 33, ..Default::default() };
    /// assert_eq!(
    ///     s.validate().unwrap_err().to_string(),
    ///     "33 is outside the valid range for parameter \"io_workers\" (0 .. 32)"
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), SettingsError> {
        // Every value through its own parser, from the text form it would have in a file.
        let mut fresh = Settings::default();
        for p in PARAMETERS {
            fresh.set(p.name, &p.text(self))?;
        }
        if self.buffer_pool_size != 0 && self.buffer_pool_size < 2 * u64::from(self.max_issuers) {
            return Err(SettingsError::new(format!(
                "buffer_pool_size ({} blocks) is too small for max_issuers ({})",
                self.buffer_pool_size, self.max_issuers
            ))
            .detail(
                "Every issuer needs two buffers it can pin (the block its caller holds, and the \
                 next one a read stream reads), so at least twice max_issuers, as PostgreSQL \
                 asks of shared_buffers.",
            )
            .hint("Raise buffer_pool_size, or lower max_issuers."));
        }
        if self.io_workers == 0 && self.io_min_workers > self.io_max_workers {
            return Err(SettingsError::new(format!(
                "io_min_workers ({}) is greater than io_max_workers ({})",
                self.io_min_workers, self.io_max_workers
            ))
            .detail(
                "With io_workers = 0 the worker pool starts io_min_workers and never grows past \
                 io_max_workers.",
            )
            .hint(
                "Lower io_min_workers, raise io_max_workers, or set io_workers for a fixed pool.",
            ));
        }
        if self.sim_latency_min > self.sim_latency_max {
            return Err(SettingsError::new(format!(
                "sim_latency_min ({}us) is greater than sim_latency_max ({}us)",
                self.sim_latency_min, self.sim_latency_max
            ))
            .detail("Each simulated I/O draws its latency between the two.")
            .hint("Lower sim_latency_min, or raise sim_latency_max."));
        }
        Ok(())
    }

    /// `io_max_concurrency` with -1 resolved as PostgreSQL does: buffer-pool blocks divided by
    /// the number of issuers, clamped to 1..64.
    ///
    /// With `buffer_pool_size = 0` (the engine brings its own cache) there is no pool to
    /// share out, and -1 resolves to 64, the most the derivation ever gives: the two settings
    /// are independent then.
    pub fn effective_io_max_concurrency(&self) -> u32 {
        if self.io_max_concurrency > 0 {
            return self.io_max_concurrency as u32;
        }
        if self.buffer_pool_size == 0 {
            return 64;
        }
        (self.buffer_pool_size / u64::from(self.max_issuers)).clamp(1, 64) as u32
    }

    /// Blocks the buffer pool really gets: `buffer_pool_size`, or for 0 (an engine with its
    /// own cache) a token pool of two blocks per issuer slot, so that `read_block` and read
    /// streams still work, a block at a time, on every issuer at once (the block the caller
    /// holds, and the next one a stream reads).
    pub fn pool_blocks(&self) -> u64 {
        if self.buffer_pool_size == 0 {
            2 * u64::from(self.max_issuers)
        } else {
            self.buffer_pool_size
        }
    }

    /// The advice budget per device in blocks, `io_advice_budget` with -1 resolved.
    pub fn advice_budget_blocks(&self) -> u32 {
        match self.io_advice_budget {
            -1 => (16
                * self
                    .effective_io_concurrency
                    .max(self.maintenance_io_concurrency))
            .clamp(256, 16384),
            v => v.clamp(0, 1 << 20) as u32,
        }
    }

    /// Whether the pool's memory is faulted in on a background thread, `auto` resolved.
    pub fn prefaults_buffer_pool(&self) -> bool {
        match self.buffer_pool_prefault {
            PoolPrefault::Auto => self.worker_processes(),
            PoolPrefault::On => true,
            PoolPrefault::Off => false,
        }
    }

    /// True when I/O goes to worker processes (`io_method = worker`, `io_worker_kind =
    /// process`): buffers and pages must then live in the shared arena.
    pub fn worker_processes(&self) -> bool {
        self.io_method == IoMethodKind::Worker && self.io_worker_kind == IoWorkerKind::Process
    }

    /// `min(io_combine_limit, io_max_combine_limit)`, as PostgreSQL applies it.
    pub fn effective_io_combine_limit(&self) -> u32 {
        self.io_combine_limit.min(self.io_max_combine_limit)
    }
}

/// One line of settings text as (name, unquoted value); `None` for a blank or comment line;
/// a PostgreSQL-style syntax error naming the line (`number`, from 1) and `origin`.
fn setting_line<'a>(
    raw: &'a str,
    number: usize,
    origin: Option<&str>,
) -> Result<Option<(&'a str, String)>, SettingsError> {
    let line = strip_comment(raw);
    if line.trim().is_empty() {
        return Ok(None);
    }
    let syntax = |near: &str| {
        let place = match origin {
            Some(f) => format!("in file \"{f}\" line {number}"),
            None => format!("in line {number}"),
        };
        SettingsError::new(format!("syntax error {place}, near token \"{near}\""))
    };
    let (name, value) = match line.split_once('=') {
        Some((n, v)) => (n.trim(), v.trim()),
        None => {
            let mut parts = line.split_whitespace();
            let n = parts.next().unwrap_or("");
            (n, line.trim()[n.len()..].trim())
        }
    };
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !name_ok || value.is_empty() {
        return Err(syntax(name));
    }
    let value = unquote(value).ok_or_else(|| syntax(value))?;
    Ok(Some((name, value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_style_errors() {
        let mut s = Settings::default();
        let e = s.set("io_workers", "33").unwrap_err();
        assert_eq!(
            e.message,
            "33 is outside the valid range for parameter \"io_workers\" (0 .. 32)"
        );
        let e = s.set("io_max_concurrency", "0").unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("Only -1 or values bigger than 0 are valid.")
        );
        let e = s.set("io_combine_limit", "12xB").unwrap_err();
        assert!(e.hint.unwrap().starts_with("Valid units"));
        let e = s.set("nope", "1").unwrap_err();
        assert_eq!(e.message, "unrecognized configuration parameter \"nope\"");
        let mut on = Settings::default();
        on.set("huge_pages", "yes").unwrap();
        assert_eq!(on.huge_pages, HugePages::On);
        on.set("transparent_huge_pages", "on").unwrap();
        assert!(on.transparent_huge_pages);
        let e = s.set("transparent_huge_pages", "2").unwrap_err();
        assert_eq!(
            e.message,
            "parameter \"transparent_huge_pages\" requires a Boolean value"
        );
        let e = s.set("huge_pages", "maybe").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value for parameter \"huge_pages\": \"maybe\"\nHINT:  Available values: try, on, off."
        );
        let e = s.set("direct_io", "maybe").unwrap_err();
        assert_eq!(
            e.message,
            "parameter \"direct_io\" requires a Boolean value"
        );
        assert_eq!(s, Settings::default(), "a failed set changes nothing");
    }

    #[test]
    fn an_engine_with_its_own_cache_sets_the_pool_to_zero() {
        let mut s = Settings::default();
        s.set("buffer_pool_size", "0").unwrap();
        assert_eq!(
            s.effective_io_max_concurrency(),
            64,
            "no longer derived from the pool"
        );
        assert_eq!(
            s.pool_blocks(),
            2 * u64::from(s.max_issuers),
            "a token pool"
        );
        s.validate().unwrap();
        let e = s.set("buffer_pool_size", "8").unwrap_err();
        assert_eq!(
            e.message,
            "8 blocks is outside the valid range for parameter \"buffer_pool_size\" (0, or 16 .. 1073741824)"
        );
        s.set("io_max_concurrency", "200").unwrap();
        assert_eq!(s.effective_io_max_concurrency(), 200);
    }

    #[test]
    fn huge_values_are_out_of_range_not_wrapped() {
        let mut s = Settings::default();
        let e = s
            .set("buffer_pool_size", "9223372036854775807B")
            .unwrap_err();
        assert_eq!(
            e.message,
            "1125899906842623 blocks is outside the valid range for parameter \"buffer_pool_size\" (0, or 16 .. 1073741824)"
        );
        let e = s
            .set("buffer_pool_size", "-9223372036854775808B")
            .unwrap_err();
        assert!(
            e.message.starts_with("-1125899906842623 blocks is outside"),
            "{}",
            e.message
        );
    }

    #[test]
    fn units_and_blocks() {
        let mut s = Settings::default();
        s.set("io_combine_limit", "1MB").unwrap();
        assert_eq!(s.io_combine_limit, 128);
        s.set("io_combine_limit", "4").unwrap();
        assert_eq!(s.io_combine_limit, 4);
        let e = s.set("io_combine_limit", "2MB").unwrap_err();
        assert_eq!(
            e.message,
            "256 blocks is outside the valid range for parameter \"io_combine_limit\" (1 .. 128)"
        );
        s.set("buffer_pool_size", "1GB").unwrap();
        assert_eq!(s.buffer_pool_size, 131072);
    }

    #[test]
    fn file_syntax() {
        let e = Settings::parse("io_method = 'sync\n", Some("x.conf")).unwrap_err();
        assert_eq!(
            e.message,
            "syntax error in file \"x.conf\" line 1, near token \"'sync\""
        );
        let s = Settings::parse(
            "# c\n\n io_workers 8 \nintrospection_socket = '/tmp/a b'\n",
            None,
        )
        .unwrap();
        assert_eq!(s.io_workers, 8);
        assert_eq!(s.introspection_socket, Some(PathBuf::from("/tmp/a b")));
        let round = Settings::parse(&s.to_text(), None).unwrap();
        assert_eq!(round, s);
    }

    #[test]
    fn auto_concurrency() {
        let s = Settings::default();
        assert_eq!(s.effective_io_max_concurrency(), 64);
        let mut s = Settings::default();
        s.set("max_issuers", "4096").unwrap();
        assert_eq!(s.effective_io_max_concurrency(), 4);
    }

    #[test]
    fn a_pool_minimum_above_its_maximum_is_an_error_unless_the_size_is_fixed() {
        let mut s = Settings::default();
        s.set("io_min_workers", "20").unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("io_min_workers (20) is greater than io_max_workers (16)"),
            "{e}"
        );
        assert!(e.contains("HINT:  Lower io_min_workers"), "{e}");
        s.set("io_workers", "4").unwrap();
        s.validate().unwrap();
        s.set("io_workers", "0").unwrap();
        s.set("io_max_workers", "20").unwrap();
        s.validate().unwrap();
    }

    #[test]
    fn worker_pool_settings_parse_with_time_units_and_combine() {
        let mut s = Settings::default();
        // Default: sized by load, PostgreSQL 19's names.
        assert_eq!(
            (s.io_workers, s.io_min_workers, s.io_max_workers),
            (0, 1, 16)
        );
        assert_eq!(s.io_worker_idle_timeout, 60_000);
        assert_eq!(s.io_worker_launch_interval, 10);
        s.set("io_worker_idle_timeout", "5min").unwrap();
        assert_eq!(s.io_worker_idle_timeout, 300_000);
        s.set("io_worker_idle_timeout", "1500").unwrap();
        assert_eq!(s.io_worker_idle_timeout, 1500);
        s.set("io_worker_launch_interval", "2s").unwrap();
        assert_eq!(s.io_worker_launch_interval, 2000);
        s.set("io_worker_launch_interval", "1499us").unwrap();
        assert_eq!(s.io_worker_launch_interval, 1, "rounded to the nearest ms");
        let e = s.set("io_worker_idle_timeout", "0").unwrap_err();
        assert_eq!(
            e.message,
            "0 ms is outside the valid range for parameter \"io_worker_idle_timeout\" (1 ms .. 2147483647 ms)"
        );
        let e = s
            .set("io_worker_launch_interval", "3 fortnights")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value for parameter \"io_worker_launch_interval\": \"3 fortnights\"\n\
             HINT:  Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\"."
        );
        let e = s.set("io_max_workers", "33").unwrap_err();
        assert_eq!(
            e.message,
            "33 is outside the valid range for parameter \"io_max_workers\" (1 .. 32)"
        );
        s.set("io_min_workers", "8").unwrap();
        s.set("io_max_workers", "4").unwrap();
        s.set("io_workers", "3").unwrap();
        // Written out and read back.
        let back = Settings::parse(&s.to_text(), None).unwrap();
        assert_eq!(back, s);
    }

    /// docs/settings.md holds the table [`reference_table`] makes from [`PARAMETERS`], so the
    /// documented names, defaults, ranges and units are the code's. Guards against a
    /// setting added, renamed or changed in one place and not the other. On a mismatch the
    /// message carries the table to paste.
    #[test]
    fn the_docs_hold_the_settings_table() {
        let doc = include_str!("../../../docs/settings.md");
        let table = reference_table();
        assert!(
            doc.contains(&table),
            "docs/settings.md does not hold the settings table; paste this:\n{table}"
        );
    }

    /// Every default, written out and read back, is itself; `show_all` lists every setting
    /// once, in the table's order, as `SHOW` prints it.
    #[test]
    fn defaults_come_from_the_table_and_round_trip() {
        let s = Settings::default();
        for p in PARAMETERS {
            let mut t = Settings::default();
            t.set(p.name, p.default).unwrap();
            assert_eq!(t, s, "{}'s default", p.name);
        }
        assert_eq!(Settings::parse(&s.to_text(), None).unwrap(), s);
        let all = s.show_all();
        assert_eq!(all.len(), PARAMETERS.len());
        let shown: Vec<_> = all.iter().map(|r| (r.name, r.setting.as_str())).collect();
        assert!(shown.contains(&("io_combine_limit", "128kB")), "{shown:?}");
        assert!(shown.contains(&("buffer_pool_size", "128MB")), "{shown:?}");
        assert!(
            shown.contains(&("io_worker_launch_interval", "10ms")),
            "{shown:?}"
        );
        assert!(shown.contains(&("io_method", "worker")), "{shown:?}");
        assert!(shown.contains(&("introspection_socket", "")), "{shown:?}");
        assert_eq!(
            s.show("no_such").unwrap_err().message,
            "unrecognized configuration parameter \"no_such\""
        );
    }

    // The five below were found by a caller-side attack on the documentation (2026-12-07).

    #[test]
    fn a_failed_apply_changes_nothing() {
        let mut s = Settings::default();
        let e = s
            .apply("io_method = sync\nio_workers = 99\n", None)
            .unwrap_err();
        assert!(e.message.contains("io_workers"), "{e}");
        assert_eq!(
            s,
            Settings::default(),
            "the line before the bad one was kept"
        );
        let e = s
            .apply("io_method = sync\nio_workers = 'x\n", None)
            .unwrap_err();
        assert!(e.message.starts_with("syntax error in line 2"), "{e}");
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn a_line_break_in_a_path_is_an_error_not_a_panic() {
        let s = Settings {
            introspection_socket: Some(PathBuf::from("/tmp/x/a\nb.sock")),
            ..Default::default()
        };
        let e = s.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value for parameter \"introspection_socket\": \"/tmp/x/a\\nb.sock\"\n\
             DETAIL:  A value cannot hold a line break or a NUL byte."
        );
        let mut s = Settings::default();
        assert!(s.set("io_worker_program", "/bin/a\0b").is_err());
        for (name, value) in [
            ("io_method", "sync\n"),
            ("io_workers", "3\r"),
            ("io_method", "'sync\n'"),
        ] {
            let e = s.set(name, value).unwrap_err();
            assert!(e.to_string().contains("cannot hold a line break"), "{e}");
        }
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn set_takes_a_quoted_value_as_a_file_does() {
        let mut s = Settings::default();
        s.set("io_method", "'sync'").unwrap();
        assert_eq!(s.io_method, IoMethodKind::Sync);
        s.set("introspection_socket", "'/run/o''brien.sock'")
            .unwrap();
        assert_eq!(
            s.introspection_socket,
            Some(PathBuf::from("/run/o'brien.sock"))
        );
        // Not quoted at both ends: taken as it is.
        s.set("introspection_socket", "/run/o'brien.sock").unwrap();
        assert_eq!(
            s.introspection_socket,
            Some(PathBuf::from("/run/o'brien.sock"))
        );
        let round = Settings::parse(&s.to_text(), None).unwrap();
        assert_eq!(round, s);
        s.validate().unwrap();
    }

    #[test]
    fn a_negative_value_with_a_unit_is_refused() {
        let mut s = Settings::default();
        for v in ["-8kB", "-16kB", "-1MB"] {
            let e = s.set("io_advice_budget", v).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid value for parameter \"io_advice_budget\": \"{v}\"\n\
                     HINT:  A negative value is written without a unit."
                )
            );
        }
        s.set("io_advice_budget", "-1").unwrap();
        assert_eq!(s.io_advice_budget, -1);
        s.set("io_advice_budget", "0kB").unwrap();
        assert_eq!(s.io_advice_budget, 0);
    }

    #[test]
    fn block_size_applies_first_in_a_file() {
        let a = Settings::parse("block_size = 4kB\nio_combine_limit = 128kB\n", None).unwrap();
        let b = Settings::parse("io_combine_limit = 128kB\nblock_size = 4kB\n", None).unwrap();
        assert_eq!(a.io_combine_limit, 32);
        assert_eq!(a, b);
        assert_eq!(b.show("io_combine_limit").unwrap(), "128kB");
    }
}
