use super::order::*;
use super::tree::*;
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
    let units: Vec<(u32, u64)> = [5u64, 1, 1, 30, 2, 8].iter().enumerate().map(|(c, &w)| (c as u32, w << 40)).collect();
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
    let stages = vec![(0u64, vec![1.0, 0.0]), (1000, vec![0.0, 1.0]), (1500, vec![1.0, 1.0]), (1501, vec![1.0, 3.0])];
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
    let one = MixtureMap::new(names(2), vec![30, 0], &[(0, vec![1.0, 0.0])], 4, 0, Policy::Stop, None).expect("mix");
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
        MixtureMap::new(names(2), vec![5, 5], &[(0, vec![1.0, 1.0]), (0, vec![1.0, 0.0])], 4, 0, Policy::Restart, None),
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
        let m =
            MixtureMap::new(names(c), vec![1000; c], &[(0, w)], 2048, 0, Policy::Restart, Some(1 << 40)).expect("mix");
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

#[test]
fn batch_lookups_equal_one_lookup_per_index_on_both_sides_of_the_parallel_threshold() {
    let n = crate::runtime::batch::PARALLEL_MIN as u64 * 2 + 1234;
    let m = MixtureMap::new(
        names(3),
        vec![1000, 37, 5000],
        &[(0, vec![0.5, 0.2, 0.3]), (n / 2, vec![0.1, 0.6, 0.3])],
        64,
        5,
        Policy::Restart,
        Some(n),
    )
    .expect("valid mixture");
    let f = FlatMap::new(&[1000, 0, 37, 5000], Some(9)).expect("flat");
    for count in [0usize, 5, crate::runtime::batch::PARALLEL_MIN + 3 * crate::runtime::batch::CHUNK + 7] {
        let ids: Vec<u64> = (0..count as u64).map(|i| (i * 7919) % n).collect();
        let (c, x, p) = m.locate_many(&ids);
        let (sc, k) = m.samples_many(&ids);
        for (j, &i) in ids.iter().enumerate() {
            let l = m.locate_unchecked(i);
            assert_eq!((c[j], x[j], p[j]), (l.child as i64, l.index as i64, l.pass as i64), "index {i}");
            let (c1, k1) = m.sample_unchecked(i);
            assert_eq!((sc[j], k[j]), (c1 as i64, k1 as i64), "index {i}");
        }
        let ids: Vec<u64> = ids.iter().map(|&i| i % f.len()).collect();
        let (c, l) = f.locate_many(&ids);
        for (j, &i) in ids.iter().enumerate() {
            let (c1, l1) = f.locate_unchecked(i);
            assert_eq!((c[j], l[j]), (c1 as i64, l1 as i64), "flat index {i}");
        }
    }
}
