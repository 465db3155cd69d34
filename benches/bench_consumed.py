"""What it costs a ``TrainerLoader`` to checkpoint what the trainer *consumed* rather than
what it fetched (``follow_consumption``, on under Lightning): in an epoch of unknown
length the state as of each batch handed out is kept (one ``state_dict()`` of the source
per batch), against the plain loader, which takes its state only when a checkpoint asks.
A sized loader keeps none (trainers count its batches instead of fetching ahead): its
row shows that following costs nothing there.

Per loader kind (sized rows through ``StatefulDataLoader`` with 0 and 2 workers, ``pack``,
a ``DynamicBatchLoader``, a ``BalancedLoader``; one process, one rank): batches/s of a
whole epoch both ways, alternated ``--repeats`` times (the best of each), the ratio, and
the cost per batch in microseconds. One ``state_dict()`` per checkpoint is the same both
ways and not counted.

    python benches/bench_consumed.py --rows 20000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write(path: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    lens = rng.integers(16, 512, rows)
    toks = pa.array([np.arange(int(n), dtype=np.int32) for n in lens], pa.list_(pa.int32()))
    pq.write_table(pa.table({"id": np.arange(rows), "input_ids": toks}), path, row_group_size=4096,
                   data_page_size=64 << 10, write_page_index=True)


def loaders(path: str) -> dict[str, Any]:
    from youmu.batching import DynamicBatchLoader
    from youmu.integrations import TrainerLoader
    from youmu.planning import BalancedLoader
    from youmu.torch import YoumuDataset, collate_packed, collate_pad, pack

    def rows(**kw: Any) -> Any:
        return YoumuDataset(path, shuffle="page", seed=1, output="numpy", **kw)

    def length(r: Any) -> int:
        return len(r["input_ids"])

    def unsized(loader: Any) -> Any:
        loader._steps = None  # as if its length were unknown: what the per-batch states cost
        return loader

    return {
        "rows (sized)": lambda: TrainerLoader(rows(), batch_size=32, collate_fn=collate_pad),
        "rows, 0 workers": lambda: unsized(TrainerLoader(rows(), batch_size=32, collate_fn=collate_pad)),
        "rows, 2 workers": lambda: unsized(TrainerLoader(rows(), batch_size=32, collate_fn=collate_pad,
                                                         num_workers=2)),
        "pack": lambda: TrainerLoader(pack(rows(columns=["input_ids"]), seq_len=2048), batch_size=8,
                                      collate_fn=collate_packed),
        "DynamicBatchLoader": lambda: TrainerLoader(DynamicBatchLoader(rows(), token_budget=16384, length_fn=length,
                                                                       collate_fn=collate_pad, num_workers=0)),
        "BalancedLoader": lambda: TrainerLoader(BalancedLoader(rows(), num_microbatches=4, global_batch_size=128,
                                                               length_fn=length, collate_fn=collate_pad)),
    }


def epoch(make: Any, follow: bool) -> tuple[float, int]:
    loader = make()
    if follow:
        loader.follow_consumption()
    t0 = time.perf_counter()
    n = 0
    for _ in loader:
        if follow:
            loader.mark_consumed()
        n += 1
    took = time.perf_counter() - t0
    loader.close()
    return took, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        write(path, args.rows)
        print(f"{args.rows} rows; best of {args.repeats} alternated epochs each way")
        print(f"{'loader':<20} {'batches':>8} {'fetched b/s':>12} {'consumed b/s':>13} {'ratio':>6} {'us/batch':>9}")
        for name, make in loaders(path).items():
            best = {False: float("inf"), True: float("inf")}
            n = 0
            for _ in range(args.repeats):
                for follow in (False, True):
                    took, n = epoch(make, follow)
                    best[follow] = min(best[follow], took)
            plain, followed = n / best[False], n / best[True]
            extra = (best[True] - best[False]) / n * 1e6
            print(f"{name:<20} {n:>8} {plain:>12.1f} {followed:>13.1f} {followed / plain:>6.3f} {extra:>9.1f}")


if __name__ == "__main__":
    main()
