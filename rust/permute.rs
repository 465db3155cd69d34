//! A keyed pseudo-random permutation of `[0, n)` for any `n`, in O(1) memory.
//!
//! A balanced Feistel network permutes the smallest even-bit-width power of two
//! `>= n`; cycle-walking (re-encrypting until the value falls below `n`) restricts it
//! to `[0, n)` and keeps it a bijection. The domain is < 4n, so a walk takes < 4 steps
//! on average. Nothing is materialised, so shuffling a billion pages costs nothing
//! until an element is asked for, and `perm(i)` is a pure function of (key, n, i).

const ROUNDS: usize = 8;

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    mask: u64,
    keys: [u64; ROUNDS],
}

impl Permutation {
    pub fn new(n: u64, key: u64) -> Self {
        let bits = if n <= 1 { 0 } else { 64 - (n - 1).leading_zeros() };
        let half_bits = bits.div_ceil(2).max(1);
        let mask = if half_bits >= 64 { u64::MAX } else { (1u64 << half_bits) - 1 };
        let mut keys = [0u64; ROUNDS];
        let mut s = key;
        for k in keys.iter_mut() {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            *k = mix64(s);
        }
        Permutation { n, half_bits, mask, keys }
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline]
    fn round(&self, r: u64, k: u64) -> u64 {
        mix64(r ^ k) & self.mask
    }

    #[inline]
    fn encrypt(&self, x: u64) -> u64 {
        let h = self.half_bits;
        let (mut l, mut r) = (x >> h, x & self.mask);
        for &k in &self.keys {
            let nl = r;
            r = l ^ self.round(r, k);
            l = nl;
        }
        (l << h) | r
    }

    #[inline]
    fn decrypt(&self, x: u64) -> u64 {
        let h = self.half_bits;
        let (mut l, mut r) = (x >> h, x & self.mask);
        for &k in self.keys.iter().rev() {
            let pr = l;
            l = r ^ self.round(l, k);
            r = pr;
        }
        (l << h) | r
    }

    /// The element at position `i` (`i < n`).
    #[inline]
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        if self.n <= 1 {
            return i;
        }
        let mut x = self.encrypt(i);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }

    /// The position of element `x` (`x < n`): `inverse(apply(i)) == i`.
    #[inline]
    pub fn inverse(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        if self.n <= 1 {
            return x;
        }
        let mut y = self.decrypt(x);
        while y >= self.n {
            y = self.decrypt(y);
        }
        y
    }

    /// Apply to many positions; `None` if any is out of range.
    pub fn apply_many(&self, idx: &[u64], out: &mut [u64]) -> Option<()> {
        for (o, &i) in out.iter_mut().zip(idx) {
            if i >= self.n {
                return None;
            }
            *o = self.apply(i);
        }
        Some(())
    }

    pub fn inverse_many(&self, idx: &[u64], out: &mut [u64]) -> Option<()> {
        for (o, &i) in out.iter_mut().zip(idx) {
            if i >= self.n {
                return None;
            }
            *o = self.inverse(i);
        }
        Some(())
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
