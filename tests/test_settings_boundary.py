"""Each setting is declared and checked once, at its boundary object — ``PlanSettings``
for the plan, ``StreamSpec`` for a Parquet stream, ``LoaderConfig`` for a
``DynamicBatchLoader`` — and every entry point that takes it hands it there: a bad
value raises the same error class with the same message whichever entry point got it,
and the loaders' keyword defaults are the boundary object's own."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from youmu.batching import DynamicBatchLoader
from youmu.batching.config import LoaderConfig
from youmu.errors import YoumuError
from youmu.parquet import ParquetStream
from youmu.planning import BalancedLoader, PlanSettings
from youmu.spec import StreamSpec


def _refusal(build: Any) -> tuple[type, str]:
    with pytest.raises(YoumuError) as e:
        build()
    return type(e.value), str(e.value)


# -- the plan -------------------------------------------------------------------------------------
def _plan_loaders() -> list[Any]:
    loaders: list[Any] = [BalancedLoader]
    try:
        from youmu.ray.deploy import RayLoaders
    except ImportError:  # the Ray extra is optional
        return loaders
    return [*loaders, RayLoaders]


@pytest.mark.parametrize("loader", _plan_loaders(), ids=lambda c: c.__name__)
def test_a_loaders_plan_keywords_default_as_plan_settings_declares_them(loader: Any) -> None:
    params = inspect.signature(loader.__init__).parameters
    declared = PlanSettings.keywords()
    taken = {k: params[k].default for k in declared if k in params}
    assert taken == {k: declared[k] for k in taken}
    assert "num_microbatches" in taken and "settings" in params


def test_balanced_loader_takes_every_plan_setting() -> None:
    assert set(PlanSettings.keywords()) <= set(inspect.signature(BalancedLoader.__init__).parameters)


BAD_PLAN = [
    ("num_microbatches", 0), ("num_microbatches", "2"), ("global_batch_size", 0), ("token_budget", -1),
    ("capacity", 0), ("method", "best"), ("placement", "first"), ("group_size", 0), ("seed", -1),
    ("seed", 1 << 64), ("drop_last", "yes"), ("reorder_only", 1), ("encoder_balance", "apart"),
]


@pytest.mark.parametrize(("setting", "bad"), BAD_PLAN, ids=lambda v: repr(v))
def test_a_bad_plan_setting_is_refused_alike_by_every_entry_point(tmp_path, setting: str, bad: Any) -> None:
    given = {"num_microbatches": 1, "global_batch_size": 4, setting: bad}
    at_boundary = _refusal(lambda: PlanSettings.make(names=["default"], world_size=1, **given))
    assert _refusal(lambda: BalancedLoader([{"input_ids": [1]}] * 4, **given)) == at_boundary
    ray_loaders = _plan_loaders()[1:]
    if ray_loaders and setting in inspect.signature(ray_loaders[0].__init__).parameters:
        # refused before any actor starts: no Ray cluster needed
        path = str(tmp_path / "t.parquet")
        pq.write_table(pa.table({"input_ids": [[1, 2]] * 8}), path)
        assert _refusal(lambda: ray_loaders[0](path, world_size=1, **given)) == at_boundary


def test_an_unknown_plan_setting_is_refused_by_the_settings() -> None:
    with pytest.raises(YoumuError, match=r"unknown plan settings \['bogus'\]"):
        PlanSettings.resolve([], world_size=1, num_microbatches=1, bogus=1)


# -- a Parquet stream -----------------------------------------------------------------------------
BAD_STREAM = [
    ("buffer_size", 0), ("buffer_size", 2.5), ("seed", -1), ("shuffle", "rows"), ("page_slices", 0),
    ("memory_budget", -1), ("read_ahead", -1), ("drop_last", "no"), ("output", "pandas"), ("transform", 3),
]


@pytest.mark.parametrize(("setting", "bad"), BAD_STREAM, ids=lambda v: repr(v))
def test_a_bad_stream_setting_is_refused_alike_by_every_entry_point(tmp_path, setting: str, bad: Any) -> None:
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"x": list(range(8))}), path, row_group_size=2)
    at_boundary = _refusal(lambda: StreamSpec(**{setting: bad}))
    assert _refusal(lambda: ParquetStream(path, rank=0, world_size=1, **{setting: bad})) == at_boundary
    from youmu.torch import YoumuDataset

    assert _refusal(lambda: YoumuDataset(path, rank=0, world_size=1, **{setting: bad})) == at_boundary


# -- a dynamic-batch loader -----------------------------------------------------------------------
BAD_ODB = [
    ("token_budget", 0), ("pool_size", 0), ("num_workers", -1), ("loss_scaling", "mean"), ("seed", -1),
    ("uneven", "drop"), ("heartbeat", 0), ("join", "yes"), ("quota", 0), ("encoder_budget", 0),
]


@pytest.mark.parametrize(("setting", "bad"), BAD_ODB, ids=lambda v: repr(v))
def test_a_bad_dynamic_batch_setting_is_refused_alike_by_every_entry_point(setting: str, bad: Any) -> None:
    given = {"dataset": [{"n": 3}] * 4, "token_budget": 64, "length_fn": len, "num_workers": 0, setting: bad}
    at_boundary = _refusal(lambda: LoaderConfig.check(given))
    assert _refusal(lambda: DynamicBatchLoader(**given)) == at_boundary


# -- defaults -------------------------------------------------------------------------------------
def test_a_loaders_keyword_defaults_are_its_boundary_objects() -> None:
    # a signature spells its defaults out for readers and IDEs; the boundary object's
    # are the ones that count, so the two must not drift apart
    from youmu.batching.config import DEFAULTS
    from youmu.torch import YoumuDataset

    dbl = inspect.signature(DynamicBatchLoader.__init__).parameters
    assert {k: dbl[k].default for k in DEFAULTS} == DEFAULTS
    fields = {f.name: f.default for f in dataclasses.fields(StreamSpec)}
    ds = inspect.signature(YoumuDataset.__init__).parameters
    assert {k: ds[k].default for k in fields} == fields
