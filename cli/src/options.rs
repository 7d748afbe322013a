//! Turning flags into settings and checked numbers, with PostgreSQL's words. Flags that are
//! settings (`--io-method`, `--io-workers`, `-c name=value`) go through
//! [`dbaio::Settings::set`], the same path as a settings file, so `--io-workers 0` and
//! `-c io_workers=33` get the same error; flags of the command alone are range-checked here
//! the same way (`0 is outside the valid range for option "--iodepth" (1 .. 1024)`).

use dbaio::Settings;
use std::time::Duration;

/// Checks that `value` of option `--name` lies in `min..=max`.
pub fn in_range(name: &str, value: u64, min: u64, max: u64) -> Result<u64, String> {
    if value < min || value > max {
        return Err(format!(
            "{value} is outside the valid range for option \"--{name}\" ({min} .. {max})"
        ));
    }
    Ok(value)
}

/// The longest run a timed option accepts: a week.
const MAX_SECONDS: f64 = 7.0 * 86400.0;

/// Parses a number of seconds for option `--name`: finite, above 0, at most a week.
pub fn seconds(name: &str, text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid value for option \"--{name}\": \"{text}\"\nHINT:  A number of seconds above 0 and at most {MAX_SECONDS:.0}."
        )
    };
    let v: f64 = text.trim().parse().map_err(|_| bad())?;
    if !(v.is_finite() && v > 0.0 && v <= MAX_SECONDS) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(v))
}

/// Settings from the defaults, then `-c name=value` in order, then the flags that name a
/// setting. A flag and a `-c` that disagree are an error; a bad value is the setting's own
/// error.
pub fn settings(sets: &[String], flags: &[(&str, Option<&str>)]) -> Result<Settings, String> {
    let mut s = Settings::default();
    let mut from_c: Vec<(String, String)> = Vec::new();
    for kv in sets {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("invalid -c \"{kv}\": expected -c NAME=VALUE"))?;
        s.set(k.trim(), v.trim()).map_err(|e| e.to_string())?;
        from_c.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    for &(name, value) in flags {
        let Some(value) = value else {
            continue;
        };
        if let Some((_, v)) = from_c.iter().rev().find(|(k, _)| k == name) {
            let mut a = Settings::default();
            let mut b = Settings::default();
            a.set(name, value).map_err(|e| e.to_string())?;
            b.set(name, v).map_err(|e| e.to_string())?;
            if a != b {
                return Err(format!(
                    "conflicting values for {name}: --{} {value} but -c {name}={v}",
                    name.replace('_', "-")
                ));
            }
        }
        s.set(name, value).map_err(|e| e.to_string())?;
    }
    s.validate().map_err(|e| e.to_string())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_like_postgres() {
        assert_eq!(
            in_range("iodepth", 0, 1, 1024).unwrap_err(),
            "0 is outside the valid range for option \"--iodepth\" (1 .. 1024)"
        );
        for bad in ["-1", "inf", "NaN", "1e300", "0", "", "3s"] {
            let e = seconds("runtime", bad).unwrap_err();
            assert!(
                e.starts_with("invalid value for option \"--runtime\""),
                "{e}"
            );
        }
        assert_eq!(
            seconds("runtime", "0.5").unwrap(),
            Duration::from_millis(500)
        );
        let e = settings(&["io_workers=33".into()], &[]).unwrap_err();
        assert_eq!(
            e,
            "33 is outside the valid range for parameter \"io_workers\" (0 .. 32)"
        );
        let e = settings(&[], &[("io_workers", Some("-1"))]).unwrap_err();
        assert_eq!(
            e,
            "-1 is outside the valid range for parameter \"io_workers\" (0 .. 32)"
        );
        let e = settings(&["io_method=sync".into()], &[("io_method", Some("worker"))]).unwrap_err();
        assert!(e.starts_with("conflicting values for io_method"), "{e}");
        assert!(settings(&["io_method=sync".into()], &[("io_method", Some("sync"))]).is_ok());
        assert!(
            settings(&["nonsense".into()], &[])
                .unwrap_err()
                .contains("-c NAME=VALUE")
        );
    }
}
