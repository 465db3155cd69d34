"""The public surface of ``youmu.planning``: exports, docstring examples (run as
doctests), and clear errors for bad arguments (TypeError for a wrong type, ValueError
for a value out of range, each naming the argument)."""

from __future__ import annotations

import doctest
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from planning_cases import BAD_ARGUMENTS

import youmu.planning as planning
from youmu.planning import (
    BalancedLoader,
    MixingSchedule,
    Planner,
    SampleMeta,
    balance,
)

MODULES = ["__init__", "engine.cost", "engine.balance", "engine.planner", "engine.schedule",
           "balanced_loader", "steps.packing", "steps.microbatch", "steps.rank_sources", "steps.exchange",
           "state.checkpoint", "engine.hybrid"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    pytest.importorskip("torch")  # loader, collate and gather_metadata examples run torch
    mod = importlib.import_module("youmu.planning" if module == "__init__" else f"youmu.planning.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0


def test_every_export_exists_and_has_an_example() -> None:
    assert len(set(planning.__all__)) == len(planning.__all__)
    missing = []
    for name in planning.__all__:
        obj = getattr(planning, name)  # AttributeError: exported but not defined
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants (METHODS, PRESETS) are documented where they are defined
        doc = inspect.getdoc(obj) or ""
        if ">>>" not in doc:
            missing.append(name)
    assert not missing, f"public APIs without a docstring example: {missing}"


def _raises(fn: Callable[[], Any], exc: type[Exception], name: str) -> None:
    with pytest.raises(exc) as info:
        fn()
    assert name in str(info.value), f"{exc.__name__} should name {name!r}: {info.value}"


@pytest.mark.parametrize("case", BAD_ARGUMENTS, ids=[c[0] for c in BAD_ARGUMENTS])
def test_bad_arguments_name_the_argument(case: tuple) -> None:
    _, fn, exc, name = case
    _raises(fn, exc, name)


def _loader(**kw: Any) -> BalancedLoader:
    args: dict[str, Any] = dict(num_microbatches=1, global_batch_size=2, prefetch=0)
    args.update(kw)
    source = args.pop("source", [{"input_ids": [1, 2]}] * 4)
    return BalancedLoader(source, **args)


LOADER_ARGUMENTS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("source None", dict(source=None), TypeError, "source"),
    ("source int", dict(source=5), TypeError, "source"),
    ("source string", dict(source="data.parquet"), TypeError, "source"),
    ("mapping value", dict(source={"a": 5}, schedule={"a": 1}), TypeError, "source['a']"),
    ("stream not in schedule", dict(source={"a": [], "b": []}, schedule=MixingSchedule({"a": 1})), ValueError,
     "not in the schedule"),
    ("schedule without stream", dict(source={"a": []}, schedule=MixingSchedule({"a": 1, "b": 1})), ValueError,
     "without a stream"),
    ("schedule names", dict(source={"a": []}, schedule={"a": 1, "b": 1}), ValueError, "unknown sources"),
    ("num_microbatches", dict(num_microbatches=0), ValueError, "num_microbatches"),
    ("global_batch_size float", dict(global_batch_size=2.0), TypeError, "global_batch_size"),
    ("both sizes", dict(token_budget=100), ValueError, "exactly one"),
    ("capacity", dict(capacity=-1), ValueError, "capacity"),
    ("group_size", dict(group_size=3), ValueError, "group_size"),
    ("method", dict(method="lpt"), ValueError, "method"),
    ("placement", dict(placement="x"), ValueError, "placement"),
    ("cost", dict(cost=42), TypeError, "cost"),
    ("prefetch bool", dict(prefetch=True), TypeError, "prefetch"),
    ("prefetch negative", dict(prefetch=-1), ValueError, "prefetch"),
    ("timeout", dict(timeout=0), ValueError, "timeout"),
    ("seed", dict(seed="x"), TypeError, "seed"),
    ("drop_last", dict(drop_last="no"), TypeError, "drop_last"),
    ("reorder_only", dict(reorder_only=1), TypeError, "reorder_only"),
    ("channel", dict(channel=5), TypeError, "channel"),
    ("collate_fn", dict(collate_fn=5), TypeError, "collate_fn"),
    ("length_fn and docs_fn", dict(length_fn=len, docs_fn=len), ValueError, "docs_fn"),
    ("resume_mode", dict(resume_mode="fast"), ValueError, "resume_mode"),
]


@pytest.mark.parametrize("case", LOADER_ARGUMENTS, ids=[c[0] for c in LOADER_ARGUMENTS])
def test_balanced_loader_arguments(case: tuple) -> None:
    pytest.importorskip("torch")
    _, kw, exc, name = case
    _raises(lambda: _loader(**kw), exc, name)


@pytest.mark.parametrize(
    "kw, exc, name",
    [
        (dict(id_fn=lambda s: "x"), TypeError, "id_fn"),
        (dict(length_fn=lambda s: 1.5), TypeError, "length_fn"),
        (dict(docs_fn=lambda s: ["a"]), TypeError, "docs_fn"),
        (dict(token_count_fn=lambda s: None), TypeError, "token_count_fn"),
        (dict(id_fn=lambda s: 1), ValueError, "unique"),
    ],
)
def test_user_functions_returning_bad_values(kw: dict, exc: type, name: str) -> None:
    pytest.importorskip("torch")
    _raises(lambda: list(_loader(**kw)), exc, name)


def test_numpy_integers_are_accepted() -> None:
    # int-typed arguments take numpy integers (sizes computed with numpy are common)
    assert balance(np.array([3.0, 1.0]), np.int64(2), np.int32(1)) == [(0, 0), (1, 0)]
    assert Planner().distribute(np.int64(2), np.int64(1), capacity=np.int64(10)).num_buckets == 2
    assert SampleMeta.build(ids=np.arange(2), lengths=np.array([3.0, 4.0])).sizes.tolist() == [3, 4]


def test_all_is_sorted_and_complete() -> None:
    """``__all__`` is the public surface: sorted (as torchdata asserts its own), and
    every public name the package binds is in it."""
    assert planning.__all__ == sorted(planning.__all__)
    public = {n for n, v in vars(planning).items() if not n.startswith("_") and not inspect.ismodule(v)
              and n != "annotations"}
    assert public == set(planning.__all__)
