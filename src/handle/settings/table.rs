//! The settings table: every setting once — name, type and range, default, unit, context,
//! description — and how it reads from and writes to [`Settings`]. Parsing
//! ([`Settings::set`]), validation ([`Settings::validate`]), the defaults
//! ([`Settings::default`]), the text form ([`Settings::to_text`]), the `SHOW`-style listing
//! ([`Settings::show_all`]) and the table in `docs/settings.md` ([`reference_table`], checked
//! by a test) all come from it.

use super::text::{
    Unit, invalid, parse_bool, parse_choice, parse_fraction, parse_int, pretty, quote,
};
use super::{
    HugePages, IoMethodKind, IoUringFallback, IoWorkerKind, MAX_IO_CONCURRENCY, PoolPrefault,
    Settings, SettingsError, SimLatency,
};
use std::path::PathBuf;

/// What values a setting takes.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// `on`/`off` and PostgreSQL's other Boolean spellings.
    Bool,
    /// An integer from `min` to `max` in `unit`.
    Int {
        /// The smallest value.
        min: i64,
        /// The largest value.
        max: i64,
        /// The unit of plain numbers.
        unit: Unit,
    },
    /// One of these words (any case); `bools`: Boolean spellings mean `on`/`off` too.
    Choice {
        /// The words, in the order of the setting's enum.
        values: &'static [&'static str],
        /// Boolean spellings mean `on`/`off` (as PostgreSQL's `huge_pages`).
        bools: bool,
    },
    /// Free text: a path, empty for none.
    Text,
    /// A chance, from 0 to 1.
    Fraction,
}

/// When a setting takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Read once, when the subsystem starts (PostgreSQL's `postmaster` context): a changed
    /// value needs a new `Aio`.
    Start,
}

impl Context {
    /// Its name in listings.
    pub fn name(self) -> &'static str {
        match self {
            Context::Start => "start",
        }
    }
}

/// A parsed value, before it is stored.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Bool(bool),
    Int(i64),
    Choice(usize),
    Text(String),
    Fraction(f64),
}

impl Value {
    fn bool(&self) -> bool {
        matches!(self, Value::Bool(true))
    }
    fn int(&self) -> i64 {
        match self {
            Value::Int(n) => *n,
            _ => unreachable!("the table gives an integer setting an integer"),
        }
    }
    fn choice(&self) -> usize {
        match self {
            Value::Choice(k) => *k,
            _ => unreachable!("the table gives a choice setting a choice"),
        }
    }
    fn fraction(&self) -> f64 {
        match self {
            Value::Fraction(p) => *p,
            _ => unreachable!("the table gives a fraction setting a fraction"),
        }
    }
    fn path(&self) -> Option<PathBuf> {
        match self {
            Value::Text(t) if !t.trim().is_empty() => Some(PathBuf::from(t.trim())),
            _ => None,
        }
    }
}

/// A rule beyond an integer setting's range: the parsed value and the text it came from.
type Check = fn(i64, &str) -> Result<(), SettingsError>;

/// One setting.
pub struct Parameter {
    /// Its name, as in a settings file.
    pub name: &'static str,
    /// What values it takes.
    pub kind: Kind,
    /// Its default, as written in a settings file.
    pub default: &'static str,
    /// When it takes effect.
    pub context: Context,
    /// What it does.
    pub description: &'static str,
    /// The valid values in words, where the type's range does not say it all.
    pub range: Option<&'static str>,
    /// An out-of-range error names the range in those words too (PostgreSQL has no such
    /// setting to copy: `buffer_pool_size`'s hole below 16 blocks).
    range_in_errors: bool,
    /// A rule beyond the type's range, on the parsed integer.
    check: Option<Check>,
    apply: fn(&mut Settings, Value),
    show: fn(&Settings) -> Value,
}

impl Parameter {
    /// The setting named `name` (any case, spaces around ignored).
    pub fn find(name: &str) -> Option<&'static Parameter> {
        let name = name.trim();
        PARAMETERS
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Parses `value` for this setting (`block_size`: the size of a block in bytes, for
    /// block-unit values).
    pub(crate) fn parse(&self, value: &str, block_size: u32) -> Result<Value, SettingsError> {
        // A settings file holds one value a line, and a path cannot hold a NUL: no value of
        // any kind may (`sync\n` was taken as `sync` by `set`, the trailing break trimmed).
        if value.contains(['\n', '\r', '\0']) {
            return Err(invalid(self.name, &value.escape_debug().to_string())
                .detail("A value cannot hold a line break or a NUL byte."));
        }
        let v = match self.kind {
            Kind::Bool => Value::Bool(parse_bool(self.name, value)?),
            Kind::Int { min, max, unit } => {
                let n = parse_int(self.name, value, unit, block_size, (min, max))
                    .map_err(|e| self.in_words(e, min, max))?;
                if let Some(check) = self.check {
                    check(n, value)?;
                }
                Value::Int(n)
            }
            Kind::Choice { values, bools } => {
                let word = match (bools, parse_bool(self.name, value)) {
                    (true, Ok(true)) => "on",
                    (true, Ok(false)) => "off",
                    _ => value,
                };
                Value::Choice(parse_choice(self.name, word, values)?)
            }
            Kind::Text => Value::Text(value.to_string()),
            Kind::Fraction => Value::Fraction(parse_fraction(self.name, value)?),
        };
        Ok(v)
    }

    /// An out-of-range message with the range in this setting's own words.
    fn in_words(&self, mut e: SettingsError, min: i64, max: i64) -> SettingsError {
        if let (Some(words), true) = (self.range, self.range_in_errors) {
            e.message = e
                .message
                .replace(&format!("({min} .. {max})"), &format!("({words})"));
        }
        e
    }

    /// Stores `value` (parsed by [`Parameter::parse`]) in `s`.
    pub(crate) fn store(&self, s: &mut Settings, value: Value) {
        (self.apply)(s, value)
    }

    /// The value in `s`, as a settings file writes it (plain numbers in the base unit).
    pub fn text(&self, s: &Settings) -> String {
        match ((self.show)(s), self.kind) {
            (Value::Bool(b), _) => if b { "on" } else { "off" }.to_string(),
            (
                Value::Int(n),
                Kind::Int {
                    unit: Unit::Millis, ..
                },
            ) => format!("{n}ms"),
            (Value::Int(n), _) => n.to_string(),
            (Value::Choice(k), Kind::Choice { values, .. }) => values[k].to_string(),
            (Value::Choice(k), _) => k.to_string(),
            (Value::Text(t), _) => quote(&t),
            (Value::Fraction(p), _) => p.to_string(),
        }
    }

    /// The value in `s` as PostgreSQL's `SHOW` prints it (`128kB`, `60s`, `on`, a path).
    pub fn shown(&self, s: &Settings) -> String {
        match ((self.show)(s), self.kind) {
            (Value::Int(n), Kind::Int { unit, .. }) => pretty(n, unit, s.block_size),
            (Value::Text(t), _) => t,
            _ => self.text(s),
        }
    }

    /// The valid values in words: the range, the words of a choice, or what text is.
    pub fn values(&self) -> String {
        match (self.range, self.kind) {
            (Some(words), _) => words.to_string(),
            (None, Kind::Bool) => "Boolean".to_string(),
            (None, Kind::Int { min, max, .. }) => format!("{min} .. {max}"),
            (None, Kind::Choice { values, .. }) => values
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", "),
            (None, Kind::Text) => "a path".to_string(),
            (None, Kind::Fraction) => "0 .. 1".to_string(),
        }
    }

    /// The unit of plain numbers, in words (empty for none).
    pub fn unit(&self) -> &'static str {
        match self.kind {
            Kind::Int { unit, .. } => unit.word(),
            _ => "",
        }
    }
}

/// `io_max_concurrency`: -1 or a positive count.
fn not_zero(n: i64, _: &str) -> Result<(), SettingsError> {
    if n != 0 {
        return Ok(());
    }
    Err(SettingsError::new(format!(
        "invalid value for parameter \"io_max_concurrency\": {n}"
    ))
    .detail("Only -1 or values bigger than 0 are valid."))
}

/// `block_size`: a power of two.
fn power_of_two(n: i64, value: &str) -> Result<(), SettingsError> {
    if (n as u64).is_power_of_two() {
        return Ok(());
    }
    Err(invalid("block_size", value).detail("The block size must be a power of two."))
}

/// `buffer_pool_size`: 0 (the engine's own cache) or at least 16 blocks.
fn no_tiny_pool(n: i64, _: &str) -> Result<(), SettingsError> {
    if !(1..16).contains(&n) {
        return Ok(());
    }
    Err(SettingsError::new(format!(
        "{n} blocks is outside the valid range for parameter \"buffer_pool_size\" (0, or 16 .. {})",
        1u64 << 30
    ))
    .detail("0 means the engine brings its own cache."))
}

/// `a == b`, in a constant.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn int(min: i64, max: i64, unit: Unit) -> Kind {
    Kind::Int { min, max, unit }
}

const fn choice(values: &'static [&'static str]) -> Kind {
    Kind::Choice {
        values,
        bools: false,
    }
}

/// An integer setting's entry, with the common parts filled in.
macro_rules! int_param {
    ($name:literal, $min:expr, $max:expr, $unit:ident, $default:literal, $field:ident as $t:ty,
     $desc:literal $(, range: $range:literal)? $(, check: $check:expr)?) => {
        Parameter {
            name: $name,
            kind: int($min, $max, Unit::$unit),
            default: $default,
            context: Context::Start,
            description: $desc,
            range: { #[allow(unused_mut, unused_assignments)] let mut r = None; $(r = Some($range);)? r },
            range_in_errors: same($name, "buffer_pool_size"),
            check: { #[allow(unused_mut, unused_assignments)] let mut c: Option<Check> = None; $(c = Some($check);)? c },
            apply: |s, v| s.$field = v.int() as $t,
            show: |s| Value::Int(s.$field as i64),
        }
    };
}

/// A Boolean setting's entry.
macro_rules! bool_param {
    ($name:literal, $default:literal, $field:ident, $desc:literal) => {
        Parameter {
            name: $name,
            kind: Kind::Bool,
            default: $default,
            context: Context::Start,
            description: $desc,
            range: None,
            range_in_errors: false,
            check: None,
            apply: |s, v| s.$field = v.bool(),
            show: |s| Value::Bool(s.$field),
        }
    };
}

/// A chance setting's entry (0 .. 1, default 0: off).
macro_rules! fraction_param {
    ($name:literal, $field:ident, $desc:literal) => {
        Parameter {
            name: $name,
            kind: Kind::Fraction,
            default: "0",
            context: Context::Start,
            description: $desc,
            range: None,
            range_in_errors: false,
            check: None,
            apply: |s, v| s.$field = v.fraction(),
            show: |s| Value::Fraction(s.$field),
        }
    };
}

/// A path setting's entry (empty: none).
macro_rules! path_param {
    ($name:literal, $field:ident, $desc:literal) => {
        Parameter {
            name: $name,
            kind: Kind::Text,
            default: "",
            context: Context::Start,
            description: $desc,
            range: None,
            range_in_errors: false,
            check: None,
            apply: |s, v| s.$field = v.path(),
            show: |s| {
                Value::Text(
                    s.$field
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                )
            },
        }
    };
}

/// Every setting, in the order `docs/settings.md` lists them.
pub const PARAMETERS: &[Parameter] = &[
    Parameter {
        name: "io_method",
        kind: choice(&["sync", "worker", "io_uring", "sim"]),
        default: "worker",
        context: Context::Start,
        description: "how I/Os are executed: in the issuer (`sync`, the oracle), by a pool of workers (`worker`), through a ring per issuer (`io_uring`; these three are PostgreSQL 18's), or on a simulated disk in memory (`sim`, for tests)",
        range: None,
        range_in_errors: false,
        check: None,
        apply: |s, v| s.io_method = IoMethodKind::EVERY[v.choice()],
        show: |s| Value::Choice(s.io_method as usize),
    },
    int_param!(
        "io_workers",
        0,
        32,
        None,
        "0",
        io_workers as u32,
        "worker method: 1 .. 32 gives a fixed pool of that many workers; 0 a pool that sizes itself between `io_min_workers` and `io_max_workers`"
    ),
    Parameter {
        name: "io_worker_kind",
        kind: choice(&["thread", "process"]),
        default: "thread",
        context: Context::Start,
        description: "what the worker method's workers are: threads of the embedder, or separate processes over shared memory (crash-isolated, replaced when killed)",
        range: None,
        range_in_errors: false,
        check: None,
        apply: |s, v| s.io_worker_kind = [IoWorkerKind::Thread, IoWorkerKind::Process][v.choice()],
        show: |s| Value::Choice(s.io_worker_kind as usize),
    },
    path_param!(
        "io_worker_program",
        io_worker_program,
        "the program worker processes execute; empty: the running program, which becomes a worker before its `main` because it links dbaio"
    ),
    int_param!(
        "io_min_workers",
        1,
        32,
        None,
        "1",
        io_min_workers as u32,
        "self-sizing pool: workers started at once and never retired (PostgreSQL 19)"
    ),
    int_param!(
        "io_max_workers",
        1,
        32,
        None,
        "16",
        io_max_workers as u32,
        "self-sizing pool: the most it grows to (PostgreSQL 19)"
    ),
    int_param!(
        "io_worker_idle_timeout",
        1,
        i32::MAX as i64,
        Millis,
        "60s",
        io_worker_idle_timeout as u32,
        "self-sizing pool: a worker idle this long leaves, unless that takes the pool below `io_min_workers` (PostgreSQL 19)"
    ),
    int_param!(
        "io_worker_launch_interval",
        0,
        i32::MAX as i64,
        Millis,
        "10ms",
        io_worker_launch_interval as u32,
        "self-sizing pool: at most one worker started per interval, and only after one in which wakes found too few idle workers (PostgreSQL 19)"
    ),
    int_param!("io_max_concurrency", -1, MAX_IO_CONCURRENCY, None, "-1", io_max_concurrency as i32,
        "handles per issuer (0 is refused); -1: `buffer_pool_size / max_issuers`, clamped to 1 .. 64 (64 when `buffer_pool_size = 0`)",
        check: not_zero),
    int_param!(
        "effective_io_concurrency",
        0,
        1000,
        None,
        "16",
        effective_io_concurrency as u32,
        "reads in flight per read stream (0: one at a time); with several streams on one issuer, at most each one's share of its handles"
    ),
    int_param!(
        "maintenance_io_concurrency",
        0,
        1000,
        None,
        "16",
        maintenance_io_concurrency as u32,
        "the same, for maintenance streams (`dbaio prewarm`, `dbaio verify`)"
    ),
    int_param!(
        "io_combine_limit",
        1,
        128,
        Blocks,
        "128kB",
        io_combine_limit as u32,
        "the most blocks one read combines; the effective value is `min(io_combine_limit, io_max_combine_limit)`"
    ),
    int_param!(
        "io_max_combine_limit",
        1,
        128,
        Blocks,
        "128kB",
        io_max_combine_limit as u32,
        "iovecs (and handle-data words) per handle: the most any I/O combines"
    ),
    int_param!("block_size", 512, 32768, Bytes, "8kB", block_size as u32,
        "the buffer pool's page size, and the unit of block-unit settings",
        range: "512 .. 32768, a power of two", check: power_of_two),
    int_param!("buffer_pool_size", 0, 1 << 30, Blocks, "128MB", buffer_pool_size as u64,
        "the buffer pool (dbaio's `shared_buffers`); sizes the automatic `io_max_concurrency`; 0: the engine brings its own cache",
        range: "0, or 16 .. 1073741824", check: no_tiny_pool),
    bool_param!(
        "direct_io",
        "off",
        direct_io,
        "open data files with O_DIRECT unless `OpenOptions` says otherwise"
    ),
    Parameter {
        name: "buffer_pool_prefault",
        kind: Kind::Choice {
            values: &["auto", "on", "off"],
            bools: true,
        },
        default: "auto",
        context: Context::Start,
        description: "fault the pool's memory in on a background thread from the first buffer handed out, so first reads do not fault pages in where they run; `auto`: only with worker processes (whose faults in a shared mapping cost most), as elsewhere the thread's faults slowed the reads it raced (an io_uring prewarm 3x)",
        range: None,
        range_in_errors: false,
        check: None,
        apply: |s, v| {
            s.buffer_pool_prefault =
                [PoolPrefault::Auto, PoolPrefault::On, PoolPrefault::Off][v.choice()]
        },
        show: |s| Value::Choice(s.buffer_pool_prefault as usize),
    },
    Parameter {
        name: "huge_pages",
        kind: Kind::Choice {
            values: &["try", "on", "off"],
            bools: true,
        },
        default: "try",
        context: Context::Start,
        description: "the pool's pages from reserved huge pages (`vm.nr_hugepages`), as PostgreSQL's; `on` fails to start without enough of them",
        range: None,
        range_in_errors: false,
        check: None,
        apply: |s, v| s.huge_pages = [HugePages::Try, HugePages::On, HugePages::Off][v.choice()],
        show: |s| Value::Choice(s.huge_pages as usize),
    },
    bool_param!(
        "track_io_timing",
        "on",
        track_io_timing,
        "time every I/O for the statistics' latencies and the view's ages; off reads only the coarse clock and records counts, not times"
    ),
    bool_param!(
        "transparent_huge_pages",
        "off",
        transparent_huge_pages,
        "when the pool is not on reserved huge pages, advise transparent ones (`MADV_HUGEPAGE`): each read lands in one physically contiguous piece"
    ),
    Parameter {
        name: "io_uring_fallback",
        kind: choice(&["error", "worker", "sync"]),
        default: "error",
        context: Context::Start,
        description: "what to do when the kernel refuses io_uring: fail naming the cause, or start the worker or sync method",
        range: None,
        range_in_errors: false,
        check: None,
        apply: |s, v| {
            s.io_uring_fallback = [
                IoUringFallback::Error,
                IoUringFallback::Worker,
                IoUringFallback::Sync,
            ][v.choice()]
        },
        show: |s| Value::Choice(s.io_uring_fallback as usize),
    },
    bool_param!(
        "io_uring_registered_files",
        "on",
        io_uring_registered_files,
        "register every open file with each ring (each ring's table holds `max_files` slots, or as many as the descriptor limit, `ulimit -n`, allows — the kernel refuses a larger one; files in slots past it go unregistered)"
    ),
    bool_param!(
        "io_uring_registered_buffers",
        "off",
        io_uring_registered_buffers,
        "register the buffer pool's memory with each ring, so that the kernel does not look up and pin its pages for every read into it (`READ_FIXED`); registering pins, and so commits, the whole pool (at the first ring, or once the prefault thread is done); where the kernel refuses (`RLIMIT_MEMLOCK`), a warning says so once and the pool's I/Os go on unregistered"
    ),
    bool_param!(
        "io_uring_registered_io_bufs",
        "on",
        io_uring_registered_io_bufs,
        "`IoBuf`s made once an io_uring subsystem with this on has started come from memory each ring registers, 2 MiB at a time as buffers are made (128 MiB at most; larger buffers stay on the heap), so that their reads and writes are fixed ones (`READ_FIXED`); under a memory-lock limit (`RLIMIT_MEMLOCK`, without `CAP_IPC_LOCK`) it registers no more than leaves 64 KiB for each of `max_issuers` rings (whose queues the limit counts too); past that, or where the kernel refuses, a warning says so once and their I/Os go on unregistered"
    ),
    int_param!(
        "io_uring_spin",
        0,
        10_000,
        Micros,
        "50us",
        io_uring_spin as u32,
        "`io_method = io_uring`: how long a thread about to sleep for completions first polls its ring for them (with 4 to 32 entries in the kernel), spending CPU to save a sleep and a wake-up; a ring whose polls keep ending empty polls only now and then; 0: never"
    ),
    int_param!(
        "io_worker_queue_size",
        16,
        65536,
        None,
        "256",
        io_worker_queue_size as u32,
        "worker threads' queue entries; an overflow runs in the issuer"
    ),
    bool_param!(
        "io_worker_try_cached",
        "on",
        io_worker_try_cached,
        "worker method: a buffered read of up to 16 KiB is first tried in the issuer without blocking (`RWF_NOWAIT`); only a read the page cache cannot serve whole goes to a worker"
    ),
    bool_param!(
        "io_worker_batch_scheduling",
        "on",
        io_worker_batch_scheduling,
        "worker method: workers run under SCHED_BATCH — a woken worker does not preempt the thread that woke it, which goes on submitting while the workers wait for the CPU; off: the normal policy, a woken worker may take the CPU at once (for a machine whose CPUs are busy with other work, where on costs the tail: p99 1.4x beside CPU hogs)"
    ),
    int_param!(
        "max_issuers",
        1,
        4096,
        None,
        "64",
        max_issuers as u32,
        "issuer slots (PostgreSQL's process slots)"
    ),
    int_param!(
        "max_files",
        1,
        1 << 20,
        None,
        "1024",
        max_files as u32,
        "file-table slots"
    ),
    path_param!(
        "introspection_socket",
        introspection_socket,
        "path of the owner-only unix socket serving the aios view; empty: none"
    ),
    int_param!(
        "io_advice_budget",
        -1,
        1 << 20,
        Blocks,
        "-1",
        io_advice_budget as i64,
        "readahead advice: blocks read streams may have advised and not yet read, per device, all issuers together; -1: 16 × max(`effective_io_concurrency`, `maintenance_io_concurrency`), clamped to 256 .. 16384; 0: no advice from throttled streams (the default `Advice::Throttled`; an `Advice::Unthrottled` stream has no budget)"
    ),
    int_param!(
        "sim_seed",
        0,
        i64::MAX,
        None,
        "0",
        sim_seed as u64,
        "`io_method = sim`: the seed of every draw (latencies, faults, and the crash choices of a disk the subsystem makes itself); the same seed and the same calls give the same run"
    ),
    int_param!(
        "sim_latency_min",
        0,
        10_000_000,
        Micros,
        "10us",
        sim_latency_min as u32,
        "`io_method = sim`: the shortest simulated latency of an I/O (simulated time: nothing sleeps; the statistics' latencies and the view's ages are in simulated time too)"
    ),
    int_param!(
        "sim_latency_max",
        0,
        10_000_000,
        Micros,
        "100us",
        sim_latency_max as u32,
        "`io_method = sim`: the longest simulated latency; each I/O draws one between the two (see `sim_latency_distribution`), so I/Os complete out of order"
    ),
    Parameter {
        name: "sim_latency_distribution",
        kind: choice(&["uniform", "exponential"]),
        default: "uniform",
        context: Context::Start,
        description: "`io_method = sim`: how each I/O's latency is drawn between `sim_latency_min` and `sim_latency_max`: evenly, or exponentially (most near the minimum, a tail towards the maximum: the minimum plus an exponential draw with a mean of a quarter of the span, cut at the maximum)",
        range: None,
        range_in_errors: false,
        check: None,
        apply: |s, v| {
            s.sim_latency_distribution = [SimLatency::Uniform, SimLatency::Exponential][v.choice()]
        },
        show: |s| Value::Choice(s.sim_latency_distribution as usize),
    },
    fraction_param!(
        "sim_fault_read_error",
        sim_fault_read_error,
        "`io_method = sim`: the chance a read fails with EIO"
    ),
    fraction_param!(
        "sim_fault_write_error",
        sim_fault_write_error,
        "`io_method = sim`: the chance a write fails with EIO"
    ),
    fraction_param!(
        "sim_fault_no_space",
        sim_fault_no_space,
        "`io_method = sim`: the chance a write or fallocate fails with ENOSPC"
    ),
    fraction_param!(
        "sim_fault_short",
        sim_fault_short,
        "`io_method = sim`: the chance a read or write transfers fewer bytes than asked (on an O_DIRECT file, a whole number of 4 KiB blocks)"
    ),
    fraction_param!(
        "sim_fault_latent",
        sim_fault_latent,
        "`io_method = sim`: the chance a read finds a sector gone bad, which reads as EIO until written again"
    ),
    fraction_param!(
        "sim_fault_bit_rot",
        sim_fault_bit_rot,
        "`io_method = sim`: the chance a read finds a bit of the media flipped (for good)"
    ),
    fraction_param!(
        "sim_fault_misdirect",
        sim_fault_misdirect,
        "`io_method = sim`: the chance a write lands a few blocks away from its offset and is reported done"
    ),
    fraction_param!(
        "sim_fault_slow",
        sim_fault_slow,
        "`io_method = sim`: the chance an I/O takes a hundred times its latency"
    ),
];

/// The table of `docs/settings.md`, from [`PARAMETERS`] (a test checks the doc holds it).
pub fn reference_table() -> String {
    let mut out = String::from(
        "| name | default | valid values | unit | what it does |\n|---|---|---|---|---|\n",
    );
    for p in PARAMETERS {
        let default = if p.default.is_empty() {
            "(empty)".to_string()
        } else {
            format!("`{}`", p.default)
        };
        out.push_str(&format!(
            "| `{}` | {default} | {} | {} | {} |\n",
            p.name,
            p.values(),
            p.unit(),
            p.description
        ));
    }
    out
}
