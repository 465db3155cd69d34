"""Hostile ``TokenUpdates`` states (youmu.batching.TokenUpdates): every edited, foreign or
absurd field is a ``StateError`` naming it, and a refused load leaves the counts as they
were (a job that catches the error goes on with the updates it had)."""

from __future__ import annotations

from typing import Any

import pytest

from youmu.batching import TokenUpdates
from youmu.batching.algo.loss import TOKEN_UPDATES_STATE
from youmu.batching.algo.step_info import StepInfo
from youmu.errors import StateError


def _mid_update() -> TokenUpdates:
    updates = TokenUpdates(100)
    for k, t in enumerate([30, 90, 25]):  # one update closed at 120, 25 tokens pending
        updates.add(StepInfo(step=k, num_samples=1, num_tokens=t, global_num_samples=1, global_num_tokens=t,
                             loss_scale=1.0))
    return updates


@pytest.mark.parametrize("field, value", [
    ("tokens_seen", "145"), ("tokens_seen", -1), ("tokens_seen", float("nan")), ("tokens_seen", float("inf")),
    ("tokens_seen", 2**70), ("tokens_seen", True), ("tokens_seen", None), ("tokens_seen", [145]),
    ("pending", -0.5), ("pending", float("-inf")), ("pending", {"tokens": 25}), ("pending", 10**30),
    ("updates", 1.5), ("updates", -1), ("updates", True), ("updates", 2**64), ("updates", "1"),
    ("tokens_per_update", 200), ("tokens_per_update", "100"), ("tokens_per_update", 100.0),
])
def test_a_forged_field_is_refused_naming_it(field: str, value: Any) -> None:
    updates = _mid_update()
    before = updates.state_dict()
    with pytest.raises(StateError, match=f"'{field}'|{field}="):
        updates.load_state_dict({**before, field: value})
    assert updates.state_dict() == before and updates.boundary == 2


@pytest.mark.parametrize("field", [f.name for f in TOKEN_UPDATES_STATE.fields])
def test_a_missing_field_is_refused_naming_it(field: str) -> None:
    updates = _mid_update()
    state = {k: v for k, v in updates.state_dict().items() if k != field}
    with pytest.raises(StateError, match=f"'{field}'"):
        updates.load_state_dict(state)


def test_more_pending_tokens_than_were_ever_seen_is_refused() -> None:
    updates = _mid_update()
    with pytest.raises(StateError, match="'pending' is 500.0 loss tokens, more than the 145.0"):
        updates.load_state_dict({**updates.state_dict(), "pending": 500})


@pytest.mark.parametrize("state", [None, [("format", "youmu.TokenUpdates/1")], "youmu.TokenUpdates/1",
                                   {"format": "youmu.TokenUpdates/2"}, {"format": "youmu.DynamicBatchLoader/2"}])
def test_something_else_than_a_token_updates_state_is_refused(state: Any) -> None:
    with pytest.raises(StateError, match="TokenUpdates"):
        TokenUpdates(100).load_state_dict(state)


def test_a_state_nested_absurdly_deep_is_refused_before_its_fields_are_read() -> None:
    deep: Any = 25
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(StateError):
        TokenUpdates(100).load_state_dict({**_mid_update().state_dict(), "pending": deep})
