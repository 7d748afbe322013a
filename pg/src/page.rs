//! PostgreSQL pages: the data checksum (`pg_checksum_page`) and the header sanity
//! checks of `PageIsVerified`, for pages of any block size that is a multiple of 128 bytes.
//!
//! The checksum runs 32 FNV-1a-style lanes in parallel over the page's 32-bit words (with the
//! page's own checksum field read as zero), folds in two rounds of zeros, xors the lanes, mixes
//! in the block number and reduces to 16 bits with an offset of one. The lane loop is written so
//! the compiler vectorises it; on x86-64 an AVX2 build of it is chosen at run time. See
//! `docs/design.md`, "PostgreSQL's formats".

/// Lanes hashed in parallel (part of the algorithm: changing it changes every checksum).
const LANES: usize = 32;
/// The FNV-1a prime.
const FNV_PRIME: u32 = 16_777_619;
/// Each lane's starting value.
const BASE_OFFSETS: [u32; LANES] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

/// Flag bits a valid page may have (`PD_VALID_FLAG_BITS`).
const VALID_FLAG_BITS: u16 = 0x0007;
/// Byte offset of `pd_checksum` in the page header.
const CHECKSUM_OFFSET: usize = 8;

/// The page header fields verification reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// `pd_lsn`.
    pub lsn: u64,
    /// `pd_checksum`.
    pub checksum: u16,
    /// `pd_flags`.
    pub flags: u16,
    /// `pd_lower`.
    pub lower: u16,
    /// `pd_upper` (0 for a new, never-initialised page).
    pub upper: u16,
    /// `pd_special`.
    pub special: u16,
}

fn u16_at(p: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([p[off], p[off + 1]])
}

impl PageHeader {
    /// Reads the header of `page` (at least 24 bytes).
    pub fn of(page: &[u8]) -> PageHeader {
        let lsn_hi = u32::from_le_bytes(page[0..4].try_into().expect("4 bytes"));
        let lsn_lo = u32::from_le_bytes(page[4..8].try_into().expect("4 bytes"));
        PageHeader {
            lsn: (u64::from(lsn_hi) << 32) | u64::from(lsn_lo),
            checksum: u16_at(page, CHECKSUM_OFFSET),
            flags: u16_at(page, 10),
            lower: u16_at(page, 12),
            upper: u16_at(page, 14),
            special: u16_at(page, 16),
        }
    }

    /// A page never initialised (`PageIsNew`): no checksum to verify.
    pub fn is_new(&self) -> bool {
        self.upper == 0
    }
}

#[inline(always)]
fn mix(lane: u32, value: u32) -> u32 {
    let t = lane ^ value;
    t.wrapping_mul(FNV_PRIME) ^ (t >> 17)
}

#[inline(always)]
fn lanes_over(page: &[u8]) -> u32 {
    let mut sums = BASE_OFFSETS;
    for (r, row) in page.chunks_exact(LANES * 4).enumerate() {
        let mut words = [0u32; LANES];
        for (w, b) in words.iter_mut().zip(row.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        if r == 0 {
            // The checksum field (bytes 8..10, the low half of word 2) counts as zero.
            words[CHECKSUM_OFFSET / 4] &= 0xFFFF_0000;
        }
        for (s, w) in sums.iter_mut().zip(words) {
            *s = mix(*s, w);
        }
    }
    let mut folded = 0;
    for s in sums {
        folded ^= mix(mix(s, 0), 0);
    }
    folded
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lanes_over_avx2(page: &[u8]) -> u32 {
    lanes_over(page)
}

fn block_checksum(page: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above), which is all the
            // target_feature function requires.
            return unsafe { lanes_over_avx2(page) };
        }
    }
    lanes_over(page)
}

/// PostgreSQL's `pg_checksum_page`: the 16-bit data checksum of `page` as block `blkno`
/// (numbered across a relation's segments). `page.len()` must be a multiple of 128.
pub fn pg_checksum_page(page: &[u8], blkno: u32) -> u16 {
    assert!(
        page.len() % (LANES * 4) == 0 && page.len() >= LANES * 4,
        "page size must be a multiple of 128 bytes"
    );
    let c = block_checksum(page) ^ blkno;
    ((c % 65535) + 1) as u16
}

/// What verifying one page found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageCheck {
    /// Header sane and checksum right (or checksums off).
    Valid,
    /// A new page that is all zeros: valid, nothing to check.
    NewZeroed,
    /// A new page (`pd_upper == 0`) with non-zero bytes.
    NewNotZeroed,
    /// The checksum does not match.
    ChecksumFailure {
        /// What the page's contents hash to.
        calculated: u16,
        /// What the page says.
        found: u16,
    },
    /// Checksum right (or off) but the header is impossible.
    BadHeader,
}

impl PageCheck {
    /// True if the page may be used.
    pub fn is_valid(&self) -> bool {
        matches!(self, PageCheck::Valid | PageCheck::NewZeroed)
    }
}

/// PostgreSQL's `PageIsVerified` for block `blkno`: a new page must be all zeros; otherwise
/// the checksum (when `checksums`) must match and the header must be sane.
pub fn verify_page(page: &[u8], blkno: u32, checksums: bool) -> PageCheck {
    let h = PageHeader::of(page);
    if h.is_new() {
        return if page.iter().all(|&b| b == 0) {
            PageCheck::NewZeroed
        } else {
            PageCheck::NewNotZeroed
        };
    }
    if checksums {
        let calculated = pg_checksum_page(page, blkno);
        if calculated != h.checksum {
            return PageCheck::ChecksumFailure {
                calculated,
                found: h.checksum,
            };
        }
    }
    let len = page.len();
    let sane = h.flags & !VALID_FLAG_BITS == 0
        && h.lower <= h.upper
        && h.upper <= h.special
        && usize::from(h.special) <= len
        && h.special % 8 == 0;
    if sane {
        PageCheck::Valid
    } else {
        PageCheck::BadHeader
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_with(upper: u16, fill: u8) -> Vec<u8> {
        let mut p = vec![fill; 8192];
        p[..24].fill(0);
        p[12..14].copy_from_slice(&24u16.to_le_bytes());
        p[14..16].copy_from_slice(&upper.to_le_bytes());
        p[16..18].copy_from_slice(&8192u16.to_le_bytes());
        p
    }

    #[test]
    fn checksum_ignores_its_own_field_and_mixes_the_block() {
        let mut p = page_with(8000, 0xab);
        let c = pg_checksum_page(&p, 7);
        p[8..10].copy_from_slice(&c.to_le_bytes());
        assert_eq!(
            pg_checksum_page(&p, 7),
            c,
            "the stored checksum does not change it"
        );
        assert_ne!(pg_checksum_page(&p, 8), c, "the block number is mixed in");
        assert_eq!(verify_page(&p, 7, true), PageCheck::Valid);
        assert!(matches!(
            verify_page(&p, 8, true),
            PageCheck::ChecksumFailure { .. }
        ));
        p[5000] ^= 1;
        assert_eq!(
            verify_page(&p, 7, true),
            PageCheck::ChecksumFailure {
                calculated: pg_checksum_page(&p, 7),
                found: c
            }
        );
        assert_eq!(
            lanes_over(&p),
            block_checksum(&p),
            "the AVX2 build agrees with the plain one"
        );
    }

    #[test]
    fn new_pages_and_headers() {
        assert_eq!(verify_page(&vec![0u8; 8192], 0, true), PageCheck::NewZeroed);
        let mut z = vec![0u8; 8192];
        z[100] = 1;
        assert_eq!(verify_page(&z, 0, true), PageCheck::NewNotZeroed);
        let mut p = page_with(8000, 0);
        p[10] = 0x80; // an unknown flag bit
        assert_eq!(verify_page(&p, 0, false), PageCheck::BadHeader);
    }
}
