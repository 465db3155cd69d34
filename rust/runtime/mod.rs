//! Process-wide mutable state (the thread pool and the dictionary-page cache), made
//! fork-safe by living in one [`PerProcess`] value: a forked child (DataLoader worker)
//! builds its own runtime on first use, so it never touches pool threads or mutexes that
//! did not survive the fork.
//!
//! The folder is the process runtime: the fork-safe holder (`perprocess.rs`), the
//! dictionary-page cache (`cache.rs`) and the one rule for running a batch call on the
//! calling thread or the pool (`batch.rs`).

pub mod batch;
pub mod cache;
pub mod perprocess;

use std::cell::Cell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::limits::MAX_THREADS;
use crate::runtime::cache::ByteLru;
use crate::runtime::perprocess::PerProcess;

/// Default bound of the dictionary-page cache (bytes of compressed dictionary pages).
pub const DEFAULT_DICT_CACHE_BYTES: usize = 256 << 20;

pub struct Runtime {
    pool: rayon::ThreadPool,
    pub dict_cache: Mutex<ByteLru>,
}

static CURRENT: PerProcess<Runtime> = PerProcess::new();

/// `YOUMU_NUM_THREADS` if set: a number is clamped to 1..=[`MAX_THREADS`]; anything else
/// is an error naming the variable (`storage::check_env` reports it; the pool then
/// takes the default).
pub fn env_threads() -> Result<Option<usize>> {
    let Some(raw) = std::env::var_os("YOUMU_NUM_THREADS") else { return Ok(None) };
    let text = raw.to_string_lossy();
    let n = text.trim().parse::<u128>().map_err(|_| {
        Error::InvalidArgument(format!(
            "environment variable YOUMU_NUM_THREADS={text:?} must be an integer (threads, 1 to {MAX_THREADS})"
        ))
    })?;
    Ok(Some(n.clamp(1, MAX_THREADS as u128) as usize))
}

fn default_threads() -> usize {
    if let Ok(Some(n)) = env_threads() {
        return n;
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
        Runtime { pool, dict_cache: Mutex::new(ByteLru::new(DEFAULT_DICT_CACHE_BYTES)) }
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
    CURRENT.get(Runtime::new, |_| {})
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
    // The old runtime may still be in use by another thread: it is leaked, not freed.
    CURRENT.replace(Runtime::with_pool(pool));
    Ok(())
}

/// glibc's largest mmap threshold on 64-bit systems (`DEFAULT_MMAP_THRESHOLD_MAX`):
/// `mallopt` refuses more.
const MAX_MMAP_THRESHOLD: i32 = 32 << 20;

/// `YOUMU_MMAP_THRESHOLD` if set: bytes in 1..=32 MiB, else an error naming the
/// variable (`storage::check_env` reports it; the allocator is then left alone).
pub fn env_allocator() -> Result<Option<i32>> {
    let Some(raw) = std::env::var_os("YOUMU_MMAP_THRESHOLD") else { return Ok(None) };
    let text = raw.to_string_lossy();
    match text.trim().parse::<i64>() {
        Ok(n) if (1..=MAX_MMAP_THRESHOLD as i64).contains(&n) => Ok(Some(n as i32)),
        _ => Err(Error::InvalidArgument(format!(
            "environment variable YOUMU_MMAP_THRESHOLD={text:?} must be an integer number of bytes, 1 to \
             {MAX_MMAP_THRESHOLD} (glibc's largest mmap threshold)"
        ))),
    }
}

/// `YOUMU_FAST_DECODE` if set: `1` (the default) or `0` (every page through arrow-rs,
/// `tokens::set_enabled(false)`), else an error naming the variable
/// (`storage::check_env` reports it). Read here, with the other process settings, so
/// storage checks it without depending on the decoder.
pub fn env_fast_decode() -> Result<Option<bool>> {
    let Some(raw) = std::env::var_os("YOUMU_FAST_DECODE") else { return Ok(None) };
    match raw.to_string_lossy().trim() {
        "1" => Ok(Some(true)),
        "0" => Ok(Some(false)),
        other => Err(Error::InvalidArgument(format!(
            "environment variable YOUMU_FAST_DECODE={other:?} must be 0 (decode every page with arrow-rs) or 1"
        ))),
    }
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
        if let Ok(Some(bytes)) = env_allocator() {
            // SAFETY: mallopt only adjusts allocator parameters.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
            }
        }
    }
}

thread_local! {
    /// The calling thread's interrupt check (see [`with_interrupt_check`]) and when it
    /// last ran.
    static INTERRUPT: Cell<Option<fn() -> bool>> = const { Cell::new(None) };
    static LAST_CHECK: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How often long loops on the calling thread poll its interrupt check: Ctrl-C is seen
/// within about this long, and the check (which takes Python's GIL) costs nothing.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

/// Run `f` with `check` as this thread's interrupt check: long loops that run on the
/// calling thread (directory walks, waiting for an index build) call [`interrupted`],
/// which polls `check` and stops the work with [`Error::Cancelled`] once it returns true.
/// The Python binding passes one that runs Python's signal handlers, so Ctrl-C stops
/// a walk of a huge (or looping) tree with `KeyboardInterrupt` instead of going unheard
/// while the GIL is released.
pub fn with_interrupt_check<T>(check: fn() -> bool, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<fn() -> bool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            INTERRUPT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(INTERRUPT.with(|c| c.replace(Some(check))));
    f()
}

/// `Err(Error::Cancelled)` if this thread's interrupt check (polled at most every
/// 50 ms) says to stop; `Ok` where no check is set (Rust callers, pool threads).
pub fn interrupted() -> Result<()> {
    let Some(check) = INTERRUPT.with(Cell::get) else { return Ok(()) };
    let now = Instant::now();
    if LAST_CHECK.with(|c| c.get()).is_some_and(|t| now.duration_since(t) < INTERRUPT_POLL) {
        return Ok(());
    }
    LAST_CHECK.with(|c| c.set(Some(now)));
    if check() { Err(Error::Cancelled("interrupted".into())) } else { Ok(()) }
}

/// Run `f` on a helper thread while this thread keeps polling its interrupt check (a
/// thread blocked in a pool's `install` polls nothing). On an interrupt `stop` is
/// called, `f` is waited for (it should return soon after `stop`) and the result is
/// [`Error::Cancelled`]. Without an interrupt check, `f` just runs here.
pub fn run_interruptible<T: Send>(f: impl FnOnce() -> T + Send, stop: impl Fn()) -> Result<T> {
    if INTERRUPT.with(Cell::get).is_none() {
        return Ok(f());
    }
    std::thread::scope(|s| {
        let waiter = std::thread::current();
        let worker = std::thread::Builder::new()
            .name("youmu-wait".into())
            .spawn_scoped(s, move || {
                let r = f();
                waiter.unpark();
                r
            })
            .map_err(|e| Error::Io { path: "youmu's worker thread".into(), source: e })?;
        let mut stopped = None;
        while !worker.is_finished() {
            std::thread::park_timeout(INTERRUPT_POLL);
            if stopped.is_none()
                && let Err(e) = interrupted()
            {
                stop();
                stopped = Some(e);
            }
        }
        let r = worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        stopped.map_or(Ok(r), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_check_stops_only_the_thread_that_set_it() {
        assert!(interrupted().is_ok());
        let r = with_interrupt_check(
            || true,
            || {
                let here = interrupted();
                let other = std::thread::spawn(|| interrupted().is_ok()).join().unwrap_or(false);
                (here, other)
            },
        );
        assert!(matches!(r.0, Err(Error::Cancelled(_))) && r.1);
        assert!(interrupted().is_ok(), "the check ends with the call");
    }
}
