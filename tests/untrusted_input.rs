//! Untrusted input never panics or hangs, and every rejection says why (issue 15, item 15):
//! the settings parser (arbitrary text, arbitrary values for every parameter, near-miss
//! spellings, huge numbers and units) and the introspection socket (arbitrary bytes sent to a
//! live socket, which must answer each with JSON — a reply or an error in words — and go on
//! serving). proptest generators; the case counts are in docs/reliability.md.

use dbaio::settings::PARAMETERS;
use dbaio::{Aio, IoMethodKind, Settings};
use proptest::prelude::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,24}",
        "-?[0-9]{1,25}",
        "-?[0-9]{1,12} ?(B|kB|MB|GB|TB|k|m|g|KB|mb|blocks|)",
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

    /// Every parameter, any value: accepted, or an error in PostgreSQL's words; a failed set
    /// changes nothing.
    #[test]
    fn any_value_for_any_parameter(k in 0..PARAMETERS.len(), v in value()) {
        let mut s = Settings::default();
        let before = s.clone();
        match s.set(PARAMETERS[k].name, &v) {
            // A single value can break only the two cross-checks: a pool too small for the
            // issuers, a worker minimum above the maximum.
            Ok(()) => prop_assert!(
                s.validate().is_ok()
                    || s.buffer_pool_size < u64::from(s.max_issuers)
                    || (s.io_workers == 0 && s.io_min_workers > s.io_max_workers)
            ),
            Err(e) => {
                prop_assert_eq!(&s, &before);
                let m = e.to_string();
                prop_assert!(
                    m.starts_with("invalid value for parameter")
                        || m.contains("is outside the valid range for parameter")
                        || m.starts_with("parameter \"")
                        || m.starts_with("unrecognized configuration parameter"),
                    "{}", m
                );
            }
        }
    }

    /// Arbitrary settings text.
    #[test]
    fn any_settings_text(text in "[ -~\n#'=]{0,200}") {
        if let Err(e) = Settings::parse(&text, Some("fuzz.conf")) {
            prop_assert!(!e.message.is_empty());
        }
    }

    /// Near-miss parameter names.
    #[test]
    fn near_miss_names(k in 0..PARAMETERS.len(), cut in 0usize..4, extra in "[a-z_]{0,3}") {
        let name = PARAMETERS[k].name;
        let name = format!("{}{}", &name[..name.len().saturating_sub(cut)], extra);
        let mut s = Settings::default();
        if let Err(e) = s.set(&name, "1") {
            prop_assert!(!e.message.is_empty());
        }
    }
}

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
    ];
    runner
        .run(&bytes, |req| {
            let reply = ask(&sock, &req);
            let v: serde_json::Value = serde_json::from_str(reply.trim())
                .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {reply:?}")))?;
            let obj = v
                .as_object()
                .ok_or_else(|| TestCaseError::fail("not an object"))?;
            prop_assert!(
                obj.get("error")
                    .is_some_and(|e| e.as_str().is_some_and(|s| !s.is_empty()))
                    || ["aios", "waits", "stats", "reset_stats", "pid"]
                        .iter()
                        .any(|k| obj.contains_key(*k)),
                "{reply}"
            );
            Ok(())
        })
        .unwrap();
    // Still serving.
    assert!(ask(&sock, b"aios\n").contains("\"aios\""));
}
