//! The `dbaio aios` and `dbaio stat` commands: clients of an embedder's introspection socket.
//! Tables, JSON, Prometheus text, and the live `--watch` screen (ratatui). See `docs/aios.md`.

use crate::interrupt::Interrupt;
use dbaio::introspect::request;
use dbaio::{AdviceBudgetRow, AdviceRow, AioRow, IssuerStatsRow, WaitRow, WorkerPoolRow};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, Row, Table};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Everything one poll of the socket returns.
#[derive(serde::Deserialize)]
pub struct All {
    /// The embedder's process id.
    pub pid: u32,
    /// The method it runs.
    pub io_method: String,
    /// Seconds since its subsystem started.
    pub uptime_s: f64,
    /// The aios view.
    pub aios: Vec<AioRow>,
    /// What each issuer waits for.
    pub waits: Vec<WaitRow>,
    /// Per-issuer statistics.
    pub stats: Vec<IssuerStatsRow>,
    /// Each device's readahead-advice budget.
    #[serde(default)]
    pub advice_budget: Vec<AdviceBudgetRow>,
    /// The worker pool (worker method only).
    #[serde(default)]
    pub worker_pool: Option<WorkerPoolRow>,
    /// Missed wake-ups the safety nets caught, every issuer, since start (0 unless there is
    /// a bug in dbaio).
    #[serde(default)]
    pub backstop_wakes: u64,
    /// io_uring's registered buffers (with `io_uring_registered_buffers` on).
    #[serde(default)]
    pub registered_buffers: Option<dbaio::RegisteredBuffers>,
}

/// The worker pool in one line (`workers 3 (1 .. 16, 1 busy, 0 queued; grown 2, retired 0,
/// replaced 0)`; for worker processes `worker processes 3 (...; replaced 1, requeued 2, ran
/// locally 0)`), or "" when the method has none.
fn pool_line(pool: &Option<WorkerPoolRow>) -> String {
    let Some(p) = pool else {
        return String::new();
    };
    let busy = p.workers.iter().filter(|w| w.state == "busy").count();
    let range = if p.min == p.max {
        "fixed".to_string()
    } else {
        format!("{} .. {}", p.min, p.max)
    };
    let line = format!(
        "{} {} ({range}, {busy} busy, {} queued; grown {}, retired {}, replaced {}",
        if p.kind == "process" {
            "worker processes"
        } else {
            "workers"
        },
        p.workers.len(),
        p.queued,
        p.grown,
        p.retired,
        p.replaced
    );
    if p.kind == "process" {
        // Missed wake-ups are a bug's symptom: said only when there are any.
        let missed = if p.missed_wakes > 0 {
            format!(", missed wakes {}", p.missed_wakes)
        } else {
            String::new()
        };
        format!(
            "{line}, requeued {}, ran locally {}{missed})",
            p.requeued, p.ran_locally
        )
    } else {
        format!("{line})")
    }
}

/// One line per worker: number, thread id, state, I/Os done.
fn worker_lines(pool: &Option<WorkerPoolRow>) -> String {
    let Some(p) = pool else {
        return String::new();
    };
    let mut o = String::new();
    let id = if p.kind == "process" { "pid" } else { "tid" };
    for w in &p.workers {
        let _ = writeln!(
            o,
            "  worker {:<3} {id} {:<8} {:<5} {} I/Os",
            w.worker, w.tid, w.state, w.ios_done
        );
    }
    o
}

/// The advice budgets in one line (`advice budget 254:0 37/1024 (peak 512)`), or "".
fn budget_line(rows: &[AdviceBudgetRow]) -> String {
    let parts: Vec<String> = rows
        .iter()
        .map(|b| format!("{} {}/{} (peak {})", b.device, b.in_use, b.limit, b.peak))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("advice budget {}", parts.join(", "))
    }
}

/// One number of a device's advice budget.
type BudgetField = fn(&AdviceBudgetRow) -> u32;

/// The five advice counters, as `name=value` words.
fn advice_words(a: &AdviceRow) -> String {
    let words: Vec<String> = ADVICE_OUTCOMES
        .iter()
        .zip(advice_values(a))
        .map(|(name, v)| format!("{name}={v}"))
        .collect();
    words.join(" ")
}

/// Every issuer's advice counters together.
pub fn advice_total(all: &All) -> AdviceRow {
    let mut total = AdviceRow::default();
    for s in &all.stats {
        total += s.advice;
    }
    total
}

const ADVICE_OUTCOMES: [&str; 5] = [
    "issued",
    "suppressed_sequential",
    "refused_by_budget",
    "useful",
    "wasted",
];

fn advice_values(a: &AdviceRow) -> [u64; 5] {
    [
        a.issued,
        a.suppressed_sequential,
        a.refused_by_budget,
        a.useful,
        a.wasted,
    ]
}

/// Says what is wrong with `socket` when connecting to it failed with `e`: missing, not a
/// socket, nobody listening, not ours.
fn explain(socket: &Path, e: &std::io::Error) -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let p = socket.display();
    if matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ) {
        return format!(
            "no answer from \"{p}\" within {} s: the embedder took the connection but did not reply\nHINT:  Is it stopped (kill -STOP), or too busy to serve its socket?",
            dbaio::introspect::CLIENT_TIMEOUT.as_secs()
        );
    }
    let meta = match std::fs::metadata(socket) {
        Err(_) => {
            return format!(
                "no introspection socket at \"{p}\"\nHINT:  Is the embedder running, with introspection_socket set to this path?"
            );
        }
        Ok(m) => m,
    };
    let t = meta.file_type();
    if t.is_dir() {
        return format!("\"{p}\" is a directory, not a socket");
    }
    if t.is_file() {
        return format!("\"{p}\" is a regular file, not a socket");
    }
    if !t.is_socket() {
        return format!("\"{p}\" is not a socket");
    }
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => format!(
            "nothing is listening on \"{p}\": a socket left behind by a process that ended\nHINT:  Start the embedder again (it replaces the stale socket), or remove the file."
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "permission denied on \"{p}\": it belongs to uid {} (mode {:o}), and only its owner may read the view",
            meta.uid(),
            meta.mode() & 0o777
        ),
        _ => format!("could not query \"{p}\": {e}"),
    }
}

/// Sends `cmd` to the socket and returns the reply, or what went wrong in words.
pub fn fetch(socket: &Path, cmd: &str) -> Result<serde_json::Value, String> {
    let v = request(socket, cmd).map_err(|e| explain(socket, &e))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if e.starts_with("permission denied") {
            return Err(format!(
                "the embedder at \"{}\" refused this user (uid {me}): {e}",
                socket.display()
            ));
        }
        return Err(format!("\"{}\" answered: {e}", socket.display()));
    }
    Ok(v)
}

/// Everything at once (the `all` command).
pub fn fetch_all(socket: &Path) -> Result<All, String> {
    serde_json::from_value(fetch(socket, "all")?).map_err(|e| format!("unexpected reply: {e}"))
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_default()
}

/// One row of the aios table, as text.
fn aio_cells(r: &AioRow) -> Vec<String> {
    let flag = |f: Option<bool>| opt(&f.map(|b| if b { "t" } else { "f" }));
    vec![
        r.issuer.clone(),
        r.pid.to_string(),
        r.tid.to_string(),
        r.io_id.to_string(),
        r.io_generation.to_string(),
        r.state.clone(),
        opt(&r.operation),
        opt(&r.off),
        opt(&r.length),
        opt(&r.target),
        opt(&r.handle_data_len),
        opt(&r.raw_result),
        opt(&r.result),
        opt(&r.target_desc),
        flag(r.f_sync),
        flag(r.f_localmem),
        flag(r.f_buffered),
        r.executor.clone(),
        r.age_us.to_string(),
    ]
}

/// The aios table: PostgreSQL's columns and dbaio's, sorted by issuer then age (oldest first).
pub fn aios_table(rows: &mut [AioRow]) -> String {
    rows.sort_by(|a, b| (&a.issuer, b.age_us).cmp(&(&b.issuer, a.age_us)));
    let head = [
        "issuer",
        "pid",
        "tid",
        "io_id",
        "io_generation",
        "state",
        "operation",
        "off",
        "length",
        "target",
        "handle_data_len",
        "raw_result",
        "result",
        "target_desc",
        "f_sync",
        "f_localmem",
        "f_buffered",
        "executor",
        "age_us",
    ];
    let cells: Vec<Vec<String>> = rows.iter().map(aio_cells).collect();
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |cols: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cols
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(parts.join(" | ").trim_end());
        out.push('\n');
    };
    line(head.to_vec(), &mut out);
    out.push_str(
        &width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-"),
    );
    out.push('\n');
    for row in &cells {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    let _ = writeln!(out, "({} rows)", rows.len());
    out
}

/// `s` escaped for a Prometheus label value.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// I/Os in flight (handles not idle) per issuer.
fn in_flight_per_issuer(all: &All) -> HashMap<&str, usize> {
    let mut in_flight: HashMap<&str, usize> = HashMap::new();
    for r in &all.aios {
        *in_flight.entry(&r.issuer).or_default() += 1;
    }
    in_flight
}

/// Stats as Prometheus text exposition.
pub fn prometheus(all: &All) -> String {
    let mut o = String::new();
    write_op_counters(&mut o, all);
    write_latency_summary(&mut o, all);
    write_executor_counters(&mut o, all);
    write_advice_metrics(&mut o, all);
    if let Some(p) = &all.worker_pool {
        write_worker_metrics(&mut o, p);
    }
    let _ = writeln!(
        o,
        "# HELP dbaio_backstop_wakes_total Waits a safety-net timeout ended although what they waited for had happened (0 unless there is a bug).\n# TYPE dbaio_backstop_wakes_total counter\ndbaio_backstop_wakes_total {}",
        all.backstop_wakes
    );
    write_in_flight_gauge(&mut o, all);
    o
}

/// The per-issuer, per-op counters: I/Os, bytes, errors, time.
fn write_op_counters(o: &mut String, all: &All) {
    let metrics: [(&str, &str, &str); 4] = [
        (
            "dbaio_io_ops_total",
            "counter",
            "Completed I/Os per issuer and op.",
        ),
        (
            "dbaio_io_bytes_total",
            "counter",
            "Bytes transferred per issuer and op.",
        ),
        (
            "dbaio_io_errors_total",
            "counter",
            "I/Os that ended in ERROR per issuer and op.",
        ),
        (
            "dbaio_io_time_seconds_total",
            "counter",
            "Summed latency, staging to completion.",
        ),
    ];
    for (name, kind, help) in metrics {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in &all.stats {
            for op in &s.ops {
                let v = match name {
                    "dbaio_io_ops_total" => op.count as f64,
                    "dbaio_io_bytes_total" => op.bytes as f64,
                    "dbaio_io_errors_total" => op.errors as f64,
                    _ => op.time_us / 1e6,
                };
                let _ = writeln!(
                    o,
                    "{name}{{issuer=\"{}\",slot=\"{}\",op=\"{}\"}} {v}",
                    label(&s.issuer),
                    s.slot,
                    op.op
                );
            }
        }
    }
}

/// The latency quantiles per issuer and op.
fn write_latency_summary(o: &mut String, all: &All) {
    let _ = writeln!(
        o,
        "# HELP dbaio_io_latency_microseconds Latency quantiles, staging to completion.\n# TYPE dbaio_io_latency_microseconds summary"
    );
    for s in &all.stats {
        for op in &s.ops {
            for (q, v) in [
                ("0.5", op.lat_us.p50),
                ("0.99", op.lat_us.p99),
                ("0.999", op.lat_us.p999),
                ("1", op.lat_us.max),
            ] {
                let _ = writeln!(
                    o,
                    "dbaio_io_latency_microseconds{{issuer=\"{}\",slot=\"{}\",op=\"{}\",quantile=\"{q}\"}} {v}",
                    label(&s.issuer),
                    s.slot,
                    op.op
                );
            }
        }
    }
}

/// I/Os per issuer and executor.
fn write_executor_counters(o: &mut String, all: &All) {
    let _ = writeln!(
        o,
        "# HELP dbaio_executor_ios_total I/Os executed per issuer and executor.\n# TYPE dbaio_executor_ios_total counter"
    );
    for s in &all.stats {
        for e in &s.executors {
            let _ = writeln!(
                o,
                "dbaio_executor_ios_total{{issuer=\"{}\",slot=\"{}\",executor=\"{}\"}} {}",
                label(&s.issuer),
                s.slot,
                e.executor,
                e.ios
            );
        }
    }
}

/// Readahead advice per issuer by outcome, and each device's advice budget.
fn write_advice_metrics(o: &mut String, all: &All) {
    let _ = writeln!(
        o,
        "# HELP dbaio_advice_blocks_total Readahead advice per issuer, by outcome.\n# TYPE dbaio_advice_blocks_total counter"
    );
    for s in &all.stats {
        for (outcome, v) in ADVICE_OUTCOMES.iter().zip(advice_values(&s.advice)) {
            let _ = writeln!(
                o,
                "dbaio_advice_blocks_total{{issuer=\"{}\",slot=\"{}\",outcome=\"{outcome}\"}} {v}",
                label(&s.issuer),
                s.slot
            );
        }
    }
    let gauges: [(&str, &str, BudgetField); 2] = [
        (
            "dbaio_advice_budget_blocks",
            "Blocks advised and not yet read, per device.",
            |b| b.in_use,
        ),
        (
            "dbaio_advice_budget_limit_blocks",
            "The advice budget per device (io_advice_budget).",
            |b| b.limit,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for b in &all.advice_budget {
            let _ = writeln!(o, "{name}{{device=\"{}\"}} {}", b.device, value(b));
        }
    }
}

/// The worker pool: workers running, I/Os per worker, and worker processes' counters.
fn write_worker_metrics(o: &mut String, p: &WorkerPoolRow) {
    let _ = writeln!(
        o,
        "# HELP dbaio_io_workers Worker threads running.\n# TYPE dbaio_io_workers gauge\ndbaio_io_workers {}",
        p.workers.len()
    );
    let _ = writeln!(
        o,
        "# HELP dbaio_worker_ios_total I/Os executed per worker.\n# TYPE dbaio_worker_ios_total counter"
    );
    for w in &p.workers {
        let _ = writeln!(
            o,
            "dbaio_worker_ios_total{{worker=\"{}\",tid=\"{}\"}} {}",
            w.worker, w.tid, w.ios_done
        );
    }
    if p.kind == "process" {
        let counters = [
            (
                "dbaio_worker_requeued_total",
                "I/Os queued again because the worker process executing them died.",
                p.requeued,
            ),
            (
                "dbaio_worker_missed_wakes_total",
                "Waits that slept to their safety limit although an awaited I/O had completed (0 unless there is a bug).",
                p.missed_wakes,
            ),
            (
                "dbaio_worker_close_waits_expired_total",
                "Closes that waited their full second for a worker process to close its descriptor of the file (a worker stopped, or in a very long I/O).",
                p.close_waits_expired,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
    }
}

/// Handles not idle per issuer.
fn write_in_flight_gauge(o: &mut String, all: &All) {
    let _ = writeln!(
        o,
        "# HELP dbaio_ios_in_flight Handles not idle per issuer.\n# TYPE dbaio_ios_in_flight gauge"
    );
    let in_flight = in_flight_per_issuer(all);
    for w in &all.waits {
        let _ = writeln!(
            o,
            "dbaio_ios_in_flight{{issuer=\"{}\",slot=\"{}\"}} {}",
            label(&w.issuer),
            w.slot,
            in_flight.get(w.issuer.as_str()).unwrap_or(&0)
        );
    }
}

/// A human stats table.
pub fn stats_table(all: &All) -> String {
    let mut o = format!(
        "pid {}  io_method {}  up {:.1} s\n",
        all.pid, all.io_method, all.uptime_s
    );
    write_op_rows(&mut o, all);
    write_advice_lines(&mut o, all);
    let line = pool_line(&all.worker_pool);
    if !line.is_empty() {
        let _ = writeln!(o, "{line}");
        o.push_str(&worker_lines(&all.worker_pool));
    }
    write_registered_buffers_line(&mut o, all);
    write_backstop_line(&mut o, all);
    o
}

/// io_uring's registered buffers: how much memory each ring registered and how many I/Os
/// used it, or the kernel's refusal.
fn write_registered_buffers_line(o: &mut String, all: &All) {
    let Some(r) = &all.registered_buffers else {
        return;
    };
    let _ = match &r.refused {
        Some(why) => writeln!(o, "registered buffers: none ({why})"),
        None => writeln!(
            o,
            "registered buffers: pool {} MiB with each of {} rings, IoBufs {} MiB, {} fixed I/Os",
            r.bytes >> 20,
            r.rings,
            r.io_buf_bytes >> 20,
            r.fixed_ios
        ),
    };
}

/// The stats table's header and one row per issuer and op, the issuer's executors on its
/// first row.
fn write_op_rows(o: &mut String, all: &All) {
    let _ = writeln!(
        o,
        "{:<16} {:>4} {:<9} {:>10} {:>12} {:>7} {:>9} {:>8} {:>8} {:>9} {:>9}  executors",
        "issuer",
        "slot",
        "op",
        "count",
        "bytes",
        "errors",
        "time_s",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us"
    );
    for s in &all.stats {
        let ex: Vec<String> = s
            .executors
            .iter()
            .map(|e| format!("{}={}", e.executor, e.ios))
            .collect();
        for (k, op) in s.ops.iter().enumerate() {
            let _ = writeln!(
                o,
                "{:<16} {:>4} {:<9} {:>10} {:>12} {:>7} {:>9.3} {:>8} {:>8} {:>9} {:>9}  {}",
                s.issuer,
                s.slot,
                op.op,
                op.count,
                op.bytes,
                op.errors,
                op.time_us / 1e6,
                op.lat_us.p50,
                op.lat_us.p99,
                op.lat_us.p999,
                op.lat_us.max,
                if k == 0 { ex.join(" ") } else { String::new() }
            );
        }
    }
}

/// The advice counters of each issuer that advised, their total and the budgets (nothing
/// when no issuer advised and no device has a budget).
fn write_advice_lines(o: &mut String, all: &All) {
    let advising: Vec<String> = all
        .stats
        .iter()
        .filter(|s| s.advice != AdviceRow::default())
        .map(|s| {
            format!(
                "{:<16} {:>4} advice (blocks): {}",
                s.issuer,
                s.slot,
                advice_words(&s.advice)
            )
        })
        .collect();
    let total = advice_total(all);
    if !advising.is_empty() || !all.advice_budget.is_empty() {
        for line in advising {
            let _ = writeln!(o, "{line}");
        }
        let _ = writeln!(
            o,
            "{:<16} {:>4} advice (blocks): {}",
            "total",
            "",
            advice_words(&total)
        );
        let line = budget_line(&all.advice_budget);
        if !line.is_empty() {
            let _ = writeln!(o, "{line}");
        }
    }
}

/// The backstop wakes, per issuer and in all: a bug's symptom, said only when there are any.
fn write_backstop_line(o: &mut String, all: &All) {
    if all.backstop_wakes > 0 {
        let per: Vec<String> = all
            .stats
            .iter()
            .filter(|s| s.backstop_wakes > 0)
            .map(|s| format!("{} {}", s.issuer, s.backstop_wakes))
            .collect();
        let _ = writeln!(
            o,
            "backstop wakes {} (waits a safety-net timeout ended although what they waited \
             for had happened: a bug in dbaio; {})",
            all.backstop_wakes,
            per.join(", ")
        );
    }
}

/// Each issuer's I/O and byte totals at the last refresh, to make rates of.
struct Rate {
    at: Instant,
    ios: HashMap<u32, (u64, u64)>,
}

fn totals(s: &IssuerStatsRow) -> (u64, u64) {
    s.ops
        .iter()
        .fold((0, 0), |(n, b), op| (n + op.count, b + op.bytes))
}

/// Each issuer's rates (I/Os per second, MB per second, by slot) since `last` (zero on the
/// first refresh), and the totals to measure the next ones from.
fn rates(all: &All, last: &Option<Rate>, now: Instant) -> (HashMap<u32, (f64, f64)>, Rate) {
    let rates = all
        .stats
        .iter()
        .map(|s| {
            let (n, b) = totals(s);
            let r = last.as_ref().and_then(|l| {
                let dt = now.duration_since(l.at).as_secs_f64();
                l.ios.get(&s.slot).map(|&(n0, b0)| {
                    (
                        n.saturating_sub(n0) as f64 / dt,
                        b.saturating_sub(b0) as f64 / dt / 1e6,
                    )
                })
            });
            (s.slot, r.unwrap_or((0.0, 0.0)))
        })
        .collect();
    let next = Rate {
        at: now,
        ios: all.stats.iter().map(|s| (s.slot, totals(s))).collect(),
    };
    (rates, next)
}

/// The live screen's rows of issuers: in flight, waiting, rates and the p99 of the busiest op.
fn issuer_rows(all: &All, rates: &HashMap<u32, (f64, f64)>) -> Vec<Row<'static>> {
    let in_flight = in_flight_per_issuer(all);
    all.waits
        .iter()
        .map(|w| {
            let (iops, mbs) = rates.get(&w.slot).copied().unwrap_or_default();
            let p99 = all
                .stats
                .iter()
                .find(|s| s.slot == w.slot)
                .and_then(|s| s.ops.iter().max_by_key(|o| o.count))
                .map(|o| format!("{} {}", o.op, o.lat_us.p99))
                .unwrap_or_default();
            let waiting = if w.wait_event.is_empty() {
                String::new()
            } else {
                format!("{} ({}) {} us", w.wait_event, w.waiting_on, w.wait_us)
            };
            Row::new(vec![
                w.issuer.clone(),
                w.tid.to_string(),
                in_flight.get(w.issuer.as_str()).unwrap_or(&0).to_string(),
                waiting,
                format!("{iops:.0}"),
                format!("{mbs:.1}"),
                p99,
            ])
        })
        .collect()
}

/// The live screen's rows of the 12 oldest I/Os.
fn oldest_io_rows(all: &All) -> Vec<Row<'static>> {
    let mut oldest: Vec<&AioRow> = all.aios.iter().collect();
    oldest.sort_by_key(|r| std::cmp::Reverse(r.age_us));
    oldest
        .iter()
        .take(12)
        .map(|r| {
            Row::new(vec![
                r.issuer.clone(),
                r.io_id.to_string(),
                r.state.clone(),
                opt(&r.operation),
                opt(&r.off),
                opt(&r.length),
                r.executor.clone(),
                r.age_us.to_string(),
                opt(&r.target_desc),
            ])
        })
        .collect()
}

/// The live screen's title: the embedder, its I/Os, the advice budgets and the pool.
fn screen_title(all: &All) -> String {
    let extra: String = [budget_line(&all.advice_budget), pool_line(&all.worker_pool)]
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| format!(" — {l}"))
        .collect();
    format!(
        " dbaio aios — pid {} — io_method {} — up {:.0} s — {} I/Os not idle{extra} — q quits ",
        all.pid,
        all.io_method,
        all.uptime_s,
        all.aios.len(),
    )
}

/// The issuers' table, under `title`.
fn issuer_table(rows: Vec<Row<'static>>, title: String) -> Table<'static> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    Table::new(
        rows,
        [
            Constraint::Length(16),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Min(30),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Length(14),
        ],
    )
    .header(
        Row::new(vec![
            "issuer",
            "tid",
            "in flight",
            "waiting",
            "IOPS",
            "MB/s",
            "p99 us",
        ])
        .style(bold),
    )
    .block(Block::default().borders(Borders::ALL).title(title))
}

/// The oldest I/Os' table.
fn oldest_io_table(rows: Vec<Row<'static>>) -> Table<'static> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    Table::new(
        rows,
        [
            Constraint::Length(12),
            Constraint::Length(6),
            Constraint::Length(17),
            Constraint::Length(9),
            Constraint::Length(12),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Min(20),
        ],
    )
    .header(
        Row::new(vec![
            "issuer",
            "io_id",
            "state",
            "operation",
            "off",
            "length",
            "executor",
            "age_us",
            "target_desc",
        ])
        .style(bold),
    )
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(" oldest I/Os "),
    )
}

/// Draws one frame of the live screen from `all`, with the issuers' `rates`.
fn draw_screen(
    terminal: &mut ratatui::DefaultTerminal,
    all: &All,
    rates: &HashMap<u32, (f64, f64)>,
) -> Result<(), String> {
    let issuers = issuer_table(issuer_rows(all, rates), screen_title(all));
    let oldest = oldest_io_table(oldest_io_rows(all));
    terminal
        .draw(|f| {
            let [top, bottom] =
                Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)])
                    .areas(f.area());
            f.render_widget(issuers, top);
            f.render_widget(oldest, bottom);
        })
        .map_err(|e| format!("terminal: {e}"))?;
    Ok(())
}

/// Waits `every` for keys: true if q, Esc or Ctrl-C was pressed, or a signal arrived (at
/// once then: the keys are polled a tenth of a second at a time).
fn quit_pressed_within(every: Duration, stop: &Interrupt) -> Result<bool, String> {
    let deadline = Instant::now() + every;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if stop.raised() {
            return Ok(true);
        }
        if event::poll(left.min(Duration::from_millis(100)))
            .map_err(|e| format!("terminal: {e}"))?
        {
            if let Event::Key(k) = event::read().map_err(|e| format!("terminal: {e}"))? {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

/// `aios --watch` without a terminal: the view as a table every `every`, under a header line,
/// `count` times (or until interrupted).
pub fn watch_plain(socket: &Path, every: Duration, count: Option<u64>) -> Result<(), String> {
    let mut n = 0u64;
    loop {
        let mut all = fetch_all(socket)?;
        let busy = all
            .waits
            .iter()
            .filter(|w| !w.wait_event.is_empty())
            .count();
        let mut text = format!(
            "== pid {} io_method {} up {:.1} s: {} I/Os in flight, {} issuers ({} waiting) ==\n",
            all.pid,
            all.io_method,
            all.uptime_s,
            all.aios.len(),
            all.waits.len(),
            busy
        );
        for line in [budget_line(&all.advice_budget), pool_line(&all.worker_pool)] {
            if !line.is_empty() {
                text += &line;
                text.push('\n');
            }
        }
        text += &aios_table(&mut all.aios);
        crate::output::out(&text)?;
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}

/// `aios --watch` on a terminal: the live screen. The terminal is restored on every way out:
/// q, Esc, Ctrl-C, `--count`, an error, a panic (ratatui's hook), SIGINT, SIGTERM or SIGHUP
/// (the loop sees the signal within a tenth of a second), and a second signal (which ends
/// the process at once, after restoring it).
pub fn watch(socket: &Path, every: Duration, count: Option<u64>) -> Result<(), String> {
    let stop = Interrupt::catch().map_err(|e| format!("could not catch signals: {e}"))?;
    let _forced = crate::interrupt::on_forced_exit(restore_terminal_now);
    let mut terminal = ratatui::init();
    let result = watch_loop(&mut terminal, socket, every, count, &stop);
    ratatui::restore();
    if stop.raised() {
        return Err(crate::interrupt::message());
    }
    result
}

/// Leaves the alternate screen, shows the cursor and ends raw mode, without locks a stuck
/// thread could hold (for a second signal's forced exit).
fn restore_terminal_now() {
    let _ = ratatui::crossterm::terminal::disable_raw_mode();
    let seq = b"\x1b[?25h\x1b[?1049l";
    // SAFETY: writes `seq`'s bytes, which live across the call, to standard output.
    unsafe { libc::write(1, seq.as_ptr().cast(), seq.len()) };
}

/// The live, top-like screen, refreshed every `every`. Quits on q, Esc or Ctrl-C, or after
/// `count` refreshes.
fn watch_loop(
    terminal: &mut ratatui::DefaultTerminal,
    socket: &Path,
    every: Duration,
    count: Option<u64>,
    stop: &Interrupt,
) -> Result<(), String> {
    let mut last: Option<Rate> = None;
    let mut frames = 0u64;
    loop {
        let all = fetch_all(socket)?;
        let (rates, totals_now) = rates(&all, &last, Instant::now());
        last = Some(totals_now);
        draw_screen(terminal, &all, &rates)?;
        frames += 1;
        if count.is_some_and(|c| frames >= c) {
            return Ok(());
        }
        if stop.raised() || quit_pressed_within(every, stop)? {
            return Ok(());
        }
    }
}
