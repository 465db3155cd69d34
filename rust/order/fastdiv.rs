//! Division by a divisor fixed at construction, by multiplication.
//!
//! Index maps divide every located index by the same few numbers (a block size, each
//! child's length). A 64-bit `div` is a long-latency instruction that does not
//! pipeline; one widening multiply by a precomputed reciprocal plus a correction does,
//! which matters when eight lookups run side by side.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastDiv {
    d: u64,
    /// `floor(2^64 / d)` for `d >= 2` (`0` marks `d == 1`).
    inv: u64,
}

impl FastDiv {
    /// `d` must be >= 1 (callers divide by lengths they have already checked non-zero).
    pub fn new(d: u64) -> Self {
        let d = d.max(1);
        let inv = if d == 1 { 0 } else { ((1u128 << 64) / d as u128) as u64 };
        FastDiv { d, inv }
    }

    pub fn divisor(&self) -> u64 {
        self.d
    }

    /// `(x / d, x % d)`.
    #[inline]
    pub fn div_rem(&self, x: u64) -> (u64, u64) {
        if self.inv == 0 {
            return (x, 0);
        }
        // inv = 2^64/d - e with 0 <= e < 1, so the estimate is below x/d by less than
        // x/2^64 + 1 < 2: it is q, q - 1 or (rarely) q - 2; step up to the exact value.
        let mut q = ((x as u128 * self.inv as u128) >> 64) as u64;
        let mut r = x - q * self.d;
        while r >= self.d {
            q += 1;
            r -= self.d;
        }
        (q, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::permute::mix64;

    #[test]
    fn matches_hardware_division() {
        let divisors = [1u64, 2, 3, 7, 64, 1000, 2048, 65_537, (1 << 32) + 1, u64::MAX / 3, u64::MAX - 1, u64::MAX];
        let mut s = 1u64;
        for &d in &divisors {
            let f = FastDiv::new(d);
            for x in [0, 1, d - 1, d, d.wrapping_add(1), u64::MAX, u64::MAX - 1, u64::MAX / 2] {
                assert_eq!(f.div_rem(x), (x / d, x % d), "{x} / {d}");
            }
            for _ in 0..20_000 {
                s = mix64(s);
                let x = s >> (s % 64);
                assert_eq!(f.div_rem(x), (x / d, x % d), "{x} / {d}");
            }
        }
        for _ in 0..20_000 {
            s = mix64(s);
            let d = (s >> (s % 63)).max(1);
            let x = mix64(s);
            assert_eq!(FastDiv::new(d).div_rem(x), (x / d, x % d), "{x} / {d}");
        }
    }
}
