//! `MixtureMap`: weighted mixing with exact allocation, stages and per-pass orders.

use super::order::ChildOrder;
use super::tree::*;
use super::*;

/// What happens when a child runs out of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Start a new pass over the child, in a fresh keyed order.
    Restart,
    /// The mixture ends before the first sample a child cannot provide.
    Stop,
}

#[derive(Debug, Clone)]
pub(super) struct Stage {
    start: u64,
    /// Number of positions (`None`: the last stage, open-ended).
    len: Option<u64>,
    pub(super) tree: Tree,
    /// Key of the block slot orders of this stage.
    slot_key: u64,
    /// Samples of every child drawn before this stage.
    before: Vec<u64>,
    /// Samples of every child drawn in this stage (finite stages only).
    drawn: Option<Vec<u64>>,
}

/// Where a global index lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub child: u32,
    /// Index into the child (its pass order applied).
    pub index: u64,
    /// Pass over the child this sample belongs to (0 = first).
    pub pass: u64,
    /// Number of this sample among all samples the mixture draws from the child.
    pub sample: u64,
}

#[derive(Debug, Clone)]
pub struct MixtureMap {
    names: Vec<String>,
    lengths: Vec<u64>,
    block_size: u64,
    policy: Policy,
    seed: u64,
    pub(super) stages: Vec<Stage>,
    /// Every child's pass order and base key (pass `p` is keyed by mixing in `p`).
    child_orders: Vec<ChildOrder>,
    child_keys: Vec<u64>,
    block_domain: Domain,
    /// Division by the block size and by every child's length, by multiplication.
    block_div: FastDiv,
    child_divs: Vec<FastDiv>,
    len: u64,
}

impl MixtureMap {
    /// `stages`: `(start index, one weight per child)`, first start 0, starts strictly
    /// increasing. `length`: number of positions (default: sum of the children's lengths
    /// under `Restart`, the exhaustion point under `Stop`).
    pub fn new(
        names: Vec<String>,
        lengths: Vec<u64>,
        stages: &[(u64, Vec<f64>)],
        block_size: u64,
        seed: u64,
        policy: Policy,
        length: Option<u64>,
    ) -> Result<Self> {
        if names.is_empty() {
            return Err(invalid("a mixture needs at least one child"));
        }
        if names.len() != lengths.len() {
            return Err(invalid("one length per child is needed"));
        }
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(invalid(format!("block_size must be in [1, {MAX_BLOCK_SIZE}], got {block_size}")));
        }
        if stages.is_empty() {
            return Err(invalid("at least one weight stage is needed"));
        }
        if stages[0].0 != 0 {
            return Err(invalid(format!("the first weight stage must start at index 0, not {}", stages[0].0)));
        }
        for w in stages.windows(2) {
            if w[1].0 <= w[0].0 {
                let starts: Vec<u64> = stages.iter().map(|s| s.0).collect();
                return Err(invalid(format!("stage starts must be strictly increasing, got {starts:?}")));
            }
        }
        if stages.last().map(|s| s.0 > MAX_LEN).unwrap_or(false) {
            return Err(invalid("stage starts must be below 2^63"));
        }
        let num = names.len();
        let child_codes: Vec<u64> = names.iter().map(|n| purpose_code(n)).collect();
        let block_purpose = purpose_code("mixture-block");
        let node_purpose = purpose_code("mixture-allocation");
        let mut built = Vec::with_capacity(stages.len());
        let mut before = vec![0u64; num];
        for (s, (start, weights)) in stages.iter().enumerate() {
            let units = weight_units(weights, s, &names)?;
            for &(c, _) in &units {
                if lengths[c as usize] == 0 {
                    return Err(invalid(format!(
                        "child {:?} is empty but has a positive weight in stage {s}",
                        names[c as usize]
                    )));
                }
            }
            let tree = Tree::build(&units, num, derive_key(&[seed, s as u64, node_purpose]))?;
            let len = stages.get(s + 1).map(|next| next.0 - start);
            let drawn = len.map(|l| {
                let mut d = vec![0u64; num];
                tree.counts_at(l, &mut d);
                d
            });
            let stage = Stage {
                start: *start,
                len,
                tree,
                slot_key: derive_key(&[seed, s as u64, block_purpose]),
                before: before.clone(),
                drawn: drawn.clone(),
            };
            if let Some(d) = &drawn {
                for (b, x) in before.iter_mut().zip(d) {
                    *b += x;
                }
            }
            built.push(stage);
        }
        let child_purpose = purpose_code("mixture-child");
        let child_orders = lengths.iter().map(|&n| ChildOrder::new(n, 1)).collect();
        let child_keys = child_codes.iter().map(|&code| derive_key(&[seed, child_purpose, code])).collect();
        let child_divs = lengths.iter().map(|&n| FastDiv::new(n)).collect();
        let mut map = MixtureMap {
            names,
            lengths,
            block_size,
            policy,
            seed,
            stages: built,
            child_orders,
            child_keys,
            block_domain: Domain::new(block_size),
            block_div: FastDiv::new(block_size),
            child_divs,
            len: 0,
        };
        let limit = match policy {
            Policy::Restart => None,
            Policy::Stop => Some(map.cut_at_exhaustion()?),
        };
        map.len = match (length, limit) {
            (Some(n), Some(lim)) if n > lim => {
                return Err(invalid(format!(
                    "length {n} exceeds the {lim} samples available before a child runs out (policy='stop')"
                )));
            }
            (Some(n), _) if n > MAX_LEN => return Err(invalid("length must be below 2^63")),
            (Some(n), _) => n,
            (None, Some(lim)) => lim,
            (None, None) => map
                .lengths
                .iter()
                .try_fold(0u64, |a, &b| a.checked_add(b).filter(|&t| t <= MAX_LEN))
                .ok_or_else(|| invalid("total length exceeds 2^63 - 1; pass length="))?,
        };
        Ok(map)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn lengths(&self) -> &[u64] {
        &self.lengths
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn num_stages(&self) -> usize {
        self.stages.len()
    }

    /// `(start, end)` of every stage (`end = None`: open-ended). Under `Stop` the stages
    /// after the exhaustion point are gone and the last one ends there.
    pub fn stage_bounds(&self) -> Vec<(u64, Option<u64>)> {
        self.stages.iter().map(|s| (s.start, s.len.map(|l| s.start + l))).collect()
    }

    /// Stage holding global index `i`.
    #[inline]
    pub fn stage_of(&self, i: u64) -> usize {
        self.stages.partition_point(|s| s.start <= i) - 1
    }

    pub fn stage_start(&self, stage: usize) -> Option<u64> {
        self.stages.get(stage).map(|s| s.start)
    }

    /// Size of block `b` of a stage (the last block of a finite stage may be short).
    #[inline]
    fn block_len(&self, st: &Stage, b: u64) -> u64 {
        let lo = b * self.block_size;
        match st.len {
            Some(l) => self.block_size.min(l - lo),
            None => self.block_size,
        }
    }

    /// Slot order of block `b` (of `size` slots): its domain and key.
    #[inline]
    fn slots(&self, st: &Stage, b: u64, size: u64) -> (Domain, u64) {
        let domain = if size == self.block_size { self.block_domain } else { Domain::new(size) };
        (domain, mix64(st.slot_key ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    /// `(child, sample number among everything drawn from the child)` of global index
    /// `i`, whatever the mixture's length. Pure arithmetic; never fails.
    #[inline]
    pub fn sample_unchecked(&self, i: u64) -> (u32, u64) {
        let st = &self.stages[self.stage_of(i)];
        let r = i - st.start;
        let (b, off) = self.block_div.div_rem(r);
        let lo = r - off;
        let size = self.block_len(st, b);
        let (domain, key) = self.slots(st, b, size);
        let slot = domain.apply(key, r - lo);
        let (c, m) = st.tree.descend(lo + slot);
        (c, st.before[c as usize] + m)
    }

    /// Index into the child for its `sample`-th draw: pass = sample / len, and every
    /// pass visits the child in its own keyed order.
    #[inline]
    pub fn child_index(&self, child: u32, sample: u64) -> (u64, u64) {
        let c = child as usize;
        let (pass, within) = self.child_divs[c].div_rem(sample);
        (self.child_orders[c].apply(self.pass_key(c, pass), within), pass)
    }

    #[inline]
    fn pass_key(&self, child: usize, pass: u64) -> u64 {
        mix64(self.child_keys[child] ^ pass.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// Chunk-local pass orders: `chunks[c]` consecutive items of child `c` per run (1 =
    /// uniform over the child; see `ChildOrder`). The allocation is unchanged.
    pub fn set_child_chunks(&mut self, chunks: &[u64]) -> Result<()> {
        if chunks.len() != self.lengths.len() {
            return Err(invalid(format!("{} chunk sizes for {} children", chunks.len(), self.lengths.len())));
        }
        if chunks.contains(&0) {
            return Err(invalid("chunk sizes must be >= 1"));
        }
        self.child_orders = self.lengths.iter().zip(chunks).map(|(&n, &r)| ChildOrder::new(n, r)).collect();
        Ok(())
    }

    #[inline]
    pub fn locate_unchecked(&self, i: u64) -> Located {
        let (child, sample) = self.sample_unchecked(i);
        let (index, pass) = self.child_index(child, sample);
        Located { child, index, pass, sample }
    }

    /// `locate_unchecked` for every index of `ids` (all `< len`), handed to
    /// `put(position in ids, located)`; evaluates `LANES` indices side by side.
    pub fn locate_batch(&self, ids: &[u64], mut put: impl FnMut(usize, Located)) {
        let mut chunks = ids.chunks_exact(LANES);
        for (j, chunk) in chunks.by_ref().enumerate() {
            let mut doms = [self.block_domain; LANES];
            let mut keys = [0u64; LANES];
            let mut xs = [0u64; LANES];
            let mut site = [(0usize, 0u64); LANES]; // (stage, first stage sample of the block)
            for l in 0..LANES {
                let i = chunk[l];
                let s = self.stage_of(i);
                let st = &self.stages[s];
                let r = i - st.start;
                let (b, off) = self.block_div.div_rem(r);
                let lo = r - off;
                (doms[l], keys[l]) = self.slots(st, b, self.block_len(st, b));
                xs[l] = off;
                site[l] = (s, lo);
            }
            apply_lanes(&doms, &keys, &mut xs);
            let mut pass = [0u64; LANES];
            let trees: [&Tree; LANES] = std::array::from_fn(|l| &self.stages[site[l].0].tree);
            let mut sample: [u64; LANES] = std::array::from_fn(|l| site[l].1 + xs[l]);
            let child = descend_lanes(&trees, &mut sample);
            for l in 0..LANES {
                let st = &self.stages[site[l].0];
                let ci = child[l] as usize;
                sample[l] += st.before[ci];
                (pass[l], xs[l]) = self.child_divs[ci].div_rem(sample[l]);
                let order = &self.child_orders[ci];
                keys[l] = self.pass_key(ci, pass[l]);
                if order.is_uniform() {
                    doms[l] = order.all;
                } else {
                    // chunk-local order: evaluated on its own; the lane passes through
                    xs[l] = order.apply(keys[l], xs[l]);
                    doms[l] = Domain::new(1);
                }
            }
            apply_lanes(&doms, &keys, &mut xs);
            for l in 0..LANES {
                put(j * LANES + l, Located { child: child[l], index: xs[l], pass: pass[l], sample: sample[l] });
            }
        }
        let done = ids.len() - chunks.remainder().len();
        for (k, &i) in chunks.remainder().iter().enumerate() {
            put(done + k, self.locate_unchecked(i));
        }
    }

    pub fn locate(&self, i: u64) -> Result<Located> {
        if i >= self.len {
            return Err(out_of_range("index", i, self.len));
        }
        Ok(self.locate_unchecked(i))
    }

    /// Samples drawn from every child among the first `i` global indices.
    pub fn counts(&self, i: u64) -> Vec<u64> {
        let mut out = vec![0u64; self.names.len()];
        if i == 0 {
            return out;
        }
        let s = self.stage_of(i - 1);
        let st = &self.stages[s];
        out.copy_from_slice(&st.before);
        let r = i - st.start;
        let b = (r - 1) / self.block_size; // block of the last counted index
        let lo = b * self.block_size;
        let size = self.block_len(st, b);
        let used = r - lo; // 1..=size positions of block b are counted
        if used == size {
            st.tree.counts_at(lo + size, &mut out);
        } else {
            // a partial block: its slot order decides which samples came first
            st.tree.counts_at(lo, &mut out);
            let (domain, key) = self.slots(st, b, size);
            for p in 0..used {
                let (c, _) = st.tree.descend(lo + domain.apply(key, p));
                out[c as usize] += 1;
            }
        }
        out
    }

    /// Composition of block `b` of `stage`: samples of every child in it.
    pub fn block_counts(&self, stage: usize, b: u64) -> Result<Vec<u64>> {
        let st = self.stages.get(stage).ok_or_else(|| invalid(format!("no stage {stage}")))?;
        // positions are below 2^63: a block past that (of an open-ended stage) does not exist
        let lo = b.checked_mul(self.block_size).filter(|&lo| st.len.is_none_or(|l| lo < l) && lo < MAX_LEN);
        let lo = lo.ok_or_else(|| invalid(format!("stage {stage} has no block {b}")))?;
        let hi = lo + self.block_len(st, b);
        let (mut a, mut z) = (vec![0u64; self.names.len()], vec![0u64; self.names.len()]);
        st.tree.counts_at(lo, &mut a);
        st.tree.counts_at(hi, &mut z);
        Ok(z.iter().zip(&a).map(|(z, a)| z - a).collect())
    }

    /// Global index of the `sample`-th draw from `child` (inverse of the allocation),
    /// or `None` if the mixture never draws it.
    pub fn position_of(&self, child: usize, sample: u64) -> Option<u64> {
        let (s, k) = self.draw_site(child, sample)?;
        let st = &self.stages[s];
        let b = k / self.block_size;
        let lo = b * self.block_size;
        let size = self.block_len(st, b);
        let (domain, key) = self.slots(st, b, size);
        st.start.checked_add(lo.checked_add(domain.inverse(key, k - lo))?)
    }

    /// `(stage, stage sample)` that makes draw number `sample` of `child`, in
    /// allocation order (before the slot shuffle), or `None` if it is never made.
    fn draw_site(&self, child: usize, sample: u64) -> Option<(usize, u64)> {
        for (s, st) in self.stages.iter().enumerate() {
            let base = st.before[child];
            if sample < base {
                return None;
            }
            let m = sample - base;
            if st.drawn.as_ref().is_some_and(|d| m >= d[child]) {
                continue;
            }
            return Some((s, st.tree.sample_of(child, m)?));
        }
        None
    }

    /// Policy `Stop`: end the mixture at the first draw, in allocation order, that
    /// some child could only make in a second pass. That draw's stage becomes the last
    /// and ends there, like a stage end: its last block holds only the draws before
    /// the cut (shuffled among themselves), so every draw before the cut is used and
    /// none after it is. Returns the resulting length.
    fn cut_at_exhaustion(&mut self) -> Result<u64> {
        let (s, k) = (0..self.names.len())
            .filter_map(|c| self.draw_site(c, self.lengths[c]))
            .min()
            .ok_or_else(|| invalid("no child is ever exhausted; pass length="))?;
        self.stages.truncate(s + 1);
        let st = &mut self.stages[s];
        let mut drawn = vec![0u64; self.names.len()];
        st.tree.counts_at(k, &mut drawn);
        st.len = Some(k);
        st.drawn = Some(drawn);
        st.start.checked_add(k).filter(|&n| n <= MAX_LEN).ok_or_else(|| invalid("mixture length exceeds 2^63 - 1"))
    }

    /// Per stage, the window-error bound of every child (NaN: weight 0 in that stage).
    pub fn window_bounds(&self) -> Vec<Vec<f64>> {
        self.stages.iter().map(|s| s.tree.bounds(self.names.len())).collect()
    }

    /// Stage samples (not positions) drawn from every child among the first `k`
    /// samples of `stage`: the allocation's cumulative counts.
    pub fn stage_counts(&self, stage: usize, k: u64) -> Result<Vec<u64>> {
        let st = self.stages.get(stage).ok_or_else(|| invalid(format!("no stage {stage}")))?;
        let mut out = vec![0u64; self.names.len()];
        st.tree.counts_at(k, &mut out);
        Ok(out)
    }
}
