"""YoumuDataset through real DataLoader worker processes: every row exactly once over
ranks × workers × shuffle modes, drop_last balance with workers, and rank/world size
taken from an initialised torch.distributed group."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from parquet_fixtures import write_token_rows
from torch.utils.data import DataLoader

import youmu
from youmu.torch import YoumuDataset

MODES = ["page", "row", "local", "none"]
N_ROWS = 1200
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
# (world size, DataLoader workers): every world size 1-4 and worker count 0-3 appears
LAYOUTS = [(1, 0), (2, 3), (3, 2), (4, 1)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("workers")
    for k, (lo, hi) in enumerate([(0, 700), (700, N_ROWS)]):
        write_token_rows(d / f"p{k}.parquet", 1 + np.arange(lo, hi) % 17, start=lo, id_first=True, data_page_size=512,
                         row_group_size=300, use_dictionary=False)
    return d


@pytest.fixture(scope="module")
def index(data: Path) -> youmu.PageIndex:
    return youmu.PageIndex(data)


def _rank_rows(index, mode: str, rank: int, world: int, workers: int, **kw) -> list[int]:
    ds = YoumuDataset(index, shuffle=mode, buffer_size=150, seed=5, rank=rank, world_size=world, output="python", **kw)
    ds.set_epoch(2)
    loader = DataLoader(ds, batch_size=None, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    return [r["id"] for r in loader]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world,workers", LAYOUTS)
def test_every_row_exactly_once_through_dataloader_workers(index, mode: str, world: int, workers: int) -> None:
    per_rank = [_rank_rows(index, mode, r, world, workers) for r in range(world)]
    assert sorted(x for rows in per_rank for x in rows) == list(range(N_ROWS))
    assert all(per_rank), "every rank gets rows"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
def test_drop_last_with_workers_gives_equal_counts_and_reports_the_rest(index, mode: str) -> None:
    world, workers = 3, 2
    per_rank = [_rank_rows(index, mode, r, world, workers, drop_last=True) for r in range(world)]
    counts = {len(x) for x in per_rank}
    assert len(counts) == 1
    seen = [x for rows in per_rank for x in rows]
    assert len(set(seen)) == len(seen)
    dropped = YoumuDataset(index, shuffle=mode, buffer_size=150, seed=5, world_size=world, rank=0,
                           drop_last=True).dropped_rows()
    assert len(seen) + dropped == N_ROWS


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
@pytest.mark.timeout(300)
def test_rank_and_world_size_come_from_torch_distributed(data: Path) -> None:
    from batching_mp import run_world, youmu_dataset_scenario

    per_rank = run_world(youmu_dataset_scenario, 2, str(data), timeout=240)
    assert [p["rank"] for p in per_rank] == [0, 1] and {p["world"] for p in per_rank} == {2}
    assert sorted(x for p in per_rank for x in p["ids"]) == list(range(N_ROWS))
