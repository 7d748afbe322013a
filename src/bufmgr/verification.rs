//! Page verification at completion: the [`PageVerifier`] trait, PostgreSQL's verifier, the
//! modes an issuer reads with ([`PageVerification`]), and how a buffer read's verdicts are
//! packed into the 23 bits of a result's error data and turned back into PostgreSQL's
//! messages (`invalid page in block 3 of relation "base/5/16403"`). The pool's read callback
//! (`bufpool.rs`) runs the verifier on every page it read, in whichever thread completed the
//! I/O. See `docs/design.md`, "Page verification".

use dbaio_pg::page::{PageCheck, verify_page};

/// What a verifier says about one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageVerdict {
    /// Usable.
    Valid,
    /// The checksum does not match, but the page is otherwise sane (usable when checksum
    /// failures are ignored).
    ChecksumFailure,
    /// Not usable (an impossible header, or a new page with data in it).
    Invalid,
    /// Not usable (an impossible header) and its checksum does not match either: counted as
    /// a checksum failure, as PostgreSQL counts it, but not kept when checksum failures are
    /// ignored.
    InvalidChecksumFailure,
}

impl PageVerdict {
    /// True if the page's checksum did not match (whether or not the page is usable).
    pub fn checksum_failed(self) -> bool {
        matches!(
            self,
            PageVerdict::ChecksumFailure | PageVerdict::InvalidChecksumFailure
        )
    }
}

/// Checks a page as it arrives from storage. Runs in the completing thread (a worker, a
/// reaper, the issuer): it must not block or panic. A panic is caught and logged, and the
/// page is taken as invalid ([`PageVerdict::Invalid`]).
pub trait PageVerifier: Send + Sync + 'static {
    /// Verifies `page`, which is block `block` of its relation (numbered across segments).
    fn verify(&self, page: &[u8], block: u32) -> PageVerdict;
}

/// PostgreSQL's `PageIsVerified`: an all-zero new page is valid; otherwise the header must
/// be sane and, with data checksums on, the checksum must match.
#[derive(Clone, Copy, Debug)]
pub struct PgPageVerifier {
    /// The cluster has data checksums.
    pub checksums: bool,
}

impl PageVerifier for PgPageVerifier {
    fn verify(&self, page: &[u8], block: u32) -> PageVerdict {
        match verify_page(page, block, self.checksums) {
            PageCheck::Valid | PageCheck::NewZeroed => PageVerdict::Valid,
            PageCheck::ChecksumFailure { .. } => {
                // Usable only if the header is sane too (PageIsVerified's order); a failed
                // checksum counts either way.
                if verify_page(page, block, false).is_valid() {
                    PageVerdict::ChecksumFailure
                } else {
                    PageVerdict::InvalidChecksumFailure
                }
            }
            PageCheck::NewNotZeroed | PageCheck::BadHeader => PageVerdict::Invalid,
        }
    }
}

/// How an issuer's buffer reads treat their pages, captured into each read when it is
/// defined (the completer may be another thread with other ideas): PostgreSQL's
/// `zero_damaged_pages` and `ignore_checksum_failure`, per issuer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageVerification {
    /// Run the pool's verifier on every page read.
    pub verify: bool,
    /// An invalid page is zeroed (and a warning given) instead of failing the read.
    pub zero_on_error: bool,
    /// A checksum failure on an otherwise sane page is a warning, and the page is kept.
    pub ignore_checksum_failure: bool,
}

impl PageVerification {
    /// No verification (the default).
    pub const OFF: PageVerification = PageVerification {
        verify: false,
        zero_on_error: false,
        ignore_checksum_failure: false,
    };
    /// Verify; an invalid page fails the read (PostgreSQL's default).
    pub const ERROR: PageVerification = PageVerification {
        verify: true,
        zero_on_error: false,
        ignore_checksum_failure: false,
    };
    /// Verify; zero invalid pages and warn.
    pub const ZERO_ON_ERROR: PageVerification = PageVerification {
        verify: true,
        zero_on_error: true,
        ignore_checksum_failure: false,
    };
    /// Verify; keep pages whose only fault is the checksum, and warn.
    pub const IGNORE_CHECKSUM_FAILURE: PageVerification = PageVerification {
        verify: true,
        zero_on_error: false,
        ignore_checksum_failure: true,
    };

    pub(crate) fn to_byte(self) -> u8 {
        u8::from(self.verify)
            | u8::from(self.zero_on_error) << 1
            | u8::from(self.ignore_checksum_failure) << 2
    }

    pub(crate) fn from_byte(b: u8) -> PageVerification {
        PageVerification {
            verify: b & 1 != 0,
            zero_on_error: b & 2 != 0,
            ignore_checksum_failure: b & 4 != 0,
        }
    }
}

/// The verdicts of one buffer read, as packed into a result's error data (PostgreSQL's
/// layout): zeroed any, ignored any, 7 bits of invalid pages (failed or zeroed), 7 bits of
/// checksum failures, 7 bits of the first affected page's offset in the read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadVerdicts {
    /// Some invalid page was zeroed.
    pub zeroed_any: bool,
    /// Some checksum failure was ignored.
    pub ignored_any: bool,
    /// Invalid pages (failed, or zeroed).
    pub invalid: u32,
    /// Pages whose checksum did not match (ignored or not).
    pub checksum_failures: u32,
    /// Offset in the read of the first invalid page (or, with none, the first ignored one).
    pub first_offset: u32,
}

const COUNT_MAX: u32 = 0x7f;

impl ReadVerdicts {
    pub(crate) fn encode(self) -> u32 {
        u32::from(self.zeroed_any)
            | u32::from(self.ignored_any) << 1
            | self.invalid.min(COUNT_MAX) << 2
            | self.checksum_failures.min(COUNT_MAX) << 9
            | self.first_offset.min(COUNT_MAX) << 16
    }

    /// Unpacks a buffer read's error data.
    pub fn decode(d: u32) -> ReadVerdicts {
        ReadVerdicts {
            zeroed_any: d & 1 != 0,
            ignored_any: d & 2 != 0,
            invalid: (d >> 2) & COUNT_MAX,
            checksum_failures: (d >> 9) & COUNT_MAX,
            first_offset: (d >> 16) & COUNT_MAX,
        }
    }

    /// PostgreSQL's words for these verdicts on blocks `first..first+n` (relation-wide) of
    /// `relation`: one line, then DETAIL and HINT lines for a read of several pages.
    /// The verdicts in words, for [`IoError::detail`](crate::IoError::detail): `1 invalid
    /// page (1 checksum failure), the first at page 0 of the read`, and what was done about
    /// them (zeroed, ignored).
    pub fn in_words(&self) -> String {
        let plural =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut s = format!(
            "{} ({}), the first at page {} of the read",
            plural(self.invalid, "invalid page", "invalid pages"),
            plural(
                self.checksum_failures,
                "checksum failure",
                "checksum failures"
            ),
            self.first_offset
        );
        if self.zeroed_any {
            s.push_str("; invalid pages zeroed");
        }
        if self.ignored_any {
            s.push_str("; checksum failures ignored");
        }
        s
    }

    pub(crate) fn message(&self, relation: &str, first: u32, n: u32) -> String {
        let last = first + n.max(1) - 1;
        let at = first + self.first_offset;
        let several = |what: &str| {
            format!(
                "\nDETAIL:  Block {at} held the first {what} page.\nHINT:  See the log for details about the other {} {what} block(s).",
                self.affected() - 1
            )
        };
        if self.zeroed_any && self.ignored_any {
            // Some pages zeroed and others' checksum failures ignored, in one read.
            let others = self.invalid + self.checksum_failures - 1;
            let detail = if self.invalid > 1 {
                format!("\nDETAIL:  Block {at} held the first zeroed page.")
            } else {
                String::new()
            };
            return format!(
                "zeroing {} page(s) and ignoring {} checksum failure(s) among blocks {first}..{last} of relation \"{relation}\"{detail}\nHINT:  See the log for details about the other {others} invalid block(s).",
                self.invalid, self.checksum_failures
            );
        }
        if self.invalid > 0 && !self.zeroed_any {
            if self.invalid == 1 {
                format!("invalid page in block {at} of relation \"{relation}\"")
            } else {
                format!(
                    "{} invalid pages among blocks {first}..{last} of relation \"{relation}\"{}",
                    self.invalid,
                    several("invalid")
                )
            }
        } else if self.zeroed_any {
            if self.invalid == 1 {
                format!("invalid page in block {at} of relation \"{relation}\"; zeroing out page")
            } else {
                format!(
                    "zeroing out {} invalid pages among blocks {first}..{last} of relation \"{relation}\"{}",
                    self.invalid,
                    several("zeroed")
                )
            }
        } else if self.checksum_failures == 1 {
            format!("ignoring checksum failure in block {at} of relation \"{relation}\"")
        } else {
            format!(
                "ignoring {} checksum failures among blocks {first}..{last} of relation \"{relation}\"{}",
                self.checksum_failures,
                several("ignored")
            )
        }
    }

    fn affected(&self) -> u32 {
        if self.invalid > 0 {
            self.invalid
        } else {
            self.checksum_failures
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_round_trip_and_read_like_postgres() {
        let v = ReadVerdicts {
            invalid: 2,
            checksum_failures: 2,
            first_offset: 1,
            ..ReadVerdicts::default()
        };
        assert_eq!(ReadVerdicts::decode(v.encode()), v);
        assert!(v.encode() < 1 << 23);
        let m = v.message("base/5/16403", 0, 4);
        assert!(m.starts_with("2 invalid pages among blocks 0..3 of relation \"base/5/16403\""));
        assert!(
            m.contains("DETAIL:  Block 1 held the first invalid page."),
            "{m}"
        );
        let one = ReadVerdicts {
            invalid: 1,
            first_offset: 3,
            ..ReadVerdicts::default()
        };
        assert_eq!(
            one.message("base/5/16403", 0, 4),
            "invalid page in block 3 of relation \"base/5/16403\""
        );
        let zeroed = ReadVerdicts {
            zeroed_any: true,
            ..one
        };
        assert!(zeroed.message("r", 0, 4).ends_with("; zeroing out page"));
        let ignored = ReadVerdicts {
            ignored_any: true,
            checksum_failures: 1,
            first_offset: 2,
            ..ReadVerdicts::default()
        };
        assert_eq!(
            ignored.message("r", 10, 4),
            "ignoring checksum failure in block 12 of relation \"r\""
        );
        for b in 0..8u8 {
            assert_eq!(PageVerification::from_byte(b).to_byte(), b);
        }
    }
}
