"""Generate the benchmark token dataset: ``list<int32>`` rows (Zipf-distributed token
ids, document lengths 32..4096), zstd, 1 MiB pages, page index on, no dictionary — the
layout youmu recommends. Files are written in document order (clustered).

    python benches/datagen.py --out bench-data/tokens --gb 1.0
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

VOCAB = 50_257


def make_table(rng: np.random.Generator, rows: int, first_id: int) -> pa.Table:
    lens = np.clip(rng.lognormal(6.3, 0.9, rows).astype(np.int64), 32, 4096)
    total = int(lens.sum())
    toks = (rng.zipf(1.15, total) % VOCAB).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(toks))
    return pa.table({"input_ids": ids, "doc_id": pa.array(np.arange(first_id, first_id + rows), pa.int64())})


def generate(out: Path, gb: float, rows_per_file: int = 60_000, page_index: bool = True, seed: int = 0) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(out.glob("*.parquet"))
    if existing and sum(p.stat().st_size for p in existing) >= gb * 1e9 * 0.98:
        return existing
    for p in existing:
        p.unlink()
    rng = np.random.default_rng(seed)
    written, k, first = 0, 0, 0
    paths = []
    t0 = time.time()
    while written < gb * 1e9:
        t = make_table(rng, rows_per_file, first)
        p = out / f"part-{k:05d}.parquet"
        pq.write_table(
            t, p, compression="zstd", data_page_size=1 << 20, write_page_index=page_index,
            use_dictionary=False, row_group_size=rows_per_file // 2, max_rows_per_page=1 << 20,
        )
        written += p.stat().st_size
        first += rows_per_file
        paths.append(p)
        k += 1
    print(f"wrote {len(paths)} files, {written / 1e9:.2f} GB in {time.time() - t0:.0f}s -> {out}")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-data/tokens")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--no-page-index", action="store_true")
    a = ap.parse_args()
    generate(Path(a.out), a.gb, page_index=not a.no_page_index)


if __name__ == "__main__":
    main()
