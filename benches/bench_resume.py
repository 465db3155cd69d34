"""Resume on another topology: merged state size and the index work before the first
window can be read, at 1%, 50% and 99% of an epoch, against a same-topology resume; and,
in the same run, a real resume on real Parquet against Hugging Face ``datasets``.

    python benches/bench_resume.py [--rows 100_000_000] [--page-rows 100] \
        [--data-rows 10_000_000] [--data /tmp/youmu-bench-resume] [--peers-python .venv-peers/bin/python]

Index only: a synthetic page table (``--rows`` rows in pages of ``--page-rows``), so no
data is written; what is timed is exactly what a resuming ``YoumuDataset`` computes
before its first window read — the same functions (``youmu.order.resume``, ``ShardPlan``).
The old job has 64 ranks × 4 workers, the new one 48 ranks × 3; a same-topology resume
builds the old shard's plan and finds its position's window. Times are the median of 3.

Real data (``--data-rows`` rows of token lists in 8 Parquet files, row groups of 10,000
rows, generated once under ``--data``): one loader reads to 1%, 50% and 99% of the epoch
and saves its state; a new loader (built from the file list) loads it and delivers its
first batch of 64 rows, timed from construction. youmu: ``YoumuDataset(shuffle="page")``.
HF ``datasets`` (run by the peers' interpreter, ``make peers-venv``; skipped with a line
saying so when it is missing): ``load_dataset("parquet", streaming=True)``'s
``IterableDataset`` ``state_dict()`` / ``load_state_dict()``, unshuffled and with
``.shuffle(buffer_size=8192)``. Reported per point: the state's JSON bytes, the time to
the first batch, and whether its first row is the row the uninterrupted stream delivers
next; for HF also the rows the resumed stream delivers against the rows the epoch had
left (HF does not save a shuffle buffer: the rows in it at the checkpoint are lost).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from itertools import islice
from pathlib import Path

import numpy as np

import youmu
from youmu.order.modes import ShuffleMode
from youmu.order.resume import Origin, deal, remaining_after, shard_plan
from youmu.order.sharding import Shard
from youmu.order.shuffle import ShardPlan, all_window_rows, row_chunk_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import PEERS_PYTHON, peers_python, run_phase  # noqa: E402

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


POINTS = (0.01, 0.5, 0.99)
FILES = 8
FIRST = 64  # rows in the first batch after the resume


def write_data(out: Path, rows: int) -> list[str]:
    """``rows`` rows (``id``, ``input_ids``: 4–32 token ids) in ``FILES`` files, once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stamp = out / f"done-{rows}"
    if not stamp.exists():
        out.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        per = -(-rows // FILES)
        for f in range(FILES):
            n = min(per, rows - f * per)
            lens = rng.integers(4, 33, n)
            offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            toks = pa.ListArray.from_arrays(offs, rng.integers(1, 50_000, int(offs[-1]), dtype=np.int32))
            t = pa.table({"id": np.arange(f * per, f * per + n, dtype=np.int64), "input_ids": toks})
            pq.write_table(t, out / f"part-{f:02d}.parquet", row_group_size=10_000, write_page_index=True)
        stamp.write_text("ok")
    return sorted(str(p) for p in out.glob("part-*.parquet"))


def phase_real_youmu(files: list[str]) -> list[dict]:
    from youmu.torch import YoumuDataset

    def make() -> YoumuDataset:
        return YoumuDataset(files, columns=["id", "input_ids"], shuffle="page", seed=0, output="numpy")

    total = len(make())
    out = []
    for frac in POINTS:
        ds = make()
        it = iter(ds)
        for _ in islice(it, int(total * frac)):
            pass
        state = ds.state_dict()
        want = int(next(it)["id"])
        t0 = time.perf_counter()
        new = make()
        new.load_state_dict(state)
        first = list(islice(iter(new), FIRST))
        dt = time.perf_counter() - t0
        out.append({"impl": "youmu page", "at": frac, "state_bytes": len(json.dumps(state)),
                    "first_batch_ms": round(dt * 1e3, 1), "exact": int(first[0]["id"]) == want})
    return out


def phase_real_hf(files: list[str], shuffled: bool) -> list[dict]:
    import datasets

    datasets.disable_progress_bars()

    def make():
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        return (ds.shuffle(seed=0, buffer_size=8192) if shuffled else ds).with_format("arrow")

    import pyarrow.parquet as pq

    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    out = []
    for frac in POINTS:
        ds = make()
        # positioned a batch at a time (fast); the state is the same as row by row's
        it = ds.iter(batch_size=FIRST)
        for _ in range(int(total * frac) // FIRST):
            next(it)
        state = ds.state_dict()
        want = int(next(it).column("id")[0].as_py())
        t0 = time.perf_counter()
        new = make()
        new.load_state_dict(state)
        rest = new.iter(batch_size=FIRST)
        first = next(rest, None)  # None: the resumed stream has no rows left
        dt = time.perf_counter() - t0
        delivered = (len(first) if first is not None else 0) + sum(len(b) for b in rest)
        out.append({"impl": "HF streaming" + (" shuffle(8192)" if shuffled else ""), "at": frac,
                    "state_bytes": len(json.dumps(state)), "first_batch_ms": round(dt * 1e3, 1) if first else None,
                    "exact": first is not None and int(first.column("id")[0].as_py()) == want,
                    "rows_left": total - int(total * frac) // FIRST * FIRST, "rows_after_resume": delivered})
    return out


def real_data(a: argparse.Namespace) -> None:
    """youmu and HF ``datasets`` resumed on the same Parquet files (see the module doc)."""
    t = time.perf_counter()
    files = write_data(Path(a.data), a.data_rows)
    print(f"real data: {a.data_rows:,} rows in {len(files)} files under {a.data} ({time.perf_counter() - t:.0f} s)",
          flush=True)
    args = ["--data", a.data, "--data-rows", str(a.data_rows)]
    runs = [("real-youmu", None)]
    py = peers_python(a.peers_python)
    if py:
        runs += [("real-hf", py), ("real-hf-shuffled", py)]
    for phase, python in runs:
        try:
            for r in run_phase(__file__, phase, *args, timeout=3600, python=python)["results"]:
                print(json.dumps({"rows": a.data_rows, **r}), flush=True)
        except RuntimeError as e:  # a baseline that fails is reported, youmu's side stands
            print(f"{phase} failed: {str(e)[-600:]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--page-rows", type=int, default=100)
    ap.add_argument("--data-rows", type=int, default=10_000_000, help="real-data rows (0: skip that part)")
    ap.add_argument("--data", default="/tmp/youmu-bench-resume")
    ap.add_argument("--peers-python", default=PEERS_PYTHON)
    ap.add_argument("--phase", default=None, help="internal: real-youmu, real-hf, real-hf-shuffled")
    a = ap.parse_args()
    if a.phase:
        files = write_data(Path(a.data), a.data_rows)
        res = phase_real_youmu(files) if a.phase == "real-youmu" else phase_real_hf(files, a.phase.endswith("shuffled"))
        print(json.dumps({"results": res}))
        return
    page_rows = np.full(a.rows // a.page_rows, a.page_rows, dtype=np.int64)
    rng = np.random.default_rng(0)
    for mode in (ShuffleMode.PAGE, ShuffleMode.ROW):
        for frac in (0.01, 0.5, 0.99):
            states = _states(page_rows, mode, frac, rng)
            merged = youmu.merge_states(states)
            size = len(json.dumps(merged))

            def resume(merged=merged, mode=mode):
                from youmu.state.jobs import decode_chain

                levels = decode_chain(merged["resumed"], "bench", tokens=True)
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
    if a.data_rows:
        real_data(a)


if __name__ == "__main__":
    main()
