//! `FlatMap`: the children's index spaces concatenated under one keyed permutation.

use super::*;

/// Virtual concatenation of children under one keyed permutation.
#[derive(Debug, Clone)]
pub struct FlatMap {
    /// `offsets[c]` = first concatenated index of child `c`; `offsets[C]` = total.
    offsets: Vec<u64>,
    perm: Option<Permutation>,
}

impl FlatMap {
    /// `key` = `None` keeps plain concatenation order.
    pub fn new(lengths: &[u64], key: Option<u64>) -> Result<Self> {
        if lengths.is_empty() {
            return Err(invalid("a flat mixture needs at least one child"));
        }
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        let mut total = 0u64;
        offsets.push(0);
        for &n in lengths {
            total = total
                .checked_add(n)
                .filter(|&t| t <= MAX_LEN)
                .ok_or_else(|| invalid("total length exceeds 2^63 - 1"))?;
            offsets.push(total);
        }
        let perm = key.map(|k| Permutation::new(total, k));
        Ok(FlatMap { offsets, perm })
    }

    pub fn len(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn num_children(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// Child owning concatenated index `x` (`x < len`). Empty children own nothing:
    /// the last child whose offset is `<= x` is the non-empty one.
    #[inline]
    fn child_of(&self, x: u64) -> usize {
        self.offsets.partition_point(|&o| o <= x) - 1
    }

    /// `(child, index in child)` of global index `i`, unchecked (`i < len`).
    #[inline]
    pub fn locate_unchecked(&self, i: u64) -> (usize, u64) {
        let x = match &self.perm {
            Some(p) => p.apply(i),
            None => i,
        };
        let c = self.child_of(x);
        (c, x - self.offsets[c])
    }

    /// `locate_unchecked` for every index of `ids` (all `< len`), handed to
    /// `put(position in ids, (child, local))`; `LANES` indices side by side.
    pub fn locate_batch(&self, ids: &[u64], mut put: impl FnMut(usize, (usize, u64))) {
        let mut chunks = ids.chunks_exact(LANES);
        for (j, chunk) in chunks.by_ref().enumerate() {
            let mut xs: [u64; LANES] = std::array::from_fn(|l| chunk[l]);
            if let Some(p) = &self.perm {
                p.apply_lanes(&mut xs);
            }
            for (l, &x) in xs.iter().enumerate() {
                let c = self.child_of(x);
                put(j * LANES + l, (c, x - self.offsets[c]));
            }
        }
        let done = ids.len() - chunks.remainder().len();
        for (k, &i) in chunks.remainder().iter().enumerate() {
            put(done + k, self.locate_unchecked(i));
        }
    }

    pub fn locate(&self, i: u64) -> Result<(usize, u64)> {
        if i >= self.len() {
            return Err(out_of_range("index", i, self.len()));
        }
        Ok(self.locate_unchecked(i))
    }

    /// Global index at which child `child`'s item `local` appears (inverse of `locate`).
    pub fn position(&self, child: usize, local: u64) -> Result<u64> {
        let n = self.num_children();
        if child >= n {
            return Err(invalid(format!("child {child} does not exist ({n} children)")));
        }
        let size = self.offsets[child + 1] - self.offsets[child];
        if local >= size {
            return Err(out_of_range("child index", local, size));
        }
        let x = self.offsets[child] + local;
        Ok(match &self.perm {
            Some(p) => p.inverse(x),
            None => x,
        })
    }
}
