"""``RowStream``'s read loop against another tree's, in one process: the other tree's
``python/youmu/streams/rowstream.py`` is loaded beside this one's (both on this build's
native module) and the two are alternated, epoch by epoch, in CPU seconds.

    git worktree add /tmp/base <commit>
    PYTHONPATH=python python benches/bench_rowstream_ab.py --base /tmp/base [--pairs 5] [--data DIR]

Prints, per case (page mode at ``read_ahead`` 1 and 0, row mode), the medians and the
new/base ratio of each pair (``time.process_time``: Rust's decode threads included). The
data (4 files × 50,000 rows of 16–111 int32 tokens, 64 KiB pages) is written on first use.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CASES = [("page, read_ahead=1, 4 epochs", ("page", 1, None, 4)),
         ("page, read_ahead=0, 4 epochs", ("page", 0, None, 4)),
         ("row, read_ahead=1, 4,000 rows", ("row", 1, 4000, 1))]


def make_data(root: Path) -> None:
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for f in range(4):
        n = 50_000
        offsets = np.concatenate([[0], np.cumsum(rng.integers(16, 112, n))]).astype(np.int32)
        values = pa.array(rng.integers(0, 50000, offsets[-1]).astype(np.int32))
        table = pa.table({"id": pa.array(np.arange(n) + f * n),
                          "input_ids": pa.ListArray.from_arrays(pa.array(offsets), values)})
        pq.write_table(table, root / f"part{f}.parquet", row_group_size=10_000, data_page_size=64 << 10)


def load_base(tree: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("rowstream_base", tree / "python/youmu/streams/rowstream.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no rowstream.py under {tree}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def epoch_cpu(module: Any, index: Any, mode: str, read_ahead: int, cap: int | None, epochs: int) -> float:
    t = time.process_time()
    for e in range(epochs):
        stream = module.RowStream(index, shuffle=mode, buffer_size=8192, seed=0, epoch=e, read_ahead=read_ahead,
                                  cap=cap)
        for _ in stream.iter_tables():
            pass
    return time.process_time() - t


def main() -> None:
    import youmu
    from youmu.streams import rowstream

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the other tree (its checkout root)")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path("bench-data/rowstream_ab"))
    args = ap.parse_args()
    if not args.data.exists():
        make_data(args.data)
    base = load_base(args.base)
    index = youmu.PageIndex(str(args.data), columns=["input_ids"])
    for name, case in CASES:
        new, old = [], []
        for _ in range(args.pairs):
            old.append(epoch_cpu(base, index, *case))
            new.append(epoch_cpu(rowstream, index, *case))
        ratios = [a / b for a, b in zip(new, old)]
        print(f"{name}: new {statistics.median(new):.3f} CPU s, base {statistics.median(old):.3f}, new/base median "
              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
