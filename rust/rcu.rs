//! A process-wide value that readers see whole and writers replace, with no lock: the
//! I/O settings and the remembered secrets live in a [`Rcu`].
//!
//! A lock is unsafe across a fork: if any thread (an I/O or pool thread reading the
//! settings) holds it at the moment a DataLoader worker forks, the child inherits it
//! locked with no thread to unlock it, and its first write (`set_io_options` in a
//! `worker_init_fn`, a new store's secrets) hangs forever. Here the value is an
//! immutable, leaked `&'static T` behind an [`AtomicPtr`] (read-copy-update, as in the
//! Linux kernel's RCU): a reader does one atomic load; a writer copies the current
//! value, changes the copy, leaks it and swaps it in with a compare-exchange, retrying
//! if another writer came first. A fork at any instant leaves the child a whole value
//! and nothing held.
//!
//! Replaced values are leaked, never freed: a reader may still hold one, and knowing
//! when none does would need hazard pointers or epochs. Writes are rare (a user's
//! `set_io_options`, a store configured with a new secret), so the leak is bounded by
//! what users do, not by the data read.

use std::sync::atomic::{AtomicPtr, Ordering};

/// A value made by `init` on first use, read whole, replaced by [`Rcu::update`].
pub struct Rcu<T: 'static> {
    cur: AtomicPtr<T>,
    init: fn() -> T,
}

impl<T: Send + Sync + 'static> Rcu<T> {
    pub const fn new(init: fn() -> T) -> Self {
        Rcu { cur: AtomicPtr::new(std::ptr::null_mut()), init }
    }

    /// The current value (made with `init` if there is none yet).
    pub fn get(&self) -> &'static T {
        let cur = self.cur.load(Ordering::Acquire);
        // SAFETY: every pointer stored is a leaked box, never freed.
        if let Some(v) = unsafe { cur.as_ref() } {
            return v;
        }
        let fresh = Box::into_raw(Box::new((self.init)()));
        match self.cur.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just leaked.
            Ok(_) => unsafe { &*fresh },
            Err(actual) => {
                // another thread made it first; `fresh` was never shared
                // SAFETY: `fresh` came from `Box::into_raw` above and nobody else saw it.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: non-null (a compare-exchange against null failed), leaked.
                unsafe { &*actual }
            }
        }
    }

    /// Replace the value by `change(current)`, or keep it where `change` returns
    /// `None`; returns the value replaced (or kept). `change` may run more than once
    /// when writers race: it must only compute, from the value it is given.
    pub fn update(&self, mut change: impl FnMut(&T) -> Option<T>) -> &'static T {
        let mut cur = self.get();
        loop {
            let Some(next) = change(cur) else { return cur };
            let next = Box::into_raw(Box::new(next));
            let expected = cur as *const T as *mut T;
            match self.cur.compare_exchange(expected, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return cur,
                Err(actual) => {
                    // SAFETY: `next` was never shared.
                    drop(unsafe { Box::from_raw(next) });
                    // SAFETY: non-null once `get` has run; leaked values stay valid.
                    cur = unsafe { &*actual };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_read_makes_the_value_and_updates_replace_it() {
        static V: Rcu<u32> = Rcu::new(|| 7);
        assert_eq!(*V.get(), 7);
        assert_eq!(*V.update(|v| Some(v + 1)), 7, "returns the value replaced");
        assert_eq!(*V.get(), 8);
        assert_eq!(*V.update(|_| None), 8, "None keeps the value");
        assert_eq!(*V.get(), 8);
    }

    #[test]
    fn concurrent_writers_lose_no_update() {
        static V: Rcu<Vec<u64>> = Rcu::new(Vec::new);
        let (threads, each) = (8u64, 200u64);
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for i in 0..each {
                        V.update(|v| {
                            let mut n = v.clone();
                            n.push(t * each + i);
                            Some(n)
                        });
                    }
                });
            }
        });
        let mut seen = V.get().clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..threads * each).collect::<Vec<_>>());
    }

    #[test]
    fn readers_see_whole_values_while_writers_replace_them() {
        // every value written is a vector of one number repeated: a torn or half-built
        // value would mix numbers or lengths
        static V: Rcu<Vec<u64>> = Rcu::new(|| vec![0; 64]);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let v = V.get();
                        assert_eq!(v.len(), 64);
                        assert!(v.iter().all(|x| *x == v[0]), "a torn value: {v:?}");
                    }
                });
            }
            for w in 0..2u64 {
                s.spawn(move || {
                    for i in 0..2000u64 {
                        V.update(|_| Some(vec![w * 10_000 + i; 64]));
                    }
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
        });
    }
}
