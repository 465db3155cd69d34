//! The maps over arrays of global indices (what the `locate_many` / `samples_many`
//! bindings return): `crate::runtime::batch` decides whether a batch runs on the calling thread
//! or in parallel; the results are those of one call per index either way.

use super::{FlatMap, MixtureMap};
use crate::runtime::batch::{fill2, fill3_chunks};

impl FlatMap {
    /// `(children, indices in child)` of every index of `ids` (all `< len`), as int64.
    pub fn locate_many(&self, ids: &[u64]) -> (Vec<i64>, Vec<i64>) {
        fill2(ids, |i| {
            let (c, l) = self.locate_unchecked(i);
            (c as i64, l as i64)
        })
    }
}

impl MixtureMap {
    /// `(children, indices in child, passes)` of every index of `ids` (all `< len`).
    pub fn locate_many(&self, ids: &[u64]) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
        fill3_chunks(ids, |ids, c, x, p| {
            self.locate_batch(ids, |j, l| (c[j], x[j], p[j]) = (l.child as i64, l.index as i64, l.pass as i64))
        })
    }

    /// `(children, draw numbers)` of every index of `ids`: index `i` is draw number `k`
    /// (0-based, over all passes) of its child.
    pub fn samples_many(&self, ids: &[u64]) -> (Vec<i64>, Vec<i64>) {
        fill2(ids, |i| {
            let (c, k) = self.sample_unchecked(i);
            (c as i64, k as i64)
        })
    }
}
