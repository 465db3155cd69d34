"""Resume on another topology: merged state size and the index work before the first
window can be read, at 1%, 50% and 99% of an epoch, against a same-topology resume.

    python benches/bench_resume.py [--rows 100_000_000] [--page-rows 100]

Index only: a synthetic page table (``--rows`` rows in pages of ``--page-rows``), so no
data is written; what is timed is exactly what a resuming ``YoumuDataset`` computes
before its first window read — the same functions (``youmu.resume``, ``ShardPlan``).
The old job has 64 ranks × 4 workers, the new one 48 ranks × 3; a same-topology resume
builds the old shard's plan and finds its position's window. Times are the median of 3.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import youmu
from youmu.resume import Origin, deal, remaining_after, shard_plan
from youmu.sharding import Shard
from youmu.shuffle import ShardPlan, all_window_rows, row_chunk_rows

OLD = (64, 4)
NEW = (48, 3)
WINDOW_PAGES = 32


def _states(page_rows, mode, frac, rng):
    """The per-rank states the old job saved, each worker at about ``frac`` of its shard."""
    world, workers = OLD
    states = []
    for r in range(world):
        positions = {}
        for k in range(workers):
            total = ShardPlan.build(page_rows, mode, window_pages=WINDOW_PAGES, seed=0, epoch=0, rank=r,
                                    world_size=world, worker=k, num_workers=workers,
                                    window_rows=row_chunk_rows(WINDOW_PAGES) if mode == "row" else None).total_rows
            positions[k] = int(min(total, max(0, round(total * frac + rng.integers(-50, 50)))))
        states.append({"format": "youmu.YoumuDataset/1", "seed": 0, "shuffle": mode, "world_size": world, "rank": r,
                       "window_pages": WINDOW_PAGES, "drop_last": False, "page_slices": 1, "data": "synthetic",
                       "epoch": 0, "num_workers": workers, "positions": positions})
    return states


def _median(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--page-rows", type=int, default=100)
    a = ap.parse_args()
    page_rows = np.full(a.rows // a.page_rows, a.page_rows, dtype=np.int64)
    rng = np.random.default_rng(0)
    for mode in ("page", "row"):
        for frac in (0.01, 0.5, 0.99):
            states = _states(page_rows, mode, frac, rng)
            merged = youmu.merge_states(states)
            size = len(json.dumps(merged))

            def resume(merged=merged, mode=mode):
                from youmu.resume import decode_levels

                levels = decode_levels(merged["resumed"], "bench")
                if mode == "row":
                    origin = Origin(np.array([int(page_rows.sum())]), "block")
                    wrows = None
                else:
                    wrows = all_window_rows(page_rows, mode, WINDOW_PAGES, 0, 0)
                    origin = Origin(wrows, "rr")
                shard = Shard(0, NEW[0], 0, NEW[1])
                units = deal(remaining_after(origin, levels, False), shard, False)
                plan = shard_plan(units, wrows, mode=mode, page_rows=page_rows, window_pages=WINDOW_PAGES, seed=0,
                                  epoch=0, shard=shard, drop_last=False, page_slices=1)
                return plan.window_at(0) if plan.total_rows else None

            def same(states=states, mode=mode):
                st = states[0]
                plan = ShardPlan.build(page_rows, mode, window_pages=WINDOW_PAGES, seed=0, epoch=0, rank=0,
                                       world_size=OLD[0], worker=0, num_workers=OLD[1],
                                       window_rows=row_chunk_rows(WINDOW_PAGES) if mode == "row" else None)
                p = st["positions"][0]
                return plan.window_at(p) if p < plan.total_rows else None

            t_new, _ = _median(resume)
            t_same, _ = _median(same)
            print(json.dumps({"mode": mode, "rows": int(page_rows.sum()), "pages": len(page_rows), "at": frac,
                              "merged_bytes": size, "bytes_per_old_shard": round(size / (OLD[0] * OLD[1]), 1),
                              "resize_resume_ms": round(t_new * 1e3, 2), "same_topology_ms": round(t_same * 1e3, 2)}))


if __name__ == "__main__":
    main()
