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

/// The read size of the bulk commands (`prewarm`, `verify`) when no `-c` names
/// `io_combine_limit` or `io_max_combine_limit`: 512 kB, where PostgreSQL's default for every
/// read is 128 kB. A command that reads whole relations gains from fewer, larger requests
/// (on the worker method each one is a hand-off to a worker); docs/benchmarks.md, "Bulk reads
/// of 512 kB".
pub const BULK_READ_BYTES: u32 = 512 * 1024;

/// Whether a `-c NAME=VALUE` in `sets` names setting `name` (names are case-insensitive, as
/// `Settings::set` reads them).
pub fn given(sets: &[String], name: &str) -> bool {
    sets.iter().any(|kv| {
        let k = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
        k.trim().eq_ignore_ascii_case(name)
    })
}

/// The names of the settings `-c` gave (lowercase, as `Settings::set` reads them).
pub fn names_given(sets: &[String]) -> Vec<String> {
    sets.iter()
        .map(|kv| {
            let k = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
            k.trim().to_ascii_lowercase()
        })
        .collect()
}

/// Raises `io_combine_limit` and `io_max_combine_limit` to [`BULK_READ_BYTES`] unless one of
/// them was given with `-c`.
pub fn bulk_reads(s: &mut Settings, sets: &[String]) {
    if !given(sets, "io_combine_limit") && !given(sets, "io_max_combine_limit") {
        let blocks =
            (BULK_READ_BYTES / s.block_size.max(1)).clamp(1, dbaio::settings::MAX_IO_COMBINE_LIMIT);
        s.io_combine_limit = blocks;
        s.io_max_combine_limit = blocks;
    }
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

/// The flags of `dbaio bench` that belong to some workloads only (clap's ids: the long name
/// with `_`), and the workloads each applies to. `--json` and `--workload` apply to all.
pub const BENCH_FLAGS: &[(&str, &[&str])] = &[
    ("filename", &["io"]),
    ("rw", &["io"]),
    ("bs", &["io"]),
    ("iodepth", &["io"]),
    ("direct", &["io"]),
    ("allow_overwrite", &["io"]),
    ("batch", &["io"]),
    ("complete_min", &["io"]),
    ("seed", &["io"]),
    ("plot", &["io"]),
    ("size", &["io", "scan"]),
    ("runtime", &["io", "pool-hit", "stream-hit"]),
    ("io_method", &["io", "scan"]),
    ("io_workers", &["io", "scan"]),
    ("set", &["io", "scan"]),
    ("socket", &["io", "scan"]),
    ("clients", &["scan"]),
    ("advice", &["scan"]),
    ("pattern", &["scan"]),
    ("effective_io_concurrency", &["scan"]),
    ("dir", &["scan"]),
    ("issuers", &["pool-hit", "stream-hit"]),
    ("touch_page", &["pool-hit"]),
];

/// The flag as typed: `--touch-page`, or `-c` for settings.
fn flag_name(id: &str) -> String {
    if id == "set" {
        "-c".to_string()
    } else {
        format!("--{}", id.replace('_', "-"))
    }
}

/// Refuses a flag given on the command line (`given`, clap's ids) that the chosen workload
/// does not use: it would be ignored, silently.
pub fn check_bench_flags(workload: &str, given: &[String]) -> Result<(), String> {
    for (id, workloads) in BENCH_FLAGS {
        if given.iter().any(|g| g == id) && !workloads.contains(&workload) {
            let list: Vec<String> = workloads
                .iter()
                .map(|w| format!("--workload {w}"))
                .collect();
            return Err(format!(
                "{} does not apply to --workload {workload}\nHINT:  It is for {}.",
                flag_name(id),
                list.join(" or ")
            ));
        }
    }
    Ok(())
}

/// Refuses a list of modes that names one twice (`--mode sync,sync`).
pub fn no_repeats(flag: &str, names: &[&str]) -> Result<(), String> {
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(format!(
                "{flag} names \"{n}\" twice\nHINT:  Name each at most once; --rounds repeats runs."
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_commands_read_512kb_unless_told_otherwise() {
        let mut s = settings(&[], &[]).unwrap();
        bulk_reads(&mut s, &[]);
        assert_eq!((s.io_combine_limit, s.io_max_combine_limit), (64, 64));
        // Either limit named with -c leaves both as given (or as PostgreSQL's default).
        for given in [
            vec!["io_combine_limit=8".to_string()],
            vec![" IO_MAX_COMBINE_LIMIT = 16".to_string()],
        ] {
            let mut s = settings(&given, &[]).unwrap();
            let before = (s.io_combine_limit, s.io_max_combine_limit);
            bulk_reads(&mut s, &given);
            assert_eq!(
                (s.io_combine_limit, s.io_max_combine_limit),
                before,
                "{given:?}"
            );
        }
        // 512 kB in blocks of another size.
        let sets = vec!["block_size=32kB".to_string()];
        let mut s = settings(&sets, &[]).unwrap();
        bulk_reads(&mut s, &sets);
        assert_eq!(s.io_combine_limit, 16);
    }

    #[test]
    fn flags_of_another_workload_are_refused() {
        let given = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check_bench_flags("io", &given(&["clients", "json"])).unwrap_err(),
            "--clients does not apply to --workload io\nHINT:  It is for --workload scan."
        );
        assert_eq!(
            check_bench_flags("pool-hit", &given(&["set"])).unwrap_err(),
            "-c does not apply to --workload pool-hit\nHINT:  It is for --workload io or --workload scan."
        );
        assert!(check_bench_flags("scan", &given(&["size", "dir", "set", "json"])).is_ok());
        assert!(check_bench_flags("stream-hit", &given(&["touch_page"])).is_err());
        // Every flag of the table is one of bench's.
        assert!(
            BENCH_FLAGS
                .iter()
                .all(|(id, w)| !id.is_empty() && !w.is_empty())
        );
        assert!(no_repeats("--mode", &["sync", "dont-wait"]).is_ok());
        assert_eq!(
            no_repeats("--mode", &["sync", "dont-wait", "sync"]).unwrap_err(),
            "--mode names \"sync\" twice\nHINT:  Name each at most once; --rounds repeats runs."
        );
    }

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
