"""Shuffle modes are strategies (:mod:`youmu.order.modes`): each mode is one registered
object that gives its orders once — the epoch's page order, a window's row order, a row
mode's position order — and the stream asks it, never which mode it holds. A new mode
is one class, registered, and every stream reads it, resumes it and records it by name."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from parquet_fixtures import write_ids

import youmu
from youmu.order.modes import MODES, SHUFFLE_MODES, ShuffleMode, register
from youmu.order.shuffle import ShardPlan, all_window_rows
from youmu.torch import YoumuDataset


class _Reversed:
    """An order of ``range(n)`` backwards, with a ``Permutation``'s ``range(lo, hi)``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def range(self, lo: int, hi: int) -> np.ndarray:
        return self.n - 1 - np.arange(lo, hi, dtype=np.int64)


@pytest.fixture
def backwards() -> Iterator[str]:
    """A mode that exists only in this test: pages last to first, rows in page order."""

    @register
    class Backwards(ShuffleMode):
        name = "backwards-test"

        def page_order(self, n_units: int, seed: int, epoch: int, page_slices: int) -> Any:
            return _Reversed(n_units)

    try:
        yield Backwards.name
    finally:
        MODES.pop(Backwards.name)


def test_a_new_mode_is_one_registered_class_that_streams_resume_and_record(tmp_path: Path, backwards: str) -> None:
    path = write_ids(tmp_path / "d.parquet", 12, row_group_size=3)  # 4 pages of 3: one row group per page
    ds = YoumuDataset(path, shuffle=backwards, buffer_size=6, output="python")
    assert [r["id"] for r in ds] == [9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2]
    it = iter(ds)
    head = [next(it)["id"] for _ in range(5)]
    state = ds.state_dict()
    assert state["shuffle"] == backwards
    again = YoumuDataset(path, shuffle=backwards, buffer_size=6, output="python")
    again.load_state_dict(state)
    assert head + [r["id"] for r in again] == [9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2]
    with pytest.raises(youmu.StateError, match="shuffle"):
        YoumuDataset(path, shuffle="none", buffer_size=6, output="python").load_state_dict(state)


@pytest.mark.parametrize(("mode", "page_slices"), [(m, 1) for m in SHUFFLE_MODES if not ShuffleMode(m).permutes_rows] + [("page", 3)])
def test_windows_and_their_pages_read_one_page_order(mode: str, page_slices: int) -> None:
    page_rows = np.array([5, 1, 7, 3, 3, 8, 2, 6, 4, 9, 1], dtype=np.int64)
    sizes = all_window_rows(page_rows, ShuffleMode(mode), 3, 7, 2, page_slices=page_slices)
    plan = ShardPlan.build(page_rows, mode, window_pages=3, seed=7, epoch=2, page_slices=page_slices)
    assert plan.window_full_rows.tolist() == sizes.tolist()
    windows = range(len(plan.window_ids))
    seen = np.concatenate([plan.pages_of(i) for i in windows])
    # every page, each in as many windows as it has slices at most
    assert set(seen.tolist()) == set(range(len(page_rows))) and np.bincount(seen).max() <= page_slices
    if page_slices == 1:  # whole pages: a window holds exactly its pages' rows
        assert [int(page_rows[plan.pages_of(i)].sum()) for i in windows] == sizes.tolist()
    order = [plan.row_order(i) for i in windows]
    if not ShuffleMode(mode).shuffles_windows:
        assert order == [None] * len(order)
        return
    assert [len(o) for o in order] == sizes.tolist()
    # each of the window's rows once (with slices: indices into its pages' rows, some left to other windows)
    assert all(len(set(o.tolist())) == len(o) for o in order)
    if page_slices == 1:
        assert all(sorted(o.tolist()) == list(range(len(o))) for o in order)


def test_a_mode_is_its_name_and_one_object() -> None:
    assert SHUFFLE_MODES[:4] == ("page", "row", "local", "none")  # the order errors list them in
    for name in SHUFFLE_MODES:
        mode = ShuffleMode(name)
        assert mode == name and str(mode) == name and f"{mode}" == name and repr(mode) == repr(name)
        assert mode is MODES[name] and pickle.loads(pickle.dumps(mode)) is mode
    assert ShuffleMode.PAGE is ShuffleMode("page") and [str(m) for m in ShuffleMode] == list(SHUFFLE_MODES)
    with pytest.raises(youmu.InvalidArgumentError, match="not a shuffle mode"):
        ShuffleMode("shuffled")
    with pytest.raises(youmu.InvalidArgumentError, match="already registered"):
        register(type("Again", (ShuffleMode,), {"name": "page"}))
    with pytest.raises(youmu.InvalidArgumentError, match="shuffle must be one of"):
        ShardPlan.build(np.array([3]), "shuffled", window_pages=1, seed=0, epoch=0)
