//! Bounds on what an argument may make youmu allocate or start.
//!
//! Rust aborts the process when an allocation fails, and Python cannot catch an
//! abort. So every call whose output grows with an argument (a permutation range, a
//! list of repeated page ids, a virtual numpy array of 10^12 zeros) compares its size
//! with the memory this process can still get *before* allocating, and refuses with
//! [`Error::TooLarge`] (Python: `RequestTooLargeError`, a `MemoryError`, like numpy's
//! "Unable to allocate 7.3 TiB for an array"). The figure is an estimate that errs
//! high — the point is to refuse requests that cannot fit, not to pack memory tight.

use crate::error::{Error, Result};

/// Most threads `set_num_threads` / `YOUMU_NUM_THREADS` may ask for: page reads are
/// bounded by disk queues and cores, and thousands of threads only exhaust the process
/// (rayon would try to start up to 65,535).
pub const MAX_THREADS: usize = 1024;

/// Bytes this process can still allocate: the smaller of the kernel's `MemAvailable`
/// and the room left under a cgroup v2 (containers) or v1 memory limit; physical memory
/// where neither is readable.
pub fn available_memory() -> u64 {
    let mut avail = meminfo_available().unwrap_or_else(physical_memory);
    if let Some(room) = cgroup_room() {
        avail = avail.min(room);
    }
    avail
}

fn meminfo_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages > 0 && size > 0 { (pages as u64).saturating_mul(size as u64) } else { u64::MAX }
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn cgroup_room() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut room: Option<u64> = None;
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(rel)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let rel = rel.trim_end_matches('/');
        // cgroup v2 ("0::/path"; limit "max" does not parse: no limit), then v1's
        // memory controller (an unlimited v1 group reports about 2^63)
        let (limit, usage) = if controllers.is_empty() {
            (format!("/sys/fs/cgroup{rel}/memory.max"), format!("/sys/fs/cgroup{rel}/memory.current"))
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                format!("/sys/fs/cgroup/memory{rel}/memory.limit_in_bytes"),
                format!("/sys/fs/cgroup/memory{rel}/memory.usage_in_bytes"),
            )
        } else {
            continue;
        };
        if let Some(max) = read_u64(&limit).filter(|&m| m < 1 << 60) {
            let left = max.saturating_sub(read_u64(&usage).unwrap_or(0));
            room = Some(room.map_or(left, |r| r.min(left)));
        }
    }
    room
}

/// Refuse `what` if it needs more than [`available_memory`]. `bytes` is a `u128` so a
/// product of two `u64` arguments cannot wrap to something small.
pub fn check_fits(what: impl FnOnce() -> String, bytes: u128) -> Result<()> {
    // small requests: not worth reading /proc
    if bytes <= 64 << 20 {
        return Ok(());
    }
    let available = available_memory();
    if bytes > available as u128 { Err(Error::TooLarge { what: what(), bytes, available }) } else { Ok(()) }
}

/// A vector with room for `n` items, or [`Error::TooLarge`] (checked against
/// [`available_memory`], then allocated with `try_reserve`, which fails instead of
/// aborting where the system refuses the memory).
pub fn vec_with_capacity<T>(n: usize, what: impl Fn() -> String) -> Result<Vec<T>> {
    let bytes = n as u128 * std::mem::size_of::<T>().max(1) as u128;
    check_fits(&what, bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::TooLarge { what: what(), bytes, available: available_memory() })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_requests_are_refused_before_allocating() {
        let r = vec_with_capacity::<u64>(1 << 50, || "a test vector".into());
        match r {
            Err(Error::TooLarge { what, bytes, .. }) => {
                assert_eq!(what, "a test vector");
                assert_eq!(bytes, 8u128 << 50);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let e = check_fits(|| "u64::MAX squared".into(), u64::MAX as u128 * u64::MAX as u128).unwrap_err();
        assert!(e.to_string().contains("u64::MAX squared needs about"), "{e}");
    }

    #[test]
    fn modest_requests_pass() {
        assert!(vec_with_capacity::<u8>(1 << 20, || "1 MiB".into()).is_ok_and(|v| v.capacity() >= 1 << 20));
        assert!(available_memory() > 16 << 20);
    }
}
