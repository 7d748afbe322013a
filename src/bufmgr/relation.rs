//! [`Relation`]: a relation stored as segment files (`16403`, `16403.1`, `16403.2`, …, each
//! 1 GiB by default, as PostgreSQL's `RELSEG_SIZE`), read by relation-wide block number. Each
//! segment is a [`File`] that knows its first block, so checksums and messages use the
//! relation's numbering. See `docs/design.md`, "Read streams".

use crate::aio::file::{File, OpenOptions};
use crate::aio::subsystem::Aio;
use crate::handle::error::{AioError, IoError};
use std::path::{Path, PathBuf};

/// PostgreSQL's segment size: 1 GiB.
pub const SEGMENT_BYTES: u64 = 1 << 30;

/// A relation's segment files, opened.
pub struct Relation {
    path: PathBuf,
    segments: Vec<File>,
    segment_blocks: u32,
    nblocks: u32,
    bytes: u64,
}

impl Relation {
    /// Opens the relation whose first segment is `path`, following `path.1`, `path.2`, …
    /// while they exist and the one before is full. Segments hold `SEGMENT_BYTES` each (see
    /// [`Relation::open_with_segment_blocks`]); as in PostgreSQL's md.c, a segment shorter
    /// than that is the last, and a `.N` file after it is not part of the relation.
    pub fn open(
        aio: &Aio,
        path: impl AsRef<Path>,
        opts: &OpenOptions,
    ) -> Result<Relation, AioError> {
        let blocks = (SEGMENT_BYTES / u64::from(aio.settings().block_size)) as u32;
        Relation::open_with_segment_blocks(aio, path, opts, blocks)
    }

    /// As [`Relation::open`], with segments of `segment_blocks` blocks.
    pub fn open_with_segment_blocks(
        aio: &Aio,
        path: impl AsRef<Path>,
        opts: &OpenOptions,
        segment_blocks: u32,
    ) -> Result<Relation, AioError> {
        let path = path.as_ref().to_path_buf();
        let block = u64::from(aio.settings().block_size);
        let segment_blocks = segment_blocks.max(1);
        let mut segments = Vec::new();
        let mut bytes = 0;
        loop {
            let n = segments.len() as u32;
            let p = segment_path(&path, n);
            let mut seg_opts = opts.clone().segment_base(n * segment_blocks);
            if n > 0 {
                // Later segments are followed, never made.
                (seg_opts.create, seg_opts.truncate) = (false, false);
            }
            let f = match aio.open(&p, &seg_opts) {
                Ok(f) => f,
                // No next segment: the relation ends here (asked of the subsystem, not the
                // file system, so a simulated disk's segments are found too).
                Err(AioError::Open { source, .. })
                    if n > 0 && source.kind() == std::io::ErrorKind::NotFound =>
                {
                    break;
                }
                Err(e) => return Err(e),
            };
            let len = file_len(&f)?;
            bytes += len;
            segments.push(f);
            if len < u64::from(segment_blocks) * block {
                break; // a short segment is the last one
            }
        }
        let nblocks = (bytes / block).min(u64::from(u32::MAX)) as u32;
        Ok(Relation {
            path,
            segments,
            segment_blocks,
            nblocks,
            bytes,
        })
    }

    /// One file alone, read by its own block numbers (its `segment_base` in `opts` still
    /// numbers its checksums): for tools that visit segment files one by one.
    pub fn single(
        aio: &Aio,
        path: impl AsRef<Path>,
        opts: &OpenOptions,
    ) -> Result<Relation, AioError> {
        Relation::from_file(aio.open(path, opts)?)
    }

    /// An open file as a one-segment relation (sharing its buffers with every other user of
    /// that `File`).
    pub fn from_file(file: File) -> Result<Relation, AioError> {
        let path = file.path().to_path_buf();
        let bytes = file_len(&file)?;
        let block = u64::from(file.aio.shared.settings.block_size);
        Ok(Relation {
            path,
            segments: vec![file],
            segment_blocks: u32::MAX,
            nblocks: (bytes / block).min(u64::from(u32::MAX)) as u32,
            bytes,
        })
    }

    /// The first segment's path (the relation's name in messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whole blocks in all segments when the relation was opened. Like md.c's, it is a
    /// count taken then, not a limit: a block past it in a segment already open (the file
    /// grew since) is read as any other; a segment made since (`.N`) is not seen until the
    /// relation is opened again.
    pub fn nblocks(&self) -> u32 {
        self.nblocks
    }

    /// Bytes in all segments.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The segment files, in order.
    pub fn segments(&self) -> &[File] {
        &self.segments
    }

    /// Blocks per segment.
    pub fn segment_blocks(&self) -> u32 {
        self.segment_blocks
    }

    /// The error for relation block `block` past the last segment this relation opened:
    /// PostgreSQL's words for a block beyond a relation's segments, naming the block, the
    /// segment file that would hold it, and what the relation held when it was opened.
    pub(crate) fn past_last_segment(&self, block: u32) -> AioError {
        let seg = block / self.segment_blocks;
        let segments = self.segments.len();
        let s = if segments == 1 { "" } else { "s" };
        IoError {
            op: crate::Op::Readv,
            path: segment_path(&self.path, seg).into(),
            new_path: None,
            offset: u64::from(block % self.segment_blocks) * u64::from(self.block_size()),
            length: u64::from(self.block_size()),
            transferred: 0,
            errno: 0,
            blocks: Some((block, 1)),
            detail: None,
            message: Some(
                format!(
                    "could not read block {block} of relation \"{}\": past its last segment \
                     (it had {} blocks in {segments} segment{s} when it was opened)",
                    self.path.display(),
                    self.nblocks
                )
                .into(),
            ),
            hint: Some(
                "A segment made since the relation was opened is seen by opening it again \
                 (Relation::open).",
            ),
            invalid_pages: 0,
        }
        .into()
    }

    /// Bytes per block (the subsystem's `block_size`).
    fn block_size(&self) -> u32 {
        self.segments
            .first()
            .map_or(8192, |f| f.aio.shared.settings.block_size)
    }

    /// The segment holding relation block `block` and the block's number in it, or `None`
    /// past the last segment.
    pub fn locate(&self, block: u32) -> Option<(&File, u32)> {
        let seg = (block / self.segment_blocks) as usize;
        self.segments
            .get(seg)
            .map(|f| (f, block % self.segment_blocks))
    }
}

/// A file's size, failing as its open would.
fn file_len(f: &File) -> Result<u64, AioError> {
    f.len().map_err(|source| AioError::Open {
        path: f.path().display().to_string(),
        source,
    })
}

/// `path` for segment 0, `path.N` for segment N.
pub fn segment_path(path: &Path, n: u32) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}
