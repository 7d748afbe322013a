//! The library's layers import only the layers below them: handle ← {method, introspect} ←
//! aio ← bufmgr ← start. Reads every `crate::…` path in `src/` (including names re-exported
//! from the crate root, resolved to the layer that defines them) and fails on any import that
//! goes upwards or sideways. Guards against: the module cycle the tree once had (the handle
//! core importing the buffer pool that sits on top of it) creeping back. CI runs it with the
//! rest of the suite.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Each layer and the layers it may import.
const LAYERS: &[(&str, &[&str])] = &[
    ("handle", &[]),
    ("method", &["handle"]),
    ("introspect", &["handle"]),
    ("aio", &["handle", "method", "introspect"]),
    ("bufmgr", &["handle", "aio"]),
    (
        "start",
        &["handle", "method", "introspect", "aio", "bufmgr"],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of `text` without `//` comments (doc comments name other layers freely).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every path that starts with `crate::` (one per item of a
/// `crate::{a, b::c}` group).
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `dbaio_crate::`, not ours
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').expect("a closed use group");
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    out.push(first.to_string());
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

/// Names the crate root re-exports (`pub use handle::op::{Op, …}`), with their layer.
fn root_exports(lib: &str) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let flat = code(lib).replace('\n', " ");
    for stmt in flat.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let layer = path.split("::").next().unwrap().trim().to_string();
        let names: Vec<&str> = match path.find('{') {
            Some(i) => path[i + 1..path.rfind('}').unwrap()].split(',').collect(),
            None => vec![path.rsplit("::").next().unwrap()],
        };
        for n in names {
            let n = n.trim();
            let n = n.rsplit(" as ").next().unwrap().trim();
            if !n.is_empty() {
                map.insert(n.to_string(), layer.clone());
            }
        }
    }
    map
}

#[test]
fn layers_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let exports = root_exports(&lib);
    let allowed: HashMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let layer = rel
            .iter()
            .next()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs");
        if layer == "lib" {
            continue;
        }
        let may = allowed
            .get(layer)
            .unwrap_or_else(|| panic!("{} is in no known layer; add it to LAYERS", rel.display()));
        let text = code(&std::fs::read_to_string(f).unwrap());
        assert!(
            !text.contains("super::super::"),
            "{}: reaches out of its layer with super::super",
            rel.display()
        );
        for first in crate_paths(&text) {
            checked += 1;
            let target = if allowed.contains_key(first.as_str()) {
                first.clone()
            } else if let Some(l) = exports.get(&first) {
                l.clone()
            } else {
                // A root item that is not a layer (e.g. `crate::page`, from dbaio-pg).
                continue;
            };
            if target != layer && !may.contains(&target.as_str()) {
                wrong.push(format!(
                    "{} ({layer}) uses crate::{first} ({target})",
                    rel.display()
                ));
            }
        }
    }
    assert!(checked > 100, "the scan found only {checked} paths");
    assert!(
        wrong.is_empty(),
        "imports against the layer order:\n{}",
        wrong.join("\n")
    );
    eprintln!(
        "layers: {checked} crate paths in {} files, none upwards",
        files.len()
    );
}

#[test]
fn the_scanner_sees_what_it_must() {
    let paths = crate_paths(&code(
        "use crate::{aio::issuer::Issuer, Aio};\n// crate::bufmgr in a comment\nlet x = crate::handle::op::Op::Readv; dbaio_crate::no",
    ));
    assert_eq!(paths, ["aio", "Aio", "handle"]);
    let ex =
        root_exports("pub use aio::subsystem::Aio;\npub use bufmgr::read::{NoWait, PinnedBuffer};");
    assert_eq!(ex["Aio"], "aio");
    assert_eq!(ex["PinnedBuffer"], "bufmgr");
}

/// Every `.rs` file under `dir`, with its code (comments left out).
fn code_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = code(&std::fs::read_to_string(&f).unwrap());
            (f, text)
        })
        .collect()
}

/// The handle layer knows no engine: not the worker pool (its sizing belongs to the worker
/// method, its snapshot reaches the view through the method), not the rings. It stands on
/// the foundation (`dbaio-sys`) alone. Guards against the handle layer building a
/// `dbaio_workers::PoolSize` or holding the pool's observer again.
#[test]
fn the_handle_layer_knows_no_engine() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/handle");
    let wrong: Vec<String> = code_files(&dir)
        .into_iter()
        .filter(|(_, text)| text.contains("dbaio_workers") || text.contains("dbaio_uring"))
        .map(|(f, _)| f.display().to_string())
        .collect();
    assert!(
        wrong.is_empty(),
        "the handle layer names an engine: {wrong:?}"
    );
}

/// The foundation crate (`sys/`) is the bottom: it depends on no other dbaio crate, in its
/// manifest or its code. Guards against the foundation growing a dependency on an engine
/// or the library above it.
#[test]
fn the_foundation_crate_imports_no_other_dbaio_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("sys/Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .expect("sys/Cargo.toml has dependencies");
    let deps = deps.split("\n[").next().unwrap();
    assert!(
        !deps.contains("dbaio"),
        "sys/Cargo.toml depends on a dbaio crate:\n{deps}"
    );
    let wrong: Vec<String> = code_files(&root.join("sys/src"))
        .into_iter()
        .filter(|(_, text)| {
            ["dbaio_workers", "dbaio_uring", "dbaio_pg", "dbaio::"]
                .iter()
                .any(|c| text.contains(c))
        })
        .map(|(f, _)| f.display().to_string())
        .collect();
    assert!(
        wrong.is_empty(),
        "the foundation names another dbaio crate: {wrong:?}"
    );
    // And the engines stand on it rather than keeping copies of its parts.
    for engine in ["workers", "uring"] {
        let m = std::fs::read_to_string(root.join(engine).join("Cargo.toml")).unwrap();
        assert!(
            m.contains("dbaio-sys"),
            "{engine} does not use the foundation"
        );
    }
}
