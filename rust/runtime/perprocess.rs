//! One value per process, made fork-safe: the thread pool (`runtime.rs`), the async I/O
//! runtime and its object-store clients, and the cache of open file handles all live in
//! a [`PerProcess`].
//!
//! A forked child (a fork-based DataLoader worker) inherits the parent's memory but
//! none of its threads: a pool, tokio runtime or connection pool made before the fork
//! has no threads there and hangs on first use, and a mutex held by one of those threads
//! at the fork stays locked forever. So each value is tagged with the fork generation
//! it was made in, and a child (a new generation) makes its own on first use. The
//! parent's value is leaked in the child, after `retire` has had a chance to release
//! what it safely can: dropping it would join threads that do not exist there.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Forks seen by this process image: a `pthread_atfork` child handler bumps it, so
/// "are we still the process that made this?" is one atomic load on the read path, not
/// a `getpid` system call per page.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// This process image's fork generation: what [`PerProcess`] tags its values with, and
/// what anything else made before a fork compares to know it is in the child.
pub fn fork_generation() -> u64 {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic (async-signal-safe).
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
    FORK_GENERATION.load(Ordering::Acquire)
}

/// A value per process: made on first use, and made again in a forked child. Values are
/// leaked, never freed, so a reference handed out stays valid while another thread
/// replaces the value ([`PerProcess::replace`]).
pub struct PerProcess<T: 'static> {
    cur: AtomicPtr<(u64, T)>,
}

impl<T: Send + Sync + 'static> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync + 'static> PerProcess<T> {
    pub const fn new() -> Self {
        PerProcess { cur: AtomicPtr::new(std::ptr::null_mut()) }
    }

    /// The value of this process, made with `make` if there is none yet; a value left by
    /// the parent of a fork is passed to `retire` once, then leaked.
    pub fn get(&self, make: impl FnOnce() -> T, retire: impl FnOnce(&T)) -> &'static T {
        let generation = fork_generation();
        let mut cur = self.cur.load(Ordering::Acquire);
        // SAFETY: values are leaked (never freed), so any pointer ever stored stays valid.
        if let Some((g, v)) = unsafe { cur.as_ref() }
            && *g == generation
        {
            return v;
        }
        let fresh = Box::into_raw(Box::new((generation, make())));
        loop {
            match self.cur.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(old) => {
                    // SAFETY: leaked values stay valid.
                    if let Some((_, v)) = unsafe { old.as_ref() } {
                        retire(v);
                    }
                    // SAFETY: just leaked above.
                    return unsafe { &(*fresh).1 };
                }
                Err(actual) => {
                    // SAFETY: leaked values stay valid.
                    if let Some((g, v)) = unsafe { actual.as_ref() }
                        && *g == generation
                    {
                        // another thread of this process installed one first
                        // SAFETY: `fresh` was never shared.
                        drop(unsafe { Box::from_raw(fresh) });
                        return v;
                    }
                    cur = actual;
                }
            }
        }
    }

    /// The value of this process if it was made already.
    pub fn peek(&self) -> Option<&'static T> {
        let generation = fork_generation();
        let cur = self.cur.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        unsafe { cur.as_ref() }.filter(|(g, _)| *g == generation).map(|(_, v)| v)
    }

    /// Make `value` this process's value. The one it replaces may still be in use by
    /// another thread: it is leaked, not freed.
    pub fn replace(&self, value: T) {
        self.cur.store(Box::into_raw(Box::new((fork_generation(), value))), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_once_and_replaced_on_demand() {
        static V: PerProcess<u32> = PerProcess::new();
        assert!(V.peek().is_none());
        assert_eq!(*V.get(|| 1, |_| {}), 1);
        assert_eq!(*V.get(|| 2, |_| {}), 1, "made once");
        V.replace(3);
        assert_eq!(*V.get(|| 4, |_| {}), 3);
    }
}
