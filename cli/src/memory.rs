//! How much memory a run may take, checked before it starts: `--bs 64m --iodepth 1024` asks
//! for 64 GiB of buffers, and an allocation that fails aborts the process (or the kernel's
//! OOM killer ends it, or another process). The available memory is the least of what the
//! system has (`MemAvailable`), what the process's cgroup allows (cgroup v2 `memory.max` less
//! `memory.current`, up the hierarchy) and what its limits allow (`RLIMIT_AS` less the
//! address space in use, `RLIMIT_DATA` less the data in use); [`KEPT`] of it is left for the
//! rest of the run (threads' stacks, the page cache it reads through).

use crate::datafile::human;

/// Memory left for the rest of the run when the buffers are counted.
pub const KEPT: u64 = 256 << 20;

/// The memory a run may use, and which limit said so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// `MemAvailable`, `cgroup memory.max`, `RLIMIT_AS` or `RLIMIT_DATA`.
    pub source: &'static str,
}

/// A field of `/proc/meminfo` or `/proc/self/status` (`MemAvailable:  123 kB`), in bytes.
fn kb_field(file: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// What this process's cgroup (v2) and its parents still allow: the least of `memory.max`
/// less `memory.current` among them; None without limits.
fn cgroup_room() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = std::path::PathBuf::from("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let mut least: Option<u64> = None;
    loop {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        if let (Some(max), Some(cur)) = (read("memory.max"), read("memory.current")) {
            if let (Ok(max), Ok(cur)) = (max.trim().parse::<u64>(), cur.trim().parse::<u64>()) {
                let room = max.saturating_sub(cur);
                least = Some(least.map_or(room, |l| l.min(room)));
            }
        }
        if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
            return least;
        }
    }
}

/// What resource limit `res` still allows, given `used` bytes of it in use; None if unlimited.
fn rlimit_room(res: nix::sys::resource::Resource, used: Option<u64>) -> Option<u64> {
    let (soft, _) = nix::sys::resource::getrlimit(res).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then(|| soft.saturating_sub(used.unwrap_or(0)))
}

/// The memory a run may use now.
pub fn available() -> Available {
    use nix::sys::resource::Resource;
    let candidates = [
        (kb_field("/proc/meminfo", "MemAvailable:"), "MemAvailable"),
        (cgroup_room(), "the cgroup's memory.max"),
        (
            rlimit_room(
                Resource::RLIMIT_AS,
                kb_field("/proc/self/status", "VmSize:"),
            ),
            "RLIMIT_AS",
        ),
        (
            rlimit_room(
                Resource::RLIMIT_DATA,
                kb_field("/proc/self/status", "VmData:"),
            ),
            "RLIMIT_DATA",
        ),
    ];
    candidates
        .into_iter()
        .filter_map(|(bytes, source)| bytes.map(|bytes| Available { bytes, source }))
        .min_by_key(|a| a.bytes)
        .unwrap_or(Available {
            bytes: u64::MAX,
            source: "no limit known",
        })
}

/// Checks that `need` bytes (`what`: `64 GiB of I/O buffers (--bs 64 MiB × --iodepth 1024)`)
/// fit in `avail` with [`KEPT`] to spare; `hint` says what would fit.
pub fn check(need: u64, what: &str, avail: &Available, hint: &str) -> Result<(), String> {
    if need.saturating_add(KEPT) <= avail.bytes {
        return Ok(());
    }
    Err(format!(
        "not enough memory for {what}: {} is available ({}), of which {} is kept for the rest of the run\nHINT:  {hint}",
        human(avail.bytes),
        avail.source,
        human(KEPT)
    ))
}

/// The bytes left for buffers in `avail` once [`KEPT`] and `other` are set aside.
pub fn room_for_buffers(avail: &Available, other: u64) -> u64 {
    avail.bytes.saturating_sub(KEPT).saturating_sub(other)
}

/// The buffer pool `settings` ask for, in bytes.
pub fn pool_bytes(settings: &dbaio::Settings) -> u64 {
    settings
        .pool_blocks()
        .saturating_mul(u64::from(settings.block_size))
}

/// Checks that the buffer pool `settings` ask for fits in the memory available now.
pub fn check_pool(settings: &dbaio::Settings, hint: &str) -> Result<(), String> {
    let pool = pool_bytes(settings);
    check(
        pool,
        &format!("a {} buffer pool", human(pool)),
        &available(),
        hint,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_limit_is_the_one_said() {
        let a = available();
        assert!(a.bytes > 0, "{a:?}");
        let small = Available {
            bytes: 1 << 30,
            source: "RLIMIT_AS",
        };
        let e = check(2 << 30, "2 GiB of I/O buffers", &small, "Lower it.").unwrap_err();
        assert_eq!(
            e,
            "not enough memory for 2 GiB of I/O buffers: 1 GiB is available (RLIMIT_AS), of which 256 MiB is kept for the rest of the run\nHINT:  Lower it."
        );
        assert!(check(512 << 20, "x", &small, "").is_ok());
        assert_eq!(room_for_buffers(&small, 128 << 20), 640 << 20);
    }
}
