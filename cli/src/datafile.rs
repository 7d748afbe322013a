//! The data file a benchmark runs on, and what the run may do to it.
//!
//! A benchmark never writes to a file or device it did not create unless told to
//! (`--allow-overwrite`): a read workload reads what is there (the file's or device's own
//! size, capped by `--size`); a file is created, or laid out, only when it is missing (and
//! the run says so). Everything that can be checked before writing is checked first (a block
//! fits in the size, the block size suits O_DIRECT, the free space with 64 MiB to spare, a
//! read-only file system); a new file is written as `NAME.dbaio-incomplete` and renamed when
//! whole, so a file at NAME is always complete, and an unfinished layout a killed run left is
//! found, removed and done again; a half-made file is removed when laying it out fails or is
//! interrupted; a file this run created and then could not use is removed; the comparison's
//! temporary file is removed at the end, after a signal, a second signal, or a closed
//! output. See `docs/benchmarks.md`, "Data files", and `docs/reliability.md`, "The command
//! under hostile use".

use crate::interrupt::{INTERRUPTED, Interrupt};
use crate::note;
use std::io::{IsTerminal, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Sizes the way people read them: `512 MiB`, `1 GiB`, `4 KiB`, `100 bytes`.
pub fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (u, name) in UNITS {
        if bytes >= u {
            let v = bytes as f64 / u as f64;
            return if v.fract() == 0.0 {
                format!("{v:.0} {name}")
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    format!("{bytes} bytes")
}

/// Where the data lives and who made it.
#[derive(Debug)]
pub enum DataFile {
    /// A temporary file of this run (the method comparison), removed when this is dropped.
    Temporary {
        /// Removed on drop, with the file in it.
        dir: tempfile::TempDir,
        /// The file.
        path: PathBuf,
    },
    /// Created by this run (it stays).
    Created(PathBuf),
    /// There before the run: a regular file or a block device.
    Existing(PathBuf),
}

impl DataFile {
    /// The path the benchmark opens.
    pub fn path(&self) -> &Path {
        match self {
            DataFile::Temporary { path, .. }
            | DataFile::Created(path)
            | DataFile::Existing(path) => path,
        }
    }
}

/// What a benchmark asks for its data.
pub struct Request<'a> {
    /// `--filename` (None: a temporary file).
    pub filename: Option<&'a Path>,
    /// `--size`, if given.
    pub size: Option<u64>,
    /// The size when none is given and the file is made here.
    pub default_size: u64,
    /// A write workload.
    pub writes: bool,
    /// `--allow-overwrite`.
    pub allow_overwrite: bool,
    /// Block size: the data must hold at least one.
    pub bs: u64,
    /// `--direct`: the block size must suit O_DIRECT (checked before anything is written, and
    /// with one aligned read of the data).
    pub direct: bool,
    /// Show a progress bar while laying a file out (on a terminal).
    pub progress: bool,
}

/// The data a run covers: the file and the bytes of it the I/Os range over.
#[derive(Debug)]
pub struct Prepared {
    /// The file.
    pub file: DataFile,
    /// Bytes covered (a multiple of the block size).
    pub size: u64,
    /// Removes a temporary file if a second signal ends the process at once.
    _cleanup: Option<crate::interrupt::Cleanup>,
}

/// Finds or makes the data file for `req`, saying on stderr what it does. Everything that
/// can be checked before writing is checked first (the size holds a block, the block size
/// suits O_DIRECT, the space); a file this run created and then could not use is removed.
pub fn prepare(req: &Request<'_>, stop: &Interrupt) -> Result<Prepared, String> {
    if req.direct && req.bs % 512 != 0 {
        return Err(direct_refusal(
            req.filename.unwrap_or(Path::new("the data file")),
            req.bs,
            &format!("{} is not a multiple of 512", req.bs),
        ));
    }
    let prepared = match req.filename {
        None => temporary(req, stop)?,
        Some(path) => named(path, req, stop)?,
    };
    if req.direct {
        if let Err(e) = check_direct(prepared.file.path(), req.bs) {
            if let DataFile::Created(p) = &prepared.file {
                let _ = std::fs::remove_file(p);
                note!(
                    "dbaio bench: removed \"{}\", which this run had just created",
                    p.display()
                );
            }
            return Err(e);
        }
    }
    Ok(prepared)
}

/// The comparison's temporary file, in a fresh directory under `$TMPDIR`.
fn temporary(req: &Request<'_>, stop: &Interrupt) -> Result<Prepared, String> {
    let size = req.size.unwrap_or(req.default_size);
    let dir = tempfile::Builder::new()
        .prefix("dbaio-bench")
        .tempdir()
        .map_err(|e| format!("could not create a temporary directory: {e}"))?;
    let cleanup = crate::interrupt::remove_on_forced_exit(dir.path());
    let path = dir.path().join("dbaio-bench.dat");
    let covered = covered(size, req.bs, &path)?;
    lay_out(&path, 0, size, req.progress, stop, None)?;
    Ok(Prepared {
        size: covered,
        file: DataFile::Temporary { dir, path },
        _cleanup: Some(cleanup),
    })
}

/// The file the user named: made when missing, else what it is.
fn named(path: &Path, req: &Request<'_>, stop: &Interrupt) -> Result<Prepared, String> {
    clear_stale_layout(path)?;
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let size = req.size.unwrap_or(req.default_size);
            let covered = covered(size, req.bs, path)?;
            let say = format!(
                "dbaio bench: creating \"{}\" ({}) for this run; it stays afterwards",
                path.display(),
                human(size)
            );
            lay_out(path, 0, size, req.progress, stop, Some(&say))?;
            return Ok(Prepared {
                size: covered,
                file: DataFile::Created(path.to_path_buf()),
                _cleanup: None,
            });
        }
        Err(e) => return Err(format!("could not stat \"{}\": {e}", path.display())),
        Ok(m) => m,
    };
    existing(path, &meta, req, stop)
}

/// A file or block device that was there before the run: read over its own size, written
/// (and grown) only with `--allow-overwrite`.
fn existing(
    path: &Path,
    meta: &std::fs::Metadata,
    req: &Request<'_>,
    stop: &Interrupt,
) -> Result<Prepared, String> {
    let kind = meta.file_type();
    let (what, len) = if kind.is_file() {
        ("file", meta.len())
    } else if kind.is_block_device() {
        ("block device", device_size(path)?)
    } else {
        return Err(format!(
            "\"{}\" is {}: name a file or a block device",
            path.display(),
            file_kind(&kind)
        ));
    };
    if req.writes && !req.allow_overwrite {
        return Err(format!(
            "refusing to write to the existing {what} \"{}\": a write benchmark overwrites its data\nHINT:  Pass --allow-overwrite to write over it, or name a file that does not exist yet.",
            path.display()
        ));
    }
    let mut size = req.size.unwrap_or(len);
    if size > len && !(req.writes && kind.is_file()) {
        note!(
            "dbaio bench: \"{}\" holds {}: the run reads the {} it holds ({} asked; a {what} dbaio did not create is never extended)",
            path.display(),
            human(len),
            human(len),
            human(size)
        );
        size = len;
    }
    let covered = covered(size, req.bs, path)?;
    if size > len {
        // Allowed to overwrite it: it may grow too.
        lay_out(path, len, size, req.progress, stop, None)?;
    }
    Ok(Prepared {
        size: covered,
        file: DataFile::Existing(path.to_path_buf()),
        _cleanup: None,
    })
}

/// What a file that is neither a regular file nor a block device is, in words.
pub fn file_kind(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_file() {
        "a regular file"
    } else {
        "neither a file nor a block device"
    }
}

/// `size` rounded down to whole blocks of `bs`; at least one.
fn covered(size: u64, bs: u64, path: &Path) -> Result<u64, String> {
    let whole = size / bs * bs;
    if whole == 0 {
        return Err(format!(
            "\"{}\" holds {}, less than one block of {}\nHINT:  Use a smaller --bs, or a larger file.",
            path.display(),
            human(size),
            human(bs)
        ));
    }
    Ok(whole)
}

/// A block device's size in bytes.
fn device_size(path: &Path) -> Result<u64, String> {
    let mut f = std::fs::File::open(path)
        .map_err(|e| format!("could not open \"{}\": {e}", path.display()))?;
    f.seek(SeekFrom::End(0))
        .map_err(|e| format!("could not find the size of \"{}\": {e}", path.display()))
}

/// Where a layout of `path` is written until it is whole: `path.dbaio-incomplete`, renamed to
/// `path` once written and synced, so a file at `path` is always complete.
pub fn incomplete_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".dbaio-incomplete");
    path.with_file_name(name)
}

/// Removes the unfinished layout a killed run left next to `path`, saying so; an error if
/// another run is laying it out now (it holds a lock on it).
fn clear_stale_layout(path: &Path) -> Result<(), String> {
    let partial = incomplete_path(path);
    let Ok(f) = std::fs::OpenOptions::new().read(true).open(&partial) else {
        return Ok(());
    };
    if nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err() {
        return Err(format!(
            "\"{}\" is being laid out by another run (\"{}\" is locked)\nHINT:  Wait for it, or name another file.",
            path.display(),
            partial.display()
        ));
    }
    std::fs::remove_file(&partial)
        .map_err(|e| format!("could not remove \"{}\": {e}", partial.display()))?;
    note!(
        "dbaio bench: removed \"{}\", an unfinished layout of \"{}\" (a run that was killed while laying it out); it is laid out again",
        partial.display(),
        path.display()
    );
    Ok(())
}

/// Free bytes for an unprivileged writer on the file system holding `path`'s directory.
pub fn free_space(path: &Path) -> Result<u64, String> {
    Ok(statvfs_of(path)?.1)
}

/// The nearest directory of `path` that exists (`path` itself if it is one).
fn existing_dir(path: &Path) -> PathBuf {
    let mut dir = path.to_path_buf();
    while !dir.is_dir() {
        match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => dir = p.to_path_buf(),
            _ => return PathBuf::from("."),
        }
    }
    dir
}

/// The directory `path` would be made in, whether its file system is read-only, and its free
/// bytes for an unprivileged writer.
fn statvfs_of(path: &Path) -> Result<(PathBuf, u64, bool), String> {
    let dir = existing_dir(path.parent().unwrap_or(Path::new(".")));
    let st = nix::sys::statvfs::statvfs(&dir).map_err(|e| {
        format!(
            "could not check the free space in \"{}\": {e}",
            dir.display()
        )
    })?;
    let read_only = st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY);
    let free = st.blocks_available() as u64 * st.fragment_size() as u64;
    Ok((dir, free, read_only))
}

/// Free space every layout leaves on the file system, for the file system's own needs.
pub const HEADROOM: u64 = 64 << 20;

/// Checks that `need` bytes of `what` (`a 4 GiB data file`) fit at `path` (a file to make, or
/// a file in a directory to make) with [`HEADROOM`] to spare, and that the file system is not
/// read-only; `hint` is what to do instead.
pub fn check_room(path: &Path, need: u64, what: &str, hint: &str) -> Result<(), String> {
    let (dir, free, read_only) = statvfs_of(path)?;
    if read_only {
        return Err(format!(
            "cannot lay out {what} at \"{}\": \"{}\" is on a read-only file system\nHINT:  {hint}",
            path.display(),
            dir.display()
        ));
    }
    if need.saturating_add(HEADROOM) > free {
        return Err(format!(
            "not enough free space for {what} at \"{}\": it needs {}, plus {} kept free for the file system, and {} is free\nHINT:  {hint}",
            path.display(),
            human(need),
            human(HEADROOM),
            human(free)
        ));
    }
    Ok(())
}

/// Writes bytes `from..to` of `path` with non-zero data, after checking the space (and then
/// saying `say`). A new file (`from` 0) is written as `path.dbaio-incomplete` under a lock and
/// renamed when whole; a file that grows is written in place. What was written goes again if
/// that fails or a signal arrives.
fn lay_out(
    path: &Path,
    from: u64,
    to: u64,
    progress: bool,
    stop: &Interrupt,
    say: Option<&str>,
) -> Result<(), String> {
    check_room(
        path,
        to - from,
        &format!("a {} data file", human(to)),
        "Ask for a smaller --size, or name a file on another file system with --filename.",
    )?;
    if let Some(say) = say {
        note!("{say}");
    }
    let t0 = Instant::now();
    let written = if from == 0 {
        lay_out_new(path, to, progress, stop)
    } else {
        grow(path, from, to, progress, stop)
    };
    match written {
        Ok(()) => {
            note!(
                "dbaio bench: laid out \"{}\" ({}) in {:.1} s",
                path.display(),
                human(to - from),
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) if e == INTERRUPTED => Err(e),
        Err(e) => Err(format!("could not lay out \"{}\": {e}", path.display())),
    }
}

/// Writes a new file of `len` bytes as `path.dbaio-incomplete`, locked while it is written,
/// and renames it to `path`; removes it if that fails.
fn lay_out_new(path: &Path, len: u64, progress: bool, stop: &Interrupt) -> Result<(), String> {
    let partial = incomplete_path(path);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&partial)
        .map_err(|e| format!("could not create \"{}\": {e}", partial.display()))?;
    let _cleanup = crate::interrupt::remove_on_forced_exit(&partial);
    let mut f = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| format!("could not lock \"{}\": {e}", partial.display()))?;
    let bar = layout_bar(path, len, progress);
    let written = write_pattern(&mut f, 0, len, stop, bar.as_ref()).and_then(|()| {
        std::fs::rename(&partial, path).map_err(|e| {
            format!(
                "could not rename \"{}\" to \"{}\": {e}",
                partial.display(),
                path.display()
            )
        })
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// Grows the existing file `path` from `from` to `to` bytes in place; back to `from` if that
/// fails.
fn grow(path: &Path, from: u64, to: u64, progress: bool, stop: &Interrupt) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("could not open \"{}\" for writing: {e}", path.display()))?;
    let bar = layout_bar(path, to - from, progress);
    let written = write_pattern(&mut f, from, to - from, stop, bar.as_ref());
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if written.is_err() {
        let _ = f.set_len(from);
    }
    written
}

/// A progress bar over laying out `need` bytes of `path` when `progress` and stderr is a
/// terminal; else None, after saying what is laid out.
fn layout_bar(path: &Path, need: u64, progress: bool) -> Option<indicatif::ProgressBar> {
    let bar = (progress && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(need);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "laying out {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .expect("valid template"),
        );
        b.set_message(path.display().to_string());
        b
    });
    if bar.is_none() {
        note!(
            "dbaio bench: laying out \"{}\" ({}) ...",
            path.display(),
            human(need)
        );
    }
    bar
}

/// Writes `need` bytes of non-zero data into `f` from `from` in 1 MiB pieces, moving `bar` on,
/// and syncs it; stops with `INTERRUPTED` when a signal arrives.
fn write_pattern(
    f: &mut std::fs::File,
    from: u64,
    need: u64,
    stop: &Interrupt,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<(), String> {
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8 | 1)
        .collect();
    f.seek(SeekFrom::Start(from)).map_err(|e| e.to_string())?;
    let mut left = need;
    while left > 0 {
        if stop.raised() {
            return Err(INTERRUPTED.to_string());
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).map_err(|e| e.to_string())?;
        left -= n as u64;
        if let Some(b) = bar {
            b.inc(n as u64);
        }
    }
    f.sync_all().map_err(|e| e.to_string())
}

/// Why `--bs bs` cannot be used with O_DIRECT on `path`, in words.
fn direct_refusal(path: &Path, bs: u64, detail: &str) -> String {
    format!(
        "--bs {bs} cannot be read with O_DIRECT from \"{}\": {detail}\nHINT:  O_DIRECT needs the block size (and offsets) aligned to the device's logical block size, usually 512 or 4096 bytes; use such a --bs, or drop --direct.",
        path.display()
    )
}

/// Checks that an O_DIRECT read of `bs` bytes works on `path` (alignment), before the run,
/// so a block size the device cannot take is an error in words, not a run of failures.
pub fn check_direct(path: &Path, bs: u64) -> Result<(), String> {
    let why = |detail: String| direct_refusal(path, bs, &detail);
    if bs % 512 != 0 {
        return Err(why(format!("{bs} is not a multiple of 512")));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("could not open \"{}\" with O_DIRECT: {e}", path.display()))?;
    let buf = dbaio::IoBuf::new(bs as usize);
    // SAFETY: reads at most `bs` bytes into `buf`, which is `bs` bytes long and lives across
    // the call.
    let r = unsafe {
        libc::pread(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            buf.as_ptr() as *mut libc::c_void,
            bs as usize,
            0,
        )
    };
    if r < 0 {
        return Err(why(std::io::Error::last_os_error().to_string()));
    }
    Ok(())
}
