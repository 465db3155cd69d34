"""Shared by the Ray tests, the Ray example's checks and its benchmark: small Parquet
sources, the stream settings every test uses, what a delivered micro-batch is
compared by, and the in-process reference (``BalancedLoader`` on Gloo ranks), a
module-level function so spawned ranks can import it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

#: (name, rows, seed) of the three sources
SOURCES = (("web", 300, 1), ("code", 200, 2), ("math", 150, 3))
WORLD = 2
#: a mixture stage switch at step 4: "code" drops out, "math" takes over
SCHEDULE = [(0, {"web": 2, "code": 1, "math": 1}), (4, {"web": 1, "code": 0, "math": 3})]
#: BalancedLoader settings: capacity tight enough that samples are carried over
PLAN = dict(num_microbatches=3, global_batch_size=32, schedule=SCHEDULE, capacity=330, cost="llama-12b", method="kk",
            seed=3, drop_last=True)
#: YoumuDataset settings of every source
STREAM = dict(columns=["id", "input_ids"], shuffle="page", buffer_size=40, seed=7, output="numpy")


def write_sources(directory: Path) -> dict[str, str]:
    """Three sources of token rows with a global ``id``; a tenth of the rows long, so
    capacity defers some; 50-row row groups of several small pages each."""
    import pyarrow as pa
    from parquet_fixtures import write_columns

    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, n, seed in SOURCES:
        rng = np.random.default_rng(seed)
        lens = np.where(rng.random(n) < 0.1, rng.integers(200, 300, n), rng.integers(5, 80, n))
        path = write_columns(directory / f"{name}.parquet",
                             {"id": np.arange(n, dtype=np.int64) + seed * 100_000,
                              "input_ids": pa.array([list(range(int(k))) for k in lens], pa.list_(pa.int32()))},
                             row_group_size=50, data_page_size=2048, write_page_index=True)
        out[name] = str(path)
    return out


def key(item: tuple[Any, Any]) -> tuple[Any, Any]:
    """A delivered ``(batch, info)`` as compared: the whole info, and every sample's id
    and token bytes in order."""
    batch, info = item
    return info, None if batch is None else [(int(s["id"]), s["input_ids"].tobytes()) for s in batch]


def in_process(rank: int, world: int, store: Any, paths: dict[str, str]) -> list[Any]:
    """Rank ``rank``'s ``BalancedLoader`` over its ``YoumuDataset`` of every source."""
    import youmu
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader
    from youmu.torch import YoumuDataset

    channel = GlooChannel.from_store(store, rank, world, prefix="youmu/test/ray", timeout=60)
    stream = {k: v for k, v in STREAM.items() if k != "columns"}
    streams = {n: YoumuDataset(youmu.PageIndex(p, columns=STREAM["columns"]), rank=rank, world_size=world, **stream)
               for n, p in paths.items()}
    return [key(x) for x in BalancedLoader(streams, channel=channel, prefetch=1, **PLAN)]


def stall_when_flagged(flag: str, row: Any) -> Any:
    """A transform that hangs while ``flag`` exists (a loader that stops answering)."""
    while os.path.exists(flag):
        time.sleep(0.05)
    return row


def drop_every_seventh(row: Any) -> Any:
    """A transform that drops some rows (their positions still count)."""
    return None if int(row["id"]) % 7 == 0 else row
