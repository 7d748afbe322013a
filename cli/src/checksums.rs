//! `dbaio verify --pgdata DIR`: `pg_checksums --check` on a stopped cluster, at device speed.
//! Each segment file is read through a [`ReadStream`] into a small buffer pool, and every page
//! is verified by the pool's read callback in whichever thread completes the read (a worker, a
//! ring reaper, the issuer), with pg_checksums' test ([`ChecksumOnly`]) in the
//! ignore-checksum-failure mode: a bad page is kept and flagged, and only flagged pages are
//! looked at again for the finding. When a file's reads are all started, the next files'
//! streams start theirs, so small files do not each cost a round trip. The findings, the
//! summary lines and the exit status are `pg_checksums`'s. See `docs/design.md`, "Page
//! verification".

use dbaio::{
    Aio, Issuer, OpenOptions, PageVerdict, PageVerification, PageVerifier, ReadStream,
    ReadStreamOptions, Relation, Settings, StreamError,
};
use dbaio_pg::cluster::{BLCKSZ, RELSEG_SIZE, RelFile, read_control, relation_files};
use dbaio_pg::page::{PageHeader, pg_checksum_page};
use serde::Serialize;
use std::path::Path;

/// Files whose streams exist at once (and descriptors open).
const WINDOW: usize = 64;

/// How to run.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// Settings to start from (the method, its workers, `-c name=value`); the run sets the
    /// depth, the pool and what else it needs over them.
    pub settings: Settings,
    /// Reads in flight.
    pub depth: u32,
    /// O_DIRECT.
    pub direct: bool,
    /// Settings named with `-c` (lowercase): the run keeps them instead of sizing them itself.
    pub given: Vec<String>,
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

/// pg_checksums' test of a page: a new page is skipped; any other must carry its checksum
/// (block numbers count across segments). Unlike `PageIsVerified`, the header is not judged.
pub struct ChecksumOnly;

impl PageVerifier for ChecksumOnly {
    fn verify(&self, page: &[u8], block: u32) -> PageVerdict {
        let h = PageHeader::of(page);
        if h.is_new() || pg_checksum_page(page, block) == h.checksum {
            PageVerdict::Valid
        } else {
            PageVerdict::ChecksumFailure
        }
    }
}

/// The cluster's block size, from the bytes of its control file: the `uint32 blcksz` that
/// follows `double floatFormat` (1234567.0, which PostgreSQL stores to check the float
/// format), the field before it in every version's `ControlFileData`.
pub fn control_block_size(bytes: &[u8]) -> Option<u32> {
    let float_format = 1234567.0f64.to_le_bytes();
    let at = (0..bytes.len().saturating_sub(12))
        .step_by(4)
        .find(|&o| bytes[o..o + 8] == float_format)?;
    Some(u32::from_le_bytes(bytes[at + 8..at + 12].try_into().ok()?))
}

/// Reads the control file of `pgdata` after checking it is a regular file (a FIFO would block
/// the read for ever); its block size must be the one verify handles, and the one `settings`
/// say (`-c block_size`), or pages would be cut at the wrong places and reported corrupt.
fn check_control(pgdata: &Path, settings: &Settings) -> Result<(), String> {
    let path = pgdata.join("global/pg_control");
    if let Ok(m) = std::fs::metadata(&path) {
        if !m.is_file() {
            return Err(format!(
                "\"{}\" is {}, not a control file",
                path.display(),
                crate::datafile::file_kind(&m.file_type())
            ));
        }
    }
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "could not open file \"{}\" for reading: {e}",
            path.display()
        )
    })?;
    let Some(blcksz) = control_block_size(&bytes) else {
        return Err(format!(
            "could not find the block size in control file \"{}\"",
            path.display()
        ));
    };
    if blcksz as usize != BLCKSZ {
        return Err(format!(
            "database cluster is not compatible with this build of dbaio verify\nDETAIL:  The database cluster was initialized with block size {blcksz}, but dbaio verify handles block size {BLCKSZ}."
        ));
    }
    if settings.block_size != blcksz {
        return Err(format!(
            "-c block_size={} does not match the cluster's block size, {blcksz} (from \"{}\")\nHINT:  Leave block_size out: verify reads it from the control file.",
            settings.block_size,
            path.display()
        ));
    }
    Ok(())
}

/// Checks the cluster at `pgdata`. `Err` is a fatal error (pg_checksums exits 1 on those too).
pub fn run(pgdata: &Path, opts: &VerifyOptions) -> Result<VerifyReport, String> {
    check_control(pgdata, &opts.settings)?;
    let control = read_control(pgdata)?;
    if control.state != 1 && control.state != 2 {
        return Err("cluster must be shut down".into());
    }
    if control.data_checksum_version == 0 {
        return Err("data checksums are not enabled in cluster".into());
    }
    let files = relation_files(pgdata)?;
    let depth = opts.depth.clamp(1, 256);
    let mut b = Aio::builder(verify_settings(opts, depth));
    b.page_verifier(ChecksumOnly);
    let aio = b.start().map_err(|e| e.to_string())?;
    let me = aio.register_issuer("verify").map_err(|e| e.to_string())?;
    me.set_page_verification(PageVerification::IGNORE_CHECKSUM_FAILURE);
    let mut scan = Scan {
        aio: &aio,
        me: &me,
        direct: opts.direct,
        depth,
        report: VerifyReport {
            files_scanned: 0,
            blocks_scanned: 0,
            bad_checksums: 0,
            data_checksum_version: control.data_checksum_version,
            failures: Vec::new(),
        },
    };
    for window in files.chunks(WINDOW) {
        scan.window(window)?;
    }
    let mut report = scan.report;
    report
        .failures
        .sort_by(|a, b| (&a.file, a.block).cmp(&(&b.file, b.block)));
    report.bad_checksums = report.failures.len() as u64;
    Ok(report)
}

/// The subsystem's settings for a check at `depth`, over `opts.settings`; a setting named with
/// `-c` is kept as given.
pub fn verify_settings(opts: &VerifyOptions, depth: u32) -> Settings {
    let mut s = opts.settings.clone();
    let keep = |name: &str| opts.given.iter().any(|g| g == name);
    if !keep("io_max_concurrency") {
        // The current file's reads plus the next files' first ones.
        s.io_max_concurrency = (depth * 4) as i32;
    }
    if !keep("maintenance_io_concurrency") {
        s.maintenance_io_concurrency = depth;
    }
    if !keep("buffer_pool_size") {
        s.buffer_pool_size = 8192;
    }
    if !keep("transparent_huge_pages") {
        // 64 MB that every byte of the cluster goes through: transparent huge pages make each
        // read one physically contiguous piece, which keeps a virtio disk without indirect
        // descriptors out of its merged regime (docs/benchmarks.md, "Checksum verification").
        s.transparent_huge_pages = true;
    }
    if !keep("max_issuers") {
        s.max_issuers = 2;
    }
    if !keep("max_files") {
        s.max_files = WINDOW as u32 + 8;
    }
    s
}

/// The read streams' options: maintenance depth, whole files, a bulk-read ring.
fn stream_options() -> ReadStreamOptions {
    ReadStreamOptions {
        maintenance: true,
        full: true,
        // PostgreSQL's bulk-read ring: the whole cluster goes through the same few hundred
        // buffers, reused in order. It came in when clock-sweep victims of the recycled
        // 64 MB pool scattered each 128 kB read over several pieces of memory, which a virtio
        // disk without indirect descriptors serves markedly slower; the pool now keeps
        // combined reads contiguous itself, and the ring stays for its small footprint
        // (docs/benchmarks.md, "Checksum verification").
        ring: true,
        ..ReadStreamOptions::default()
    }
}

/// A check under way: the subsystem it reads with and the findings so far.
struct Scan<'a> {
    aio: &'a Aio,
    me: &'a Issuer,
    direct: bool,
    /// Reads in flight.
    depth: u32,
    report: VerifyReport,
}

impl Scan<'_> {
    /// Checks a window of files, each file's stream starting the next files' reads once its
    /// own are all started.
    fn window(&mut self, files: &[RelFile]) -> Result<(), String> {
        let mut rels = Vec::with_capacity(files.len());
        for rf in files {
            let open = OpenOptions::read()
                .direct(self.direct)
                .segment_base(rf.segno * RELSEG_SIZE);
            rels.push(Relation::single(self.aio, &rf.path, &open).map_err(|e| e.to_string())?);
        }
        let mut streams: Vec<_> = rels
            .iter()
            .map(|r| ReadStream::new(self.me, r, 0..r.nblocks(), stream_options()))
            .collect();
        for (i, rf) in files.iter().enumerate() {
            let (cur, next) = streams[i..].split_first_mut().expect("one stream per file");
            self.file(rf, cur, next)?;
        }
        Ok(())
    }

    /// Checks file `rf` through its stream `cur`, starting the reads of the `next` files'
    /// streams once `cur`'s are all started.
    fn file<I: Iterator<Item = u32>>(
        &mut self,
        rf: &RelFile,
        cur: &mut ReadStream<'_, I>,
        next: &mut [ReadStream<'_, I>],
    ) -> Result<(), String> {
        let name = rf.path.display().to_string();
        while let Some(buf) = cur.next_buffer() {
            let buf = buf.map_err(|e| read_failure(&e, &name))?;
            if buf.checksum_failed() {
                let page = buf.page();
                self.report.failures.push(Failure {
                    file: name.clone(),
                    block: buf.block(),
                    calculated: pg_checksum_page(page, rf.segno * RELSEG_SIZE + buf.block()),
                    found: PageHeader::of(page).checksum,
                });
            }
            if cur.all_started() {
                start_next(cur.ios_in_flight(), self.depth, next);
            }
        }
        self.report.files_scanned += 1;
        self.report.blocks_scanned += cur.stats().blocks;
        let tail = rf.size % BLCKSZ as u64;
        if tail != 0 {
            return Err(format!(
                "could not read block {} in file \"{name}\": read {tail} of {BLCKSZ}",
                rf.size / BLCKSZ as u64
            ));
        }
        Ok(())
    }
}

/// A failed read of file `name`, in pg_checksums' words (the system's error alone when there
/// is one).
fn read_failure(e: &StreamError, name: &str) -> String {
    let why = match &e.error {
        dbaio::AioError::Io(io) => io
            .os_error()
            .map_or_else(|| io.to_string(), |o| o.to_string()),
        other => other.to_string(),
    };
    format!("could not read block {} in file \"{name}\": {why}", e.block)
}

/// With `in_flight` reads of the current file left, starts the following files' reads while
/// fewer than `depth` are in flight.
fn start_next<I: Iterator<Item = u32>>(in_flight: u32, depth: u32, next: &mut [ReadStream<'_, I>]) {
    let mut total = in_flight;
    for s in next {
        if total >= depth {
            return;
        }
        if !s.all_started() {
            s.prefetch();
        }
        total += s.ios_in_flight();
    }
}
