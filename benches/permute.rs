//! Keyed permutation throughput. `cargo bench --bench permute`
use std::hint::black_box;

use _core::Permutation;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("permutation");
    for n in [1_000u64, 1 << 20, (1 << 40) + 17] {
        let p = Permutation::new(n, 42);
        g.throughput(Throughput::Elements(1024));
        g.bench_function(format!("apply_1024_n={n}"), |b| {
            b.iter(|| {
                let mut acc = 0u64;
                for i in 0..1024u64 {
                    acc ^= p.apply(black_box(i % n));
                }
                acc
            })
        });
    }
    g.finish();
}

criterion_group!(permute, benches);
criterion_main!(permute);
