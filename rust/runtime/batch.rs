//! Evaluating a pure per-index function over many indices: on the calling thread for a
//! small batch, split into chunks on the runtime's pool for a large one. The maps it
//! serves (permutations, mixture maps) are pure, so the output is the same element for
//! element whichever way a batch runs; only the time differs.

use std::ops::Range;

use rayon::prelude::*;

use crate::runtime::runtime;

/// Below this many indices a batch runs on the calling thread: handing work to the pool
/// costs some tens of microseconds, what ~10^4 evaluations of these maps take.
pub const PARALLEL_MIN: usize = 1 << 15;

/// Indices per parallel task (output slices this long are filled by one thread).
pub const CHUNK: usize = 1 << 12;

/// `f(i)` for every index of `ids`, in order.
pub fn map1(ids: &[u64], f: impl Fn(u64) -> i64 + Sync) -> Vec<i64> {
    if ids.len() < PARALLEL_MIN {
        ids.iter().map(|&i| f(i)).collect()
    } else {
        runtime().pool().install(|| ids.par_iter().with_min_len(CHUNK).map(|&i| f(i)).collect())
    }
}

/// `f(i)` for every `i` of `range`, in order, into `out` (what it held is replaced; its
/// capacity is the caller's to check against the memory available, and `range` holds
/// at most `usize::MAX` indices).
pub fn map_range(range: Range<u64>, out: &mut Vec<i64>, f: impl Fn(u64) -> i64 + Sync) {
    let (start, n) = (range.start, range.end.saturating_sub(range.start) as usize);
    out.clear();
    if n < PARALLEL_MIN {
        out.extend(range.map(f));
    } else {
        runtime()
            .pool()
            .install(|| (0..n).into_par_iter().with_min_len(CHUNK).map(|k| f(start + k as u64)).collect_into_vec(out));
    }
}

/// `f(i)` for every index of `ids` into two outputs.
pub fn fill2(ids: &[u64], f: impl Fn(u64) -> (i64, i64) + Sync) -> (Vec<i64>, Vec<i64>) {
    let (mut a, mut b) = (vec![0i64; ids.len()], vec![0i64; ids.len()]);
    let run = |ids: &[u64], a: &mut [i64], b: &mut [i64]| {
        for ((&i, a), b) in ids.iter().zip(a).zip(b) {
            (*a, *b) = f(i);
        }
    };
    if ids.len() < PARALLEL_MIN {
        run(ids, &mut a, &mut b);
    } else {
        runtime().pool().install(|| {
            (ids.par_chunks(CHUNK), a.par_chunks_mut(CHUNK), b.par_chunks_mut(CHUNK))
                .into_par_iter()
                .for_each(|(ids, a, b)| run(ids, a, b))
        });
    }
    (a, b)
}

/// Three outputs filled chunk by chunk by `f(ids, a, b, c)` (slices of equal length), so
/// the map can evaluate several indices of a chunk side by side.
pub fn fill3_chunks(
    ids: &[u64],
    f: impl Fn(&[u64], &mut [i64], &mut [i64], &mut [i64]) + Sync,
) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let (mut a, mut b, mut c) = (vec![0i64; ids.len()], vec![0i64; ids.len()], vec![0i64; ids.len()]);
    if ids.len() < PARALLEL_MIN {
        f(ids, &mut a, &mut b, &mut c);
    } else {
        runtime().pool().install(|| {
            (ids.par_chunks(CHUNK), a.par_chunks_mut(CHUNK), b.par_chunks_mut(CHUNK), c.par_chunks_mut(CHUNK))
                .into_par_iter()
                .for_each(|(ids, a, b, c)| f(ids, a, b, c))
        });
    }
    (a, b, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> i64 {
        (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 1) as i64
    }

    /// Sizes on both sides of the threshold, with a ragged last chunk.
    fn sizes() -> [usize; 4] {
        [0, 7, PARALLEL_MIN - 1, PARALLEL_MIN + 3 * CHUNK + 5]
    }

    fn ids(n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| (i * 7919) % (n as u64 + 13)).collect()
    }

    #[test]
    fn every_batch_helper_equals_the_map_index_by_index_on_both_sides_of_the_threshold() {
        for n in sizes() {
            let ids = ids(n);
            let want: Vec<i64> = ids.iter().map(|&i| h(i)).collect();
            assert_eq!(map1(&ids, h), want, "map1 n={n}");
            let (a, b) = fill2(&ids, |i| (h(i), -h(i)));
            assert_eq!(a, want, "fill2 n={n}");
            assert_eq!(b, want.iter().map(|x| -x).collect::<Vec<_>>());
            let (a, b, c) = fill3_chunks(&ids, |ids, a, b, c| {
                for (j, &i) in ids.iter().enumerate() {
                    (a[j], b[j], c[j]) = (h(i), i as i64, ids.len() as i64);
                }
            });
            assert_eq!(a, want, "fill3_chunks n={n}");
            assert_eq!(b, ids.iter().map(|&i| i as i64).collect::<Vec<_>>());
            // chunks are at most CHUNK long in parallel, the whole batch otherwise
            let most = if n < PARALLEL_MIN { n as i64 } else { CHUNK as i64 };
            assert!(c.iter().all(|&k| k <= most && k > 0));
        }
    }

    #[test]
    fn a_range_replaces_what_the_output_held() {
        for n in sizes() {
            let start = 1u64 << 40;
            let mut out = vec![-1];
            map_range(start..start + n as u64, &mut out, h);
            assert_eq!(out.len(), n);
            assert!(out.iter().zip(start..).all(|(&x, i)| x == h(i)), "n={n}");
        }
    }
}
