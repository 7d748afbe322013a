//! Fire and forget: a detached unlink that fails (missing file, no permission, a directory)
//! calls its `on_error` exactly once, on the `dbaio-notify` thread, with the path and errno,
//! and nothing else breaks; detached successes call nothing; `Aio::shutdown` with detached
//! I/Os still in flight completes them and runs their callbacks before it returns.
//! Guards against: a detached failure's `on_error` called twice, never, with the wrong path or
//! errno, or on another thread than `dbaio-notify`; an error callback run for a success; a failed
//! detached I/O that breaks the issuer's next I/O; and `shutdown` returning before detached writes
//! in flight are done and their callbacks have run.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoError, IoMethodKind, Op, OpenOptions};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Seen = Arc<Mutex<Vec<(IoError, String)>>>;

fn recorder(seen: &Seen) -> impl FnOnce(IoError) + Send + 'static {
    let seen = Arc::clone(seen);
    move |e| {
        let thread = std::thread::current().name().unwrap_or("").to_string();
        seen.lock().unwrap().push((e, thread));
    }
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start(m);
    let me = aio.register_issuer("gc").unwrap();
    let seen: Seen = Arc::default();

    // Three failing unlinks, one good one.
    let missing = d.path().join("never-existed");
    let a_dir = d.path().join("a-directory");
    std::fs::create_dir(&a_dir).unwrap();
    // Refused even to root: /proc files cannot be unlinked (EPERM; EACCES for others).
    let forbidden = Path::new("/proc/version");
    let old_chunk = data_file(&d, "old-chunk", 1 << 20);
    for p in [&missing, &a_dir, &forbidden.to_path_buf(), &old_chunk] {
        me.acquire()
            .unwrap()
            .unlink(c_path(p))
            .on_error(recorder(&seen));
    }
    eventually(30, "three error callbacks", || {
        seen.lock().unwrap().len() >= 3
    });
    eventually(30, "the good unlink", || !exists(&aio, &old_chunk));
    // Nothing else breaks: the issuer reads on.
    let f = aio
        .open(data_file(&d, "live", 65536), &OpenOptions::read_write())
        .unwrap();
    assert_pattern(&me.read_exact_at(&f, 4096, IoBuf::new(4096)).unwrap(), 4096);

    // Detached writes, fsync and ftruncate that succeed call nothing; the data is there.
    me.acquire()
        .unwrap()
        .write(&f, 0, IoBuf::from_slice(&[9u8; 8192]))
        .on_error(recorder(&seen));
    let sync = me.acquire().unwrap().fdatasync(&f);
    me.wait(sync).check().unwrap();
    me.acquire()
        .unwrap()
        .fallocate(&f, 65536, 65536)
        .on_error(recorder(&seen));
    me.acquire().unwrap().fsync(&f).detach();

    // Shutdown with detached writes in flight (two slow, two failing): they are complete and
    // the failures' callbacks have run, each once, when it returns.
    aio.inject_fault(
        FaultRule::new(FaultAction::Delay(Duration::from_millis(20)))
            .op(Op::Writev)
            .on_file(&f)
            .offsets(16384..24576),
    );
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::ENOSPC))
            .op(Op::Writev)
            .on_file(&f)
            .offsets(24576..32768),
    );
    for off in [16384u64, 20480, 24576, 28672] {
        me.acquire()
            .unwrap()
            .write(&f, off, IoBuf::from_slice(&[5u8; 4096]))
            .on_error(recorder(&seen));
    }
    let a2 = aio.clone();
    within(60, "shutdown with detached I/O in flight", move || {
        a2.shutdown()
    });

    let seen = seen.lock().unwrap();
    let errnos: Vec<(String, i32)> = seen
        .iter()
        .map(|(e, _)| (e.path.display().to_string(), e.errno))
        .collect();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let no_permission = if root { libc::EPERM } else { libc::EACCES };
    let mut expected = vec![
        (missing.display().to_string(), libc::ENOENT),
        (a_dir.display().to_string(), libc::EISDIR),
        (forbidden.display().to_string(), no_permission),
    ];
    let live = f.path().display().to_string();
    expected.push((live.clone(), libc::ENOSPC));
    expected.push((live, libc::ENOSPC));
    let mut got = errnos.clone();
    got.sort();
    expected.sort();
    assert_eq!(
        got, expected,
        "each failure once, nothing for the successes"
    );
    for (e, thread) in seen.iter() {
        assert_eq!(
            thread, "dbaio-notify",
            "callbacks run on the notifier thread"
        );
        let words = e.to_string();
        assert!(words.contains(&e.path.display().to_string()), "{words}");
        assert!(words.contains(&format!("errno {}", e.errno)), "{words}");
        if e.op == Op::Unlink {
            assert!(words.contains("could not remove"), "{words}");
        }
    }
    let data = contents(&aio, f.path());
    assert_eq!(&data[..8192], &[9u8; 8192][..]);
    assert_eq!(&data[16384..24576], &[5u8; 8192][..]);
    assert_eq!(data.len(), 131072, "the fallocate happened");
}

crate::for_every_method!(scenario);
