//! Index build and single-page read/decode. `cargo bench --bench page_read`
mod common;

use std::hint::black_box;

use _core::PageIndex;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn benches(c: &mut Criterion) {
    let dir = common::bench_dir();
    let with_index = common::token_file(&dir, "tokens-pi.parquet", 40_000, 256 << 10, true);
    let without = common::token_file(&dir, "tokens-nopi.parquet", 40_000, 256 << 10, false);
    let paths = |p: &std::path::Path| vec![p.display().to_string()];

    let mut g = c.benchmark_group("index_build");
    g.sample_size(20);
    g.bench_function("offset_index", |b| {
        b.iter(|| black_box(PageIndex::build(&paths(&with_index), None, None, None).expect("build")))
    });
    g.bench_function("header_scan", |b| {
        b.iter(|| black_box(PageIndex::build(&paths(&without), None, None, None).expect("build")))
    });
    g.finish();

    let idx = PageIndex::build(&paths(&with_index), None, None, None).expect("build");
    let n = idx.len();
    let page_bytes: u64 = idx.page_byte_sizes().iter().sum::<u64>() / n.max(1);
    let mut g = c.benchmark_group("read_page");
    g.throughput(Throughput::Bytes(page_bytes));
    let mut i = 0u64;
    g.bench_function("random_page_zstd_list_int32", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            black_box(idx.read_page(i).expect("read"))
        })
    });
    // The local physical bound: the same random pages with a bare `pread` and zstd
    // decompression, nothing else (no index lookup, no page cache, no Arrow decode);
    // youmu's `random_page_zstd_list_int32` as a share of it is what youmu costs on top.
    let locs: Vec<(u64, usize)> = (0..n)
        .map(|id| {
            let info = idx.page_info(id).expect("page");
            let l = &idx.file(info.file).locations(info.row_group)[0][info.page];
            (l.offset as u64, l.compressed_page_size as usize)
        })
        .collect();
    let file = std::fs::File::open(&with_index).expect("open");
    let mut j = 0u64;
    g.bench_function("physical_bound_pread_zstd", |b| {
        b.iter(|| {
            use std::os::unix::fs::FileExt;
            j = (j + 7919) % n;
            let (off, len) = locs[j as usize];
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, off).expect("pread");
            let (h, hl) = _core::parquet::thrift::parse_page_header(&buf).expect("header");
            black_box(zstd::bulk::decompress(&buf[hl..], h.uncompressed_size as usize).expect("zstd"))
        })
    });
    let ids: Vec<u64> = (0..64).map(|k| (k * 104_729) % n).collect();
    g.throughput(Throughput::Bytes(page_bytes * ids.len() as u64));
    g.bench_function("64_random_pages_parallel", |b| b.iter(|| black_box(idx.read_pages(&ids).expect("read"))));
    g.finish();

    let mut g = c.benchmark_group("locate");
    g.throughput(Throughput::Elements(1));
    let rows = idx.num_rows();
    let mut r = 0u64;
    g.bench_function("row_to_page", |b| {
        b.iter(|| {
            r = (r + 104_729) % rows;
            black_box(idx.locate_row(r).expect("locate"))
        })
    });
    g.finish();
}

criterion_group!(page_read, benches);
criterion_main!(page_read);
