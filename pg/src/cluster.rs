//! A stopped PostgreSQL data directory, as `pg_checksums` sees it: the control file's state and
//! data checksum version, and the relation files to check (under `global`, `base` and
//! `pg_tblspc`, skipping the same files and temporary directories, with each file's segment
//! number). See `docs/design.md`, "PostgreSQL's formats".

use std::path::{Path, PathBuf};

/// Blocks per segment file (1 GiB of 8 KiB blocks, PostgreSQL's default `RELSEG_SIZE`).
pub const RELSEG_SIZE: u32 = 131_072;
/// The only block size `dbaio verify` handles (PostgreSQL's default).
pub const BLCKSZ: usize = 8192;

/// What the control file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    /// `pg_control_version` (1800 for PostgreSQL 18).
    pub version: u32,
    /// `state` (1: shut down, 2: shut down in recovery).
    pub state: i32,
    /// `data_checksum_version` (0: checksums off).
    pub data_checksum_version: u32,
}

/// Reads `global/pg_control`. The CRC-32C at the end of the struct locates it: the struct
/// ends `data_checksum_version` (u32), [`default_char_signedness` (bool) from 18 on],
/// `mock_authentication_nonce` (32 bytes), `crc`.
pub fn read_control(pgdata: &Path) -> Result<Control, String> {
    let path = pgdata.join("global/pg_control");
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "could not open file \"{}\" for reading: {e}",
            path.display()
        )
    })?;
    if bytes.len() < 64 {
        return Err(format!(
            "\"{}\" is too short to be a control file",
            path.display()
        ));
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let crc_off = (64..bytes.len().min(1024) - 4)
        .step_by(4)
        .find(|&o| crc.checksum(&bytes[..o]) == u32_at(o))
        .ok_or_else(|| {
            format!(
                "calculated CRC checksum does not match value stored in control file \"{}\"",
                path.display()
            )
        })?;
    let version = u32_at(8);
    let back = if version >= 1800 { 40 } else { 36 };
    Ok(Control {
        version,
        state: u32_at(16) as i32,
        data_checksum_version: u32_at(crc_off - back),
    })
}

/// One relation file to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelFile {
    /// The path as `pg_checksums` prints it (`DATADIR/base/5/16403.1`).
    pub path: PathBuf,
    /// The segment number (`.1` → 1).
    pub segno: u32,
    /// Size in bytes when listed.
    pub size: u64,
}

/// Files `pg_checksums` never checks (name, prefix match).
const SKIP: &[(&str, bool)] = &[
    ("pg_control", false),
    ("pg_filenode.map", false),
    ("pg_internal.init", true),
    ("PG_VERSION", false),
];

fn skipped(name: &str) -> bool {
    SKIP.iter().any(|&(s, prefix)| {
        if prefix {
            name.starts_with(s)
        } else {
            name == s
        }
    })
}

/// Lists the relation files under `global`, `base` and `pg_tblspc`, in path order.
pub fn relation_files(pgdata: &Path) -> Result<Vec<RelFile>, String> {
    let mut out = Vec::new();
    for sub in ["global", "base", "pg_tblspc"] {
        let dir = pgdata.join(sub);
        if dir.exists() {
            scan(&dir, &mut out)?;
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn scan(dir: &Path, out: &mut Vec<RelFile>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("could not open directory \"{}\": {e}", dir.display()))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| format!("could not read directory \"{}\": {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("pgsql_tmp") || name == ".DS_Store" {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::metadata(&path)
            .map_err(|e| format!("could not stat file \"{}\": {e}", path.display()))?;
        if meta.is_dir() {
            scan(&path, out)?;
        } else if meta.is_file() && !skipped(&name) {
            let segno = match name.split_once('.') {
                Some((_, seg)) => match seg.parse::<u32>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(format!(
                            "invalid segment number {} in file name \"{}\"",
                            seg.parse::<i64>().unwrap_or(0),
                            path.display()
                        ));
                    }
                },
                None => 0,
            };
            out.push(RelFile {
                path,
                segno,
                size: meta.len(),
            });
        }
    }
    Ok(())
}
