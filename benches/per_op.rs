//! Criterion micro-benchmarks: the cost of one I/O through the handle API on each method,
//! against the raw `pread` it wraps (page-cache hits, so the subsystem's own overhead shows),
//! and the PostgreSQL page checksum's throughput.

use criterion::Criterion;
use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings};
use std::os::unix::fs::FileExt;

fn per_op(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot");
    std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
    let raw = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 4096];
    c.bench_function("raw pread 4k (page cache)", |b| {
        b.iter(|| raw.read_at(&mut buf, 8192).unwrap())
    });
    for m in IoMethodKind::ALL {
        if m == IoMethodKind::IoUring
            && let Err(why) = dbaio::io_uring_available()
        {
            eprintln!("SKIPPED per_op on io_uring: {why}");
            continue;
        }
        let aio = Aio::start(Settings {
            io_method: m,
            ..Settings::default()
        })
        .unwrap();
        let me = aio.register_issuer("bench").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let mut slot = Some(IoBuf::new(4096));
        c.bench_function(&format!("{m} read 4k (page cache)"), |b| {
            b.iter(|| {
                let io = me.acquire().unwrap().read(&f, 8192, slot.take().unwrap());
                slot = Some(me.wait(io).into_buf());
            })
        });
        // What an engine calling from any thread into its own buffer pays (dbaio-redb's read).
        let mut out = vec![0u8; 4096];
        c.bench_function(
            &format!("{m} with_issuer + read_exact_into 4k (page cache)"),
            |b| {
                b.iter(|| {
                    aio.with_issuer(|iss| iss.read_exact_into(&f, 8192, &mut out))
                        .unwrap()
                        .unwrap()
                })
            },
        );
        drop(me);
    }
}

fn checksum(c: &mut Criterion) {
    let page: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut g = c.benchmark_group("page");
    g.throughput(criterion::Throughput::Bytes(8192));
    g.bench_function("pg_checksum_page 8 KiB", |b| {
        b.iter(|| dbaio::page::pg_checksum_page(std::hint::black_box(&page), 3))
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    per_op(&mut c);
    checksum(&mut c);
    c.final_summary();
}
