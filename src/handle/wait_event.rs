//! Wait events: what an issuer is blocked on right now, published in its issuer slot around
//! every blocking wait and every synchronous system call, so the view can say who waits for
//! what (PostgreSQL's `wait_event`). See `docs/aios.md`, "Waits".

use super::op::Op;

/// What an issuer is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WaitEvent {
    /// Not waiting.
    None = 0,
    /// Acquire found no idle handle and waits for one to finish.
    AioHandleFree = 1,
    /// Waiting for one I/O to complete (object: io_id).
    AioIoCompletion = 2,
    /// Waiting for some of its I/Os to complete (object: how many).
    AioIoCompletions = 3,
    /// Executing a read itself (sync method, or a full worker queue) (object: io_id).
    DataFileRead = 4,
    /// Executing a write itself.
    DataFileWrite = 5,
    /// Executing an fsync or fdatasync itself.
    DataFileSync = 6,
    /// Executing an fallocate itself.
    DataFileExtend = 7,
    /// Executing an ftruncate itself.
    DataFileTruncate = 8,
    /// Executing a readahead advice itself.
    DataFilePrefetch = 9,
    /// Executing an unlink itself.
    DataFileUnlink = 10,
    /// Waiting for another reader's I/O on a buffer it wants (object: io_id).
    BufferIo = 11,
    /// Executing a rename itself.
    DataFileRename = 12,
}

impl WaitEvent {
    pub(crate) fn for_sync_op(op: Op) -> WaitEvent {
        match op {
            Op::Readv | Op::Invalid => WaitEvent::DataFileRead,
            Op::Writev => WaitEvent::DataFileWrite,
            Op::Fsync | Op::Fdatasync => WaitEvent::DataFileSync,
            Op::Fallocate => WaitEvent::DataFileExtend,
            Op::Ftruncate => WaitEvent::DataFileTruncate,
            Op::FadviseWillneed => WaitEvent::DataFilePrefetch,
            Op::Unlink => WaitEvent::DataFileUnlink,
            Op::Rename => WaitEvent::DataFileRename,
        }
    }

    pub(crate) fn from_code(v: u32) -> WaitEvent {
        use WaitEvent::*;
        [
            None,
            AioHandleFree,
            AioIoCompletion,
            AioIoCompletions,
            DataFileRead,
            DataFileWrite,
            DataFileSync,
            DataFileExtend,
            DataFileTruncate,
            DataFilePrefetch,
            DataFileUnlink,
            BufferIo,
            DataFileRename,
        ]
        .get(v as usize)
        .copied()
        .unwrap_or(None)
    }

    /// The name shown in the view.
    pub fn name(self) -> &'static str {
        match self {
            WaitEvent::None => "",
            WaitEvent::AioHandleFree => "AioHandleFree",
            WaitEvent::AioIoCompletion => "AioIoCompletion",
            WaitEvent::AioIoCompletions => "AioIoCompletions",
            WaitEvent::DataFileRead => "DataFileRead",
            WaitEvent::DataFileWrite => "DataFileWrite",
            WaitEvent::DataFileSync => "DataFileSync",
            WaitEvent::DataFileExtend => "DataFileExtend",
            WaitEvent::DataFileTruncate => "DataFileTruncate",
            WaitEvent::DataFilePrefetch => "DataFilePrefetch",
            WaitEvent::DataFileUnlink => "DataFileUnlink",
            WaitEvent::BufferIo => "BufferIo",
            WaitEvent::DataFileRename => "DataFileRename",
        }
    }
}
