"""A field declared in ``DynamicBatchLoader``'s state format reaches every state the
loader writes from the declaration alone: a summed count (one a merge adds up over the
ranks) that a loaded state holds is carried into each state the resumed epoch writes,
with no runtime code naming it. This is what keeps a new state field to its declaration
and the code that changes it (``docs/architecture.md``, "Change cost, measured")."""

from __future__ import annotations

from typing import Any

import pytest

import youmu.batching.runtime.epoch as epoch_module
import youmu.batching.state as state_module
from youmu.batching import DynamicBatchLoader
from youmu.state.formats import RANK, SUM, StateField, an_int


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's format with one more summed field, ``loads``, as a new field would be
    declared (same tag: a field added without a version bump is optional)."""
    fmt = state_module.LOADER_STATE
    with_loads = fmt.extend(fmt.tag, StateField("loads", an_int(), scope=RANK, merge=SUM, required=False),
                            older=fmt.older)
    monkeypatch.setattr(state_module, "LOADER_STATE", with_loads)
    monkeypatch.setattr(epoch_module, "LOADER_STATE", with_loads, raising=False)


def _loader() -> DynamicBatchLoader:
    return DynamicBatchLoader(list(range(1, 400)), token_budget=64, length_fn=lambda s: s % 17 + 1, pool_size=32,
                              num_workers=0)


def _after(state: dict[str, Any] | None, steps: int) -> dict[str, Any]:
    loader = _loader()
    if state is not None:
        loader.load_state_dict(state)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    return loader.state_dict()


def test_a_declared_summed_field_of_a_loaded_state_is_in_every_state_the_epoch_writes(counted: None) -> None:
    saved = _after(None, 3)
    assert "loads" not in saved  # nothing counted it yet
    saved["loads"] = 5           # as the load that counts it would leave it
    assert _after(saved, 0)["loads"] == 5  # not yet iterated: the loaded state itself
    assert _after(saved, 2)["loads"] == 5  # mid-round: a state the epoch writes afresh


def test_without_the_field_the_states_are_unchanged(counted: None) -> None:
    assert "loads" not in _after(_after(None, 3), 2)
