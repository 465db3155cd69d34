"""Page-level I/O figures, measured in one run on one machine.

    python benches/bench_pages.py [--data bench-data/tokens] [--gb 1.0]

Prints: random-page read+decode throughput (1 and 2 threads) against pyarrow's
sequential scan of the same column; random single-row access against pyarrow's best
random row access (read the row group with only that column, take the row); index
build rates (with OffsetIndex; header-scan fallback); index bytes per page; peak RSS of
each phase (each runs in its own process). The page cache is warm for every phase
(the data was just written or read), so these are CPU/decode figures, not disk ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import emit, run_phase  # noqa: E402

COL = "input_ids"


def phase_index(data: str) -> None:
    import youmu

    t0 = time.perf_counter()
    idx = youmu.PageIndex(data, columns=[COL])
    dt = time.perf_counter() - t0
    size = sum(Path(f).stat().st_size for f in idx.files)
    emit({"files": idx.num_files, "pages": len(idx), "rows": idx.num_rows, "seconds": dt,
          "files_per_s": idx.num_files / dt, "mb_per_s": size / dt / 1e6,
          "bytes_per_page": idx.table_bytes / max(len(idx), 1), "dataset_gb": size / 1e9})


def phase_youmu_random(data: str, threads: int, seconds: float) -> None:
    import youmu

    youmu.set_num_threads(threads)
    idx = youmu.PageIndex(data, columns=[COL])
    order = youmu.Permutation(len(idx), seed=1).range()
    done_bytes = done_pages = 0
    t0, c0 = time.perf_counter(), time.process_time()
    i = 0
    while time.perf_counter() - t0 < seconds and i < len(order):
        ids = order[i : i + 8]
        for b in idx.read_pages(ids):
            done_bytes += b.nbytes
        done_pages += len(ids)
        i += 8
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    # CPU time of every thread of the process (the pool's decodes too): steadier than
    # wall-clock figures on a shared machine
    emit({"threads": threads, "mb_per_s": done_bytes / dt / 1e6, "pages_per_s": done_pages / dt,
          "pages_per_cpu_s": done_pages / max(cpu, 1e-9)})


def phase_pyarrow_seq(data: str, seconds: float) -> None:
    import pyarrow.parquet as pq

    files = sorted(Path(data).glob("*.parquet"))
    done = 0
    t0 = time.perf_counter()
    for f in files:
        for b in pq.ParquetFile(f).iter_batches(columns=[COL], batch_size=8192):
            done += b.nbytes
        if time.perf_counter() - t0 > seconds:
            break
    dt = time.perf_counter() - t0
    emit({"mb_per_s": done / dt / 1e6})


def phase_youmu_row(data: str, n: int) -> None:
    import youmu

    idx = youmu.PageIndex(data, columns=[COL])
    rows = np.random.default_rng(0).integers(0, idx.num_rows, n)
    t0, c0 = time.perf_counter(), time.process_time()
    for r in rows:
        row = idx.read_rows([int(r)])  # one-row selection inside the page
        assert row.num_rows == 1
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    emit({"rows_per_s": n / dt, "rows_per_cpu_s": n / max(cpu, 1e-9)})


def phase_pyarrow_row(data: str, n: int) -> None:
    import pyarrow.parquet as pq

    files = sorted(Path(data).glob("*.parquet"))
    pfs = [pq.ParquetFile(f) for f in files]
    # (file, row group) start rows, from metadata only
    bounds = []
    start = 0
    for fi, pf in enumerate(pfs):
        for rg in range(pf.metadata.num_row_groups):
            bounds.append((start, fi, rg))
            start += pf.metadata.row_group(rg).num_rows
    starts = np.array([b[0] for b in bounds])
    rows = np.random.default_rng(0).integers(0, start, n)
    t0 = time.perf_counter()
    for r in rows:
        k = int(np.searchsorted(starts, r, side="right") - 1)
        _, fi, rg = bounds[k]
        row = pfs[fi].read_row_group(rg, columns=[COL]).slice(int(r - starts[k]), 1)
        assert row.num_rows == 1
    dt = time.perf_counter() - t0
    emit({"rows_per_s": n / dt})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="bench-data/tokens")
    ap.add_argument("--scan-data", default="bench-data/tokens-nopi")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--phase")
    ap.add_argument("--arg", default="")
    a = ap.parse_args()
    if a.phase:
        {
            "index": lambda: phase_index(a.data),
            "youmu_random": lambda: phase_youmu_random(a.data, int(a.arg), a.seconds),
            "pyarrow_seq": lambda: phase_pyarrow_seq(a.data, a.seconds),
            "youmu_row": lambda: phase_youmu_row(a.data, int(a.arg)),
            "pyarrow_row": lambda: phase_pyarrow_row(a.data, int(a.arg)),
        }[a.phase]()
        return
    from datagen import generate

    generate(Path(a.data), a.gb)
    generate(Path(a.scan_data), min(a.gb, 0.3), page_index=False, seed=1)
    me = __file__
    common = ["--data", a.data, "--seconds", str(a.seconds)]
    idx = run_phase(me, "index", *common)
    scan = run_phase(me, "index", "--data", a.scan_data)
    r1 = run_phase(me, "youmu_random", *common, "--arg", "1")
    r2 = run_phase(me, "youmu_random", *common, "--arg", "2")
    seq = run_phase(me, "pyarrow_seq", *common)
    yrow = run_phase(me, "youmu_row", *common, "--arg", "3000")
    prow = run_phase(me, "pyarrow_row", *common, "--arg", "40")
    print(f"\n## Page I/O ({idx['dataset_gb']:.2f} GB, {idx['files']} files, {idx['pages']:,} pages, "
          f"{idx['rows']:,} rows; zstd, 1 MiB pages, list<int32>; warm page cache)\n")
    print("| measurement | youmu | baseline | ratio | peak RSS (MB) youmu / baseline |")
    print("|---|---|---|---|---|")
    for r in (r1, r2):
        print(f"| random page read+decode, {r['threads']} thread(s) vs pyarrow sequential scan (MB/s Arrow) "
              f"| {r['mb_per_s']:.0f} ({r['pages_per_s']:.0f} pages/s) | {seq['mb_per_s']:.0f} "
              f"| {r['mb_per_s'] / seq['mb_per_s']:.2f}x | {r['peak_rss_mb']:.0f} / {seq['peak_rss_mb']:.0f} |")
    print(f"| random single-row access (rows/s) vs pyarrow read_row_group+take | {yrow['rows_per_s']:.0f} "
          f"| {prow['rows_per_s']:.2f} | {yrow['rows_per_s'] / prow['rows_per_s']:.0f}x "
          f"| {yrow['peak_rss_mb']:.0f} / {prow['peak_rss_mb']:.0f} |")
    print(f"| index build with OffsetIndex | {idx['files_per_s']:.0f} files/s ({idx['seconds']:.2f} s) | | | {idx['peak_rss_mb']:.0f} |")
    print(f"| index build by header scan (no OffsetIndex) | {scan['mb_per_s']:.0f} MB/s of file "
          f"({scan['dataset_gb']:.2f} GB in {scan['seconds']:.2f} s) | | | {scan['peak_rss_mb']:.0f} |")
    print(f"| index memory | {idx['bytes_per_page']:.1f} bytes/page (page tables; footers excluded) | | | |")


if __name__ == "__main__":
    main()
