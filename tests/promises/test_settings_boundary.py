"""Each setting is declared and checked once, at its boundary object — ``PlanSettings``
for the plan, ``StreamSpec`` for a Parquet stream, ``LoaderConfig`` for a
``DynamicBatchLoader``, the mixtures' constructors — and every entry point that takes
it hands it there: a bad value raises the same error class with the same message
whichever entry point got it, the loaders' keyword defaults are the boundary object's
own, and building a loader runs each setting's rule once (the inner objects it builds
trust what the boundary checked)."""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from parquet_fixtures import write_columns

from youmu.batching import DynamicBatchLoader
from youmu.batching.config import LoaderConfig
from youmu.errors import YoumuError
from youmu.planning import BalancedLoader, PlanSettings
from youmu.streams.parquet import ParquetStream
from youmu.streams.spec import StreamSpec


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
        write_columns(path, {"input_ids": [[1, 2]] * 8})
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
def test_a_bad_stream_setting_is_refused_alike_by_every_entry_point(ids_file, setting: str, bad: Any) -> None:
    path = ids_file(8, column="x", row_group_size=2)
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
    # every keyword but the channel's group is a setting LoaderConfig declares (the loader
    # picks its settings from its locals() by that declaration: one it lacks would be lost)
    declared = LoaderConfig.keywords()
    assert set(dbl) - {"self", "group"} == set(declared)
    assert {k: (inspect.Parameter.empty if d is dataclasses.MISSING else d) for k, d in declared.items()} == {
        k: dbl[k].default for k in declared}
    fields = {f.name: f.default for f in dataclasses.fields(StreamSpec)}
    ds = inspect.signature(YoumuDataset.__init__).parameters
    assert {k: ds[k].default for k in fields} == fields


# -- each rule runs once per build ----------------------------------------------------------------
def _rules() -> dict[Callable[..., Any], Callable[[inspect.BoundArguments], list[str]]]:
    """Every argument rule, with the settings a call of it checks."""
    from youmu._internal import args as _args
    from youmu.order.shuffle import shuffle_args, window_args
    from youmu.planning.engine import metrics
    from youmu.state import contract as stateful

    named = {getattr(_args, n): (lambda b: [b.arguments["name"]]) for n in _args.__all__
             if callable(getattr(_args, n)) and "name" in inspect.signature(getattr(_args, n)).parameters}
    return {**named, stateful.check_epoch: lambda b: ["epoch"],
            shuffle_args: lambda b: ["shuffle", "page_slices"],
            window_args: lambda b: ["buffer_size", "memory_budget", "read_ahead"],
            metrics.check_grid: lambda b: list(b.arguments["names"])}


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Counts, by setting, the rule calls made from here on: every rule is wrapped
    wherever a youmu module holds it (a rule calling another counts once)."""
    import youmu.mixture
    import youmu.planning
    import youmu.torch  # noqa: F401  # every module holding a rule is loaded before the walk

    counts: collections.Counter[str] = collections.Counter()
    depth = [0]

    def wrap(rule: Callable[..., Any], settings: Callable[[inspect.BoundArguments], list[str]]) -> Any:
        sig = inspect.signature(rule)

        @functools.wraps(rule)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if not depth[0]:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                counts.update(settings(bound))
            depth[0] += 1
            try:
                return rule(*args, **kwargs)
            finally:
                depth[0] -= 1
        return counted

    rules = _rules()
    wrapped = {id(r): wrap(r, names) for r, names in rules.items()}
    held = 0
    for module in [m for name, m in sys.modules.items() if name.split(".")[0] == "youmu"]:
        for attr, value in list(vars(module).items()):
            if callable(value) and id(value) in wrapped and any(value is r for r in rules):
                monkeypatch.setattr(module, attr, wrapped[id(value)])
                held += 1
    assert held > len(rules)  # the rules are found where the modules hold them
    yield counts


def _once(counts: collections.Counter[str], settings: set[str]) -> None:
    twice = {name: n for name, n in counts.items() if n > 1}
    assert not twice, f"checked more than once in one build: {twice}"
    assert settings <= set(counts), f"never checked: {sorted(settings - set(counts))}"


STREAM_RULED = {"shuffle", "buffer_size", "seed", "transform", "drop_last", "output", "memory_budget", "read_ahead",
                "page_slices", "storage_options", "rank", "world_size"}


@pytest.mark.parametrize("adapter", ["ParquetStream", "YoumuDataset"])
def test_building_a_parquet_stream_checks_each_setting_once(ids_file, checks, adapter: str) -> None:
    path = ids_file(64, column="x", row_group_size=4)
    if adapter == "YoumuDataset":
        from youmu.torch import YoumuDataset as build
    else:
        build = ParquetStream
    build(path, rank=1, world_size=2, seed=3, buffer_size=8, memory_budget=1 << 30, read_ahead=1, page_slices=2)
    _once(checks, STREAM_RULED)


def test_building_a_balanced_loader_checks_each_plan_setting_once(checks) -> None:
    BalancedLoader([{"input_ids": [1]}] * 8, num_microbatches=2, global_batch_size=4, capacity=64, group_size=1,
                   placement="greedy", seed=3)
    ruled = {k for k in PlanSettings.keywords() if k not in ("cost", "schedule", "encoder_cost")}
    _once(checks, ruled | {"world_size", "prefetch", "timeout", "resume_mode"})


def test_making_plan_settings_for_a_world_size_checks_each_setting_once(checks) -> None:
    # what the Ray deployment does: the world size is known when the settings are made
    PlanSettings.make(names=["a", "b"], world_size=4, num_microbatches=2, global_batch_size=8, schedule={"a": 1, "b": 1},
                      group_size=2, seed=3)
    ruled = {k for k in PlanSettings.keywords() if k not in ("cost", "schedule", "encoder_cost", "placement")}
    _once(checks, ruled | {"world_size"})


def test_building_a_dynamic_batch_loader_checks_each_setting_once(checks) -> None:
    DynamicBatchLoader([{"n": 3}] * 8, token_budget=64, length_fn=len, num_workers=0, seed=3, timeout=60)
    _once(checks, {"token_budget", "pool_size", "num_workers", "seed", "timeout", "heartbeat", "loss_scaling"})


def test_building_a_mixture_checks_each_setting_once(checks) -> None:
    from youmu.mixture import FlatMixture, MixtureDataset

    MixtureDataset({"a": list(range(10)), "b": list(range(5))}, {"a": 1, "b": 1}, seed=3, block_size=4)
    _once(checks, {"seed", "policy", "block_size", "length"})
    checks.clear()
    FlatMixture({"a": list(range(10)), "b": list(range(5))}, seed=3)
    _once(checks, {"seed", "shuffle"})


def test_the_inner_objects_a_boundary_builds_still_refuse_bad_input_given_directly(ids_file) -> None:
    # the boundary's path goes around their checks; a caller who builds them keeps them
    import numpy as np

    import youmu
    from youmu.errors import ArgumentTypeError, InvalidArgumentError
    from youmu.order.shuffle import ShardPlan, window_pages_for
    from youmu.planning import Planner
    from youmu.streams.rowstream import RowStream, window_layout

    path = ids_file(16, column="x", row_group_size=4)
    index = youmu.PageIndex(path)
    rows = np.array([4, 4, 4, 4])
    refused = [
        (lambda: RowStream(index, buffer_size=0), InvalidArgumentError, "buffer_size"),
        (lambda: RowStream(index, shuffle="rows"), InvalidArgumentError, "shuffle"),
        (lambda: RowStream(index, rank=2, world_size=2), InvalidArgumentError, "rank"),
        (lambda: RowStream(index, window_pages=0), InvalidArgumentError, "window_pages"),
        (lambda: ShardPlan.build(rows, "page", window_pages=0, seed=0, epoch=0), InvalidArgumentError, "window_pages"),
        (lambda: window_layout(index, 8, 1, read_ahead=-1), InvalidArgumentError, "read_ahead"),
        (lambda: window_layout(index, 2.5, 1), ArgumentTypeError, "buffer_size"),
        (lambda: window_pages_for(np.zeros(0), None, memory_budget=0), InvalidArgumentError, "memory_budget"),
        (lambda: StreamSpec().layout(index, world_size=0), InvalidArgumentError, "world_size"),
        (lambda: StreamSpec().layout(index, world_size=2).stream(rank=2), InvalidArgumentError, "rank"),
        (lambda: Planner(seed=-1), InvalidArgumentError, "seed"),
        (lambda: Planner().distribute(4, group_size=3), InvalidArgumentError, "group_size"),
        (lambda: Planner().balance("interleave"), InvalidArgumentError, "reorder_only"),
        (lambda: Planner().cost(42), ArgumentTypeError, "cost"),
    ]
    for build, error, name in refused:
        with pytest.raises(error, match=name):
            build()


def test_a_plan_settings_planner_is_the_planner_its_stages_build() -> None:
    from youmu.planning import Planner

    s = PlanSettings.make(names=["default"], world_size=2, num_microbatches=2, global_batch_size=8, capacity=64,
                          method="kk", placement="greedy", seed=5, group_size=2)
    staged = (Planner(seed=5).distribute(2, 2, capacity=64, group_size=2).cost(None)
              .balance("kk", on_overflow="defer", placement="greedy"))
    assert s.planner() == staged
    # the world size still open: groups of 2 ranks are settings a world of 2, 4, ... ranks plans with
    open_world = PlanSettings.make(names=["default"], world_size=None, num_microbatches=1, global_batch_size=4,
                                   group_size=2)
    assert open_world.on(4).planner().group_size == 2
    with pytest.raises(YoumuError, match="group_size must divide num_buckets=3"):
        open_world.on(3).planner()
    with pytest.raises(YoumuError, match="interleave"):
        PlanSettings.make(names=["default"], world_size=1, num_microbatches=1, global_batch_size=4,
                          method="interleave")
