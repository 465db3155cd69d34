"""One shuffled page-mode epoch, one DynamicBatchLoader epoch and one packed epoch
(``youmu.torch.pack``, 4,096-token sequences) — no workers — over a generated token
set, timed in-process; run it against two trees to compare builds.

    PYTHONPATH=<tree>/python python benches/bench_layers_ab.py page|odb|pack|aligner [--data DIR]

``aligner``: the ODB aligner alone — a ``DynamicBatchLoader`` epoch over 200,000 in-memory
samples (lengths log-normal as ShareGPT4o's, the sample is its own length; budget 16,384,
pool 1,024), so no Parquet or torch work hides the aligner's per-sample cost.

Prints ``<what> <rows> <seconds> <CPU seconds>`` (the process's CPU time, every thread's:
the loader reads ahead on a thread, and on a shared machine CPU time varies less than wall
time). The data (4 zstd files, 80,000 rows of 16-1023 int32 tokens) is written on first use.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_data(root: Path) -> None:
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for f in range(4):
        lengths = rng.integers(16, 1024, size=20000)
        rows = [rng.integers(0, 50000, size=int(n), dtype=np.int32) for n in lengths]
        table = pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int32()))})
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=5000, data_page_size=256 << 10,
                       compression="zstd")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["page", "odb", "pack", "aligner"])
    ap.add_argument("--data", type=Path, default=Path("bench-data/layers_ab"))
    args = ap.parse_args()
    from youmu.batching import DynamicBatchLoader

    if args.what == "aligner":
        rng = random.Random(0)
        lengths = [max(16, min(12110, int(rng.lognormvariate(6.88, 0.934)))) for _ in range(200_000)]
        t0, c0 = time.perf_counter(), time.process_time()
        loader = DynamicBatchLoader(lengths, token_budget=16384, length_fn=lambda s: s, pool_size=1024,
                                    num_workers=0, shuffle=False)
        n = sum(len(batch) for batch, _ in loader)
        print(args.what, n, round(time.perf_counter() - t0, 3), round(time.process_time() - c0, 3))
        return
    if not args.data.exists():
        make_data(args.data)
    from youmu.torch import YoumuDataset, pack

    t0, c0 = time.perf_counter(), time.process_time()
    ds = YoumuDataset(str(args.data), columns=["input_ids"], shuffle="page", seed=1)
    if args.what == "page":
        n = sum(1 for _ in ds)
    elif args.what == "pack":
        n = sum(1 for _ in pack(ds, seq_len=4096, eos_id=0))
    else:
        loader = DynamicBatchLoader(ds, token_budget=16384, length_fn=lambda r: len(r["input_ids"]),
                                    collate_fn=None, num_workers=0)
        n = sum(len(batch) for batch, _ in loader)
    print(args.what, n, round(time.perf_counter() - t0, 3), round(time.process_time() - c0, 3))


if __name__ == "__main__":
    main()
