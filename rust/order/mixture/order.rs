//! Light keyed permutations for the many small orders (block slots, child passes).

use crate::order::permute::{Domain, mix64};

/// The order of one pass over a child: a keyed permutation of its `n` items, either
/// uniform (`chunk <= 1`), or chunk-local: consecutive runs of `chunk` items visited in
/// a keyed order, each run's items shuffled among themselves (the `n % chunk` leftover
/// items form one shorter run at a keyed place). A run of draws of the child then
/// reads a few neighbouring rows (the same Parquet pages) instead of scattered ones,
/// the way a page shuffle does, so a page cache serves it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChildOrder {
    pub(super) all: Domain,
    chunk: u64,
    full: u64,
    tail: u64,
    chunks: Domain,
    rows: Domain,
    tail_rows: Domain,
}

impl ChildOrder {
    pub(super) fn new(n: u64, chunk: u64) -> Self {
        let chunk = chunk.max(1);
        let (full, tail) = (n / chunk, n % chunk);
        ChildOrder {
            all: Domain::new(n),
            chunk,
            full,
            tail,
            chunks: Domain::new(full),
            rows: Domain::new(chunk),
            tail_rows: Domain::new(tail),
        }
    }

    /// Uniform over all items (also when the child fits in one run).
    #[inline]
    pub(super) fn is_uniform(&self) -> bool {
        self.chunk <= 1 || self.full == 0 || (self.full == 1 && self.tail == 0)
    }

    /// Item at position `k` of the pass keyed by `key`.
    pub(super) fn apply(&self, key: u64, k: u64) -> u64 {
        if self.is_uniform() {
            return self.all.apply(key, k);
        }
        // the leftover run sits after `t` full runs
        let t = if self.tail > 0 { mix64(key ^ 0x2545_f491_4f6c_dd1d) % (self.full + 1) } else { self.full };
        let at = t * self.chunk;
        if k >= at && k < at + self.tail {
            return self.full * self.chunk + self.tail_rows.apply(mix64(key ^ 0x5851_f42d_4c95_7f2d), k - at);
        }
        let k = if k >= at + self.tail { k - self.tail } else { k };
        let run = self.chunks.apply(mix64(key ^ 0x1405_7b7e_f767_814f), k / self.chunk);
        let row_key = mix64(key ^ (run + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        run * self.chunk + self.rows.apply(row_key, k % self.chunk)
    }
}
