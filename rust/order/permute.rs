//! A keyed pseudo-random permutation of `[0, n)` for any `n`, in O(1) memory.
//!
//! A Feistel network permutes the smallest power of two `>= n` (unbalanced when its
//! width is odd); cycle-walking (re-encrypting until the value falls below `n`)
//! restricts it to `[0, n)` and keeps it a bijection. The domain is < 2n, so a walk
//! takes < 2 steps on average. Nothing is materialised, so shuffling a billion pages costs nothing
//! until an element is asked for, and `perm(i)` is a pure function of (key, n, i).

/// splitmix64 finaliser: a strong 64-bit mixer used as the Feistel round function.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Derive one 64-bit key from the parts that define a shuffle (seed, epoch, purpose...).
pub fn derive_key(parts: &[u64]) -> u64 {
    let mut h = 0x6a09_e667_f3bc_c909u64;
    for &p in parts {
        h = mix64(h ^ mix64(p.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    }
    h
}

/// Round constants (the SHA-512 IV and first round constants): round `r` mixes
/// `key ^ ROUND_KEYS[r]`.
const ROUND_KEYS: [u64; 16] = [
    0x6a09_e667_f3bc_c909,
    0xbb67_ae85_84ca_a73b,
    0x3c6e_f372_fe94_f82b,
    0xa54f_f53a_5f1d_36f1,
    0x510e_527f_ade6_82d1,
    0x9b05_688c_2b3e_6c1f,
    0x1f83_d9ab_fb41_bd6b,
    0x5be0_cd19_137e_2179,
    0x428a_2f98_d728_ae23,
    0x7137_4491_23ef_65cd,
    0xb5c0_fbcf_ec4d_3b2f,
    0xe9b5_dba5_8189_dbbc,
    0x3956_c25b_f348_b538,
    0x59f1_11f1_b605_d019,
    0x923f_82a4_af19_4f9b,
    0xab1c_5ed5_da6d_8118,
];

/// Domain of a keyed permutation of `[0, n)`. Building one costs nothing and the key
/// is an argument, because mixtures key a fresh order per use (every block, every pass
/// over a child): the round keys are the key xor fixed constants.
///
/// A Feistel network over the smallest power of two >= n, unbalanced when its bit
/// width is odd (halves of `a` and `b` bits whose roles alternate each round), with
/// cycle-walking into `[0, n)`: the walk's domain is < 2n (a balanced network needs an
/// even width, up to 4n), and a power-of-two `n` such as a block size never walks.
/// Rounds of the splitmix64 finaliser, 4 to 16 by width (`rounds_for`); a bijection
/// for any key.
#[derive(Debug, Clone, Copy)]
pub struct Domain {
    pub n: u64,
    /// Widths of the two parts: rounds alternate (top `a`, bottom `b`) and (`b`, `a`).
    pub a: u32,
    pub b: u32,
    /// Number of rounds (even, so the widths end where they started).
    pub rounds: u32,
}

#[inline]
fn low_mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// Rounds for a domain of `bits` bits. Narrow halves mix slowly: with few rounds the
/// positions of neighbouring inputs stay correlated (measured by the pair chi-square
/// test below: 4 rounds suffice from 8 bits up, 7 bits need 6, 4–5 bits 12, and the
/// 1-bit half of a 3-bit domain 16). Wide domains, the common case (blocks of
/// hundreds, children of thousands+), get the cheap 4.
fn rounds_for(bits: u32) -> u32 {
    match bits {
        0..=3 => 16,
        4..=5 => 12,
        6..=7 => 6,
        _ => 4,
    }
}

impl Domain {
    pub fn new(n: u64) -> Self {
        let bits = if n <= 1 { 1 } else { 64 - (n - 1).leading_zeros() };
        Domain { n, a: bits / 2, b: bits - bits / 2, rounds: rounds_for(bits) }
    }

    #[inline]
    pub fn encrypt(&self, key: u64, mut x: u64) -> u64 {
        let (mut t, mut u) = (self.a, self.b); // widths of the top and bottom parts
        for &rk in &ROUND_KEYS[..self.rounds as usize] {
            let (top, bot) = (x >> u, x & low_mask(u));
            let top = top ^ (mix64(bot ^ key ^ rk) & low_mask(t));
            x = (bot << t) | top; // swap: the bottom part feeds the next round
            (t, u) = (u, t);
        }
        x
    }

    #[inline]
    pub fn decrypt(&self, key: u64, mut x: u64) -> u64 {
        // Undo the rounds last first. The last (odd) round had widths (top b, bottom a)
        // and left `x = (bot << b) | top'`; with (t, u) = (a, b) that is
        // bot = x >> u, top' = x & mask(u), and the input was (top << t) | bot.
        let (mut t, mut u) = (self.a, self.b);
        for rk in ROUND_KEYS[..self.rounds as usize].iter().rev() {
            let (bot, top) = (x >> u, x & low_mask(u));
            let top = top ^ (mix64(bot ^ key ^ rk) & low_mask(u));
            x = (top << t) | bot;
            (t, u) = (u, t);
        }
        x
    }

    /// Position `i` (< n) under `key`.
    #[inline]
    pub fn apply(&self, key: u64, i: u64) -> u64 {
        if self.n <= 1 {
            return i;
        }
        let mut x = self.encrypt(key, i);
        while x >= self.n {
            x = self.encrypt(key, x);
        }
        x
    }

    /// Inverse of `apply` under the same key.
    #[inline]
    pub fn inverse(&self, key: u64, x: u64) -> u64 {
        if self.n <= 1 {
            return x;
        }
        let mut y = self.decrypt(key, x);
        while y >= self.n {
            y = self.decrypt(key, y);
        }
        y
    }
}

/// Evaluations interleaved by the batch paths: one `Domain::apply` is a chain of
/// dependent multiplies, so running several side by side lets the CPU overlap them.
pub const LANES: usize = 8;

/// `doms[l].apply(keys[l], xs[l])` for every lane, in place.
#[inline]
pub fn apply_lanes(doms: &[Domain; LANES], keys: &[u64; LANES], xs: &mut [u64; LANES]) {
    let mut ys = *xs;
    let mut widths: [(u32, u32); LANES] = std::array::from_fn(|l| (doms[l].a, doms[l].b));
    let rounds = doms.iter().map(|d| d.rounds).max().unwrap_or(0) as usize;
    for (r, &rk) in ROUND_KEYS[..rounds].iter().enumerate() {
        for l in 0..LANES {
            let (t, u) = widths[l];
            let (top, bot) = (ys[l] >> u, ys[l] & low_mask(u));
            let top = top ^ (mix64(bot ^ keys[l] ^ rk) & low_mask(t));
            // lanes whose domain needs fewer rounds keep their value (a select, not a
            // branch: lanes usually agree, but a mispredict costs more than the select)
            let live = (r as u32) < doms[l].rounds;
            ys[l] = if live { (bot << t) | top } else { ys[l] };
            widths[l] = if live { (u, t) } else { (t, u) };
        }
    }
    for l in 0..LANES {
        let d = &doms[l];
        if d.n > 1 {
            let mut y = ys[l];
            while y >= d.n {
                y = d.encrypt(keys[l], y); // cycle-walk the few lanes that left [0, n)
            }
            xs[l] = y;
        }
    }
}

/// A keyed permutation of `[0, n)`: `Domain` with its key.
#[derive(Debug, Clone, Copy)]
pub struct Permutation {
    dom: Domain,
    key: u64,
}

impl PartialEq for Permutation {
    fn eq(&self, other: &Self) -> bool {
        self.dom.n == other.dom.n && self.key == other.key
    }
}

impl Eq for Permutation {}

impl Permutation {
    pub fn new(n: u64, key: u64) -> Self {
        // one extra mix so that nearby keys (seed, seed + 1) share no round inputs
        Permutation { dom: Domain::new(n), key: mix64(key ^ 0x7065_726d_7574_6521) }
    }

    pub fn len(&self) -> u64 {
        self.dom.n
    }

    pub fn is_empty(&self) -> bool {
        self.dom.n == 0
    }

    /// The element at position `i` (`i < n`).
    #[inline]
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.dom.n.max(1));
        self.dom.apply(self.key, i)
    }

    /// The position of element `x` (`x < n`): `inverse(apply(i)) == i`.
    #[inline]
    pub fn inverse(&self, x: u64) -> u64 {
        debug_assert!(x < self.dom.n.max(1));
        self.dom.inverse(self.key, x)
    }

    /// `apply` to `LANES` positions side by side (all `< n`).
    #[inline]
    pub fn apply_lanes(&self, xs: &mut [u64; LANES]) {
        apply_lanes(&[self.dom; LANES], &[self.key; LANES], xs);
    }

    /// Apply to many positions; `None` if any is out of range.
    pub fn apply_many(&self, idx: &[u64], out: &mut [u64]) -> Option<()> {
        if idx.iter().any(|&i| i >= self.dom.n) {
            return None;
        }
        let mut chunks = idx.chunks_exact(LANES);
        let mut outs = out.chunks_exact_mut(LANES);
        for (c, o) in chunks.by_ref().zip(outs.by_ref()) {
            let mut xs: [u64; LANES] = std::array::from_fn(|l| c[l]);
            self.apply_lanes(&mut xs);
            o.copy_from_slice(&xs);
        }
        for (o, &i) in outs.into_remainder().iter_mut().zip(chunks.remainder()) {
            *o = self.apply(i);
        }
        Some(())
    }

    pub fn inverse_many(&self, idx: &[u64], out: &mut [u64]) -> Option<()> {
        for (o, &i) in out.iter_mut().zip(idx) {
            if i >= self.dom.n {
                return None;
            }
            *o = self.inverse(i);
        }
        Some(())
    }

    /// `apply` for every position of `ids` (all `< n`), as int64 (`n <= 2^63` where
    /// this is used), in parallel for a large batch.
    pub fn take(&self, ids: &[u64]) -> Vec<i64> {
        crate::runtime::batch::map1(ids, |i| self.apply(i) as i64)
    }

    /// `inverse` for every element of `xs` (all `< n`).
    pub fn inverse_take(&self, xs: &[u64]) -> Vec<i64> {
        crate::runtime::batch::map1(xs, |x| self.inverse(x) as i64)
    }

    /// `apply` for every position of `start..stop` (`start <= stop <= n`) without an
    /// index vector; the output is checked against the memory available first.
    pub fn range(&self, start: u64, stop: u64) -> crate::error::Result<Vec<i64>> {
        let what = || format!("Permutation.range({start}, {stop})");
        let n = usize::try_from(stop - start).map_err(|_| crate::error::Error::TooLarge {
            what: what(),
            bytes: (stop - start) as u128 * 8,
            available: crate::limits::available_memory(),
        })?;
        let mut out = crate::limits::vec_with_capacity::<i64>(n, what)?;
        crate::runtime::batch::map_range(start..stop, &mut out, |i| self.apply(i) as i64);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_bijection(n: u64, key: u64) {
        let p = Permutation::new(n, key);
        let mut seen = vec![false; n as usize];
        for i in 0..n {
            let x = p.apply(i);
            assert!(x < n, "n={n}: {i} -> {x}");
            assert!(!seen[x as usize], "n={n}: {x} hit twice");
            seen[x as usize] = true;
            assert_eq!(p.inverse(x), i);
        }
    }

    #[test]
    fn bijection_for_many_sizes() {
        for n in (0..300).chain([511, 512, 513, 1000, 1024, 4093, 4096, 65_537, 100_003]) {
            assert_bijection(n, 42);
            assert_bijection(n, 7);
        }
    }

    #[test]
    fn batch_calls_equal_one_call_per_index_on_both_sides_of_the_parallel_threshold() {
        for n in [0u64, 1, 1000, crate::runtime::batch::PARALLEL_MIN as u64 * 3 + 17] {
            let p = Permutation::new(n, 99);
            let ids: Vec<u64> = (0..n).map(|i| (i * 7919) % n.max(1)).collect();
            let want: Vec<i64> = ids.iter().map(|&i| p.apply(i) as i64).collect();
            assert_eq!(p.take(&ids), want, "n={n}");
            let back: Vec<u64> = want.iter().map(|&x| x as u64).collect();
            assert_eq!(p.inverse_take(&back), ids.iter().map(|&i| i as i64).collect::<Vec<_>>());
            let start = n / 3;
            let r = p.range(start, n).unwrap();
            assert_eq!(r, (start..n).map(|i| p.apply(i) as i64).collect::<Vec<_>>(), "n={n}");
        }
    }

    #[test]
    fn huge_domains_round_trip_by_sampling() {
        for n in [1u64 << 40, (1 << 40) + 12_345, u64::MAX / 3, u64::MAX] {
            let p = Permutation::new(n, 1);
            let mut s = 12345u64;
            for _ in 0..2000 {
                s = mix64(s);
                let i = s % n;
                let x = p.apply(i);
                assert!(x < n);
                assert_eq!(p.inverse(x), i);
            }
        }
    }

    #[test]
    fn lanes_equal_one_by_one() {
        for n in [0u64, 1, 2, 3, 17, 1000, 1 << 20, (1 << 33) + 7] {
            let p = Permutation::new(n, 9);
            for start in [0u64, 5, 100] {
                let mut xs: [u64; 8] = std::array::from_fn(|j| (start + 13 * j as u64) % n.max(1));
                let want = xs.map(|x| if n == 0 { x } else { p.apply(x) });
                p.apply_lanes(&mut xs);
                assert_eq!(xs, want, "n={n}");
            }
        }
    }

    #[test]
    fn keys_give_different_orders_and_same_key_same_order() {
        let a: Vec<u64> = (0..1000).map(|i| Permutation::new(1000, 1).apply(i)).collect();
        let b: Vec<u64> = (0..1000).map(|i| Permutation::new(1000, 2).apply(i)).collect();
        let c: Vec<u64> = (0..1000).map(|i| Permutation::new(1000, 1).apply(i)).collect();
        assert_ne!(a, b);
        assert_eq!(a, c);
        // not close to the identity: few fixed points
        assert!(a.iter().enumerate().filter(|(i, x)| *i as u64 == **x).count() < 20);
    }

    #[test]
    fn positions_are_roughly_uniform() {
        // element 0's position over many keys should spread over the domain
        let n = 64u64;
        let mut hist = [0u32; 64];
        for key in 0..64_000 {
            hist[Permutation::new(n, key).apply(0) as usize] += 1;
        }
        let (lo, hi) = (hist.iter().min().copied().unwrap(), hist.iter().max().copied().unwrap());
        assert!(lo > 700 && hi < 1300, "histogram too uneven: {lo}..{hi}");
    }
}
