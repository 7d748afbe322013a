//! `io_uring_registered_buffers`: the buffer pool's memory is registered with every issuer's
//! ring, reads into the pool are fixed ones and bring the right bytes, and a kernel that
//! refuses the registration (`RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`) costs a warning, not a
//! read. `io_uring_registered_io_bufs`: `IoBuf`s come from memory every ring registers, chunk
//! by chunk, and their reads and writes are fixed ones into and out of the right memory.
//! Guards against fixed reads landing in the wrong memory (a buffer index or address off by
//! one block or one chunk), against a refusal that fails the subsystem or its reads, against
//! registered memory that leaves later issuers' rings no room under `RLIMIT_MEMLOCK`, and
//! against a setting that does nothing.

#[path = "common/skips.rs"]
mod skips;

use dbaio::{
    Aio, IoBuf, IoMethodKind, Issuer, OpenOptions, ReadStream, ReadStreamOptions, Settings,
};
use std::path::Path;

const BLOCKS: u32 = 256;

/// The byte at `offset` of the test relation (differs from block to block and within one).
fn byte_at(offset: u64) -> u8 {
    ((offset / 8192) as u8).wrapping_mul(31) ^ (offset % 251) as u8
}

fn settings(registered: bool) -> Settings {
    Settings {
        io_method: IoMethodKind::IoUring,
        // 64 blocks of 8 kB: a stream of 256 blocks cycles through the pool four times, so
        // reads land everywhere in the registered memory, its last block included.
        buffer_pool_size: 64,
        io_uring_registered_buffers: registered,
        io_uring_registered_io_bufs: registered,
        // Without the prefault thread the pool's memory is ready at once, so each ring
        // registers it when it is made (with it, once the thread is done: the last test).
        buffer_pool_prefault: dbaio::PoolPrefault::Off,
        max_issuers: 4,
        ..Settings::default()
    }
}

fn relation(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("16500");
    let data: Vec<u8> = (0..u64::from(BLOCKS) * 8192).map(byte_at).collect();
    std::fs::write(&path, data).unwrap();
    path
}

/// Streams every block of the relation at `path` on issuer `me` and checks each byte.
fn read_all_and_check(aio: &Aio, me: &Issuer, path: &Path) {
    let f = aio.open(path, &OpenOptions::read()).unwrap();
    let rel = dbaio::Relation::from_file(f).unwrap();
    let opts = ReadStreamOptions {
        full: true,
        ..ReadStreamOptions::default()
    };
    for (k, r) in ReadStream::new(me, &rel, 0..BLOCKS, opts).enumerate() {
        let buf = r.unwrap_or_else(|e| panic!("block {k}: {e}"));
        assert_eq!(buf.block(), k as u32);
        let base = u64::from(buf.block()) * 8192;
        for (i, &b) in buf.page().iter().enumerate() {
            assert_eq!(b, byte_at(base + i as u64), "block {k}, byte {i}");
        }
    }
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dbaio-test")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

#[test]
fn pool_reads_are_fixed_ones_into_the_right_buffers_on_every_ring() {
    if !skips::io_uring_column("registered_buffers") {
        return;
    }
    let d = dir();
    let path = relation(d.path());
    let aio = Aio::start(settings(true)).unwrap();
    let first = aio.register_issuer("first").unwrap();
    read_all_and_check(&aio, &first, &path);
    // A second issuer on another thread while the first lives: its own ring registers the
    // pool too.
    std::thread::scope(|s| {
        s.spawn(|| read_all_and_check(&aio, &aio.register_issuer("second").unwrap(), &path));
    });
    let r = aio
        .registered_buffers()
        .expect("io_uring with the setting on");
    assert_eq!(r.refused, None, "{r:?}");
    assert_eq!(r.rings, 2, "{r:?}");
    // The pool's pages, rounded up to a huge page.
    assert!(r.bytes >= 64 * 8192 && r.bytes % 4096 == 0, "{r:?}");
    assert!(r.fixed_ios > 0, "no read went in as a fixed one: {r:?}");
    // An IoBuf made now comes from the registered slab: its read is a fixed one too.
    let before = r.fixed_ios;
    let me = aio.register_issuer("iobuf").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let got = me.read_exact_at(&f, 8192, IoBuf::new(8192)).unwrap();
    assert!((0..8192).all(|i| got[i] == byte_at(8192 + i as u64)));
    let r = aio.registered_buffers().unwrap();
    assert!(r.fixed_ios > before, "{r:?}");
    assert!(r.io_buf_bytes >= 2 << 20, "{r:?}");
}

#[test]
fn io_buf_reads_and_writes_are_fixed_ones_into_the_right_memory_in_every_chunk() {
    if !skips::io_uring_column("registered io bufs") {
        return;
    }
    let d = dir();
    let path = d.path().join("iobufs");
    let aio = Aio::start(Settings {
        io_uring_registered_buffers: false,
        ..settings(true)
    })
    .unwrap();
    let me = aio.register_issuer("io bufs").unwrap();
    let f = aio
        .open(&path, &OpenOptions::read_write().direct(true))
        .unwrap();
    // Sizes from one block to the largest the slab holds, and one past it (the heap), with
    // enough 1 MiB buffers alive at once that later ones land in later chunks.
    let sizes = [
        4096,
        8192,
        12288,
        65536,
        1 << 20,
        1 << 20,
        1 << 20,
        (1 << 20) + 4096,
    ];
    let mut at = 0u64;
    let mut written = Vec::new();
    let mut kept = Vec::new();
    for (k, &n) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..n).map(|i| byte_at(at + i as u64) ^ k as u8).collect();
        let buf = me.write_all_at(&f, at, IoBuf::from_slice(&data)).unwrap();
        kept.push(buf);
        written.push((at, data));
        at += n as u64;
    }
    let after_writes = aio.registered_buffers().unwrap();
    assert!(after_writes.fixed_ios >= 7, "{after_writes:?}");
    // Read each range back into a fresh buffer, on this thread and on another issuer's.
    let check = |me: &Issuer| {
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        for (at, data) in &written {
            let got = me.read_exact_at(&f, *at, IoBuf::new(data.len())).unwrap();
            assert!(got[..] == data[..], "{} bytes at {at}", data.len());
        }
    };
    check(&me);
    std::thread::scope(|s| {
        s.spawn(|| check(&aio.register_issuer("io bufs 2").unwrap()));
    });
    drop(kept);
    let r = aio.registered_buffers().unwrap();
    assert_eq!(r.refused, None, "{r:?}");
    assert_eq!(r.rings, 0, "the pool is not registered: {r:?}");
    assert!(
        r.io_buf_bytes >= 4 << 20,
        "three 1 MiB buffers span two chunks: {r:?}"
    );
    assert!(r.fixed_ios >= after_writes.fixed_ios + 14, "{r:?}");
}

#[test]
fn with_the_setting_off_nothing_is_registered_and_reads_are_the_same() {
    if !skips::io_uring_column("registered_buffers off") {
        return;
    }
    let d = dir();
    let path = relation(d.path());
    let aio = Aio::start(settings(false)).unwrap();
    read_all_and_check(&aio, &aio.register_issuer("unregistered").unwrap(), &path);
    assert_eq!(aio.registered_buffers(), None);
}

/// One memlock-limited child at a time: the kernel counts pinned memory per user, across
/// processes, so one child's registered chunks would count against the other's limit.
static MEMLOCK_CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The child half of the refusal test: without `CAP_IPC_LOCK` and with a 64 KiB
/// `RLIMIT_MEMLOCK`, the kernel refuses to pin the pool (512 KiB in a 2 MiB mapping).
const CHILD: &str = "DBAIO_TEST_MEMLOCK_CHILD";

#[test]
fn a_refused_registration_is_said_once_and_reads_go_on() {
    if let Some(path) = std::env::var_os(CHILD) {
        return refused_child(Path::new(&path));
    }
    if !skips::io_uring_column("registered_buffers refused") {
        return;
    }
    let d = dir();
    let path = relation(d.path());
    in_limited_child(
        "a_refused_registration_is_said_once_and_reads_go_on",
        CHILD,
        &path,
    );
}

/// Runs test `name` again in a child process with `var` set to `path` (the child runs its
/// memlock-limited half), one such child at a time, and checks it ran and passed.
fn in_limited_child(name: &str, var: &str, path: &Path) {
    let _one = MEMLOCK_CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(var, path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stderr}");
    assert!(
        stderr.contains("child ran"),
        "the child did not run the scenario: {stderr}"
    );
}

fn refused_child(path: &Path) {
    drop_ipc_lock_and_limit_memlock(64 << 10);
    let sock = path.with_file_name("aio.sock");
    let aio = start_limited(Settings {
        introspection_socket: Some(sock.clone()),
        ..settings(true)
    });
    let first = aio.register_issuer("refused-1").unwrap();
    read_all_and_check(&aio, &first, path);
    std::thread::scope(|s| {
        s.spawn(|| read_all_and_check(&aio, &aio.register_issuer("refused-2").unwrap(), path));
    });
    // An IoBuf's read goes on too, unregistered (its chunk is refused as well).
    let f = aio.open(path, &OpenOptions::read()).unwrap();
    let got = first.read_exact_at(&f, 8192, IoBuf::new(8192)).unwrap();
    assert!((0..8192).all(|i| got[i] == byte_at(8192 + i as u64)));
    let r = aio.registered_buffers().unwrap();
    assert_eq!(r.rings, 0, "{r:?}");
    assert_eq!(r.fixed_ios, 0, "{r:?}");
    assert_eq!(r.io_buf_bytes, 0, "{r:?}");
    let why = r.refused.expect("the refusal is kept");
    assert!(
        why.starts_with("the kernel refused to register the buffer pool's ")
            && why.contains(" with an io_uring ring (Cannot allocate memory (os error 12)): ")
            && why.contains("RLIMIT_MEMLOCK")
            && why.ends_with("io_uring_registered_buffers = off stops trying"),
        "{why}"
    );
    // The view says it too, in the same words.
    let all = dbaio::introspect::request(&sock, "all").unwrap();
    assert_eq!(all["registered_buffers"]["refused"], why.as_str(), "{all}");
    assert_eq!(all["registered_buffers"]["rings"], 0, "{all}");
    eprintln!("child ran: {why}");
}

/// The child half of the partial-refusal test.
const PARTIAL_CHILD: &str = "DBAIO_TEST_MEMLOCK_PARTIAL_CHILD";

/// Found by an attack from the caller's side: with a memlock limit that holds some chunks
/// and not others, a ring that registered several new chunks in one call took the kernel's
/// partial count for success, and I/O into the chunks past the limit went in as fixed ones
/// on empty table entries (EFAULT). Ten 1 MiB buffers (five chunks) made before the ring's
/// first submission, under a 5 MiB limit: every write and read succeeds with the right
/// bytes, and the refusal is said, naming the setting that stops it.
#[test]
fn a_partly_refused_chunk_registration_leaves_no_fixed_io_on_an_empty_entry() {
    if let Some(path) = std::env::var_os(PARTIAL_CHILD) {
        return partly_refused_child(Path::new(&path));
    }
    if !skips::io_uring_column("registered io bufs partly refused") {
        return;
    }
    let d = dir();
    in_limited_child(
        "a_partly_refused_chunk_registration_leaves_no_fixed_io_on_an_empty_entry",
        PARTIAL_CHILD,
        &d.path().join("partial"),
    );
}

fn partly_refused_child(path: &Path) {
    drop_ipc_lock_and_limit_memlock(5 << 20);
    let aio = start_limited(Settings {
        io_uring_registered_buffers: false,
        ..settings(true)
    });
    let me = aio.register_issuer("partly refused").unwrap();
    let f = aio
        .open(path, &OpenOptions::read_write().direct(true))
        .unwrap();
    let bufs: Vec<IoBuf> = (0..10).map(|_| IoBuf::new(1 << 20)).collect();
    for (k, b) in bufs.into_iter().enumerate() {
        let data = vec![k as u8 + 1; 1 << 20];
        let mut b = b;
        b.copy_from_slice(&data);
        me.write_all_at(&f, (k as u64) << 20, b)
            .unwrap_or_else(|e| panic!("write {k}: {e}"));
    }
    for k in 0..10u64 {
        let got = me.read_exact_at(&f, k << 20, IoBuf::new(1 << 20)).unwrap();
        assert!(got.iter().all(|&b| b == k as u8 + 1), "read {k}");
    }
    let r = aio.registered_buffers().unwrap();
    assert!(r.io_buf_bytes < 10 << 20, "{r:?}");
    let why = r.refused.expect("the refusal is kept");
    assert!(
        why.contains("RLIMIT_MEMLOCK")
            && why.ends_with("io_uring_registered_io_bufs = off stops trying"),
        "{why}"
    );
    // Not a power of two: refused alike whether the buffer would come from the slab or the
    // heap (the slab once returned a misaligned block).
    assert!(std::panic::catch_unwind(|| IoBuf::with_alignment(100, 3000)).is_err());
    eprintln!("child ran: {why}");
}

/// The child half of the sharing test.
const SHARED_CHILD: &str = "DBAIO_TEST_MEMLOCK_SHARED_CHILD";

/// Each ring used to pin (and count against `RLIMIT_MEMLOCK`) every chunk again: under a
/// common 8 MiB limit the fifth ring was refused. Rings now share a chunk's entry from the
/// first ring that registered it. Under a 5 MiB limit, one ring registers two chunks (4 MiB)
/// and three more rings on other threads read into the same buffers: every read is a fixed
/// one and nothing is refused. Needs Linux 6.12 (sharing an entry), else skipped visibly.
#[test]
fn rings_share_the_chunks_and_count_them_once_against_memlock() {
    if let Some(path) = std::env::var_os(SHARED_CHILD) {
        return shared_chunks_child(Path::new(&path));
    }
    if !skips::io_uring_column("registered io bufs shared") {
        return;
    }
    let release = nix::sys::utsname::uname().unwrap();
    let version: Vec<u32> = release
        .release()
        .to_string_lossy()
        .split(['.', '-'])
        .take(2)
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    if version < vec![6, 12] {
        eprintln!(
            "SKIPPED: sharing registered buffers between rings needs Linux 6.12 ({release:?})"
        );
        return;
    }
    let d = dir();
    in_limited_child(
        "rings_share_the_chunks_and_count_them_once_against_memlock",
        SHARED_CHILD,
        &d.path().join("shared"),
    );
}

fn shared_chunks_child(path: &Path) {
    drop_ipc_lock_and_limit_memlock(5 << 20);
    let aio = start_limited(Settings {
        io_uring_registered_buffers: false,
        ..settings(true)
    });
    let me = aio.register_issuer("first").unwrap();
    let f = aio
        .open(path, &OpenOptions::read_write().direct(true))
        .unwrap();
    let mut bufs = Vec::new();
    for k in 0..4u64 {
        let mut b = IoBuf::new(1 << 20);
        b.fill(k as u8 + 1);
        bufs.push(me.write_all_at(&f, k << 20, b).unwrap());
    }
    for t in 0..3u8 {
        bufs = std::thread::scope(|s| {
            s.spawn(|| {
                let other = aio.register_issuer(&format!("sharer {t}")).unwrap();
                let f = aio.open(path, &OpenOptions::read().direct(true)).unwrap();
                let mut back = Vec::new();
                for (k, mut b) in bufs.into_iter().enumerate() {
                    b.fill(0);
                    let got = other.read_exact_at(&f, (k as u64) << 20, b).unwrap();
                    assert!(
                        got.iter().all(|&x| x == k as u8 + 1),
                        "ring {t}, buffer {k}"
                    );
                    back.push(got);
                }
                back
            })
            .join()
            .unwrap()
        });
    }
    let r = aio.registered_buffers().unwrap();
    assert_eq!(r.refused, None, "{r:?}");
    assert!(r.fixed_ios >= 16, "every write and read a fixed one: {r:?}");
    eprintln!("child ran: {r:?}");
}

/// The child half of the room test.
const ROOM_CHILD: &str = "DBAIO_TEST_MEMLOCK_ROOM_CHILD";

/// Each ring's queues are charged to `RLIMIT_MEMLOCK` too: registering `IoBuf` memory up to
/// the limit left none for the rings of issuers registered later, and under 2 MiB + 64 KiB
/// (one chunk) only 7 of 32 issuers could be registered (found by a caller-side attack,
/// 2026-12-07). The chunks now leave each issuer's ring its room, the limit is said in the
/// refusal, and every issuer registers and reads.
#[test]
fn registered_io_bufs_leave_room_for_every_issuers_ring() {
    if let Some(path) = std::env::var_os(ROOM_CHILD) {
        return room_child(Path::new(&path));
    }
    if !skips::io_uring_column("registered io bufs leave room") {
        return;
    }
    let d = dir();
    let path = relation(d.path());
    in_limited_child(
        "registered_io_bufs_leave_room_for_every_issuers_ring",
        ROOM_CHILD,
        &path,
    );
}

fn room_child(path: &Path) {
    drop_ipc_lock_and_limit_memlock((2 << 20) + (64 << 10));
    let aio = start_limited(Settings {
        io_uring_registered_buffers: false,
        max_issuers: 32,
        ..settings(true)
    });
    let f = aio.open(path, &OpenOptions::read()).unwrap();
    let issuers: Vec<Issuer> = (0..32)
        .map(|k| {
            let me = aio
                .register_issuer(&format!("issuer {k}"))
                .unwrap_or_else(|e| panic!("issuer {k}: {e}"));
            let got = me.read_exact_at(&f, 8192, IoBuf::new(8192)).unwrap();
            assert!((0..8192).all(|i| got[i] == byte_at(8192 + i as u64)));
            me
        })
        .collect();
    let r = aio.registered_buffers().unwrap();
    let why = r.refused.expect("the limit is said");
    assert!(why.contains("RLIMIT_MEMLOCK"), "{why}");
    drop(issuers);
    eprintln!("child ran: {why}");
}

/// Starts a subsystem in a memlock-limited child. The kernel counts pinned memory per user
/// and releases an exited process's rings in the background, so a child started right after
/// another may find its limit still used up by the first for a moment: it tries again (for
/// up to 20 s) while the refusal is the memlock one.
fn start_limited(s: Settings) -> Aio {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match Aio::start(s.clone()) {
            Ok(aio) => return aio,
            Err(e)
                if e.to_string().contains("RLIMIT_MEMLOCK") && std::time::Instant::now() < end =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("start: {e}"),
        }
    }
}

/// Drops `CAP_IPC_LOCK` from every thread's sets (capabilities are per thread, so before any
/// other thread starts: the test harness runs this test alone in the child) and lowers
/// `RLIMIT_MEMLOCK` to `bytes`.
fn drop_ipc_lock_and_limit_memlock(bytes: u64) {
    const CAP_IPC_LOCK: u32 = 14;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two Data structs for version 3, which `d` holds.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    d[0].effective &= !(1 << CAP_IPC_LOCK);
    d[0].permitted &= !(1 << CAP_IPC_LOCK);
    // SAFETY: capset reads the header and two Data structs.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
    assert_eq!(r, 0, "setrlimit: {}", std::io::Error::last_os_error());
    // All but what the probe's own ring takes (a few pages, counted against the limit too).
    wait_until_memlock_is_ours(bytes.saturating_sub(64 << 10).max(bytes / 2));
}

/// The kernel counts pinned memory per user and releases an exited process's rings in the
/// background, so a child started right after another may find part of its limit still held
/// by the first (CI once saw the sharing child refused its second chunk that way, after the
/// partial-refusal child). Waits (for up to 20 s) until a bare ring can pin `bytes`, then
/// unpins them at once (unregistering is synchronous) and goes on.
fn wait_until_memlock_is_ours(bytes: u64) {
    let len = (bytes as usize) & !4095;
    if len == 0 {
        return;
    }
    let mut mem = vec![0u8; len + 4096];
    let start = mem.as_mut_ptr().align_offset(4096);
    let iov = libc::iovec {
        // SAFETY: `start` is below 4096 and `mem` is `len + 4096` long.
        iov_base: unsafe { mem.as_mut_ptr().add(start) }.cast(),
        iov_len: len,
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ring = loop {
        // The ring's own memory counts against the limit as well.
        let ring = io_uring::IoUring::new(2);
        // SAFETY: `mem` outlives the registration, which is undone below before it drops.
        match ring.and_then(|r| unsafe { r.submitter().register_buffers(&[iov]) }.map(|()| r)) {
            Ok(ring) => break ring,
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("the memlock probe could not pin {len} bytes: {e}"),
        }
    };
    ring.submitter()
        .unregister_buffers()
        .expect("unregistering the memlock probe");
}

#[test]
fn with_the_prefault_thread_a_ring_registers_the_pool_once_its_pages_are_in() {
    if !skips::io_uring_column("registered_buffers after prefault") {
        return;
    }
    let d = dir();
    let path = relation(d.path());
    let aio = Aio::start(Settings {
        buffer_pool_prefault: dbaio::PoolPrefault::On,
        ..settings(true)
    })
    .unwrap();
    let me = aio.register_issuer("prefaulted").unwrap();
    // The ring was made before the first buffer was handed out, so before the prefault
    // thread started: nothing registered yet (registering would have faulted the pool in on
    // this thread).
    assert_eq!(aio.registered_buffers().unwrap().rings, 0);
    // Each pass hands out buffers (starting the thread) and submits (where a pending ring
    // registers once the thread is done). A watchdog instead of a hang.
    let start = std::time::Instant::now();
    while aio.registered_buffers().unwrap().rings == 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the pool was never registered: {:?}",
            aio.registered_buffers()
        );
        read_all_and_check(&aio, &me, &path);
    }
    let before = aio.registered_buffers().unwrap().fixed_ios;
    read_all_and_check(&aio, &me, &path);
    let r = aio.registered_buffers().unwrap();
    assert!(r.fixed_ios > before, "{r:?}");
    assert_eq!(r.refused, None);
}
