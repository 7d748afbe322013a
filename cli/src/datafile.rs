//! The data file a benchmark runs on, and what the run may do to it.
//!
//! A benchmark never writes to a file or device it did not create unless told to
//! (`--allow-overwrite`): a read workload reads what is there (the file's or device's own
//! size, capped by `--size`); a file is created, or laid out, only when it is missing (and
//! the run says so), after checking the free space, with progress shown; a half-made file is
//! removed when laying it out fails or is interrupted; the comparison's temporary file is
//! removed at the end, also after Ctrl-C or SIGTERM. See `docs/benchmarks.md`, "Data files".

use crate::interrupt::{INTERRUPTED, Interrupt};
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
}

/// Finds or makes the data file for `req`, saying on stderr what it does.
pub fn prepare(req: &Request<'_>, stop: &Interrupt) -> Result<Prepared, String> {
    let Some(path) = req.filename else {
        let size = req.size.unwrap_or(req.default_size);
        let dir = tempfile::Builder::new()
            .prefix("dbaio-bench")
            .tempdir()
            .map_err(|e| format!("could not create a temporary directory: {e}"))?;
        let path = dir.path().join("dbaio-bench.dat");
        lay_out(&path, 0, size, req.progress, stop, None)?;
        return Ok(Prepared {
            size: covered(size, req.bs, &path)?,
            file: DataFile::Temporary { dir, path },
        });
    };
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let size = req.size.unwrap_or(req.default_size);
            let say = format!(
                "dbaio bench: creating \"{}\" ({}) for this run; it stays afterwards",
                path.display(),
                human(size)
            );
            lay_out(path, 0, size, req.progress, stop, Some(&say))?;
            return Ok(Prepared {
                size: covered(size, req.bs, path)?,
                file: DataFile::Created(path.to_path_buf()),
            });
        }
        Err(e) => return Err(format!("could not stat \"{}\": {e}", path.display())),
        Ok(m) => m,
    };
    let kind = meta.file_type();
    let (what, len) = if kind.is_file() {
        ("file", meta.len())
    } else if kind.is_block_device() {
        ("block device", device_size(path)?)
    } else {
        let is = if kind.is_dir() {
            "a directory"
        } else {
            "neither a file nor a block device"
        };
        return Err(format!(
            "\"{}\" is {is}: name a file or a block device",
            path.display()
        ));
    };
    if req.writes && !req.allow_overwrite {
        return Err(format!(
            "refusing to write to the existing {what} \"{}\": a write benchmark overwrites its data\nHINT:  Pass --allow-overwrite to write over it, or name a file that does not exist yet.",
            path.display()
        ));
    }
    let mut size = req.size.unwrap_or(len);
    if size > len {
        if req.writes && kind.is_file() {
            // Allowed to overwrite it: it may grow too.
            lay_out(path, len, size, req.progress, stop, None)?;
        } else {
            eprintln!(
                "dbaio bench: \"{}\" holds {}: the run reads the {} it holds ({} asked; a {what} dbaio did not create is never extended)",
                path.display(),
                human(len),
                human(len),
                human(size)
            );
            size = len;
        }
    }
    Ok(Prepared {
        size: covered(size, req.bs, path)?,
        file: DataFile::Existing(path.to_path_buf()),
    })
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

/// Free bytes for an unprivileged writer on the file system holding `path`'s directory.
pub fn free_space(path: &Path) -> Result<u64, String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let st = nix::sys::statvfs::statvfs(dir).map_err(|e| {
        format!(
            "could not check the free space in \"{}\": {e}",
            dir.display()
        )
    })?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// Writes bytes `from..to` of `path` (creating it when `from` is 0) with non-zero data, after
/// checking the space (and then saying `say`); removes what it wrote if that fails or a
/// signal arrives.
fn lay_out(
    path: &Path,
    from: u64,
    to: u64,
    progress: bool,
    stop: &Interrupt,
    say: Option<&str>,
) -> Result<(), String> {
    check_room(path, from, to)?;
    if let Some(say) = say {
        eprintln!("{say}");
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(from == 0)
        .create_new(from == 0)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("could not create \"{}\": {e}", path.display()))?;
    let need = to - from;
    let t0 = Instant::now();
    let bar = layout_bar(path, need, progress);
    let written = write_pattern(&mut f, from, need, stop, bar.as_ref());
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match written {
        Ok(()) => {
            eprintln!(
                "dbaio bench: laid out \"{}\" ({}) in {:.1} s",
                path.display(),
                human(need),
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) => {
            // Undo: a file made here goes; one that was there goes back to its length.
            if from == 0 {
                let _ = std::fs::remove_file(path);
            } else {
                let _ = f.set_len(from);
            }
            if e == INTERRUPTED {
                Err(e)
            } else {
                Err(format!("could not lay out \"{}\": {e}", path.display()))
            }
        }
    }
}

/// Checks there is room for bytes `from..to` of `path`, and a little for the file system's own
/// needs.
fn check_room(path: &Path, from: u64, to: u64) -> Result<(), String> {
    let need = to - from;
    let free = free_space(path)?;
    if need.saturating_add(64 << 20) > free {
        return Err(format!(
            "not enough free space for a {} data file at \"{}\": {} free\nHINT:  Ask for a smaller --size, or name a file on another file system with --filename.",
            human(to),
            path.display(),
            human(free)
        ));
    }
    Ok(())
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
        eprintln!(
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

/// Checks that an O_DIRECT read of `bs` bytes works on `path` (alignment), before the run,
/// so a block size the device cannot take is an error in words, not a run of failures.
pub fn check_direct(path: &Path, bs: u64) -> Result<(), String> {
    let why = |detail: String| {
        format!(
            "--bs {bs} cannot be read with O_DIRECT from \"{}\": {detail}\nHINT:  O_DIRECT needs the block size (and offsets) aligned to the device's logical block size, usually 512 or 4096 bytes; use such a --bs, or drop --direct.",
            path.display()
        )
    };
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
