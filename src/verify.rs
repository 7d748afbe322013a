//! `dbaio verify --pgdata DIR`: `pg_checksums --check` on a stopped cluster, at device speed.
//! Each relation file is read in chunks of up to 16 blocks, `depth` reads in flight across
//! files, and every page is verified by a completion callback in whichever thread completes
//! the read (a worker, a ring reaper, the issuer). The findings, the summary lines and the exit
//! status are `pg_checksums`'s. Read streams over a buffer pool (issue 4) will replace the
//! chunk loop. See `docs/design.md`, "Page verification".

use crate::page::{PageHeader, pg_checksum_page};
use crate::pgdata::{BLCKSZ, RELSEG_SIZE, RelFile, read_control, relation_files};
use crate::{
    Aio, CallbackId, HandleCallbacks, InFlight, IoBuf, IoContext, IoMethodKind, IoResult,
    OpenOptions, Settings, Status,
};
use serde::Serialize;
use std::path::Path;

/// Blocks per read.
const CHUNK_BLOCKS: u64 = 16;

/// How to run.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The method.
    pub io_method: IoMethodKind,
    /// Worker threads (worker method).
    pub io_workers: u32,
    /// Reads in flight.
    pub depth: u32,
    /// O_DIRECT.
    pub direct: bool,
}

/// One bad checksum.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Failure {
    /// The file, as pg_checksums prints it.
    pub file: String,
    /// Block number within the file.
    pub block: u32,
    /// What the page hashes to.
    pub calculated: u16,
    /// What the page says.
    pub found: u16,
}

/// The result (`--json` fields).
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Files checked.
    pub files_scanned: u64,
    /// Blocks read (new pages included).
    pub blocks_scanned: u64,
    /// Pages whose checksum did not match.
    pub bad_checksums: u64,
    /// The cluster's data checksum version.
    pub data_checksum_version: u32,
    /// The bad pages, in file order.
    pub failures: Vec<Failure>,
}

impl VerifyReport {
    /// `pg_checksums --check`'s summary lines.
    pub fn summary(&self) -> String {
        format!(
            "Checksum operation completed\nFiles scanned:   {}\nBlocks scanned:  {}\nBad checksums:  {}\nData checksum version: {}\n",
            self.files_scanned, self.blocks_scanned, self.bad_checksums, self.data_checksum_version
        )
    }
}

impl Failure {
    /// `pg_checksums`'s error line (without the program prefix).
    pub fn message(&self) -> String {
        format!(
            "checksum verification failed in file \"{}\", block {}: calculated checksum {:X} but block contains {:X}",
            self.file, self.block, self.calculated, self.found
        )
    }
}

/// Verifies every page of a completed read; sets bit i of error_data for a bad page i.
/// Handle data word 0 is the relation-wide block number of the first page.
struct ChecksumAtCompletion;

impl HandleCallbacks for ChecksumAtCompletion {
    fn name(&self) -> &'static str {
        "pg-checksum"
    }
    fn complete_shared(&self, io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        if prior.status == Status::Error {
            return prior;
        }
        let first = io.handle_data_at(0).unwrap_or(0) as u32;
        let done = prior.result.max(0) as usize / BLCKSZ;
        let bad = io.with_buffers(|bufs| {
            let mut bad = 0u32;
            let mut k = 0usize;
            for buf in bufs {
                for page in buf.chunks_exact(BLCKSZ) {
                    if k >= done {
                        break;
                    }
                    let h = PageHeader::of(page);
                    if !h.is_new() && pg_checksum_page(page, first + k as u32) != h.checksum {
                        bad |= 1 << k;
                    }
                    k += 1;
                }
            }
            bad
        });
        if bad == 0 {
            return prior;
        }
        IoResult {
            status: Status::Warning,
            callback_id: 0,
            error_data: bad,
            ..prior
        }
    }
}

struct Pending<'a> {
    io: InFlight<'a>,
    file: usize,
    first_block: u32,
}

/// Checks the cluster at `pgdata`. `Err` is a fatal error (pg_checksums exits 1 on those too).
pub fn run(pgdata: &Path, opts: &VerifyOptions) -> Result<VerifyReport, String> {
    let control = read_control(pgdata)?;
    if control.state != 1 && control.state != 2 {
        return Err("cluster must be shut down".into());
    }
    if control.data_checksum_version == 0 {
        return Err("data checksums are not enabled in cluster".into());
    }
    let files = relation_files(pgdata)?;
    let settings = Settings {
        io_method: opts.io_method,
        io_workers: opts.io_workers,
        io_max_concurrency: opts.depth.max(1) as i32,
        max_issuers: 2,
        ..Settings::default()
    };
    let mut b = Aio::builder(settings);
    let cb: CallbackId = b
        .callback(ChecksumAtCompletion)
        .map_err(|e| e.to_string())?;
    let aio = b.start().map_err(|e| e.to_string())?;
    let me = aio.register_issuer("verify").map_err(|e| e.to_string())?;
    let mut report = VerifyReport {
        files_scanned: 0,
        blocks_scanned: 0,
        bad_checksums: 0,
        data_checksum_version: control.data_checksum_version,
        failures: Vec::new(),
    };
    let mut open: Vec<Option<crate::File>> = (0..files.len()).map(|_| None).collect();
    let mut pending: Vec<Pending<'_>> = Vec::new();
    let (mut next_file, mut next_off) = (0usize, 0u64);
    loop {
        // Fill the pipeline.
        while pending.len() < opts.depth as usize && next_file < files.len() {
            let rf: &RelFile = &files[next_file];
            if open[next_file].is_none() {
                let f = aio
                    .open(&rf.path, &OpenOptions::read().direct(opts.direct))
                    .map_err(|e| e.to_string())?;
                report.files_scanned += 1;
                open[next_file] = Some(f);
            }
            if next_off >= rf.size {
                open[next_file] = None;
                next_file += 1;
                next_off = 0;
                continue;
            }
            let len = (rf.size - next_off).min(CHUNK_BLOCKS * BLCKSZ as u64);
            let aligned = len.div_ceil(4096) * 4096;
            let first_block = (next_off / BLCKSZ as u64) as u32;
            let mut h = me.acquire().map_err(|e| e.to_string())?;
            h.set_handle_data(&[u64::from(first_block + rf.segno * RELSEG_SIZE)])
                .map_err(|e| e.to_string())?;
            h.add_callback(cb, 0).map_err(|e| e.to_string())?;
            let file = open[next_file].as_ref().expect("opened above");
            let io = h.read(file, next_off, IoBuf::new(aligned as usize));
            pending.push(Pending {
                io,
                file: next_file,
                first_block,
            });
            next_off += len;
        }
        if pending.is_empty() {
            break;
        }
        me.wait_for_completions(1);
        let mut k = 0;
        while k < pending.len() {
            if !pending[k].io.is_done() {
                k += 1;
                continue;
            }
            let p = pending.swap_remove(k);
            let c = me.wait(p.io);
            let rf = &files[p.file];
            let name = rf.path.display().to_string();
            if let Err(e) = c.check() {
                return Err(format!(
                    "could not read block {} in file \"{name}\": {}",
                    p.first_block,
                    e.os_error()
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| e.to_string())
                ));
            }
            let want = (rf.size - u64::from(p.first_block) * BLCKSZ as u64)
                .min(CHUNK_BLOCKS * BLCKSZ as u64);
            let got = (c.bytes() as u64).min(want);
            if got % BLCKSZ as u64 != 0 || got < want {
                let blk = p.first_block + (got / BLCKSZ as u64) as u32;
                return Err(format!(
                    "could not read block {blk} in file \"{name}\": read {} of {BLCKSZ}",
                    got % BLCKSZ as u64
                ));
            }
            report.blocks_scanned += got / BLCKSZ as u64;
            let r = c.result();
            if r.status == Status::Warning {
                let buf = c.into_buf();
                for i in 0..(got / BLCKSZ as u64) as usize {
                    if r.error_data & (1 << i) != 0 {
                        let page = &buf[i * BLCKSZ..(i + 1) * BLCKSZ];
                        let block = p.first_block + i as u32;
                        let calculated = pg_checksum_page(page, block + rf.segno * RELSEG_SIZE);
                        report.failures.push(Failure {
                            file: name.clone(),
                            block,
                            calculated,
                            found: PageHeader::of(page).checksum,
                        });
                    }
                }
            }
        }
    }
    report
        .failures
        .sort_by(|a, b| (&a.file, a.block).cmp(&(&b.file, b.block)));
    report.bad_checksums = report.failures.len() as u64;
    Ok(report)
}
