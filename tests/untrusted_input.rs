//! Untrusted input never panics or hangs, and every rejection says why in PostgreSQL's words
//! (issue 15, item 15): the settings parser (arbitrary text, arbitrary values for every
//! parameter, near-miss spellings, huge numbers and units) and the introspection socket
//! (arbitrary bytes sent to a live socket, which must answer each with JSON — a reply or an
//! error in words — and go on serving). Each rejection is checked word for word against what
//! the input must produce: `invalid value for parameter "io_method": "x"` with its HINT of
//! the available values, `… is outside the valid range for parameter "…" (min .. max)`, the
//! DETAIL where a check explains itself, `unrecognized configuration parameter "…"`, `syntax
//! error in file "…" line N, near token "…"`. Guards against messages that are vague, name
//! the wrong parameter or value, lose their DETAIL or HINT, or drift from PostgreSQL's
//! wording; and against a value accepted that should be refused, or the reverse. proptest
//! generators; the case counts are in docs/reliability.md.

use dbaio::settings::PARAMETERS;
use dbaio::{Aio, AioError, IoMethodKind, Settings};
use proptest::prelude::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// What each input must produce: the parameters' kinds and ranges (docs/settings.md) and
// PostgreSQL's message for each way a value can be wrong.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Unit {
    None,
    Bytes,
    Blocks,
    Millis,
    Micros,
}

#[derive(Clone, Copy)]
enum Kind {
    /// One of these spellings (any case).
    Enum(&'static [&'static str]),
    Bool,
    Int {
        unit: Unit,
        min: i64,
        max: i64,
    },
    /// Any text (a path).
    Text,
    /// A probability, 0 .. 1.
    Fraction,
}

const MAX_MS: i64 = i32::MAX as i64;

fn kind(name: &str) -> Kind {
    use Kind::*;
    let int = |unit, min, max| Int { unit, min, max };
    match name {
        "io_method" => Enum(&["sync", "worker", "io_uring", "sim"]),
        "io_worker_kind" => Enum(&["thread", "process"]),
        "huge_pages" => Enum(&["try", "on", "off"]),
        "io_uring_fallback" => Enum(&["error", "worker", "sync"]),
        "sim_latency_distribution" => Enum(&["uniform", "exponential"]),
        "buffer_pool_prefault" => Enum(&["auto", "on", "off"]),
        "direct_io"
        | "track_io_timing"
        | "transparent_huge_pages"
        | "io_uring_registered_files"
        | "io_uring_registered_buffers"
        | "io_uring_registered_io_bufs"
        | "io_worker_try_cached"
        | "io_worker_batch_scheduling" => Bool,
        "io_worker_program" | "introspection_socket" => Text,
        "io_workers" => int(Unit::None, 0, 32),
        "io_min_workers" | "io_max_workers" => int(Unit::None, 1, 32),
        "io_worker_idle_timeout" => int(Unit::Millis, 1, MAX_MS),
        "io_worker_launch_interval" => int(Unit::Millis, 0, MAX_MS),
        "io_max_concurrency" => int(Unit::None, -1, 1024),
        "effective_io_concurrency" | "maintenance_io_concurrency" => int(Unit::None, 0, 1000),
        "io_combine_limit" | "io_max_combine_limit" => int(Unit::Blocks, 1, 128),
        "block_size" => int(Unit::Bytes, 512, 32768),
        "buffer_pool_size" => int(Unit::Blocks, 0, 1 << 30),
        "io_worker_queue_size" => int(Unit::None, 16, 65536),
        "io_uring_spin" => int(Unit::Micros, 0, 10_000),
        "max_issuers" => int(Unit::None, 1, 4096),
        "max_files" => int(Unit::None, 1, 1 << 20),
        "io_advice_budget" => int(Unit::Blocks, -1, 1 << 20),
        "sim_seed" => int(Unit::None, 0, i64::MAX),
        "sim_latency_min" | "sim_latency_max" => int(Unit::Micros, 0, 10_000_000),
        n if n.starts_with("sim_fault_") => Fraction,
        other => panic!("untrusted_input.rs has no expectation for parameter \"{other}\""),
    }
}

const MEMORY_UNITS_HINT: &str =
    "HINT:  Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\".";
const MICROS_UNITS_HINT: &str =
    "HINT:  Valid units for this parameter are \"us\", \"ms\", and \"s\".";
const TIME_UNITS_HINT: &str =
    "HINT:  Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\".";

/// PostgreSQL's `invalid value for parameter "name": "value"`.
fn invalid(name: &str, value: &str) -> String {
    format!("invalid value for parameter \"{name}\": \"{value}\"")
}

fn is_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" | "y" => Some(true),
        "off" | "false" | "no" | "0" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// An integer setting's value in its base unit, or the full error text it must produce.
fn expected_int(
    name: &str,
    value: &str,
    unit: Unit,
    min: i64,
    max: i64,
    block_size: i64,
) -> Result<i64, String> {
    let v = value.trim();
    let split = v
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map_or(v.len(), |(i, _)| i);
    let (num, suffix) = v.split_at(split);
    let n: i64 = num.parse().map_err(|_| invalid(name, value))?;
    let suffix = suffix.trim();
    if n < 0 && min < 0 && !suffix.is_empty() {
        return Err(format!(
            "{}\nHINT:  A negative value is written without a unit.",
            invalid(name, value)
        ));
    }
    if unit == Unit::Micros {
        let mul: i64 = match suffix {
            "" | "us" => 1,
            "ms" => 1000,
            "s" => 1_000_000,
            _ => return Err(format!("{}\n{MICROS_UNITS_HINT}", invalid(name, value))),
        };
        let us = n.checked_mul(mul).ok_or_else(|| invalid(name, value))?;
        if us < min || us > max {
            return Err(format!(
                "{us} us is outside the valid range for parameter \"{name}\" ({min} us .. {max} us)"
            ));
        }
        return Ok(us);
    }
    if unit == Unit::Millis {
        let (mul, div): (i64, i64) = match suffix {
            "" | "ms" => (1, 1),
            "us" => (1, 1000),
            "s" => (1000, 1),
            "min" => (60_000, 1),
            "h" => (3_600_000, 1),
            "d" => (86_400_000, 1),
            _ => return Err(format!("{}\n{TIME_UNITS_HINT}", invalid(name, value))),
        };
        let ms = n.checked_mul(mul).ok_or_else(|| invalid(name, value))?;
        // Rounded to the nearest millisecond.
        let ms = if div > 1 {
            ms.wrapping_add(div / 2).div_euclid(div)
        } else {
            ms
        };
        if ms < min || ms > max {
            return Err(format!(
                "{ms} ms is outside the valid range for parameter \"{name}\" ({min} ms .. {max} ms)"
            ));
        }
        return Ok(ms);
    }
    let base = if suffix.is_empty() {
        n
    } else {
        if unit == Unit::None {
            return Err(invalid(name, value)); // a plain number takes no unit
        }
        let mul: i64 = match suffix {
            "B" => 1,
            "kB" => 1 << 10,
            "MB" => 1 << 20,
            "GB" => 1 << 30,
            "TB" => 1 << 40,
            _ => return Err(format!("{}\n{MEMORY_UNITS_HINT}", invalid(name, value))),
        };
        let bytes = n.checked_mul(mul).ok_or_else(|| invalid(name, value))?;
        match unit {
            Unit::Bytes => bytes,
            // Rounded to the nearest whole block.
            _ => bytes.saturating_add(block_size / 2) / block_size,
        }
    };
    if base < min || base > max {
        let shown = match (suffix.is_empty(), unit) {
            (true, _) => base.to_string(),
            (false, Unit::Bytes) => format!("{base} B"),
            (false, _) => format!("{base} blocks"),
        };
        return Err(format!(
            "{shown} is outside the valid range for parameter \"{name}\" ({min} .. {max})"
        ));
    }
    Ok(base)
}

/// What `Settings::set(name, value)` must do, with `block_size` the current block size: the
/// new value as a number where it is one (`Ok(None)` otherwise), or the full text of the
/// error.
fn expected_set(name: &str, value: &str, block_size: i64) -> Result<Option<i64>, String> {
    // Quoted at both ends, as in a file: the value is what is inside.
    let quoted = value.len() >= 2 && value.starts_with('\'') && value.ends_with('\'');
    match quoted.then(|| unquote(value)).flatten() {
        Some(inner) => expected_unquoted(name, &inner, block_size),
        None => expected_unquoted(name, value, block_size),
    }
}

/// [`expected_set`] of a value whose quotes, if it had any, are gone (a settings file's line).
fn expected_unquoted(name: &str, value: &str, block_size: i64) -> Result<Option<i64>, String> {
    let canonical = name.trim().to_ascii_lowercase();
    if !PARAMETERS.iter().any(|p| p.name == canonical) {
        return Err(format!(
            "unrecognized configuration parameter \"{canonical}\""
        ));
    }
    let name = canonical.as_str();
    match kind(name) {
        Kind::Text => Ok(None),
        Kind::Fraction => match value.trim().parse::<f64>() {
            Ok(p) if p.is_nan() => Err(invalid(name, value)),
            Ok(p) if (0.0..=1.0).contains(&p) => Ok(None),
            Ok(p) => Err(format!(
                "{p} is outside the valid range for parameter \"{name}\" (0 .. 1)"
            )),
            Err(_) => Err(invalid(name, value)),
        },
        Kind::Bool => match is_bool(value) {
            Some(_) => Ok(None),
            None => Err(format!("parameter \"{name}\" requires a Boolean value")),
        },
        Kind::Enum(values) => {
            let ok = values.iter().any(|v| v.eq_ignore_ascii_case(value.trim()))
                || (matches!(name, "huge_pages" | "buffer_pool_prefault")
                    && is_bool(value).is_some());
            if ok {
                Ok(None)
            } else {
                Err(format!(
                    "{}\nHINT:  Available values: {}.",
                    invalid(name, value),
                    values.join(", ")
                ))
            }
        }
        Kind::Int { unit, min, max } => {
            let v = expected_int(name, value, unit, min, max, block_size).map_err(|e| {
                if name == "buffer_pool_size" {
                    e.replace("(0 .. ", "(0, or 16 .. ")
                } else {
                    e
                }
            })?;
            match name {
                "io_max_concurrency" if v == 0 => {
                    Err("invalid value for parameter \"io_max_concurrency\": 0\n\
                     DETAIL:  Only -1 or values bigger than 0 are valid."
                        .to_string())
                }
                "block_size" if !(v as u64).is_power_of_two() => Err(format!(
                    "{}\nDETAIL:  The block size must be a power of two.",
                    invalid(name, value)
                )),
                "buffer_pool_size" if (1..16).contains(&v) => Err(format!(
                    "{v} blocks is outside the valid range for parameter \"buffer_pool_size\" \
                     (0, or 16 .. 1073741824)\nDETAIL:  0 means the engine brings its own cache."
                )),
                _ => Ok(Some(v)),
            }
        }
    }
}

/// Removes one level of single quotes (`''` stands for one); None if unbalanced.
fn unquote(v: &str) -> Option<String> {
    match v.strip_prefix('\'') {
        Some(inner) => Some(inner.strip_suffix('\'')?.replace("''", "'")),
        None if v.contains('\'') => None,
        None => Some(v.to_string()),
    }
}

/// What `Settings::parse(text, Some(file))` must do: `Ok` or the full text of the first
/// error: the first syntax error (naming file, line and token), else the first bad value,
/// `block_size` lines being applied before the others.
fn expected_parse(text: &str, file: &str) -> Result<(), String> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        // A `#` outside quotes starts a comment.
        let mut quoted = false;
        let end = raw
            .char_indices()
            .find(|&(_, c)| {
                quoted ^= c == '\'';
                c == '#' && !quoted
            })
            .map_or(raw.len(), |(i, _)| i);
        let line = &raw[..end];
        if line.trim().is_empty() {
            continue;
        }
        let syntax = |near: &str| {
            Err(format!(
                "syntax error in file \"{file}\" line {}, near token \"{near}\"",
                i + 1
            ))
        };
        let (name, value) = match line.split_once('=') {
            Some((n, v)) => (n.trim(), v.trim()),
            None => {
                let n = line.split_whitespace().next().unwrap_or("");
                (n, line.trim()[n.len()..].trim())
            }
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            || value.is_empty()
        {
            return syntax(name);
        }
        let Some(value) = unquote(value) else {
            return syntax(value);
        };
        lines.push((name, value));
    }
    let mut block_size = 8192;
    let is_block_size = |name: &str| name.trim().eq_ignore_ascii_case("block_size");
    for (name, value) in lines.iter().filter(|(n, _)| is_block_size(n)) {
        block_size = expected_unquoted(name, value, block_size)?.expect("block_size is a number");
    }
    for (name, value) in lines.iter().filter(|(n, _)| !is_block_size(n)) {
        expected_unquoted(name, value, block_size)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Settings: chosen cases, word for word.
// ---------------------------------------------------------------------------------------

/// One bad value per way a value can be wrong, each with the exact message PostgreSQL would
/// give (its DETAIL and HINT included), through `Settings::set` and through `Aio::start` of
/// a settings file; and spellings that must be accepted. Guards against drifted wording, a
/// lost DETAIL or HINT, and the expectations of this file drifting from the parser (each
/// case also goes through [`expected_set`]).
#[test]
fn each_bad_value_is_refused_in_postgresql_words() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "io_method",
            "x",
            "invalid value for parameter \"io_method\": \"x\"\n\
             HINT:  Available values: sync, worker, io_uring, sim.",
        ),
        (
            "io_worker_kind",
            "fork",
            "invalid value for parameter \"io_worker_kind\": \"fork\"\n\
             HINT:  Available values: thread, process.",
        ),
        (
            "io_uring_fallback",
            "never",
            "invalid value for parameter \"io_uring_fallback\": \"never\"\n\
             HINT:  Available values: error, worker, sync.",
        ),
        (
            "huge_pages",
            "maybe",
            "invalid value for parameter \"huge_pages\": \"maybe\"\n\
             HINT:  Available values: try, on, off.",
        ),
        (
            "direct_io",
            "maybe",
            "parameter \"direct_io\" requires a Boolean value",
        ),
        (
            "io_workers",
            "33",
            "33 is outside the valid range for parameter \"io_workers\" (0 .. 32)",
        ),
        (
            "io_workers",
            "4kB",
            "invalid value for parameter \"io_workers\": \"4kB\"",
        ),
        (
            "max_files",
            "99999999999999999999",
            "invalid value for parameter \"max_files\": \"99999999999999999999\"",
        ),
        (
            "io_advice_budget",
            "-2",
            "-2 is outside the valid range for parameter \"io_advice_budget\" (-1 .. 1048576)",
        ),
        (
            "io_combine_limit",
            "12xB",
            "invalid value for parameter \"io_combine_limit\": \"12xB\"\n\
             HINT:  Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\".",
        ),
        (
            "io_combine_limit",
            "2MB",
            "256 blocks is outside the valid range for parameter \"io_combine_limit\" (1 .. 128)",
        ),
        (
            "block_size",
            "64kB",
            "65536 B is outside the valid range for parameter \"block_size\" (512 .. 32768)",
        ),
        (
            "block_size",
            "3000",
            "invalid value for parameter \"block_size\": \"3000\"\n\
             DETAIL:  The block size must be a power of two.",
        ),
        (
            "io_max_concurrency",
            "0",
            "invalid value for parameter \"io_max_concurrency\": 0\n\
             DETAIL:  Only -1 or values bigger than 0 are valid.",
        ),
        (
            "buffer_pool_size",
            "8",
            "8 blocks is outside the valid range for parameter \"buffer_pool_size\" \
             (0, or 16 .. 1073741824)\nDETAIL:  0 means the engine brings its own cache.",
        ),
        (
            "buffer_pool_size",
            "9223372036854775807B",
            "1125899906842623 blocks is outside the valid range for parameter \
             \"buffer_pool_size\" (0, or 16 .. 1073741824)",
        ),
        (
            "io_worker_idle_timeout",
            "0",
            "0 ms is outside the valid range for parameter \"io_worker_idle_timeout\" \
             (1 ms .. 2147483647 ms)",
        ),
        (
            "io_worker_launch_interval",
            "3 fortnights",
            "invalid value for parameter \"io_worker_launch_interval\": \"3 fortnights\"\n\
             HINT:  Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\".",
        ),
        (
            "io_metod",
            "sync",
            "unrecognized configuration parameter \"io_metod\"",
        ),
        (
            " IO_Metod ",
            "sync",
            "unrecognized configuration parameter \"io_metod\"",
        ),
    ];
    for &(name, value, want) in cases {
        let mut s = Settings::default();
        let e = s.set(name, value).expect_err(want);
        assert_eq!(e.to_string(), want, "set({name:?}, {value:?})");
        assert_eq!(s, Settings::default(), "a failed set changes nothing");
        assert_eq!(
            expected_set(name, value, 8192),
            Err(want.to_string()),
            "this file's expectations for set({name:?}, {value:?})"
        );
        // The same words from a settings file given to `Aio::start`.
        if !name.contains(' ') {
            let text = format!("{name} = '{value}'\n");
            let e = Settings::parse(&text, Some("bad.conf")).unwrap_err();
            assert_eq!(e.to_string(), want, "{text:?}");
        }
    }
    // Accepted spellings: any case, surrounding blanks, boolean words for huge_pages and
    // buffer_pool_prefault, units.
    let mut s = Settings::default();
    for (name, value) in [
        (" IO_Method ", " IO_URING "),
        ("huge_pages", "yes"),
        ("direct_io", "T"),
        ("buffer_pool_size", "0"),
        ("io_combine_limit", "1MB"),
        ("io_worker_launch_interval", "1499us"),
        ("io_max_concurrency", "-1"),
    ] {
        s.set(name, value)
            .unwrap_or_else(|e| panic!("set({name:?}, {value:?}) refused: {e}"));
        assert!(expected_set(name, value, 8192).is_ok(), "{name} = {value}");
    }
    assert_eq!(s.io_method, IoMethodKind::IoUring);
    assert_eq!(s.io_combine_limit, 128);
    assert_eq!(s.io_worker_launch_interval, 1, "rounded to the nearest ms");
}

/// Settings built in code that break a cross-check are refused by `validate` and by
/// `Aio::start` with the message, DETAIL and HINT that explain the combination. Guards
/// against a start that fails with a bare or misleading message (or does not fail).
#[test]
fn bad_combinations_are_refused_with_detail_and_hint() {
    let small_pool = Settings {
        buffer_pool_size: 16,
        ..Settings::default()
    };
    let want = "buffer_pool_size (16 blocks) is too small for max_issuers (64)\n\
                DETAIL:  Every issuer needs two buffers it can pin (the block its caller holds, and the \
                next one a read stream reads), so at least twice max_issuers, as PostgreSQL asks of \
                shared_buffers.\n\
                HINT:  Raise buffer_pool_size, or lower max_issuers.";
    assert_eq!(small_pool.validate().unwrap_err().to_string(), want);
    match Aio::start(small_pool) {
        Err(e @ AioError::Settings(_)) => assert_eq!(e.to_string(), want),
        Err(e) => panic!("expected a settings error, got {e}"),
        Ok(_) => panic!("started with a pool too small for its issuers"),
    }
    let upside_down = Settings {
        io_min_workers: 20,
        ..Settings::default()
    };
    assert_eq!(
        upside_down.validate().unwrap_err().to_string(),
        "io_min_workers (20) is greater than io_max_workers (16)\n\
         DETAIL:  With io_workers = 0 the worker pool starts io_min_workers and never grows \
         past io_max_workers.\n\
         HINT:  Lower io_min_workers, raise io_max_workers, or set io_workers for a fixed pool."
    );
    let slow_fast = Settings {
        sim_latency_min: 500,
        sim_latency_max: 50,
        ..Settings::default()
    };
    assert_eq!(
        slow_fast.validate().unwrap_err().to_string(),
        "sim_latency_min (500us) is greater than sim_latency_max (50us)\n\
         DETAIL:  Each simulated I/O draws its latency between the two.\n\
         HINT:  Lower sim_latency_min, or raise sim_latency_max."
    );
    let out_of_range = Settings {
        io_workers: 33,
        ..Settings::default()
    };
    match Aio::start(out_of_range) {
        Err(e) => assert_eq!(
            e.to_string(),
            "33 is outside the valid range for parameter \"io_workers\" (0 .. 32)"
        ),
        Ok(_) => panic!("started with io_workers = 33"),
    }
}

/// A settings file's syntax errors name the file, the line and the token; a missing file is
/// named with the OS's reason. Guards against a syntax error that does not say where.
#[test]
fn settings_file_errors_say_where() {
    let e =
        Settings::parse("# ok\nio_workers = 4\nio_method = 'sync\n", Some("x.conf")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "syntax error in file \"x.conf\" line 3, near token \"'sync\""
    );
    let e = Settings::parse("io-method = sync\n", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "syntax error in line 1, near token \"io-method\""
    );
    let e = Settings::parse("io_method =\n", Some("y.conf")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "syntax error in file \"y.conf\" line 1, near token \"io_method\""
    );
    let missing = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such.conf");
    let e = Settings::from_file(&missing).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "could not open configuration file \"{}\": No such file or directory (os error 2)",
            missing.display()
        )
    );
}

// ---------------------------------------------------------------------------------------
// Settings: arbitrary input, each result checked against what it must be.
// ---------------------------------------------------------------------------------------

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,24}",
        "-?[0-9]{1,25}",
        "-?[0-9]{1,12} ?(B|kB|MB|GB|TB|k|m|g|KB|mb|blocks|)",
        "-?[0-9]{1,12} ?(us|ms|s|min|h|d|sec|)",
        "'[ -~]{0,10}'?",
        Just(String::new()),
        Just("on".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("18446744073709551616TB".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Every parameter, any value: accepted exactly when it must be, and otherwise refused
    /// with exactly the message (DETAIL and HINT included) that value must produce; a failed
    /// set changes nothing.
    #[test]
    fn any_value_for_any_parameter(k in 0..PARAMETERS.len(), v in value()) {
        let mut s = Settings::default();
        let before = s.clone();
        let name = PARAMETERS[k].name;
        let got = s.set(name, &v).map_err(|e| e.to_string());
        let want = expected_set(name, &v, 8192).map(|_| ());
        prop_assert_eq!(&got, &want, "set({:?}, {:?})", name, v);
        match got {
            // A single value can break only the three cross-checks: a pool too small for the
            // issuers, a worker minimum above the maximum, a simulated latency minimum above
            // the maximum.
            Ok(()) => prop_assert!(
                s.validate().is_ok()
                    || s.buffer_pool_size < 2 * u64::from(s.max_issuers)
                    || (s.io_workers == 0 && s.io_min_workers > s.io_max_workers)
                    || s.sim_latency_min > s.sim_latency_max
            ),
            Err(_) => prop_assert_eq!(&s, &before),
        }
    }

    /// Arbitrary settings text: parsed, or refused with exactly the first error it holds (a
    /// syntax error naming file, line and token, or that line's parameter error).
    #[test]
    fn any_settings_text(text in "[ -~\n#'=]{0,200}") {
        let got = Settings::parse(&text, Some("fuzz.conf")).map(|_| ()).map_err(|e| e.to_string());
        prop_assert_eq!(got, expected_parse(&text, "fuzz.conf"), "{:?}", text);
    }

    /// Near-miss parameter names: a name that is still a parameter sets it; any other is
    /// `unrecognized configuration parameter "…"`, naming it as given (trimmed, lower case).
    #[test]
    fn near_miss_names(k in 0..PARAMETERS.len(), cut in 0usize..4, extra in "[a-zA-Z_ ]{0,3}") {
        let name = PARAMETERS[k].name;
        let name = format!("{}{}", &name[..name.len().saturating_sub(cut)], extra);
        let mut s = Settings::default();
        let got = s.set(&name, "1").map_err(|e| e.to_string());
        prop_assert_eq!(got, expected_set(&name, "1", 8192).map(|_| ()), "{:?}", name);
    }
}

// ---------------------------------------------------------------------------------------
// The introspection socket.
// ---------------------------------------------------------------------------------------

/// Sends `req` and returns the reply.
fn ask(sock: &std::path::Path, req: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(req);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// What the socket must answer to `req` (sent whole, then the write side shut): the key of
/// its reply, or the exact error.
fn expected_reply(req: &[u8]) -> Result<&'static str, String> {
    const COMMANDS: [(&str, &str); 5] = [
        ("aios", "aios"),
        ("waits", "waits"),
        ("stats", "stats"),
        ("all", "pid"),
        ("reset_stats", "reset_stats"),
    ];
    let text = std::str::from_utf8(req).map_err(|_| "request is not UTF-8".to_string())?;
    let line = text.lines().next().unwrap_or("").trim();
    let cmd = if line.starts_with('{') {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("malformed JSON request: {e}"))?;
        v.get("cmd")
            .and_then(|c| c.as_str())
            .ok_or("JSON request lacks a \"cmd\" string")?
            .to_string()
    } else {
        line.to_string()
    };
    COMMANDS
        .iter()
        .find(|(c, _)| *c == cmd)
        .map(|(_, key)| *key)
        .ok_or_else(|| {
            format!(
                "unknown command \"{}\"; valid commands: aios, waits, stats, all, reset_stats",
                cmd.chars().take(40).collect::<String>()
            )
        })
}

/// Arbitrary bytes to a live socket: each request gets JSON back, the reply its command
/// asks for or exactly the error that says why it was refused (not UTF-8, malformed JSON, no
/// "cmd", an unknown command named with the valid ones); the socket goes on serving. Guards
/// against a socket that crashes, hangs or answers garbage with a vague error.
#[test]
fn any_bytes_to_the_socket() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let sock = dir.path().join("aio.sock");
    let _aio = Aio::start(Settings {
        io_method: IoMethodKind::Sync,
        max_issuers: 4,
        introspection_socket: Some(sock.clone()),
        ..Settings::default()
    })
    .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2_000));
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        "[ -~]{0,30}\n?".prop_map(String::into_bytes),
        "\\{\"cmd\": \"[a-z_]{0,10}\"\\}\n".prop_map(String::into_bytes),
        prop::sample::select(vec!["aios", "waits", "stats", "all", "reset_stats"])
            .prop_map(|c| format!("{c}\n").into_bytes()),
    ];
    runner
        .run(&bytes, |req| {
            let reply = ask(&sock, &req);
            let v: serde_json::Value = serde_json::from_str(reply.trim())
                .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {reply:?}")))?;
            let obj = v
                .as_object()
                .ok_or_else(|| TestCaseError::fail("not an object"))?;
            match expected_reply(&req) {
                Ok(key) => prop_assert!(
                    obj.contains_key(key) && !obj.contains_key("error"),
                    "{:?} must be answered with \"{}\": {}",
                    String::from_utf8_lossy(&req),
                    key,
                    reply
                ),
                Err(want) => prop_assert_eq!(
                    obj.get("error").and_then(|e| e.as_str()),
                    Some(want.as_str()),
                    "{:?}",
                    String::from_utf8_lossy(&req)
                ),
            }
            Ok(())
        })
        .unwrap();
    // Still serving.
    assert!(ask(&sock, b"aios\n").contains("\"aios\""));
}
