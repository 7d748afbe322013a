//! One method, one alignment, for profilers: `cargo run --release --example slice_overhead_one
//! -- sync 100000` runs that many `with_issuer` + `read_exact_into` 4 KiB page-cache reads.
use dbaio::{Aio, IoMethodKind, OpenOptions, Settings};

fn main() {
    let mut args = std::env::args().skip(1);
    let m: IoMethodKind = args.next().unwrap_or("sync".into()).parse().unwrap();
    let n: u64 = args.next().unwrap_or("100000".into()).parse().unwrap();
    let dir = tempfile::tempdir_in(".").unwrap();
    let path = dir.path().join("hot");
    std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
    let aio = Aio::start(Settings {
        io_method: m,
        ..Settings::default()
    })
    .unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let mut out = vec![0u8; 4096];
    for i in 0..n {
        aio.with_issuer(|iss| iss.read_exact_into(&f, (i % 256) * 4096, &mut out))
            .unwrap()
            .unwrap();
    }
}
