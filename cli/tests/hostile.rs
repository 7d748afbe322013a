//! The `dbaio` command under hostile use (issue 34), each case run on the real binary: bytes
//! that are not UTF-8, a full or closed standard output, buffers beyond the memory, FIFOs
//! where files belong, pipes closed early, layouts rejected or killed half-way, full and
//! read-only file systems, signals (one and two, SIGINT, SIGTERM), the live screen's terminal
//! (through a pty), settings the command would override, flags of another mode and modes
//! named twice, a plot path that cannot be written, character devices, layouts a signal
//! stops, a socket that does not answer, clients that hold the socket and clients over its
//! cap.
//! Every case asserts the exit status, the words on stderr and what is left on disk; none
//! asserts a time. docs/reliability.md, "The command under hostile use".

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{dbaio, exited, text, walk};

fn dir() -> tempfile::TempDir {
    common::scratch("dbaio-hostile")
}

/// Runs `c` to its end, or kills it after `limit` and fails: a command that hangs.
fn output_within(c: &mut Command, limit: Duration, what: &str) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?} (it hangs); stderr: {}",
                text(&o).1
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sets resource limit `res` to `bytes` in the child before it runs the command.
fn limit(c: &mut Command, res: libc::__rlimit_resource_t, bytes: u64, sigxfsz: libc::sighandler_t) {
    // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, signal).
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            libc::setrlimit(res, &lim);
            let core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &core);
            libc::signal(libc::SIGXFSZ, sigxfsz);
            Ok(())
        });
    }
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../tests/fixtures/pg18/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A stopped cluster: the PostgreSQL 18 fixture's control file and one relation of two real
/// pages.
fn cluster(root: &Path) {
    std::fs::create_dir_all(root.join("global")).unwrap();
    std::fs::create_dir_all(root.join("base/5")).unwrap();
    std::fs::write(root.join("global/pg_control"), fixture("pg_control")).unwrap();
    let mut rel = fixture("16403-block0.page");
    rel.extend(fixture("16403-block1.page"));
    std::fs::write(root.join("base/5/16403"), rel).unwrap();
}

/// A subsystem serving its view on a socket in `d`, for the socket clients.
fn embedder(d: &Path) -> (dbaio::Aio, PathBuf) {
    let sock = d.join("aio.sock");
    let aio = dbaio::Aio::start(dbaio::Settings {
        io_method: dbaio::IoMethodKind::Sync,
        max_issuers: 4,
        introspection_socket: Some(sock.clone()),
        ..dbaio::Settings::default()
    })
    .unwrap();
    (aio, sock)
}

// ---------------------------------------------------------------------------------------
// 1. Panics: arguments that are not UTF-8, a standard output that cannot be written.
// ---------------------------------------------------------------------------------------

/// A file name is bytes: `--filename $'\xff'` is a file like any other (it panicked in
/// `std::env::args`), shown with a replacement character in the JSON; a flag whose value must
/// be text is a usage error, status 2.
#[test]
fn arguments_that_are_not_utf8_are_taken_or_refused_not_panicked_on() {
    let d = dir();
    let name = d.path().join(std::ffi::OsStr::from_bytes(b"data-\xff"));
    let o = dbaio()
        .args([
            "bench",
            "--size",
            "1m",
            "--io-method",
            "sync",
            "--runtime",
            "0.1",
        ])
        .args(["--json", "--filename"])
        .arg(&name)
        .output()
        .unwrap();
    exited(&o, 0, "--filename $'\\xff'");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["filename"].as_str().unwrap().ends_with("data-\u{fffd}"),
        "{v}"
    );
    assert_eq!(std::fs::metadata(&name).unwrap().len(), 1 << 20);
    for json in [false, true] {
        let mut c = dbaio();
        c.args(["bench", "-c"])
            .arg(std::ffi::OsStr::from_bytes(b"io_method=\xff"));
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        let err = exited(&o, 2, "-c $'\\xff'");
        assert!(err.contains("invalid UTF-8"), "{err}");
        if json {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert!(v["error"].as_str().unwrap().contains("UTF-8"), "{v}");
        }
    }
}

/// `dbaio stat > /dev/full` panicked on the failed print: now it is an I/O error, status 1,
/// in words; the same for a bench's table and for --help.
#[test]
fn a_full_standard_output_is_an_error_not_a_panic() {
    let d = dir();
    let (_aio, sock) = embedder(d.path());
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
    let cases: [Vec<&std::ffi::OsStr>; 3] = [
        vec!["stat".as_ref(), "--socket".as_ref(), sock.as_os_str()],
        vec![
            "bench".as_ref(),
            "--filename".as_ref(),
            f.as_os_str(),
            "--io-method".as_ref(),
            "sync".as_ref(),
            "--runtime".as_ref(),
            "0.1".as_ref(),
        ],
        vec!["--help".as_ref()],
    ];
    for args in cases {
        let o = dbaio()
            .args(&args)
            .stdout(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .output()
            .unwrap();
        let err = exited(&o, 1, &format!("{args:?} > /dev/full"));
        assert!(
            err.contains("dbaio: could not write to standard output: No space left on device"),
            "{args:?}: {err}"
        );
    }
}

/// `dbaio stat >&-` and `bench --help >&-` (descriptor 1 closed: EBADF) exited 0 with the
/// output lost: Rust's runtime puts /dev/null on a closed descriptor before `main`. The
/// command looks first now: an I/O error naming standard output, status 1, before anything
/// runs (a bench makes no file).
#[test]
fn a_closed_standard_output_is_an_error() {
    let d = dir();
    let (_aio, sock) = embedder(d.path());
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let cases: [Vec<&std::ffi::OsStr>; 3] = [
        vec!["stat".as_ref(), "--socket".as_ref(), sock.as_os_str()],
        vec!["bench".as_ref(), "--help".as_ref()],
        vec![
            "bench".as_ref(),
            "--size".as_ref(),
            "1m".as_ref(),
            "--io-method".as_ref(),
            "sync".as_ref(),
            "--runtime".as_ref(),
            "0.1".as_ref(),
        ],
    ];
    for args in cases {
        let mut c = dbaio();
        c.args(&args).env("TMPDIR", &tmp);
        // SAFETY: between fork and exec only close(2), which is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                libc::close(1);
                Ok(())
            });
        }
        let o = c.output().unwrap();
        let err = exited(&o, 1, &format!("{args:?} >&-"));
        assert!(
            err.contains("dbaio: could not write to standard output: Bad file descriptor"),
            "{args:?}: {err}"
        );
    }
    assert!(walk(&tmp).is_empty(), "left {:?}", walk(&tmp));
}

/// A pipe: (read end, write end), the write end blocking. `full`: filled up first, so that a
/// write to it waits until the reader reads (the O_NONBLOCK used to fill it is cleared again:
/// the flag belongs to the pipe, which the command shares).
fn pipe(full: bool) -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors, owned by the files below.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    assert_eq!(made, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new and owned by nothing else.
    let (r, mut w) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    if full {
        for piece in [&[b'x'; 4096][..], b"x"] {
            loop {
                match w.write(piece) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    // SAFETY: F_SETFL on a descriptor this function owns.
    assert_eq!(unsafe { libc::fcntl(fds[1], libc::F_SETFL, 0) }, 0);
    (r, w)
}

/// `dbaio stat | true` (the reader gone before the first write): status 141 (128 + SIGPIPE,
/// docs/benchmarks.md, "Data files"), quietly, as for a bench; not a panic, nor status 1.
#[test]
fn stat_into_a_broken_pipe_exits_141_quietly() {
    let d = dir();
    let (_aio, sock) = embedder(d.path());
    for format in ["--json", "--prometheus", "--reset"] {
        let (r, w) = pipe(false);
        drop(r);
        let o = dbaio()
            .args(["stat", format, "--socket"])
            .arg(&sock)
            .stdout(w)
            .output()
            .unwrap();
        let err = exited(&o, 141, &format!("stat {format} | (no reader)"));
        assert!(err.is_empty(), "{format}: quiet: {err}");
    }
}

// ---------------------------------------------------------------------------------------
// 2. Memory: buffers beyond what the process may have are refused before anything is made.
// ---------------------------------------------------------------------------------------

/// `--bs 64m --iodepth 1024` asks for 64 GiB of buffers and aborted on allocation (or was
/// killed by the OOM killer). Under a 4 GiB address-space limit (so the test means the same
/// on every machine, and the unfixed command aborts instead of exhausting this one) it is
/// refused before the data file is made, saying what fits; a run that fits still runs.
#[test]
fn buffers_beyond_the_memory_are_refused_saying_what_fits() {
    let d = dir();
    let f = d.path().join("f");
    let mut c = dbaio();
    c.args(["bench", "--size", "64m", "--bs", "64m", "--iodepth", "1024"])
        .args(["--io-method", "worker", "--runtime", "0.2", "--filename"])
        .arg(&f);
    limit(&mut c, libc::RLIMIT_AS, 4 << 30, libc::SIG_DFL);
    let o = c.output().unwrap();
    let err = exited(&o, 1, "--bs 64m --iodepth 1024");
    assert!(
        err.contains(
            "dbaio: not enough memory for 64 GiB of I/O buffers (--bs 64 MiB x --iodepth 1024)"
        ),
        "{err}"
    );
    assert!(
        err.contains("(RLIMIT_AS)") && err.contains("HINT:  At --bs 64 MiB at most --iodepth "),
        "{err}"
    );
    assert!(!f.exists(), "refused before the data file was made");
    let mut c = dbaio();
    c.args(["bench", "--size", "4m", "--bs", "1m", "--iodepth", "4"])
        .args(["--io-method", "sync", "--runtime", "0.1", "--filename"])
        .arg(&f);
    limit(&mut c, libc::RLIMIT_AS, 4 << 30, libc::SIG_DFL);
    exited(&c.output().unwrap(), 0, "--bs 1m --iodepth 4");
}

// ---------------------------------------------------------------------------------------
// 3. Hangs: a FIFO where a file belongs is refused before it is opened.
// ---------------------------------------------------------------------------------------

/// `prewarm FIFO`, a relation whose second segment is a FIFO, `verify` of a data directory
/// whose `global/pg_control` is a FIFO, and `bench --filename FIFO` blocked for ever in
/// open(2) or read(2): each is now refused, naming what the path is.
#[test]
fn a_fifo_is_refused_not_waited_on() {
    let d = dir();
    let fifo = d.path().join("fifo");
    mkfifo(&fifo);
    let rel = d.path().join("16403");
    std::fs::write(&rel, vec![0u8; 8192]).unwrap();
    mkfifo(&d.path().join("16403.1"));
    let pg = d.path().join("pgdata");
    cluster(&pg);
    std::fs::remove_file(pg.join("global/pg_control")).unwrap();
    mkfifo(&pg.join("global/pg_control"));
    let cases: [(Vec<&std::ffi::OsStr>, &Path); 4] = [
        (vec!["prewarm".as_ref(), fifo.as_os_str()], &fifo),
        (
            vec!["prewarm".as_ref(), rel.as_os_str()],
            &d.path().join("16403.1"),
        ),
        (
            vec!["verify".as_ref(), "-D".as_ref(), pg.as_os_str()],
            &pg.join("global/pg_control"),
        ),
        (
            vec![
                "bench".as_ref(),
                "--io-method".as_ref(),
                "sync".as_ref(),
                "--filename".as_ref(),
                fifo.as_os_str(),
            ],
            &fifo,
        ),
    ];
    for (args, named) in cases {
        let o = output_within(
            dbaio().args(&args),
            Duration::from_secs(60),
            &format!("{args:?}"),
        );
        let err = exited(&o, 1, &format!("{args:?}"));
        assert!(
            err.contains(&format!("\"{}\" is a FIFO (named pipe)", named.display())),
            "{args:?}: {err}"
        );
    }
}

/// A character device (`/dev/zero`: no size, no end) where a relation or a data file belongs:
/// pg_prewarm and pg_checksums read relation files, and a bench's data is a file or a block
/// device, so `prewarm /dev/zero` and `bench --filename /dev/zero` are refused in words,
/// status 1, not read for ever; a write bench does not write to it either.
#[test]
fn a_character_device_is_refused_not_read_for_ever() {
    let zero = Path::new("/dev/zero");
    let cases: [(&[&str], &str); 3] = [
        (
            &["prewarm"],
            "\"/dev/zero\" is a character device, not a relation file",
        ),
        (
            &[
                "bench",
                "--io-method",
                "sync",
                "--rw",
                "read",
                "--runtime",
                "1",
            ],
            "\"/dev/zero\" is a character device: name a file or a block device",
        ),
        (
            &[
                "bench",
                "--io-method",
                "sync",
                "--rw",
                "write",
                "--allow-overwrite",
            ],
            "\"/dev/zero\" is a character device: name a file or a block device",
        ),
    ];
    for (args, words) in cases {
        let mut c = dbaio();
        c.args(args);
        if args[0] == "bench" {
            c.arg("--filename");
        }
        let o = output_within(c.arg(zero), Duration::from_secs(60), &format!("{args:?}"));
        let err = exited(&o, 1, &format!("{args:?} /dev/zero"));
        assert!(err.contains(words), "{args:?}: {err}");
    }
}

// ---------------------------------------------------------------------------------------
// 4. Leftovers: every file dbaio makes goes, or is whole, or is said to be incomplete.
// ---------------------------------------------------------------------------------------

/// `dbaio bench --json | head -1`: the reader goes after the first line. The command died of
/// SIGPIPE and left its temporary data file; now the failed write ends it, status 141
/// (128 + SIGPIPE, as the shell reports a process SIGPIPE killed), quietly, the file removed.
#[test]
fn a_reader_that_goes_away_leaves_no_temporary_file() {
    let tmp = dir();
    let mut child = dbaio()
        .args(["bench", "--json", "--size", "8m", "--runtime", "0.3"])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("{\"io_method\""), "{first}");
    // The reader is gone (head -1 exited): the next JSON line cannot be written.
    let o = child.wait_with_output().unwrap();
    let err = exited(&o, 141, "a closed pipe");
    assert!(!err.contains("dbaio: "), "quiet: {err}");
    assert!(
        walk(tmp.path()).is_empty(),
        "left behind: {:?}",
        walk(tmp.path())
    );
}

/// A file laid out and then refused (a block size O_DIRECT cannot take, a size below one
/// block) stayed behind, and the rerun then refused to write over "the existing file". It is
/// refused before anything is written now, and the rerun runs.
#[test]
fn a_file_refused_after_its_layout_is_not_left_behind() {
    let d = dir();
    let f = d.path().join("w");
    let base = [
        "bench",
        "--io-method",
        "sync",
        "--runtime",
        "0.1",
        "--rw",
        "write",
    ];
    let o_direct = format!(
        "--bs 1000 cannot be read with O_DIRECT from \"{}\": 1000 is not a multiple of 512",
        f.display()
    );
    let one_block = format!(
        "\"{}\" holds 2.9 KiB, less than one block of 4 KiB",
        f.display()
    );
    for (bad, words) in [
        (&["--size", "4m", "--bs", "1000", "--direct"][..], &o_direct),
        (&["--size", "3000", "--bs", "4096"][..], &one_block),
    ] {
        let o = dbaio()
            .args(base)
            .args(bad)
            .arg("--filename")
            .arg(&f)
            .output()
            .unwrap();
        let err = exited(&o, 1, &format!("{bad:?}"));
        assert!(err.contains(words.as_str()), "{bad:?}: {err}");
        assert!(
            walk(d.path()).is_empty(),
            "{bad:?} left {:?}",
            walk(d.path())
        );
    }
    let o = dbaio()
        .args(base)
        .args(["--size", "4m", "--bs", "4096", "--filename"])
        .arg(&f)
        .output()
        .unwrap();
    exited(&o, 0, "the rerun");
}

/// A layout killed half-way (SIGXFSZ at a 1 MiB file size limit stands in for SIGKILL or a
/// power cut) left a short file under the file's name, which the next run read as if whole
/// and exited 0. The layout is written under `NAME.dbaio-incomplete` now and renamed when
/// whole: the name never holds half a file, and the next run removes the unfinished layout,
/// says so and lays the file out again.
#[test]
fn a_half_laid_out_file_is_detected_and_redone() {
    let d = dir();
    let f = d.path().join("data");
    let args = [
        "bench",
        "--size",
        "8m",
        "--io-method",
        "sync",
        "--runtime",
        "0.1",
    ];
    let mut c = dbaio();
    c.args(args).arg("--filename").arg(&f);
    limit(&mut c, libc::RLIMIT_FSIZE, 1 << 20, libc::SIG_DFL);
    let o = c.output().unwrap();
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGXFSZ),
        "killed mid-layout: {:?}",
        text(&o)
    );
    assert!(!f.exists(), "the name holds no half file");
    let o = dbaio()
        .args(args)
        .arg("--filename")
        .arg(&f)
        .output()
        .unwrap();
    let err = exited(&o, 0, "the rerun");
    assert!(
        err.contains("data.dbaio-incomplete\", an unfinished layout of"),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 8 << 20);
    assert_eq!(walk(d.path()), vec![f], "nothing else is left");
}

/// Two signals: the first asks the run to stop, the second ends the process at once — which
/// left the temporary file. The second now removes it before the process ends. (Sent back to
/// back, two signals may arrive as one, and only the first's path ran: the second goes once
/// the first has been seen — the run stopped, its socket is gone — while the process is held
/// writing its table to a full pipe, which it can leave only by the forced exit.)
#[test]
fn a_second_signal_still_removes_the_temporary_file() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let tmp = dir();
        let sock = tmp.path().join("b.sock");
        let (_reader, full) = pipe(true);
        let mut child = dbaio()
            .args([
                "bench",
                "--size",
                "8m",
                "--runtime",
                "60",
                "--io-method",
                "sync",
                "--socket",
            ])
            .arg(&sock)
            .env("TMPDIR", tmp.path())
            .stdout(full)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_ios(&sock, &mut child);
        assert!(
            walk(tmp.path()).iter().any(|p| p.is_file()),
            "the temporary file is there"
        );
        // SAFETY: kill with a valid pid and signal number.
        unsafe { libc::kill(child.id() as i32, sig) };
        let t0 = Instant::now();
        while sock.exists() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "signal {sig}: it ended after one signal, though its output cannot be written"
            );
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "signal {sig}: the run did not stop"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            walk(tmp.path()).iter().any(|p| p.is_file()),
            "signal {sig}: the data file is still there while the table waits"
        );
        // SAFETY: kill with a valid pid and signal number.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.wait_with_output().unwrap();
        exited(&o, 128 + sig, &format!("signal {sig} twice"));
        assert!(
            walk(tmp.path()).is_empty(),
            "signal {sig} left {:?}",
            walk(tmp.path())
        );
    }
}

/// Starts `c`, and once `unfinished` holds (a layout under way: a partial file shorter than it
/// will be) stops it there (SIGSTOP), looks again, sends `sig` and lets it go on, so the signal
/// lands mid-layout however fast the machine lays out. A command whose layout got past the
/// point (`missed`) before it was caught is killed and `None` returned, to try again.
fn signal_mid_layout(
    c: &mut Command,
    sig: i32,
    unfinished: &dyn Fn() -> bool,
    missed: &dyn Fn() -> bool,
) -> Option<Output> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no layout under way within a minute"
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "it ended ({status:?}) before its layout was caught: {}",
                text(&child.wait_with_output().unwrap()).1
            );
        }
        if missed() {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        if unfinished() {
            let mut status = 0;
            // SAFETY: kill and waitpid on our own child; WUNTRACED returns once it has stopped
            // (it reaps it only if it ended, which fails the test).
            unsafe {
                libc::kill(pid, libc::SIGSTOP);
                assert_eq!(libc::waitpid(pid, &mut status, libc::WUNTRACED), pid);
            }
            assert!(libc::WIFSTOPPED(status), "it ended: {status:#x}");
            let caught = unfinished();
            // SAFETY: kill with a valid pid and signal numbers.
            unsafe {
                if caught {
                    libc::kill(pid, sig);
                }
                libc::kill(pid, libc::SIGCONT);
            }
            if caught {
                return Some(child.wait_with_output().unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The length of `p`, if it is there.
fn len_of(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.len())
}

/// SIGINT while a new `--filename` was laid out: the file under the user's name must never be
/// half of one. The unfinished `NAME.dbaio-incomplete` is removed, the name stays free, the
/// words name the signal (they said only "interrupted"), status 130.
#[test]
fn a_layout_interrupted_by_sigint_leaves_no_half_file_under_the_name() {
    let d = dir();
    for attempt in 0.. {
        assert!(attempt < 5, "the layout was never caught under way");
        let f = d.path().join(format!("data{attempt}"));
        let partial = d.path().join(format!("data{attempt}.dbaio-incomplete"));
        let mut c = dbaio();
        c.args(["bench", "--size", "1g", "--io-method", "sync"])
            .args(["--runtime", "60", "--filename"])
            .arg(&f);
        let Some(o) = signal_mid_layout(
            &mut c,
            libc::SIGINT,
            &|| len_of(&partial).is_some_and(|n| n < 1 << 30),
            &|| f.exists(),
        ) else {
            let _ = std::fs::remove_file(&f);
            continue;
        };
        let err = exited(&o, 130, "SIGINT mid-layout");
        assert!(err.contains("dbaio: interrupted by SIGINT"), "{err}");
        assert!(!f.exists(), "a half file under the user's name");
        assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
        return;
    }
}

/// SIGINT while the scan laid out its data in a new `--dir`: the `.part` file it was writing
/// goes, and so does the directory it made (it was left, empty); status 130, the signal named.
#[test]
fn a_scan_layout_interrupted_by_sigint_leaves_nothing() {
    let d = dir();
    for attempt in 0.. {
        assert!(attempt < 5, "the scan's layout was never caught under way");
        let data = d.path().join(format!("scan{attempt}/data"));
        let first = data.join("scan-0.dat.part");
        let mut c = dbaio();
        c.args(["bench", "--workload", "scan", "--size", "1g", "--dir"])
            .arg(&data);
        // The first file caught while it is written: nothing whole in the directory yet.
        let Some(o) = signal_mid_layout(
            &mut c,
            libc::SIGINT,
            &|| len_of(&first).is_some_and(|n| n < 64 << 20),
            &|| data.join("scan-0.dat").exists(),
        ) else {
            let _ = std::fs::remove_dir_all(d.path().join(format!("scan{attempt}")));
            continue;
        };
        let err = exited(&o, 130, "SIGINT mid-layout of the scan");
        assert!(err.contains("dbaio: interrupted by SIGINT"), "{err}");
        assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
        return;
    }
}

// ---------------------------------------------------------------------------------------
// 5. Disk space: checked before every layout, with the headroom said; EROFS told apart.
// ---------------------------------------------------------------------------------------

/// `--workload scan --size 100t` did not check the free space and filled the file system.
/// It is refused before a byte is written, saying the 64 MiB kept free. (The 1 MiB file size
/// limit keeps an unfixed command from filling this machine's disk.)
#[test]
fn the_scan_workload_checks_the_free_space_first() {
    let d = dir();
    let data = d.path().join("scan");
    let mut c = dbaio();
    c.args([
        "bench",
        "--workload",
        "scan",
        "--size",
        "100t",
        "--io-method",
        "sync",
        "--dir",
    ])
    .arg(&data);
    limit(&mut c, libc::RLIMIT_FSIZE, 1 << 20, libc::SIG_IGN);
    let err = exited(&c.output().unwrap(), 1, "--size 100t");
    assert!(
        err.contains("dbaio: not enough free space for the scan data (16 of 16 files of "),
        "{err}"
    );
    assert!(
        err.contains("plus 64 MiB kept free for the file system"),
        "{err}"
    );
    assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
}

/// The free-space check (64 MiB kept free) was asserted for the scan alone: pool-hit and
/// stream-hit lay out their 32 MiB file under $TMPDIR, here a 64 MiB tmpfs (in a mount
/// namespace of the command's own; skipped, and said, where none may be made); unlink-bench
/// its chunks under --dir (under a 1 MiB file size limit, so that an unchecked run cannot
/// fill the disk). Each is refused before a byte is written, status 1, saying the headroom.
#[test]
fn pool_hit_stream_hit_and_unlink_bench_check_the_free_space_first() {
    let d = dir();
    let o = {
        let mut c = dbaio();
        c.args(["unlink-bench", "--chunks", "1024", "--chunk-size", "64g"])
            .args([
                "--gc-cycles",
                "1",
                "--rounds",
                "1",
                "--mode",
                "sync",
                "--dir",
            ])
            .arg(d.path());
        limit(&mut c, libc::RLIMIT_FSIZE, 1 << 20, libc::SIG_IGN);
        c.output().unwrap()
    };
    let err = exited(&o, 1, "unlink-bench --chunks 1024 --chunk-size 64g");
    assert!(
        err.contains("dbaio: not enough free space for a run's files (128.0 TiB: two generations of chunks and the live file)")
            && err.contains("plus 64 MiB kept free for the file system"),
        "{err}"
    );
    assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
    let small = d.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let target = std::ffi::CString::new(small.as_os_str().as_bytes()).unwrap();
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    for workload in ["pool-hit", "stream-hit"] {
        let mut c = dbaio();
        c.args(["bench", "--workload", workload, "--runtime", "0.1"])
            .env("TMPDIR", &small);
        let target = target.clone();
        // SAFETY: between fork and exec only system calls (unshare, open, write, mount).
        unsafe {
            c.pre_exec(move || private_tmpfs(&target, uid, gid, 0, c"size=64m"));
        }
        let o = match c.output() {
            Ok(o) => o,
            Err(e) => {
                eprintln!(
                    "SKIPPED pool_hit_stream_hit_and_unlink_bench_check_the_free_space_first for {workload}: no mount namespace here ({e})"
                );
                return;
            }
        };
        let err = exited(&o, 1, workload);
        assert!(
            err.contains("dbaio: not enough free space for the 32 MiB data file at ")
                && err.contains(
                    "it needs 32 MiB, plus 64 MiB kept free for the file system, and 64 MiB is free"
                ),
            "{workload}: {err}"
        );
    }
}

/// A read-only file system was reported as "not enough free space". Mounted read-only in a
/// mount namespace of the command's own (root, or a user namespace; skipped, and said, where
/// neither is allowed), it is named as such, for bench and the scan workload.
#[test]
fn a_read_only_file_system_is_told_apart_from_a_full_one() {
    let d = dir();
    let ro = d.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let target = std::ffi::CString::new(ro.as_os_str().as_bytes()).unwrap();
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let cases = [
        vec![
            "bench".to_string(),
            "--io-method".into(),
            "sync".into(),
            "--size".into(),
            "1m".into(),
            "--filename".into(),
            ro.join("f").display().to_string(),
        ],
        vec![
            "bench".into(),
            "--workload".into(),
            "scan".into(),
            "--size".into(),
            "16m".into(),
            "--dir".into(),
            ro.join("scan").display().to_string(),
        ],
    ];
    for args in cases {
        let mut c = dbaio();
        c.args(&args);
        let target = target.clone();
        // SAFETY: between fork and exec only system calls (unshare, open, write, mount).
        unsafe { c.pre_exec(move || read_only_mount(&target, uid, gid)) };
        let o = match c.output() {
            Ok(o) => o,
            Err(e) => {
                eprintln!(
                    "SKIPPED a_read_only_file_system_is_told_apart_from_a_full_one: no mount namespace here ({e})"
                );
                return;
            }
        };
        let err = exited(&o, 1, &format!("{args:?}"));
        assert!(
            err.contains("is on a read-only file system"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("free space"), "{args:?}: {err}");
    }
}

/// In the child: a mount namespace of its own (in a user namespace unless root) with a
/// read-only tmpfs on `target`; nothing propagates back.
fn read_only_mount(target: &std::ffi::CStr, uid: u32, gid: u32) -> std::io::Result<()> {
    private_tmpfs(target, uid, gid, libc::MS_RDONLY, c"size=16m")
}

/// In the child: a mount namespace of its own (in a user namespace unless root) with a tmpfs
/// mounted on `target` with `flags` and `options`; nothing propagates back.
fn private_tmpfs(
    target: &std::ffi::CStr,
    uid: u32,
    gid: u32,
    flags: libc::c_ulong,
    options: &std::ffi::CStr,
) -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: system calls with valid, NUL-terminated arguments.
    unsafe {
        if uid == 0 {
            check(libc::unshare(libc::CLONE_NEWNS))?;
        } else {
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
            let write = |path: &std::ffi::CStr, text: &[u8]| {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                let ok = fd >= 0 && libc::write(fd, text.as_ptr().cast(), text.len()) >= 0;
                libc::close(fd);
                ok
            };
            let mut buf = [0u8; 32];
            let map = |id: u32, buf: &mut [u8; 32]| {
                // "0 <id> 1" without allocating.
                let mut digits = [0u8; 10];
                let (mut n, mut v) = (0, id);
                loop {
                    digits[n] = b'0' + (v % 10) as u8;
                    n += 1;
                    v /= 10;
                    if v == 0 {
                        break;
                    }
                }
                buf[..2].copy_from_slice(b"0 ");
                for i in 0..n {
                    buf[2 + i] = digits[n - 1 - i];
                }
                buf[2 + n..4 + n].copy_from_slice(b" 1");
                4 + n
            };
            let len = map(uid, &mut buf);
            let _ = write(c"/proc/self/setgroups", b"deny");
            if !write(c"/proc/self/uid_map", &buf[..len]) {
                return Err(std::io::Error::last_os_error());
            }
            let len = map(gid, &mut buf);
            let _ = write(c"/proc/self/gid_map", &buf[..len]);
        }
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            options.as_ptr().cast(),
        ))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 6. The terminal: the live screen restores it however it ends (through a pty).
// ---------------------------------------------------------------------------------------

/// The live screen in a pty (nix's openpty, 80x24), until it has drawn; then `sig`. Returns
/// the exit status, everything it wrote, and whether the pty is back in canonical mode with
/// echo.
fn live_screen_until(sig: i32, sock: &Path) -> (std::process::ExitStatus, Vec<u8>, bool) {
    use std::os::fd::AsRawFd;
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut c = dbaio();
    c.args(["aios", "--watch", "0.1", "--socket"])
        .arg(sock)
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave.try_clone().unwrap());
    // SAFETY: between fork and exec only system calls: a session of its own, with the pty as
    // its controlling terminal (crossterm may open /dev/tty).
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            Ok(())
        });
    }
    let mut child: Child = c.spawn().unwrap();
    drop(slave);
    let master = std::fs::File::from(pty.master);
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let mut reader = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let t0 = Instant::now();
    // Drawn: the alternate screen entered and the issuers table on it.
    while !(contains(&seen, b"\x1b[?1049h") && contains(&seen, b"oldest")) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the screen never drew: {:?}",
            String::from_utf8_lossy(&seen)
        );
        if let Ok(b) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.extend(b);
        }
    }
    // SAFETY: kill with a valid pid and signal number.
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = child.wait().unwrap();
    while let Ok(b) = rx.recv_timeout(Duration::from_millis(500)) {
        seen.extend(b);
    }
    let t = nix::sys::termios::tcgetattr(&master).unwrap();
    use nix::sys::termios::LocalFlags;
    let cooked = t
        .local_flags
        .contains(LocalFlags::ICANON | LocalFlags::ECHO);
    let _ = master.as_raw_fd();
    (status, seen, cooked)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `aios --watch` killed by SIGINT or SIGTERM left the terminal in the alternate screen and
/// raw mode. It leaves both now, and exits 128 + the signal's number.
#[test]
fn the_live_screen_restores_the_terminal_on_a_signal() {
    let d = dir();
    let (_aio, sock) = embedder(d.path());
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let (status, seen, cooked) = live_screen_until(sig, &sock);
        let last_enter = seen.windows(8).rposition(|w| w == b"\x1b[?1049h").unwrap();
        assert!(
            contains(&seen[last_enter..], b"\x1b[?1049l"),
            "signal {sig}: the alternate screen was not left: {:?}",
            String::from_utf8_lossy(&seen[last_enter..])
        );
        assert!(cooked, "signal {sig}: the terminal was left in raw mode");
        assert_eq!(status.code(), Some(128 + sig), "signal {sig}: {status:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 7. Wrong answers said calmly: settings the command overrides, flags of another mode.
// ---------------------------------------------------------------------------------------

/// `verify -c block_size=4096` on an 8 kB cluster read each page as two and reported false
/// corruption. The block size comes from pg_control: a `-c` that disagrees is refused, and a
/// cluster of another block size is not compatible (pg_checksums' words).
#[test]
fn verify_takes_the_block_size_from_pg_control() {
    let d = dir();
    let pg = d.path().join("pgdata");
    cluster(&pg);
    let o = dbaio()
        .args(["verify", "-c", "block_size=4096", "-D"])
        .arg(&pg)
        .output()
        .unwrap();
    let err = exited(&o, 1, "-c block_size=4096");
    assert!(
        err.contains("-c block_size=4096 does not match the cluster's block size, 8192"),
        "{err}"
    );
    assert!(!err.contains("checksum verification failed"), "{err}");
    let o = dbaio().args(["verify", "-D"]).arg(&pg).output().unwrap();
    let (out, _) = text(&o);
    exited(&o, 0, "the clean cluster");
    assert!(out.contains("Bad checksums:  0"), "{out}");
    // A 16 kB cluster: its control file says so (CRC kept valid).
    let mut control = fixture("pg_control");
    let at = control
        .windows(8)
        .position(|w| w == 1234567.0f64.to_le_bytes())
        .unwrap()
        + 8;
    control[at..at + 4].copy_from_slice(&16384u32.to_le_bytes());
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let crc_off = (64..1020)
        .step_by(4)
        .find(|&o| {
            crc.checksum(&fixture("pg_control")[..o]).to_le_bytes()
                == fixture("pg_control")[o..o + 4]
        })
        .unwrap();
    let sum = crc.checksum(&control[..crc_off]);
    control[crc_off..crc_off + 4].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(pg.join("global/pg_control"), &control).unwrap();
    let o = dbaio().args(["verify", "-D"]).arg(&pg).output().unwrap();
    let err = exited(&o, 1, "a 16 kB cluster");
    assert!(
        err.contains("initialized with block size 16384, but dbaio verify handles block size 8192"),
        "{err}"
    );
}

/// `-c io_max_concurrency` and `-c max_issuers` were silently replaced by the depth and 4:
/// both are kept now, as the run's JSON shows (`io_max_concurrency`, `max_issuers`; the
/// depth and 4 without `-c`), and `io_max_concurrency` is refused when it leaves too few
/// handles for `--iodepth`; the scan refuses fewer issuer slots than clients.
#[test]
fn bench_keeps_dash_c_io_max_concurrency_and_max_issuers_or_says_why_not() {
    let d = dir();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
    let run = |extra: &[&str]| {
        dbaio()
            .args([
                "bench",
                "--io-method",
                "worker",
                "--iodepth",
                "32",
                "--runtime",
                "0.1",
            ])
            .args(extra)
            .arg("--filename")
            .arg(&f)
            .output()
            .unwrap()
    };
    let err = exited(
        &run(&["-c", "io_max_concurrency=8"]),
        1,
        "io_max_concurrency=8",
    );
    assert!(
        err.contains("-c io_max_concurrency=8 leaves 8 handles for --iodepth 32"),
        "{err}"
    );
    for (extra, issuers, handles) in [
        (
            &["-c", "io_max_concurrency=40", "-c", "max_issuers=1"][..],
            1,
            40,
        ),
        (&["-c", "max_issuers=7"][..], 7, 32),
        (&[][..], 4, 32),
    ] {
        let o = run(&[extra, &["--json"]].concat());
        exited(&o, 0, &format!("{extra:?}"));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (v["max_issuers"].as_u64(), v["io_max_concurrency"].as_u64()),
            (Some(issuers), Some(handles)),
            "{extra:?}: {v}"
        );
    }
    let err = exited(
        &dbaio()
            .args([
                "bench",
                "--workload",
                "scan",
                "--clients",
                "4",
                "-c",
                "max_issuers=2",
            ])
            .args(["--size", "16m", "--dir"])
            .arg(d.path().join("scan"))
            .output()
            .unwrap(),
        1,
        "scan max_issuers=2",
    );
    assert!(
        err.contains("-c max_issuers=2 is too few for --clients 4"),
        "{err}"
    );
}

/// Flags the chosen mode does not use were ignored, silently; a mode named twice was run
/// twice. Each is refused, naming where the flag belongs.
#[test]
fn flags_of_another_mode_and_repeated_modes_are_refused() {
    let d = dir();
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "--clients", "4"],
            "--clients does not apply to --workload io\nHINT:  It is for --workload scan.",
        ),
        (
            &["bench", "--workload", "scan", "--runtime", "1"],
            "--runtime does not apply to --workload scan",
        ),
        (
            &["bench", "--workload", "scan", "--filename", "x"],
            "--filename does not apply to --workload scan",
        ),
        (
            &["bench", "--workload", "pool-hit", "-c", "io_method=sync"],
            "-c does not apply to --workload pool-hit",
        ),
        (
            &["bench", "--workload", "stream-hit", "--touch-page"],
            "--touch-page does not apply to --workload stream-hit",
        ),
        (
            &["aios", "--socket", "/nonexistent", "--count", "2"],
            "--count applies only with --watch",
        ),
        (
            &["unlink-bench", "--mode", "sync,dont-wait,sync"],
            "--mode names \"sync\" twice",
        ),
    ];
    for (args, words) in cases {
        let o = dbaio().args(*args).current_dir(d.path()).output().unwrap();
        let err = exited(&o, 1, &args.join(" "));
        assert!(err.contains(words), "{}: {err}", args.join(" "));
    }
    assert!(
        walk(d.path()).is_empty(),
        "nothing was made: {:?}",
        walk(d.path())
    );
}

/// A bench's modes named twice (`--io-method sync --io-method worker`, `--rw`, `--workload`):
/// one silently winning would run what was not meant. Each is clap's usage error, status 2,
/// naming the flag, and nothing runs or is made.
#[test]
fn repeated_bench_modes_are_usage_errors() {
    let d = dir();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--io-method", "sync", "--io-method", "worker"],
            "the argument '--io-method <IO_METHOD>' cannot be used multiple times",
        ),
        (
            &["--rw", "read", "--rw", "write"],
            "the argument '--rw <RW>' cannot be used multiple times",
        ),
        (
            &["--workload", "io", "--workload", "scan"],
            "the argument '--workload <WORKLOAD>' cannot be used multiple times",
        ),
    ];
    for (args, words) in cases {
        let o = dbaio()
            .args(["bench", "--size", "1m", "--runtime", "0.1"])
            .args(args)
            .env("TMPDIR", d.path())
            .current_dir(d.path())
            .output()
            .unwrap();
        let err = exited(&o, 2, &args.join(" "));
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?} ran: {}", text(&o).0);
    }
    assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
}

// ---------------------------------------------------------------------------------------
// 8. Signals and exit status; a partial block.
// ---------------------------------------------------------------------------------------

/// Waits until the bench serving `sock` has completed I/Os (its view says so).
fn wait_for_ios(sock: &Path, child: &mut Child) {
    let t0 = Instant::now();
    loop {
        assert!(child.try_wait().unwrap().is_none(), "the bench ended early");
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the bench never did I/O"
        );
        if let Ok(v) = dbaio::introspect::request(sock, "stats") {
            let ios: u64 = v["stats"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r["ops"].as_array().into_iter().flatten())
                .filter_map(|o| o["count"].as_u64())
                .sum();
            if ios > 0 {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A signal during a bench: the runs measured so far are printed (the JSON line of the
/// interrupted one, with its I/Os), the data file is removed, and the exit status is 128 +
/// the signal's number — SIGTERM exited 130 like SIGINT.
#[test]
fn a_signal_during_a_bench_prints_what_was_measured() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = dir();
        let sock = d.path().join("b.sock");
        let mut child = dbaio()
            .args([
                "bench",
                "--json",
                "--size",
                "8m",
                "--io-method",
                "sync",
                "--runtime",
                "60",
            ])
            .arg("--socket")
            .arg(&sock)
            .env("TMPDIR", d.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_ios(&sock, &mut child);
        // SAFETY: kill with a valid pid and signal number.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.wait_with_output().unwrap();
        let err = exited(&o, 128 + sig, &format!("signal {sig}"));
        let name = if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        assert!(err.contains(&format!("interrupted by {name}")), "{err}");
        // One line per run, then the error (with --json, errors are JSON too).
        let lines: Vec<serde_json::Value> = text(&o)
            .0
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0]["ios"].as_u64().unwrap() > 0, "{lines:?}");
        assert_eq!(lines[1]["error"], format!("interrupted by {name}"));
        assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
    }
}

/// SIGINT during the comparison without `--json`: the table printed must hold the row of the
/// run the signal stopped, with its I/Os (not the header alone), the others said not run,
/// the temporary file removed, status 130.
#[test]
fn a_signal_during_a_bench_prints_the_table_of_what_was_measured() {
    let d = dir();
    let sock = d.path().join("b.sock");
    let mut child = dbaio()
        .args(["bench", "--size", "8m", "--runtime", "60", "--socket"])
        .arg(&sock)
        .env("TMPDIR", d.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first method of the comparison, sync, has completed I/Os.
    wait_for_ios(&sock, &mut child);
    // SAFETY: kill with a valid pid and signal number.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = exited(&o, 130, "SIGINT");
    let (out, _) = text(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].starts_with("method "),
        "a header and one row: {out}"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[0], "sync", "{out}");
    let iops: f64 = row[5].parse().unwrap();
    assert!(iops > 0.0, "the row holds the I/Os measured: {out}");
    assert!(
        err.contains(
            "dbaio bench: 1 of 4 runs measured before the signal; removed the temporary data file"
        ) && err.contains("dbaio: interrupted by SIGINT"),
        "{err}"
    );
    assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
}

/// `unlink-bench` stopped by SIGINT printed nothing of the rounds it had run: the table of
/// those now, and status 130.
#[test]
fn an_interrupted_unlink_bench_prints_the_rounds_it_ran() {
    let d = dir();
    let mut child = dbaio()
        .args([
            "unlink-bench",
            "--chunks",
            "1",
            "--chunk-size",
            "64k",
            "--gc-cycles",
            "1",
        ])
        .args(["--rounds", "100", "--mode", "sync", "--dir"])
        .arg(d.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    // The first round's line ends with its figures ("max … us").
    while !said.contains(" us, ") {
        let mut chunk = [0u8; 256];
        let n = err.read(&mut chunk).unwrap();
        assert!(n > 0, "no round finished: {said}");
        said += &String::from_utf8_lossy(&chunk[..n]);
    }
    // SAFETY: kill with a valid pid and signal number.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        out.lines().any(|l| l.starts_with("sync ")),
        "the table: {out}"
    );
    assert!(walk(d.path()).is_empty(), "left {:?}", walk(d.path()));
}

/// `prewarm` of a file that ends in a partial block said nothing of the bytes it did not
/// read: a warning now (and in the JSON), the exit status still 0.
#[test]
fn prewarm_warns_of_a_trailing_partial_block() {
    let d = dir();
    let rel = d.path().join("16403");
    std::fs::write(&rel, vec![0u8; 10_000]).unwrap();
    let o = dbaio()
        .args(["prewarm", "--buffered", "--json"])
        .arg(&rel)
        .output()
        .unwrap();
    let err = exited(&o, 0, "a partial block");
    assert!(
        err.contains("WARNING:  ") && err.contains("ends in a partial block: its last 1808 bytes"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["blocks"], 1, "{v}");
}

// ---------------------------------------------------------------------------------------
// 9. Words: a timeout, a plot path, where unlink-bench writes, the README.
// ---------------------------------------------------------------------------------------

/// A socket that takes the connection and never answers was reported as `Resource
/// temporarily unavailable (os error 11)`: a timeout in words now.
#[test]
fn a_silent_socket_is_a_timeout_in_words() {
    let d = dir();
    let sock = d.path().join("mute.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let o = dbaio()
        .args(["stat", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    let err = exited(&o, 1, "a silent socket");
    assert!(
        err.contains("no answer from") && err.contains("within 5 s"),
        "{err}"
    );
    assert!(!err.contains("os error 11"), "{err}");
}

/// A plot path that cannot be written failed only after the whole run: it is checked first
/// (nothing runs, nothing is printed, nothing is left), for bench and unlink-bench.
#[test]
fn an_unwritable_plot_path_is_refused_before_the_run() {
    let d = dir();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
    let plot = d.path().join("missing/lat.svg");
    let cases: [Vec<&std::ffi::OsStr>; 2] = [
        vec![
            "bench".as_ref(),
            "--io-method".as_ref(),
            "sync".as_ref(),
            "--runtime".as_ref(),
            "0.2".as_ref(),
            "--filename".as_ref(),
            f.as_os_str(),
        ],
        vec![
            "unlink-bench".as_ref(),
            "--chunks".as_ref(),
            "1".as_ref(),
            "--chunk-size".as_ref(),
            "64k".as_ref(),
            "--gc-cycles".as_ref(),
            "1".as_ref(),
            "--rounds".as_ref(),
            "1".as_ref(),
            "--dir".as_ref(),
            d.path().as_os_str(),
        ],
    ];
    for args in cases {
        let o = dbaio()
            .args(&args)
            .arg("--plot")
            .arg(&plot)
            .output()
            .unwrap();
        let err = exited(&o, 1, &format!("{args:?}"));
        assert!(
            err.contains("to draw the plot: No such file or directory"),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?} ran: {}", text(&o).0);
        assert_eq!(walk(d.path()), vec![f.clone()], "{args:?}");
    }
}

/// `unlink-bench` wrote its 2 GiB of chunks into the current directory by default: it writes
/// under the temporary directory now ($TMPDIR), says where, and removes what it wrote.
#[test]
fn unlink_bench_writes_under_the_temporary_directory_by_default() {
    let (cwd, tmp) = (dir(), dir());
    let o = dbaio()
        .args([
            "unlink-bench",
            "--chunks",
            "1",
            "--chunk-size",
            "64k",
            "--gc-cycles",
            "1",
        ])
        .args(["--rounds", "1", "--mode", "sync"])
        .current_dir(cwd.path())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let err = exited(&o, 0, "unlink-bench");
    assert!(
        err.contains(&format!(
            "in a new directory under \"{}\" (the system's temporary directory",
            tmp.path().display()
        )),
        "{err}"
    );
    assert!(walk(cwd.path()).is_empty() && walk(tmp.path()).is_empty());
}

/// The README says where `cargo build` puts the command, and how to get a data directory to
/// try prewarm and verify on.
#[test]
fn the_readme_says_where_the_binary_is_and_how_to_get_a_data_directory() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(
        readme.contains("`cargo build --release` leaves the command at `target/release/dbaio`")
    );
    assert!(readme.contains("initdb -D ~/pgdata --data-checksums"));
    assert!(readme.contains("dbaio verify --pgdata ~/pgdata"));
}

// ---------------------------------------------------------------------------------------
// 10. The socket serves clients at once.
// ---------------------------------------------------------------------------------------

/// The client cap of the socket (64) was untested: at the cap a new client lets the oldest
/// idle one go, telling it why, and is served. With 100 idle connections open, `stat` is
/// answered and the oldest idle ones read `too many clients at once (limit 64)`. (An idle
/// client is also let go after 1 s with other words: a burst a loaded machine spread over
/// more than that, so that no client was ever over the cap, is tried again.)
#[test]
fn clients_over_the_socket_cap_are_told_so_and_stat_still_answers() {
    let d = dir();
    let (_aio, sock) = embedder(d.path());
    for _attempt in 0..5 {
        let idle: Vec<_> = (0..100)
            .map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap())
            .collect();
        let o = dbaio()
            .args(["stat", "--json", "--socket"])
            .arg(&sock)
            .output()
            .unwrap();
        exited(&o, 0, "stat beside 100 idle clients");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["io_method"], "sync", "{v}");
        let mut told = 0;
        for mut s in idle {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
            let e = v["error"].as_str().unwrap_or_else(|| panic!("{reply}"));
            if e == "too many clients at once (limit 64); this idle one was closed" {
                told += 1;
            } else {
                assert!(e.starts_with("request timed out after 1000 ms"), "{e}");
            }
        }
        if told > 0 {
            return;
        }
    }
    panic!("no client over the cap was ever told so");
}

/// The socket served one client at a time: 300 idle connections, or one client sending its
/// request a byte at a time, held `stat` up until they timed out (or its own 5 s ran out).
/// With them all connected, and the slow one still sending, `stat` is answered.
#[test]
fn idle_and_slow_socket_clients_do_not_hold_up_others() {
    let d = dir();
    let (_aio, sock) = embedder(d.path());
    // Connected from a thread: a server that takes one client at a time lets its backlog
    // fill, and then connect(2) waits.
    let (tx, rx) = std::sync::mpsc::channel();
    let to = sock.clone();
    std::thread::spawn(move || {
        let idle: Vec<_> = (0..300)
            .map(|_| std::os::unix::net::UnixStream::connect(&to).unwrap())
            .collect();
        let _ = tx.send(idle);
    });
    let idle = rx.recv_timeout(Duration::from_secs(60)).expect(
        "300 connections were not taken within a minute: the server takes them one at a time",
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = {
        let (sock, done) = (sock.clone(), done.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !done.load(std::sync::atomic::Ordering::Relaxed)
                && t0.elapsed() < Duration::from_secs(60)
            {
                // A fresh slow client whenever the server lets the last one go.
                let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                while !done.load(std::sync::atomic::Ordering::Relaxed) && s.write_all(b"a").is_ok()
                {
                    std::thread::sleep(Duration::from_millis(50));
                    if t0.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let o = dbaio()
        .args(["stat", "--json", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    slow.join().unwrap();
    exited(&o, 0, "stat beside 300 idle clients and a slow one");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["io_method"], "sync", "{v}");
    drop(idle);
}
