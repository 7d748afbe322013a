//! Reading and writing a setting's text: Booleans, integers with memory and time units,
//! choices, quoting and comments — with PostgreSQL's words when the text is wrong. The table
//! (`table.rs`) says which of these each setting uses.

use super::SettingsError;

/// The unit a numeric setting's plain numbers are in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count, without unit.
    None,
    /// Bytes (memory units accepted).
    Bytes,
    /// Blocks of `block_size` bytes (memory units accepted, rounded to whole blocks).
    Blocks,
    /// Milliseconds (time units accepted).
    Millis,
    /// Microseconds (time units accepted).
    Micros,
}

impl Unit {
    /// The unit's name in messages and listings (`B`, `blocks`, `ms`; empty for none).
    pub fn word(self) -> &'static str {
        match self {
            Unit::Bytes => "B",
            Unit::Blocks => "blocks",
            Unit::Millis => "ms",
            Unit::Micros => "us",
            Unit::None => "",
        }
    }
}

/// `invalid value for parameter "name": "value"`.
pub(super) fn invalid(name: &str, value: &str) -> SettingsError {
    SettingsError::new(format!(
        "invalid value for parameter \"{name}\": \"{value}\""
    ))
}

/// One of `values`, in any case; the error lists them as PostgreSQL's HINT does.
pub(super) fn parse_choice(
    name: &str,
    value: &str,
    values: &[&str],
) -> Result<usize, SettingsError> {
    let v = value.trim();
    values
        .iter()
        .position(|spelling| spelling.eq_ignore_ascii_case(v))
        .ok_or_else(|| {
            invalid(name, value).hint(format!("Available values: {}.", values.join(", ")))
        })
}

/// A Boolean in PostgreSQL's spellings (`on`, `off`, `true`, `false`, `yes`, `no`, `1`, `0`
/// and their one-letter forms).
pub(super) fn parse_bool(name: &str, value: &str) -> Result<bool, SettingsError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" | "y" => Ok(true),
        "off" | "false" | "no" | "0" | "f" | "n" => Ok(false),
        _ => Err(SettingsError::new(format!(
            "parameter \"{name}\" requires a Boolean value"
        ))),
    }
}

/// An integer with an optional unit, in the setting's base `unit`, within `min ..= max`.
pub(super) fn parse_int(
    name: &str,
    value: &str,
    unit: Unit,
    block_size: u32,
    (min, max): (i64, i64),
) -> Result<i64, SettingsError> {
    let v = value.trim();
    let split = v
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map_or(v.len(), |(i, _)| i);
    let (num, suffix) = v.split_at(split);
    let n: i64 = num.parse().map_err(|_| invalid(name, value))?;
    let suffix = suffix.trim();
    // -1 (automatic, for the settings that have it) is a flag, not an amount: with a unit it
    // rounded to 0 or to -1 by its size (`-8kB` was "no advice", `-16kB` "automatic").
    // Where no negative value is valid, the range says so.
    if n < 0 && min < 0 && !suffix.is_empty() {
        return Err(invalid(name, value).hint("A negative value is written without a unit."));
    }
    let base = match unit {
        Unit::Millis => millis(name, value, n, suffix)?,
        Unit::Micros => micros(name, value, n, suffix)?,
        _ if suffix.is_empty() => n,
        Unit::None => return Err(invalid(name, value)),
        Unit::Bytes | Unit::Blocks => memory(name, value, n, suffix, unit, block_size)?,
    };
    if base < min || base > max {
        return Err(out_of_range(name, base, !suffix.is_empty(), unit, min, max));
    }
    Ok(base)
}

/// `n` in time unit `suffix`, in milliseconds (PostgreSQL rounds to the nearest one).
fn millis(name: &str, value: &str, n: i64, suffix: &str) -> Result<i64, SettingsError> {
    let (num, den): (i64, i64) = match suffix {
        "" | "ms" => (1, 1),
        "us" => (1, 1000),
        "s" => (1000, 1),
        "min" => (60_000, 1),
        "h" => (3_600_000, 1),
        "d" => (86_400_000, 1),
        _ => {
            return Err(invalid(name, value).hint(
                "Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\".",
            ));
        }
    };
    let ms = n.checked_mul(num).ok_or_else(|| invalid(name, value))?;
    // Far out of any range when it overflows.
    Ok(if den > 1 {
        ms.saturating_add(den / 2).div_euclid(den)
    } else {
        ms
    })
}

/// `n` in time unit `suffix` (a plain number is microseconds), in microseconds.
fn micros(name: &str, value: &str, n: i64, suffix: &str) -> Result<i64, SettingsError> {
    let mult: i64 = match suffix {
        "" | "us" => 1,
        "ms" => 1000,
        "s" => 1_000_000,
        _ => {
            return Err(invalid(name, value)
                .hint("Valid units for this parameter are \"us\", \"ms\", and \"s\"."));
        }
    };
    n.checked_mul(mult).ok_or_else(|| invalid(name, value))
}

/// `n` in memory unit `suffix`, in bytes or (PostgreSQL rounds to the nearest) blocks.
fn memory(
    name: &str,
    value: &str,
    n: i64,
    suffix: &str,
    unit: Unit,
    block_size: u32,
) -> Result<i64, SettingsError> {
    let mult: i64 = match suffix {
        "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => {
            return Err(invalid(name, value).hint(
                "Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\".",
            ));
        }
    };
    let bytes = n.checked_mul(mult).ok_or_else(|| invalid(name, value))?;
    Ok(match unit {
        Unit::Bytes => bytes,
        // A value too large to round is far out of any range anyway.
        _ => bytes.saturating_add(i64::from(block_size) / 2) / i64::from(block_size),
    })
}

/// PostgreSQL's out-of-range message (the unit named when the value was written with one).
fn out_of_range(
    name: &str,
    base: i64,
    had_unit: bool,
    unit: Unit,
    min: i64,
    max: i64,
) -> SettingsError {
    if matches!(unit, Unit::Millis | Unit::Micros) {
        let u = unit.word();
        return SettingsError::new(format!(
            "{base} {u} is outside the valid range for parameter \"{name}\" ({min} {u} .. {max} {u})"
        ));
    }
    let shown = if had_unit {
        format!("{base} {}", unit.word())
    } else {
        base.to_string()
    };
    SettingsError::new(format!(
        "{shown} is outside the valid range for parameter \"{name}\" ({min} .. {max})"
    ))
}

/// A value as PostgreSQL's `SHOW` prints it: memory in the largest unit it fills whole
/// (`128kB`, `8kB`), time likewise (`60s`, `10ms`), anything else as it is.
pub(super) fn pretty(n: i64, unit: Unit, block_size: u32) -> String {
    match unit {
        Unit::Bytes | Unit::Blocks if n > 0 => {
            let bytes = if unit == Unit::Blocks {
                n.saturating_mul(i64::from(block_size))
            } else {
                n
            };
            let (div, word) = [
                (1i64 << 40, "TB"),
                (1 << 30, "GB"),
                (1 << 20, "MB"),
                (1 << 10, "kB"),
            ]
            .into_iter()
            .find(|&(d, _)| bytes % d == 0)
            .unwrap_or((1, "B"));
            format!("{}{word}", bytes / div)
        }
        Unit::Millis if n > 0 => {
            let (div, word) = [
                (86_400_000, "d"),
                (3_600_000, "h"),
                (60_000, "min"),
                (1000, "s"),
            ]
            .into_iter()
            .find(|&(d, _)| n % d == 0)
            .unwrap_or((1, "ms"));
            format!("{}{word}", n / div)
        }
        Unit::Micros if n > 0 => {
            let (div, word) = [(1_000_000, "s"), (1000, "ms")]
                .into_iter()
                .find(|&(d, _)| n % d == 0)
                .unwrap_or((1, "us"));
            format!("{}{word}", n / div)
        }
        _ => n.to_string(),
    }
}

/// A chance from 0 to 1 (`0.001`, `1e-3`, `0`).
pub(super) fn parse_fraction(name: &str, value: &str) -> Result<f64, SettingsError> {
    let p: f64 = value.trim().parse().map_err(|_| invalid(name, value))?;
    if p.is_nan() {
        return Err(invalid(name, value));
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(SettingsError::new(format!(
            "{p} is outside the valid range for parameter \"{name}\" (0 .. 1)"
        )));
    }
    Ok(p)
}

/// The line without its `#` comment (a `#` inside single quotes is text).
pub(super) fn strip_comment(line: &str) -> &str {
    let mut in_quote = false;
    for (i, c) in line.char_indices() {
        match c {
            '\'' => in_quote = !in_quote,
            '#' if !in_quote => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Removes one level of single quotes (`''` inside stands for one quote); None if unbalanced.
pub(super) fn unquote(v: &str) -> Option<String> {
    if let Some(inner) = v.strip_prefix('\'') {
        let inner = inner.strip_suffix('\'')?;
        Some(inner.replace("''", "'"))
    } else if v.contains('\'') {
        None
    } else {
        Some(v.to_string())
    }
}

/// `v` in single quotes, its quotes doubled.
pub(super) fn quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}
