//! Process-wide mutable state (the thread pool and the dictionary-page cache), made
//! fork-safe the simple way: everything lives in a `Runtime` tagged with the pid that
//! created it. A forked child (DataLoader worker) sees a different pid and builds its
//! own runtime, so it never touches pool threads or mutexes that did not survive the
//! fork. The parent's runtime is leaked in the child on purpose: dropping it would try
//! to join threads that do not exist there.

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::cache::ByteLru;
use crate::error::{Error, Result};
use crate::limits::MAX_THREADS;

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
        return n.clamp(1, MAX_THREADS);
    }
    // Page reads mix pread waits with decode work: a few more threads than cores keeps
    // the disk queue busy without oversubscribing decode much.
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).max(2)
}

fn build_pool(n: usize) -> std::result::Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new().num_threads(n).thread_name(|i| format!("youmu-io-{i}")).build()
}

impl Runtime {
    fn with_pool(pool: rayon::ThreadPool) -> Self {
        Runtime { pid: std::process::id(), pool, dict_cache: Mutex::new(ByteLru::new(DEFAULT_DICT_CACHE_BYTES)) }
    }

    fn new() -> Self {
        // A process short of threads (a low pid limit) still gets a one-thread pool;
        // one that cannot start a single thread cannot read pages at all.
        let pool = build_pool(default_threads()).or_else(|_| build_pool(1)).unwrap_or_else(|e| {
            panic!("youmu could not start a thread for its page-read pool: {e}") // caught as an error by every caller
        });
        Self::with_pool(pool)
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

/// Replace the current process's pool by one with `n` threads (n = 0: default), at most
/// [`MAX_THREADS`]. If the threads cannot be started the current pool stays.
pub fn set_num_threads(n: usize) -> Result<()> {
    if n > MAX_THREADS {
        return Err(Error::InvalidArgument(format!(
            "set_num_threads(n): n must be between 0 (default) and {MAX_THREADS}, got {n}"
        )));
    }
    let threads = if n == 0 { default_threads() } else { n };
    let pool = build_pool(threads).map_err(|e| Error::Io {
        path: "youmu's thread pool".into(),
        source: std::io::Error::other(format!("starting {threads} threads: {e}")),
    })?;
    // The old runtime may still be in use by another thread: leak it rather than free it.
    CURRENT.store(Box::into_raw(Box::new(Runtime::with_pool(pool))), Ordering::Release);
    Ok(())
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
