//! `dbaio prewarm FILE...`: each FILE is a relation's first segment; its `.1`, `.2`, …
//! segments follow. Every block goes into the buffer pool through a [`ReadStream`], like
//! PostgreSQL's `pg_prewarm(rel, 'buffer')`, optionally verifying every page at completion.
//! See `docs/design.md`, "Read streams".

use dbaio::{
    Aio, OpenOptions, PageVerification, ReadStream, ReadStreamOptions, Relation, Settings,
    segment_path,
};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// What to prewarm and how.
#[derive(Clone, Debug)]
pub struct PrewarmOptions {
    /// First segments of the relations.
    pub files: Vec<PathBuf>,
    /// Settings (io_method, buffer_pool_size, concurrency, …). With `buffer_pool_size` 0 the
    /// pool is sized to hold every block (at most half the machine's memory).
    pub settings: Settings,
    /// Read with O_DIRECT.
    pub direct: bool,
    /// Verify every page (PostgreSQL's header checks and data checksum) as it completes.
    pub verify_checksums: bool,
    /// Blocks per segment file (0: 1 GiB worth, PostgreSQL's default).
    pub segment_blocks: u32,
    /// `max_issuers` was named with `-c`: the run keeps it (else 2: its one issuer's pin
    /// share is then the whole pool).
    pub keep_max_issuers: bool,
}

/// What a prewarm did (`--json` fields).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PrewarmReport {
    /// Segment files read.
    pub files: u64,
    /// Blocks now valid in the pool.
    pub blocks: u64,
    /// Bytes read into the pool (blocks × block size).
    pub bytes: u64,
    /// Wall time of the reads.
    pub seconds: f64,
    /// bytes / seconds.
    pub bytes_per_sec: f64,
    /// Pages whose checksum did not match (with --verify-checksums).
    pub checksum_failures: u64,
    /// Pages found invalid in any way (bad checksum or header).
    pub invalid_pages: u64,
    /// Reads started, and the blocks they covered (their mean size is the combining).
    pub reads: u64,
    /// The io_method that ran.
    pub io_method: String,
    /// Buffer pool size in blocks.
    pub buffer_pool_blocks: u64,
    /// io_method worker: the workers running when the reads ended (a self-sizing pool grows
    /// with the load); `null` for the other methods.
    pub workers: Option<u32>,
    /// Blocks that could not be read or failed verification, with PostgreSQL's messages.
    pub errors: Vec<String>,
    /// What was read but is worth knowing (a segment that ends in a partial block, whose
    /// bytes past the last whole block are not read).
    pub warnings: Vec<String>,
    /// io_uring: the buffer pool's memory registered with the ring (fixed reads), or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registered_buffers: Option<dbaio::RegisteredBuffers>,
}

/// Total bytes of the relations' segments (to size the pool).
fn relation_bytes(files: &[PathBuf]) -> u64 {
    let mut total = 0;
    for f in files {
        let mut n = 0;
        while let Ok(m) = std::fs::metadata(segment_path(f, n)) {
            total += m.len();
            n += 1;
        }
    }
    total
}

fn physical_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64) * (size.max(0) as u64)
}

/// The message for one block the stream could not deliver: PostgreSQL's words for that block
/// alone (a read of several blocks reports them together, and there is no server log here to
/// find the others in), or the I/O error.
fn block_error(rel: &Relation, e: &dbaio::StreamError) -> String {
    match &e.error {
        dbaio::AioError::Io(io) if io.invalid_pages > 0 => format!(
            "invalid page in block {} of relation \"{}\"",
            e.block,
            rel.path().display()
        ),
        other => other.to_string(),
    }
}

impl PrewarmReport {
    /// The one-line summary `dbaio prewarm` prints (the same figures as `--json`).
    pub fn summary(&self, verified: bool) -> String {
        let mut s = format!(
            "prewarmed {} blocks ({} files, {:.1} MB) in {:.3} s: {:.1} MB/s, {} reads, io_method {}",
            self.blocks,
            self.files,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.bytes_per_sec / 1e6,
            self.reads,
            self.io_method
        );
        if verified {
            s += &format!(
                ", {} invalid pages ({} checksum failures)",
                self.invalid_pages, self.checksum_failures
            );
        }
        if !self.errors.is_empty() {
            s += &format!(
                ", {} blocks not loaded (each named above)",
                self.errors.len()
            );
        }
        s
    }
}

/// Checks every segment of every relation before anything is opened: each must be a regular
/// file (a FIFO would block the open for ever, a directory or device is no relation); the
/// warnings for segments that end in a partial block.
pub fn check_files(files: &[PathBuf], block: u64) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    for f in files {
        let mut n = 0;
        while let Ok(m) = std::fs::metadata(segment_path(f, n)) {
            let p = segment_path(f, n);
            if !m.is_file() {
                return Err(format!(
                    "\"{}\" is {}, not a relation file\nHINT:  prewarm reads regular files: a relation's segments, such as base/5/16403.",
                    p.display(),
                    crate::datafile::file_kind(&m.file_type())
                ));
            }
            let tail = m.len() % block;
            if tail != 0 {
                warnings.push(format!(
                    "\"{}\" ends in a partial block: its last {tail} bytes (block {}, {tail} of {block} bytes) are not read",
                    p.display(),
                    m.len() / block
                ));
            }
            n += 1;
        }
    }
    Ok(warnings)
}

/// The settings of a prewarm: one issuer (unless `-c max_issuers`), a pool sized to hold
/// every block unless given (at most half the memory, and what is available).
pub fn prewarm_settings(opts: &PrewarmOptions) -> Settings {
    let mut settings = opts.settings.clone();
    if !opts.keep_max_issuers {
        // One issuer: its pin share (buffer_pool_size / max_issuers) is then the whole pool.
        settings.max_issuers = 2;
    }
    let block = u64::from(settings.block_size);
    if settings.buffer_pool_size == 0 {
        let want = relation_bytes(&opts.files).div_ceil(block);
        // At most half the memory, and no more than is available now.
        let avail = crate::memory::room_for_buffers(&crate::memory::available(), 0);
        let cap = (physical_memory().min(avail * 2) / 2 / block).max(128);
        settings.buffer_pool_size = want.clamp(128, cap);
    }
    settings
}

/// Runs the prewarm. `Err` is a fatal error (bad settings, a file that cannot be opened or
/// is not a regular file); blocks that fail are listed in the report.
pub fn run(opts: &PrewarmOptions) -> Result<PrewarmReport, String> {
    let settings = prewarm_settings(opts);
    let block = u64::from(settings.block_size);
    let warnings = check_files(&opts.files, block)?;
    let aio = Aio::start(settings).map_err(|e| e.to_string())?;
    let me = aio.register_issuer("prewarm").map_err(|e| e.to_string())?;
    if opts.verify_checksums {
        me.set_page_verification(PageVerification::ERROR);
    }
    let open = OpenOptions::read().direct(opts.direct);
    let mut rels = Vec::new();
    for f in &opts.files {
        let rel = if opts.segment_blocks > 0 {
            Relation::open_with_segment_blocks(&aio, f, &open, opts.segment_blocks)
        } else {
            Relation::open(&aio, f, &open)
        };
        rels.push(rel.map_err(|e| e.to_string())?);
    }
    let mut r = PrewarmReport {
        io_method: aio.io_method().name().to_string(),
        buffer_pool_blocks: aio.settings().buffer_pool_size,
        warnings,
        ..PrewarmReport::default()
    };
    let t0 = Instant::now();
    for rel in &rels {
        r.files += rel.segments().len() as u64;
        let mut stream = ReadStream::new(
            &me,
            rel,
            0..rel.nblocks(),
            ReadStreamOptions {
                maintenance: true,
                full: true,
                ..ReadStreamOptions::default()
            },
        );
        while let Some(b) = stream.next_buffer() {
            match b {
                Ok(_) => r.blocks += 1,
                Err(e) => r.errors.push(block_error(rel, &e)),
            }
        }
        let st = stream.stats();
        r.checksum_failures += st.checksum_failures;
        r.invalid_pages += st.invalid_pages;
        r.reads += st.ios;
    }
    r.seconds = t0.elapsed().as_secs_f64();
    r.workers = aio.worker_pool().map(|p| p.workers.len() as u32);
    r.registered_buffers = aio.registered_buffers();
    r.bytes = r.blocks * block;
    r.bytes_per_sec = r.bytes as f64 / r.seconds.max(1e-9);
    // Done: shutting down first spares each file's close its buffer scan.
    aio.shutdown();
    drop(rels);
    drop(me);
    Ok(r)
}
