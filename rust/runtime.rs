//! Process-wide mutable state (the thread pool and the dictionary-page cache), made
//! fork-safe the simple way: everything lives in a `Runtime` tagged with the pid that
//! created it. A forked child (DataLoader worker) sees a different pid and builds its
//! own runtime, so it never touches pool threads or mutexes that did not survive the
//! fork. The parent's runtime is leaked in the child on purpose: dropping it would try
//! to join threads that do not exist there.

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::cache::ByteLru;

/// Default bound of the dictionary-page cache (bytes of compressed dictionary pages).
pub const DEFAULT_DICT_CACHE_BYTES: usize = 256 << 20;

pub struct Runtime {
    pid: u32,
    pool: rayon::ThreadPool,
    pub dict_cache: Mutex<ByteLru>,
}

static CURRENT: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());

fn default_threads() -> usize {
    if let Some(n) = std::env::var("YOUMU_NUM_THREADS").ok().and_then(|v| v.parse::<usize>().ok()) {
        return n.max(1);
    }
    // Page reads mix pread waits with decode work: a few more threads than cores keeps
    // the disk queue busy without oversubscribing decode much.
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).max(2)
}

impl Runtime {
    fn new() -> Self {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(default_threads())
            .thread_name(|i| format!("youmu-io-{i}"))
            .build()
            .expect("failed to start youmu's thread pool");
        Runtime { pid: std::process::id(), pool, dict_cache: Mutex::new(ByteLru::new(DEFAULT_DICT_CACHE_BYTES)) }
    }

    pub fn pool(&self) -> &rayon::ThreadPool {
        &self.pool
    }

    pub fn num_threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

/// The runtime of the current process, created on first use (and again after a fork).
pub fn runtime() -> &'static Runtime {
    let pid = std::process::id();
    let cur = CURRENT.load(Ordering::Acquire);
    // SAFETY: runtimes are leaked (never freed), so any pointer ever stored stays valid.
    if let Some(rt) = unsafe { cur.as_ref() }
        && rt.pid == pid
    {
        return rt;
    }
    let fresh = Box::into_raw(Box::new(Runtime::new()));
    match CURRENT.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked above.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // Another thread of this process installed one first; use it, drop ours.
            // SAFETY: `fresh` was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: leaked runtimes stay valid.
            let rt = unsafe { &*winner };
            if rt.pid == pid { rt } else { runtime() }
        }
    }
}

/// Replace the current process's pool by one with `n` threads (n = 0: default).
pub fn set_num_threads(n: usize) {
    let pid = std::process::id();
    let mut rt = Runtime::new();
    if n > 0 {
        rt.pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("youmu-io-{i}"))
            .build()
            .expect("failed to start youmu's thread pool");
    }
    debug_assert_eq!(rt.pid, pid);
    // The old runtime may still be in use by another thread: leak it rather than free it.
    CURRENT.store(Box::into_raw(Box::new(rt)), Ordering::Release);
}

/// Optionally pin glibc's mmap threshold so freed page buffers go back to the OS.
///
/// glibc raises its mmap threshold each time a large mmapped block is freed (up to
/// 32 MiB); after that youmu's ~1 MiB page and window buffers come from the heap and
/// stay resident once freed. Measured on a 1 GB stream: +105 MB peak RSS with the
/// default allocator vs the windows alone, but pinning the threshold (every buffer a
/// fresh, zero-filled mmap) costs ~40% of page-mode throughput. So the default stays
/// fast; `YOUMU_MMAP_THRESHOLD=262144` (bytes) trades that speed for the leaner RSS.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if let Some(bytes) = std::env::var("YOUMU_MMAP_THRESHOLD").ok().and_then(|v| v.parse::<i32>().ok())
            && bytes > 0
        {
            // SAFETY: mallopt only adjusts allocator parameters.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
            }
        }
    }
}
