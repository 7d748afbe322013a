//! The `dbaio` command's tools (the library half, `dbaio_cli`), each scenario on every
//! method as in the library's conformance suite, whose helpers it shares. One scenario per
//! file under `tools/`.

#[path = "../../../tests/conformance/support.rs"]
#[allow(dead_code)]
mod support;

mod prewarm;
mod verify_cluster;
