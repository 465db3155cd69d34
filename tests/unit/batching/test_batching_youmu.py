"""DynamicBatchLoader over youmu's own datasets: ``YoumuDataset`` (iterable, Parquet) and
``MixtureDataset`` (map-style). Skipped when the native core is not built."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
import importlib.util  # noqa: E402

from parquet_fixtures import write_token_rows  # noqa: E402

if importlib.util.find_spec("youmu._core") is None:  # pragma: no cover
    pytest.skip("the native core is not built", allow_module_level=True)

from youmu.batching import DynamicBatchLoader  # noqa: E402
from youmu.mixture import MixtureDataset  # noqa: E402
from youmu.state import files as statefile  # noqa: E402
from youmu.torch import YoumuDataset, lm_collate  # noqa: E402

N = 1200


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("odb")
    rng = np.random.default_rng(0)
    write_token_rows(d / "part-0.parquet", rng.integers(1, 200, N), data_page_size=2048, row_group_size=300,
                     use_dictionary=False)
    return d


def _len(row) -> int:
    return int(row["input_ids"].shape[0])


def _ids(batch) -> list[int]:
    return batch["id"].tolist()


def _loader(ds, **kw) -> DynamicBatchLoader:
    return DynamicBatchLoader(ds, token_budget=1024, length_fn=_len, collate_fn=lm_collate, pool_size=64,
                              timeout=30, **kw)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_youmu_dataset_every_row_once(parquet_dir: Path, workers: int) -> None:
    loader = _loader(YoumuDataset(parquet_dir, columns=["input_ids", "id"], seed=1), num_workers=workers)
    ids = []
    for batch, info in loader:
        ids += _ids(batch)
        lengths = batch["attention_mask"].sum(1)
        if info.num_samples > 1:
            assert info.num_samples * int(lengths.max()) <= 1024
    assert sorted(ids) == list(range(N))


@pytest.mark.timeout(120)
def test_youmu_dataset_resume(parquet_dir: Path) -> None:
    def make() -> DynamicBatchLoader:
        return _loader(YoumuDataset(parquet_dir, columns=["input_ids", "id"], seed=1), num_workers=0)

    full = [_ids(b) for b, _ in make()]
    first = make()
    it = iter(first)
    head = [_ids(b) for _, (b, _) in zip(range(9), it)]
    state = statefile.loads(statefile.dumps(first.state_dict()), where="checkpoint")
    first.close()
    second = make()
    second.load_state_dict(state)
    assert head + [_ids(b) for b, _ in second] == full


def test_mixture_dataset(parquet_dir: Path) -> None:
    a = [{"input_ids": np.zeros(n, np.int64), "id": i} for i, n in enumerate(range(1, 301))]
    b = [{"input_ids": np.zeros(500, np.int64), "id": 1000 + i} for i in range(20)]
    mix = MixtureDataset({"a": a, "b": b}, {"a": 0.9, "b": 0.1})
    loader = DynamicBatchLoader(mix, token_budget=2048, length_fn=lambda s: len(s["input_ids"]),
                                collate_fn=lambda s: [x["id"] for x in s], pool_size=32, num_workers=0)
    ids = [i for batch, _ in loader for i in batch]
    assert len(ids) == len(mix)
    assert sum(1 for i in ids if i >= 1000) == sum(1 for k in range(len(mix)) if mix[k]["id"] >= 1000)
