//! Mixture index math: pure maps from a global sample index to `(child, index in child)`.
//!
//! Two maps, both O(1) memory in the number of samples and free of state, so resuming
//! is "set the index" and every rank computes the same answer:
//!
//! * [`FlatMap`] — the children's index spaces concatenated and put through one keyed
//!   permutation ("concatenate, then shuffle"); a child is found by binary search on
//!   cumulative lengths.
//! * [`MixtureMap`] — weighted mixing with an exact allocation, weight stages, and a
//!   fresh permutation of a child for every pass over it.
//!
//! # The allocation
//!
//! Within a stage, samples `0, 1, 2, …` are dealt to children by a binary tree built
//! over the children with positive weight (Huffman order: light children pair up
//! first, so a sample's walk down the tree is short on average). Every internal node
//! splits the samples reaching it between its two sides by a *mechanical (Sturmian)
//! sequence*: of the first `k` samples reaching a node whose left side has share `p`,
//! exactly `L(k) = floor((k·p + φ) / 2^64)` go left, with `p` a 64-bit fixed-point
//! fraction and `φ` a keyed phase. This is integer arithmetic (one 64×64→128 multiply
//! per level), so:
//!
//! * the split is an exact partition at every node, hence block sizes are exact and the
//!   children's counts always add up;
//! * `L` is non-decreasing with steps of 0 or 1, so every count is monotone — no
//!   Alabama paradox, unlike largest-remainder on cumulative targets, which can take a
//!   sample back from a child in a later block (counted in the tests);
//! * the counts of every child among the first `k` samples (`counts_at`) and the child
//!   of sample `k` with its number among that child's samples (`descend`) are closed
//!   forms, and so is the inverse (`sample_of`): where the `m`-th sample of a child is.
//!
//! Error: if a node's count over any window of samples is within `E` of its target,
//! a side with share `r` is within `1 + r·E` (its own floor, plus its share of the
//! parent's error). The root is exact, so a child's window error is below
//! `1 + r_d(1 + r_{d-1}(1 + …))` along its path (`window_bounds`): below 1 for both
//! children of a two-way mixture (the Levanter case), typically 1–2.5 for many
//! children. Strictly below 1 for *every* child is impossible in general with exact
//! block sizes (each child's counts would have to be a mechanical word
//! `floor(b·B·w_c + u_c)`, whose sum over the children is not `b·B` for generic
//! weights): some child must exceed 1, and this keeps every child within a small
//! constant that does not grow with the number of blocks. Nothing rounds a weight to
//! zero: a child of weight 1e-6 gets its sample once per ~10^6 samples, on schedule
//! (its hits are a mechanical sequence in its parent's time).
//!
//! # Blocks
//!
//! Positions are grouped in blocks of `block_size`; a block's composition is fixed by
//! the allocation above (samples `b·B .. (b+1)·B` of the stage) and its slots are put
//! in a keyed random order, so a block is a shuffled, exactly-composed unit, as in
//! Levanter's block-deterministic mixture. The last block of a finite stage holds the
//! stage's remaining samples only, so a stage's samples are exactly its first
//! `length` samples and a child's numbering carries over into the next stage with no
//! gap or repeat.
//!
//! # Passes and policies
//!
//! A child's `m`-th draw is item `order_p(m mod n)` of pass `p = m div n`, where every
//! pass has its own keyed order (`ChildOrder`: uniform, or chunk-local so that runs of
//! draws read neighbouring rows). Under `Policy::Stop` the mixture ends at the first
//! draw, in allocation order, that would start a second pass; that point becomes a
//! stage end (see `cut_at_exhaustion`), so every draw before it is made exactly once.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::{Error, Result};
use crate::fastdiv::FastDiv;
use crate::permute::{Domain, LANES, Permutation, apply_lanes, derive_key, mix64};

/// Stable 64-bit code of a purpose string (FNV-1a), the same code
/// `youmu.Permutation(..., purpose="...")` uses, so keys match across the two APIs.
pub fn purpose_code(s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in s.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Largest allowed index space (positions are handed to Python as int64).
pub const MAX_LEN: u64 = i64::MAX as u64;
/// Largest block: `counts` walks a partial block, so keep that walk bounded.
pub const MAX_BLOCK_SIZE: u64 = 1 << 24;
/// Weights are quantised to integers summing to about this (≥ 1 per positive weight),
/// so a positive weight is never rounded to zero.
const WEIGHT_UNITS: f64 = (1u64 << 62) as f64;

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

fn out_of_range(what: &'static str, id: u64, len: u64) -> Error {
    Error::OutOfRange { what, id: id as i128, len }
}

// ------------------------------------------------------------------------------------
// Light keyed permutations for the many small orders (block slots, child passes)
// ------------------------------------------------------------------------------------

/// The order of one pass over a child: a keyed permutation of its `n` items, either
/// uniform (`chunk <= 1`), or chunk-local: consecutive runs of `chunk` items visited in
/// a keyed order, each run's items shuffled among themselves (the `n % chunk` leftover
/// items form one shorter run at a keyed place). A run of draws of the child then
/// reads a few neighbouring rows (the same Parquet pages) instead of scattered ones,
/// the way a page shuffle does, so a page cache serves it.
#[derive(Debug, Clone, Copy)]
struct ChildOrder {
    all: Domain,
    chunk: u64,
    full: u64,
    tail: u64,
    chunks: Domain,
    rows: Domain,
    tail_rows: Domain,
}

impl ChildOrder {
    fn new(n: u64, chunk: u64) -> Self {
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
    fn is_uniform(&self) -> bool {
        self.chunk <= 1 || self.full == 0 || (self.full == 1 && self.tail == 0)
    }

    /// Item at position `k` of the pass keyed by `key`.
    fn apply(&self, key: u64, k: u64) -> u64 {
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

// ------------------------------------------------------------------------------------
// FlatMap
// ------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------
// Allocation tree
// ------------------------------------------------------------------------------------

/// Left-going samples among the first `k` reaching a node: `floor((k·p + φ) / 2^64)`.
#[inline]
fn split(k: u64, p: u64, phase: u64) -> u64 {
    ((k as u128 * p as u128 + phase as u128) >> 64) as u64
}

/// Smallest `k` at which the `m`-th (0-based) left-going sample arrives, for the
/// mechanical sequence `split(·, p, phase)`: the `k` with `split(k) = m`,
/// `split(k + 1) = m + 1`. Needs `p > 0`; `None` if beyond u64.
fn nth_hit(m: u64, p: u64, phase: u64) -> Option<u64> {
    // smallest j with j·p + φ >= (m+1)·2^64, then k = j - 1
    let need = ((m as u128) + 1) << 64;
    let rest = need - phase as u128; // phase < 2^64 <= need
    let j = rest.div_ceil(p as u128);
    u64::try_from(j).ok().and_then(|j| j.checked_sub(1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ref {
    Leaf(u32),
    Node(u32),
}

#[derive(Debug, Clone)]
struct Node {
    /// Share of this node's samples that go left, in units of 2^-64 (0 < p < 2^64).
    p: u64,
    phase: u64,
    left: Ref,
    right: Ref,
}

/// Right-going samples follow a mechanical sequence too: `k - split(k, p, φ)` =
/// `floor((k·(2^64 - p) + (2^64 - 1 - φ)) / 2^64)`. Returns that sequence's (p, φ).
#[inline]
fn right_params(p: u64, phase: u64) -> (u64, u64) {
    (p.wrapping_neg(), !phase)
}

/// `Node` for the branch-free batch walk: children coded as u32, `LEAF` set on leaves.
#[derive(Debug, Clone, Copy)]
struct FlatNode {
    p: u64,
    phase: u64,
    left: u32,
    right: u32,
}

const LEAF: u32 = 1 << 31;

fn code(r: Ref) -> u32 {
    match r {
        Ref::Leaf(c) => c | LEAF,
        Ref::Node(n) => n,
    }
}

#[derive(Debug, Clone)]
struct Tree {
    root: Ref,
    nodes: Vec<Node>,
    /// `nodes` coded for `descend_lanes`, plus one inert node (p = 0) that leaves use.
    flat: Vec<FlatNode>,
    /// For every child: the path from the root, `(node, went_left)`, root first.
    paths: Vec<Option<Vec<(u32, bool)>>>,
}

impl Tree {
    /// Huffman tree over `(child, weight units)`, ties broken by child order, so the
    /// tree is a pure function of the weights. Phases are keyed by `key`.
    fn build(units: &[(u32, u64)], num_children: usize, key: u64) -> Result<Tree> {
        let mut heap: BinaryHeap<Reverse<(u128, u64, Ref)>> = BinaryHeap::new();
        for (seq, &(c, w)) in units.iter().enumerate() {
            heap.push(Reverse((w as u128, seq as u64, Ref::Leaf(c))));
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut seq = units.len() as u64;
        let root = loop {
            let Some(Reverse((wa, _, a))) = heap.pop() else {
                return Err(invalid("a weight stage needs at least one positive weight"));
            };
            let Some(Reverse((wb, _, b))) = heap.pop() else {
                break a;
            };
            let w = wa + wb;
            // p = floor(wa·2^64 / w): 0 < wa < w < 2^64 so 0 < p < 2^64.
            let p = ((wa << 64) / w) as u64;
            let id = nodes.len() as u64;
            let phase = mix64(key ^ mix64(id.wrapping_add(0x9e37_79b9_7f4a_7c15)));
            nodes.push(Node { p: p.max(1), phase, left: a, right: b });
            heap.push(Reverse((w, seq, Ref::Node(id as u32))));
            seq += 1;
        };
        let mut paths = vec![None; num_children];
        let mut stack = vec![(root, Vec::new())];
        while let Some((r, path)) = stack.pop() {
            match r {
                Ref::Leaf(c) => paths[c as usize] = Some(path),
                Ref::Node(n) => {
                    let nd = &nodes[n as usize];
                    let mut l = path.clone();
                    l.push((n, true));
                    let mut rr = path;
                    rr.push((n, false));
                    stack.push((nd.left, l));
                    stack.push((nd.right, rr));
                }
            }
        }
        let mut flat: Vec<FlatNode> = nodes
            .iter()
            .map(|n| FlatNode { p: n.p, phase: n.phase, left: code(n.left), right: code(n.right) })
            .collect();
        flat.push(FlatNode { p: 0, phase: 0, left: 0, right: 0 });
        Ok(Tree { root, nodes, flat, paths })
    }

    /// Child of stage sample `k`, and `k`'s number among that child's samples.
    #[inline]
    fn descend(&self, mut k: u64) -> (u32, u64) {
        let mut r = self.root;
        loop {
            match r {
                Ref::Leaf(c) => return (c, k),
                Ref::Node(n) => {
                    let nd = &self.nodes[n as usize];
                    let x = k as u128 * nd.p as u128 + nd.phase as u128;
                    let before = (x >> 64) as u64;
                    // sample k goes left iff split(k + 1) = split(k) + 1, i.e. the low
                    // word carries when p is added
                    if (x as u64).checked_add(nd.p).is_none() {
                        r = nd.left;
                        k = before;
                    } else {
                        r = nd.right;
                        k -= before;
                    }
                }
            }
        }
    }

    /// Samples of every child among the first `k` samples of the stage (added to `out`).
    fn counts_at(&self, k: u64, out: &mut [u64]) {
        let mut stack = vec![(self.root, k)];
        while let Some((r, k)) = stack.pop() {
            match r {
                Ref::Leaf(c) => out[c as usize] += k,
                Ref::Node(n) => {
                    let nd = &self.nodes[n as usize];
                    let l = split(k, nd.p, nd.phase);
                    stack.push((nd.left, l));
                    stack.push((nd.right, k - l));
                }
            }
        }
    }

    /// Stage sample holding the `m`-th sample of `child` (inverse of `descend`);
    /// `None` if the child is not in the tree or the answer exceeds u64.
    fn sample_of(&self, child: usize, m: u64) -> Option<u64> {
        let path = self.paths.get(child)?.as_ref()?;
        let mut m = m;
        for &(n, left) in path.iter().rev() {
            let nd = &self.nodes[n as usize];
            let (p, ph) = if left { (nd.p, nd.phase) } else { right_params(nd.p, nd.phase) };
            m = nth_hit(m, p, ph)?;
        }
        Some(m)
    }

    /// Window-error bound of every child (`f64::NAN` for children not in the tree).
    fn bounds(&self, num_children: usize) -> Vec<f64> {
        let mut out = vec![f64::NAN; num_children];
        let mut stack = vec![(self.root, 0.0f64)];
        while let Some((r, e)) = stack.pop() {
            match r {
                Ref::Leaf(c) => out[c as usize] = e,
                Ref::Node(n) => {
                    let nd = &self.nodes[n as usize];
                    let share = nd.p as f64 / 2f64.powi(64);
                    stack.push((nd.left, 1.0 + share * e));
                    stack.push((nd.right, 1.0 + (1.0 - share) * e));
                }
            }
        }
        out
    }
}

/// `Tree::descend` for `LANES` samples side by side (each in its own stage's tree)
/// without data-dependent branches: the side a sample takes is a coin flip that a
/// branch predictor cannot learn. Lanes that reached a leaf step through their tree's
/// inert node and keep their state. Returns the children; `ks` become the numbers
/// within them.
#[inline]
fn descend_lanes(trees: &[&Tree; LANES], ks: &mut [u64; LANES]) -> [u32; LANES] {
    let mut at: [u32; LANES] = std::array::from_fn(|l| code(trees[l].root));
    loop {
        let mut all = true;
        for l in 0..LANES {
            let leaf = at[l] & LEAF != 0;
            let flat = &trees[l].flat;
            let nd = &flat[if leaf { flat.len() - 1 } else { at[l] as usize }];
            let x = ks[l] as u128 * nd.p as u128 + nd.phase as u128;
            let before = (x >> 64) as u64;
            let left = (x as u64).overflowing_add(nd.p).1;
            let (next, k) = if left { (nd.left, before) } else { (nd.right, ks[l] - before) };
            at[l] = if leaf { at[l] } else { next };
            ks[l] = if leaf { ks[l] } else { k };
            all &= leaf;
        }
        if all {
            return std::array::from_fn(|l| at[l] & !LEAF);
        }
    }
}

/// Quantise one stage's weights to integer units (every positive weight gets >= 1).
fn weight_units(weights: &[f64], stage: usize, names: &[String]) -> Result<Vec<(u32, u64)>> {
    if weights.len() != names.len() {
        return Err(invalid(format!("stage {stage} has {} weights for {} children", weights.len(), names.len())));
    }
    for (w, name) in weights.iter().zip(names) {
        if !w.is_finite() || *w < 0.0 {
            return Err(invalid(format!("stage {stage}: weight of {name:?} must be finite and >= 0, got {w}")));
        }
    }
    let total: f64 = weights.iter().sum();
    if total.is_nan() || total <= 0.0 || !total.is_finite() {
        return Err(invalid(format!("stage {stage}: at least one weight must be positive (and the sum finite)")));
    }
    Ok(weights
        .iter()
        .enumerate()
        .filter(|(_, w)| **w > 0.0)
        .map(|(c, w)| (c as u32, ((w / total) * WEIGHT_UNITS).round().max(1.0) as u64))
        .collect())
}

// ------------------------------------------------------------------------------------
// MixtureMap
// ------------------------------------------------------------------------------------

/// What happens when a child runs out of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Start a new pass over the child, in a fresh keyed order.
    Restart,
    /// The mixture ends before the first sample a child cannot provide.
    Stop,
}

#[derive(Debug, Clone)]
struct Stage {
    start: u64,
    /// Number of positions (`None`: the last stage, open-ended).
    len: Option<u64>,
    tree: Tree,
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
    stages: Vec<Stage>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    fn mix(lengths: &[u64], weights: &[f64], b: u64, seed: u64, len: u64) -> MixtureMap {
        MixtureMap::new(
            names(lengths.len()),
            lengths.to_vec(),
            &[(0, weights.to_vec())],
            b,
            seed,
            Policy::Restart,
            Some(len),
        )
        .expect("valid mixture")
    }

    #[test]
    fn flat_map_is_a_bijection_with_empty_children() {
        for (lengths, key) in [(vec![3u64, 0, 5, 0, 1], Some(7)), (vec![0, 0, 4], Some(1)), (vec![2, 3], None)] {
            let f = FlatMap::new(&lengths, key).expect("flat");
            let total: u64 = lengths.iter().sum();
            let mut seen: Vec<Vec<bool>> = lengths.iter().map(|&n| vec![false; n as usize]).collect();
            for i in 0..total {
                let (c, l) = f.locate(i).expect("in range");
                assert!(!seen[c][l as usize]);
                seen[c][l as usize] = true;
                assert_eq!(f.position(c, l).expect("inverse"), i);
            }
            assert!(seen.iter().all(|s| s.iter().all(|&x| x)));
            assert!(f.locate(total).is_err());
            let ids: Vec<u64> = (0..total).chain(0..total).collect();
            f.locate_batch(&ids, |j, got| assert_eq!(Some(got), f.locate(ids[j]).ok(), "lengths {lengths:?}"));
        }
        assert!(FlatMap::new(&[], None).is_err());
    }

    #[test]
    fn light_permutations_are_bijections_and_spread() {
        for n in (0..200u64).chain([255, 256, 257, 1000, 2048, 4097, 65_537]) {
            let d = Domain::new(n);
            for key in [0u64, 1, 0xdead_beef, u64::MAX] {
                let mut seen = vec![false; n as usize];
                for i in 0..n {
                    let x = d.apply(key, i);
                    assert!(x < n && !seen[x as usize], "n={n} key={key}: {i} -> {x}");
                    seen[x as usize] = true;
                    assert_eq!(d.inverse(key, x), i);
                }
            }
        }
        // element 0's position over many keys covers the domain evenly
        let d = Domain::new(64);
        let mut hist = [0u32; 64];
        for key in 0..64_000u64 {
            hist[d.apply(mix64(key), 0) as usize] += 1;
        }
        let (lo, hi) = (hist.iter().min().copied().unwrap_or(0), hist.iter().max().copied().unwrap_or(0));
        assert!(lo > 800 && hi < 1200, "histogram too uneven: {lo}..{hi}");
    }

    /// Pearson chi-square of the joint positions of two neighbouring inputs over many
    /// keys: a weak permutation family (too few rounds for its half width) leaves the
    /// second position tied to the first.
    fn pair_chi_square(n: u64, cells: u64, keys: u64) -> (f64, f64) {
        let d = Domain::new(n);
        let bucket = |x: u64| x * cells / n;
        let mut hist = vec![0u64; (cells * cells) as usize];
        for key in 0..keys {
            let k = mix64(key ^ 0x1234_5678);
            hist[(bucket(d.apply(k, 0)) * cells + bucket(d.apply(k, 1))) as usize] += 1;
        }
        // expected counts: the two positions are distinct, uniform over ordered pairs
        let mut chi = 0.0;
        let mut df = 0.0;
        for a in 0..cells {
            for b in 0..cells {
                let size = |c: u64| ((c + 1) * n).div_ceil(cells) - (c * n).div_ceil(cells);
                let pairs = if a == b { size(a) * (size(a) - 1) } else { size(a) * size(b) };
                let e = keys as f64 * pairs as f64 / (n * (n - 1)) as f64;
                if e > 0.0 {
                    let o = hist[(a * cells + b) as usize] as f64;
                    chi += (o - e) * (o - e) / e;
                    df += 1.0;
                }
            }
        }
        (chi, df - 1.0)
    }

    #[test]
    fn light_permutations_place_neighbours_independently() {
        let sizes = [4u64, 5, 8, 16, 24, 32, 64, 100, 128, 256, 1000, 2048];
        for n in sizes {
            let cells = n.min(16);
            let (chi, df) = pair_chi_square(n, cells, 200_000);
            // chi-square has mean df and sd sqrt(2 df): allow 6 sd
            assert!(chi < df + 6.0 * (2.0 * df).sqrt(), "n={n}: chi-square {chi:.0} for {df} degrees of freedom");
        }
    }

    #[test]
    fn chunk_local_orders_are_bijections_made_of_runs() {
        for (n, chunk) in [(100u64, 7u64), (100, 10), (5, 7), (7, 7), (8, 7), (1000, 64), (1, 3), (0, 4), (64, 1)] {
            let o = ChildOrder::new(n, chunk);
            for key in [1u64, 99, u64::MAX] {
                let items: Vec<u64> = (0..n).map(|k| o.apply(key, k)).collect();
                let mut sorted = items.clone();
                sorted.sort_unstable();
                assert!(sorted.iter().enumerate().all(|(i, &x)| i as u64 == x), "n={n} chunk={chunk}");
                if chunk > 1 && n > chunk {
                    // every full run of `chunk` positions holds one run of items
                    let full = n / chunk;
                    let runs: std::collections::HashSet<u64> =
                        items.iter().filter(|&&x| x < full * chunk).map(|x| x / chunk).collect();
                    assert_eq!(runs.len() as u64, full);
                    let mut jumps = 0;
                    for w in items.windows(2) {
                        jumps += (w[0] / chunk != w[1] / chunk) as u64;
                    }
                    assert!(jumps <= full + 1, "n={n} chunk={chunk}: {jumps} run changes");
                }
            }
        }
    }

    #[test]
    fn flat_map_equals_concatenate_then_permute() {
        let f = FlatMap::new(&[4, 6], Some(99)).expect("flat");
        let p = Permutation::new(10, 99);
        for i in 0..10 {
            let x = p.apply(i);
            let want = if x < 4 { (0, x) } else { (1, x - 4) };
            assert_eq!(f.locate(i).expect("ok"), want);
        }
    }

    #[test]
    fn split_steps_are_zero_or_one_and_nth_hit_inverts_it() {
        for &(p, ph) in &[(1u64 << 63, 0u64), (3, u64::MAX), (u64::MAX - 2, 12345), (0x1234_5678_9abc_def0, 1 << 40)] {
            for (pp, pph) in [(p, ph), right_params(p, ph)] {
                let mut hits = 0u64;
                for k in 0..5000u64 {
                    let (a, b) = (split(k, pp, pph), split(k + 1, pp, pph));
                    assert!(b == a || b == a + 1);
                    if b == a + 1 {
                        assert_eq!(nth_hit(hits, pp, pph), Some(k));
                        hits += 1;
                    }
                }
            }
            // left and right sequences partition the samples
            let (q, qh) = right_params(p, ph);
            for k in [0u64, 1, 17, 1 << 40, (1 << 62) + 3] {
                assert_eq!(split(k, p, ph) + split(k, q, qh), k);
            }
        }
    }

    #[test]
    fn descend_counts_and_inverse_agree() {
        let units: Vec<(u32, u64)> =
            [5u64, 1, 1, 30, 2, 8].iter().enumerate().map(|(c, &w)| (c as u32, w << 40)).collect();
        let t = Tree::build(&units, 6, 11).expect("tree");
        let mut counts = vec![0u64; 6];
        for k in 0..20_000u64 {
            let (c, m) = t.descend(k);
            assert_eq!(m, counts[c as usize], "sample numbers are dealt in order");
            assert_eq!(t.sample_of(c as usize, m), Some(k));
            counts[c as usize] += 1;
            if k % 997 == 0 {
                let mut at = vec![0u64; 6];
                t.counts_at(k + 1, &mut at);
                assert_eq!(at, counts);
            }
        }
    }

    #[test]
    fn blocks_are_exact_and_windows_within_the_bound() {
        let w = [0.7, 0.2, 0.07, 0.0005, 0.0295];
        let b = 64u64;
        let m = mix(&[1000; 5], &w, b, 3, 1 << 40);
        let bounds = &m.window_bounds()[0];
        let nb = 4000u64;
        let mut cum = vec![vec![0u64; 5]];
        for blk in 0..nb {
            let counts = m.block_counts(0, blk).expect("block");
            assert_eq!(counts.iter().sum::<u64>(), b, "block {blk} is exactly block_size");
            let last = cum.last().cloned().unwrap_or_default();
            cum.push(last.iter().zip(&counts).map(|(a, b)| a + b).collect());
        }
        for c in 0..5 {
            let err: Vec<f64> = (0..=nb as usize).map(|k| cum[k][c] as f64 - k as f64 * b as f64 * w[c]).collect();
            let spread = err.iter().cloned().fold(f64::MIN, f64::max) - err.iter().cloned().fold(f64::MAX, f64::min);
            assert!(spread < bounds[c] + 1e-9, "child {c}: window error {spread} > bound {}", bounds[c]);
        }
    }

    #[test]
    fn two_children_are_within_one_in_every_window_levanter_case() {
        // Levanter: int(0.001 * 64) == 0 -> never sampled. Here: 1 per 1000, on schedule.
        let m = mix(&[100_000, 1000], &[0.999, 0.001], 64, 0, 1 << 40);
        assert!(m.window_bounds()[0].iter().all(|&e| e <= 1.0));
        let mut hits = Vec::new();
        for i in 0..640_000u64 {
            if m.locate(i).expect("ok").child == 1 {
                hits.push(i);
            }
        }
        assert!((hits.len() as i64 - 640).abs() <= 1, "{}", hits.len());
        for g in hits.windows(2) {
            let gap = g[1] - g[0];
            assert!(gap > 1000 - 2 * 64 && gap < 1000 + 2 * 64, "gap {gap}");
        }
    }

    #[test]
    fn one_in_a_million_is_on_schedule() {
        let m = mix(&[1 << 30, 5], &[1.0 - 1e-6, 1e-6], 64, 2, 1 << 40);
        for k in 0..5u64 {
            let pos = m.position_of(1, k).expect("drawn");
            let want = (k as f64 + 0.5) * 1e6;
            assert!((pos as f64 - want).abs() <= 0.5e6 + 64.0, "sample {k} at {pos}");
            let l = m.locate(pos).expect("ok");
            assert_eq!((l.child, l.sample), (1, k));
        }
        let c = m.counts(5_000_000);
        assert!((c[1] as i64 - 5).abs() <= 1);
    }

    #[test]
    fn locate_is_a_bijection_onto_passes_and_counts_match() {
        // 496 = 62 whole blocks: inside a block slots are shuffled, so only whole blocks
        // hold a contiguous range of each child's sample numbers
        let m = mix(&[7, 13, 1], &[0.5, 0.3, 0.2], 8, 5, 496);
        let mut per: Vec<Vec<u64>> = vec![Vec::new(); 3];
        for i in 0..496u64 {
            let l = m.locate(i).expect("ok");
            per[l.child as usize].push(l.sample);
            assert_eq!(m.position_of(l.child as usize, l.sample), Some(i));
            let (idx, pass) = m.child_index(l.child, l.sample);
            assert_eq!((idx, pass), (l.index, l.pass));
            if i % 37 == 0 {
                let c = m.counts(i + 1);
                assert_eq!(c, per.iter().map(|v| v.len() as u64).collect::<Vec<_>>());
            }
        }
        for (c, v) in per.iter_mut().enumerate() {
            v.sort_unstable();
            assert!(v.iter().enumerate().all(|(k, &x)| k as u64 == x), "child {c} sample numbers are 0..n");
        }
        // each complete pass over child 1 visits all its items, in a different order per pass
        let mut by_pass: Vec<Vec<u64>> = Vec::new();
        for s in 0..39u64 {
            let (idx, pass) = m.child_index(1, s);
            if by_pass.len() <= pass as usize {
                by_pass.push(Vec::new());
            }
            by_pass[pass as usize].push(idx);
        }
        assert_ne!(by_pass[0], by_pass[1]);
        for p in &mut by_pass {
            p.sort_unstable();
            assert_eq!(*p, (0..13).collect::<Vec<_>>());
        }
    }

    #[test]
    fn batch_locate_equals_one_by_one() {
        let stages = vec![(0u64, vec![1.0, 2.0, 0.01]), (333, vec![0.0, 1.0, 1.0]), (5000, vec![3.0, 0.0, 1.0])];
        let mut m =
            MixtureMap::new(names(3), vec![17, 1, 300], &stages, 50, 8, Policy::Restart, Some(20_000)).expect("mix");
        m.set_child_chunks(&[4, 1, 1]).expect("chunks");
        let ids: Vec<u64> = (0..1003u64).map(|i| mix64(i) % 20_000).chain(0..77).collect();
        let mut got = vec![None; ids.len()];
        m.locate_batch(&ids, |j, l| got[j] = Some(l));
        for (j, &i) in ids.iter().enumerate() {
            assert_eq!(got[j], Some(m.locate_unchecked(i)), "index {i}");
        }
    }

    #[test]
    fn stages_switch_exactly_and_numbering_carries_over() {
        let stages =
            vec![(0u64, vec![1.0, 0.0]), (1000, vec![0.0, 1.0]), (1500, vec![1.0, 1.0]), (1501, vec![1.0, 3.0])];
        // end on a block boundary of the last stage (whole blocks hold contiguous numbers)
        let end = 1501 + 64 * 50;
        let m = MixtureMap::new(names(2), vec![100, 100], &stages, 64, 1, Policy::Restart, Some(end)).expect("mix");
        let mut per: Vec<Vec<u64>> = vec![Vec::new(); 2];
        for i in 0..end {
            let l = m.locate(i).expect("ok");
            if i < 1000 {
                assert_eq!(l.child, 0);
            } else if i < 1500 {
                assert_eq!(l.child, 1);
            }
            per[l.child as usize].push(l.sample);
        }
        assert_eq!(m.counts(1000), vec![1000, 0]);
        assert_eq!(m.counts(1500), vec![1000, 500]);
        for v in &mut per {
            v.sort_unstable();
            assert!(v.iter().enumerate().all(|(k, &x)| k as u64 == x), "no gap or repeat across stages");
        }
    }

    #[test]
    fn stop_ends_before_the_first_repeat() {
        let stages = [(0, vec![0.5, 0.5])];
        let m = MixtureMap::new(names(2), vec![100, 10], &stages, 8, 4, Policy::Stop, None).expect("mix");
        let n = m.len();
        // every draw before the cut is used, none after: b's 10 items exactly once
        assert_eq!(m.counts(n)[1], 10);
        let mut seen = [vec![false; 100], vec![false; 10]];
        for i in 0..n {
            let l = m.locate(i).expect("ok");
            assert_eq!(l.pass, 0);
            assert!(!seen[l.child as usize][l.index as usize]);
            seen[l.child as usize][l.index as usize] = true;
        }
        assert!(seen[1].iter().all(|&x| x));
        assert!(m.locate(n).is_err());
        // the same allocation without the cut: index n in allocation order is b's 11th draw
        let r = MixtureMap::new(names(2), vec![100, 10], &stages, 8, 4, Policy::Restart, Some(1000)).expect("mix");
        assert_eq!(r.stages[0].tree.sample_of(1, 10), Some(n));
        let too_long = MixtureMap::new(names(2), vec![100, 10], &stages, 8, 4, Policy::Stop, Some(n + 1));
        assert!(too_long.is_err());
        // a single child is used up exactly, even when its length is not a multiple of the block
        let one =
            MixtureMap::new(names(2), vec![30, 0], &[(0, vec![1.0, 0.0])], 4, 0, Policy::Stop, None).expect("mix");
        assert_eq!(one.len(), 30);
        // exhaustion inside an early stage drops the later stages
        let st = [(0, vec![1.0, 1.0]), (1000, vec![1.0, 0.0])];
        let cut = MixtureMap::new(names(2), vec![1000, 10], &st, 8, 4, Policy::Stop, None).expect("mix");
        assert_eq!(cut.num_stages(), 1);
        assert!(cut.len() < 1000);
        assert_eq!(cut.stage_bounds(), vec![(0, Some(cut.len()))]);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let st = |w: Vec<f64>| vec![(0u64, w)];
        let bad = [
            MixtureMap::new(names(2), vec![5, 0], &st(vec![1.0, 1.0]), 4, 0, Policy::Restart, None),
            MixtureMap::new(names(2), vec![5, 5], &st(vec![-1.0, 1.0]), 4, 0, Policy::Restart, None),
            MixtureMap::new(names(2), vec![5, 5], &st(vec![0.0, 0.0]), 4, 0, Policy::Restart, None),
            MixtureMap::new(names(2), vec![5, 5], &st(vec![f64::NAN, 1.0]), 4, 0, Policy::Restart, None),
            MixtureMap::new(names(2), vec![5, 5], &st(vec![1.0]), 4, 0, Policy::Restart, None),
            MixtureMap::new(names(2), vec![5, 5], &st(vec![1.0, 1.0]), 0, 0, Policy::Restart, None),
            MixtureMap::new(names(2), vec![5, 5], &[(1, vec![1.0, 1.0])], 4, 0, Policy::Restart, None),
            MixtureMap::new(
                names(2),
                vec![5, 5],
                &[(0, vec![1.0, 1.0]), (0, vec![1.0, 0.0])],
                4,
                0,
                Policy::Restart,
                None,
            ),
            MixtureMap::new(vec![], vec![], &st(vec![]), 4, 0, Policy::Restart, None),
        ];
        for (k, b) in bad.iter().enumerate() {
            assert!(matches!(b, Err(Error::InvalidArgument(_))), "case {k}: {b:?}");
        }
        // weight 0 for an empty child is fine
        assert!(MixtureMap::new(names(2), vec![5, 0], &st(vec![1.0, 0.0]), 4, 0, Policy::Stop, None).is_ok());
    }

    #[test]
    fn largest_remainder_on_cumulative_targets_would_take_samples_back() {
        // Why the allocation is a tree of mechanical splits and not Hamilton's method
        // on cumulative targets: the latter can give a child fewer samples after more
        // blocks (a negative block count). Search a small case and show ours never does.
        let w = [0.9, 0.099, 0.001];
        let b = 64u64;
        let hamilton = |blocks: u64| -> Vec<i64> {
            let t: Vec<f64> = w.iter().map(|x| x * (blocks * b) as f64).collect();
            let mut n: Vec<i64> = t.iter().map(|x| x.floor() as i64).collect();
            let rest = (blocks * b) as i64 - n.iter().sum::<i64>();
            let mut order: Vec<usize> = (0..3).collect();
            order.sort_by(|&x, &y| (t[y] - t[y].floor()).total_cmp(&(t[x] - t[x].floor())));
            for &c in order.iter().take(rest as usize) {
                n[c] += 1;
            }
            n
        };
        let negative = (0..3000u64).any(|k| hamilton(k + 1).iter().zip(hamilton(k)).any(|(a, b)| *a < b));
        assert!(negative, "expected an Alabama-paradox step in Hamilton's method");
        let m = mix(&[1000; 3], &w, b, 0, 1 << 40);
        let mut prev = vec![0u64; 3];
        for k in 1..3000u64 {
            let c = m.stage_counts(0, k * b).expect("stage");
            assert!(c.iter().zip(&prev).all(|(a, b)| a >= b));
            prev = c;
        }
    }

    /// Throughput figures, not a check: `cargo test --release --lib mixture_rates -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn mixture_rates() {
        use std::time::Instant;
        let n = 4_000_000u64;
        let ids: Vec<u64> = (0..n).map(|i| mix64(i) % (1 << 40)).collect();
        // CPU time of this thread as well as wall time: on a shared machine the wall
        // clock includes time the thread waited for a core
        let cpu = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes into the timespec we own
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
        };
        let report = |label: &str, f: &dyn Fn(u64) -> u64| {
            let (t, c) = (Instant::now(), cpu());
            let mut acc = 0u64;
            for &i in &ids {
                acc = acc.wrapping_add(f(i));
            }
            let (dt, dc) = (t.elapsed().as_secs_f64(), cpu() - c);
            println!(
                "{label}: {:.1} M/s per core (CPU time), {:.1} M/s wall, one thread (checksum {acc})",
                n as f64 / dc / 1e6,
                n as f64 / dt / 1e6
            );
        };
        let lens: Vec<u64> = (0..50).map(|k| 1000 + 37 * k).collect();
        let flat = FlatMap::new(&lens, Some(1)).expect("flat");
        let total = flat.len();
        report("FlatMap 50 children, random", &|i| flat.locate_unchecked(i % total).1);
        let flat_ids: Vec<u64> = ids.iter().map(|&i| i % total).collect();
        let (t, c0) = (Instant::now(), cpu());
        let mut acc = 0u64;
        flat.locate_batch(&flat_ids, |_, (_, x)| acc = acc.wrapping_add(x));
        let (dt, dc) = (t.elapsed().as_secs_f64(), cpu() - c0);
        println!(
            "FlatMap 50 children, random, locate_batch: {:.1} M/s per core (CPU time), {:.1} M/s wall (checksum {acc})",
            n as f64 / dc / 1e6,
            n as f64 / dt / 1e6
        );
        for c in [2usize, 50] {
            let w: Vec<f64> = (0..c).map(|k| 1.0 / (k + 1) as f64).collect();
            let m = MixtureMap::new(names(c), vec![1000; c], &[(0, w)], 2048, 0, Policy::Restart, Some(1 << 40))
                .expect("mix");
            report(&format!("MixtureMap {c} children, random, one by one"), &|i| m.locate_unchecked(i).index);
            let (t, c0) = (Instant::now(), cpu());
            let mut acc = 0u64;
            m.locate_batch(&ids, |_, l| acc = acc.wrapping_add(l.index));
            let (dt, dc) = (t.elapsed().as_secs_f64(), cpu() - c0);
            println!(
                "MixtureMap {c} children, random, locate_batch: {:.1} M/s per core (CPU time), {:.1} M/s wall (checksum {acc})",
                n as f64 / dc / 1e6,
                n as f64 / dt / 1e6
            );
        }
    }
}
