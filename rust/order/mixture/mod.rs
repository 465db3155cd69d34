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
use crate::order::fastdiv::FastDiv;
use crate::order::permute::{Domain, LANES, Permutation, apply_lanes, derive_key, mix64};

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

mod flat;
mod many;
mod map;
mod order;
#[cfg(test)]
mod tests;
mod tree;

pub use flat::FlatMap;
pub use map::{Located, MixtureMap, Policy};
