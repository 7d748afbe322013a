//! Per-read cost of `Aio::with_issuer` + `read_exact_into` against a raw `pread` into the same
//! buffer, at several buffer alignments (the kernel's copy speed depends on it), on each method.
use dbaio::{Aio, IoMethodKind, OpenOptions, Settings};
use std::os::unix::fs::FileExt;
use std::time::Instant;

fn main() {
    let dir = tempfile::tempdir_in(".").unwrap();
    let path = dir.path().join("hot");
    std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
    let raw = std::fs::File::open(&path).unwrap();
    let mut backing = vec![0u8; 8192 + 4096];
    let base = backing.as_ptr() as usize;
    let n = 200_000;
    for m in IoMethodKind::ALL {
        let aio = Aio::start(Settings {
            io_method: m,
            ..Settings::default()
        })
        .unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        for shift in [0usize, 16, 2048] {
            let start = (4096 - base % 4096) % 4096 + shift;
            let out = &mut backing[start..start + 4096];
            let t = Instant::now();
            for i in 0..n {
                raw.read_at(out, (i % 256) * 4096).unwrap();
            }
            let rawns = t.elapsed().as_nanos() as f64 / n as f64;
            let t = Instant::now();
            for i in 0..n {
                aio.with_issuer(|iss| iss.read_exact_into(&f, (i % 256) * 4096, out))
                    .unwrap()
                    .unwrap();
            }
            let dbns = t.elapsed().as_nanos() as f64 / n as f64;
            println!(
                "{m:<9} buffer at page+{shift:<5} raw pread {rawns:7.0} ns   dbaio {dbns:7.0} ns   overhead {:6.0} ns",
                dbns - rawns
            );
        }
    }
}
