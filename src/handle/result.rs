//! Results: small, `Copy`, and packed into one 64-bit word in the handle table.
//!
//! Layout as PostgreSQL's `PgAioResult`: callback id (6 bits), status (3 bits), error data
//! (23 bits), raw-ish result (32 bits). The base result comes from the raw syscall result; each
//! callback may transform it (innermost first). See `docs/design.md`, "Results and errors".

use crate::handle::op::Op;

/// How an I/O ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Not completed yet.
    Unknown = 0,
    /// Fully succeeded.
    Ok = 1,
    /// Transferred fewer bytes than asked, without error; continue with the rest.
    Partial = 2,
    /// (Partially) succeeded, with a warning.
    Warning = 3,
    /// Failed.
    Error = 4,
}

impl Status {
    /// The name the aios view shows.
    pub fn name(self) -> &'static str {
        match self {
            Status::Unknown => "UNKNOWN",
            Status::Ok => "OK",
            Status::Partial => "PARTIAL",
            Status::Warning => "WARNING",
            Status::Error => "ERROR",
        }
    }
}

/// A distilled I/O result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoResult {
    /// How it ended.
    pub status: Status,
    /// Which callback set the status (0: the subsystem's base interpretation).
    pub callback_id: u8,
    /// Meaning defined by that callback; for the base, the errno of an error (0: end of file).
    pub error_data: u32,
    /// Bytes transferred (0 for ops that transfer none or failed).
    pub result: i32,
}

/// error_data of the base result when a read or write moved 0 bytes (end of file).
pub const ERROR_DATA_EOF: u32 = 0;

/// Set in the error data of a base ERROR when the I/O never reached the kernel because its
/// submission was refused (`io_uring_enter` failed); the low 12 bits are that errno.
pub const ERROR_DATA_SUBMIT_FAILED: u32 = 1 << 22;

/// error_data of an ERROR result when the thread executing the I/O, or the callback that
/// reports it (`callback_id`), panicked.
pub const ERROR_DATA_PANICKED: u32 = 0x7f_ffff;

/// error_data of an ERROR result when every worker process that executed the I/O died before
/// finishing it (it was tried three times; see the worker method).
pub const ERROR_DATA_WORKER_LOST: u32 = 0x7f_fffe;

/// error_data of an ERROR result when a callback (`callback_id`) returned a result the I/O
/// cannot have (see [`IoResult::is_possible`]).
pub const ERROR_DATA_IMPOSSIBLE: u32 = 0x7f_fffd;

impl IoResult {
    /// Whether this is a result an I/O of `op` asking `length` bytes can have: a status set;
    /// for a read or write, OK for every byte, PARTIAL for some but not all (at least one, so
    /// that resuming makes progress), WARNING for at most all; for other ops, nothing partial.
    /// A callback returning another is a bug the completion turns into an error: before,
    /// `Unknown`, or OK for 0 bytes, hid an EIO (`check` said Ok), and OK for twice the
    /// length reported bytes the buffer does not have.
    pub fn is_possible(&self, op: Op, length: u64) -> bool {
        let n = self.result;
        match (self.status, op.transfers_data()) {
            (Status::Unknown, _) => false,
            (Status::Error, _) => true,
            (Status::Ok, true) => n >= 0 && n as u64 == length,
            (Status::Partial, true) => n > 0 && (n as u64) < length,
            (Status::Warning, true) => n >= 0 && n as u64 <= length,
            (Status::Partial, false) => false,
            (Status::Ok | Status::Warning, false) => n >= 0,
        }
    }

    /// An ERROR that callback `callback_id` made: `error_data` is [`ERROR_DATA_PANICKED`] or
    /// [`ERROR_DATA_IMPOSSIBLE`] (the subsystem's own markers), described by the subsystem,
    /// not by the callback.
    pub(crate) fn failed_by_callback(callback_id: u8, error_data: u32) -> IoResult {
        IoResult {
            status: Status::Error,
            callback_id,
            error_data,
            result: 0,
        }
    }

    /// Not completed.
    pub const UNKNOWN: IoResult = IoResult {
        status: Status::Unknown,
        callback_id: 0,
        error_data: 0,
        result: 0,
    };

    /// The base interpretation of a raw result (`bytes` or `-errno`) for `op` that asked for
    /// `expected` bytes.
    pub fn from_raw(op: Op, raw: i32, expected: u64) -> IoResult {
        if raw < 0 {
            return IoResult {
                status: Status::Error,
                callback_id: 0,
                error_data: (-raw) as u32 & 0x7f_ffff,
                result: 0,
            };
        }
        let status = if !op.transfers_data() || raw as u64 >= expected {
            Status::Ok
        } else if raw == 0 {
            return IoResult {
                status: Status::Error,
                callback_id: 0,
                error_data: ERROR_DATA_EOF,
                result: 0,
            };
        } else {
            Status::Partial
        };
        IoResult {
            status,
            callback_id: 0,
            error_data: 0,
            result: raw,
        }
    }

    /// True for `Ok` and `Warning` (the data is usable).
    pub fn is_ok(&self) -> bool {
        matches!(self.status, Status::Ok | Status::Warning)
    }

    /// True for a read or write that moved no bytes because it started at (or past) the end
    /// of the file: a base ERROR with errno 0. Prefer this to testing the errno.
    pub fn is_end_of_file(&self) -> bool {
        self.status == Status::Error
            && self.callback_id == 0
            && self.error_data == ERROR_DATA_EOF
            && self.result == 0
    }

    /// The errno of a base error, if this is one (0 stands for end of file).
    /// For a refused submission, the errno of the refusal; for a panicked executor, 0.
    pub fn errno(&self) -> Option<i32> {
        if self.status != Status::Error || self.callback_id != 0 {
            return None;
        }
        Some(match self.error_data {
            ERROR_DATA_PANICKED | ERROR_DATA_WORKER_LOST => 0,
            d if d & ERROR_DATA_SUBMIT_FAILED != 0 => (d & 0xfff) as i32,
            d => d as i32,
        })
    }

    /// True for a base ERROR whose executor panicked.
    pub fn panicked(&self) -> bool {
        self.status == Status::Error && self.error_data == ERROR_DATA_PANICKED
    }

    /// True for a base ERROR whose worker processes all died executing it.
    pub fn worker_lost(&self) -> bool {
        self.status == Status::Error && self.error_data == ERROR_DATA_WORKER_LOST
    }

    /// True for a base ERROR whose submission the kernel refused.
    pub fn submit_failed(&self) -> bool {
        self.status == Status::Error
            && self.callback_id == 0
            && self.error_data != ERROR_DATA_PANICKED
            && self.error_data != ERROR_DATA_WORKER_LOST
            && self.error_data & ERROR_DATA_SUBMIT_FAILED != 0
    }

    pub(crate) fn pack(self) -> u64 {
        let hi = u64::from(self.callback_id & 0x3f)
            | (u64::from(self.status as u8) << 6)
            | (u64::from(self.error_data & 0x7f_ffff) << 9);
        (hi << 32) | u64::from(self.result as u32)
    }

    pub(crate) fn unpack(v: u64) -> IoResult {
        let hi = (v >> 32) as u32;
        let status = match (hi >> 6) & 7 {
            1 => Status::Ok,
            2 => Status::Partial,
            3 => Status::Warning,
            4 => Status::Error,
            _ => Status::Unknown,
        };
        IoResult {
            status,
            callback_id: (hi & 0x3f) as u8,
            error_data: hi >> 9,
            result: v as u32 as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pack_round_trips(id in 0u8..64, st in 0u8..5, data in 0u32..(1 << 23), res: i32) {
            let status = [Status::Unknown, Status::Ok, Status::Partial, Status::Warning, Status::Error][st as usize];
            let r = IoResult { status, callback_id: id, error_data: data, result: res };
            prop_assert_eq!(IoResult::unpack(r.pack()), r);
        }
    }

    #[test]
    fn base_interpretation() {
        assert_eq!(IoResult::from_raw(Op::Readv, 8192, 8192).status, Status::Ok);
        assert_eq!(
            IoResult::from_raw(Op::Readv, 4096, 8192).status,
            Status::Partial
        );
        assert_eq!(IoResult::from_raw(Op::Readv, 0, 8192).status, Status::Error);
        assert_eq!(IoResult::from_raw(Op::Readv, -5, 8192).errno(), Some(5));
        assert_eq!(IoResult::from_raw(Op::Fsync, 0, 0).status, Status::Ok);
    }
}
