//! The allocation tree: mechanical (Sturmian) splits of samples between children.

use super::*;

/// Left-going samples among the first `k` reaching a node: `floor((k·p + φ) / 2^64)`.
#[inline]
pub(super) fn split(k: u64, p: u64, phase: u64) -> u64 {
    ((k as u128 * p as u128 + phase as u128) >> 64) as u64
}

/// Smallest `k` at which the `m`-th (0-based) left-going sample arrives, for the
/// mechanical sequence `split(·, p, phase)`: the `k` with `split(k) = m`,
/// `split(k + 1) = m + 1`. Needs `p > 0`; `None` if beyond u64.
pub(super) fn nth_hit(m: u64, p: u64, phase: u64) -> Option<u64> {
    // smallest j with j·p + φ >= (m+1)·2^64, then k = j - 1
    let need = ((m as u128) + 1) << 64;
    let rest = need - phase as u128; // phase < 2^64 <= need
    let j = rest.div_ceil(p as u128);
    u64::try_from(j).ok().and_then(|j| j.checked_sub(1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ref {
    Leaf(u32),
    Node(u32),
}

#[derive(Debug, Clone)]
pub(super) struct Node {
    /// Share of this node's samples that go left, in units of 2^-64 (0 < p < 2^64).
    p: u64,
    phase: u64,
    left: Ref,
    right: Ref,
}

/// Right-going samples follow a mechanical sequence too: `k - split(k, p, φ)` =
/// `floor((k·(2^64 - p) + (2^64 - 1 - φ)) / 2^64)`. Returns that sequence's (p, φ).
#[inline]
pub(super) fn right_params(p: u64, phase: u64) -> (u64, u64) {
    (p.wrapping_neg(), !phase)
}

/// `Node` for the branch-free batch walk: children coded as u32, `LEAF` set on leaves.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlatNode {
    p: u64,
    phase: u64,
    left: u32,
    right: u32,
}

pub(super) const LEAF: u32 = 1 << 31;

pub(super) fn code(r: Ref) -> u32 {
    match r {
        Ref::Leaf(c) => c | LEAF,
        Ref::Node(n) => n,
    }
}

#[derive(Debug, Clone)]
pub(super) struct Tree {
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
    pub(super) fn build(units: &[(u32, u64)], num_children: usize, key: u64) -> Result<Tree> {
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
    pub(super) fn descend(&self, mut k: u64) -> (u32, u64) {
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
    pub(super) fn counts_at(&self, k: u64, out: &mut [u64]) {
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
    pub(super) fn sample_of(&self, child: usize, m: u64) -> Option<u64> {
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
    pub(super) fn bounds(&self, num_children: usize) -> Vec<f64> {
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
pub(super) fn descend_lanes(trees: &[&Tree; LANES], ks: &mut [u64; LANES]) -> [u32; LANES] {
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
pub(super) fn weight_units(weights: &[f64], stage: usize, names: &[String]) -> Result<Vec<(u32, u64)>> {
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
