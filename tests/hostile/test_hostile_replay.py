"""A hostile user's ``DynamicBatchLoader`` states that would replay: a saved round's
``replay`` steps and ``overflow`` name each pooled sample once, and no more samples
than the grouping pool held. A key twice would deliver one sample twice without a
word; thousands of keys would wait forever for credits the loader never grants. Each
is a :class:`~youmu.errors.StateError` naming the field, at load and at merge."""

from __future__ import annotations

from typing import Any

import pytest
from batching_mp import LengthDataset, collate_ids, sample_len, sample_tok, token_counts

import youmu
from youmu.batching import DynamicBatchLoader
from youmu.errors import StateError

LENGTHS = [8 + i % 5 for i in range(40)]
POOL = 8


def _map_loader() -> DynamicBatchLoader:
    return DynamicBatchLoader(LengthDataset(LENGTHS, token_counts(LENGTHS)), token_budget=24, length_fn=sample_len,
                              token_count_fn=sample_tok, collate_fn=collate_ids, pool_size=POOL, num_workers=0,
                              timeout=20, heartbeat=0.1)


class _Rows:
    """An iterable dataset with a state (a mid-epoch DBL state then carries payloads)."""

    def __init__(self) -> None:
        self.pos = 0

    def __iter__(self):
        while self.pos < len(LENGTHS):
            self.pos += 1
            yield {"ids": list(range(LENGTHS[self.pos - 1])), "n": LENGTHS[self.pos - 1]}

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos = state["pos"]


def _iter_loader() -> DynamicBatchLoader:
    return DynamicBatchLoader(_Rows(), token_budget=24, length_fn=lambda s: s["n"], pool_size=POOL, num_workers=0,
                              collate_fn=lambda b: b, timeout=20, heartbeat=0.1)


def _mid_round_state(make: Any) -> dict[str, Any]:
    """A state saved after the first step of a round that planned several."""
    loader = make()
    it = iter(loader)
    for taken in range(1, 21):
        next(it)
        state = loader.state_dict()
        if state["replay"]:
            loader.close()
            return {**state, "taken": taken}
    raise AssertionError("no state with a replay in 20 steps")


@pytest.fixture(scope="module")
def map_run() -> dict[str, Any]:
    return _mid_round_state(_map_loader)


@pytest.fixture(scope="module")
def map_state(map_run) -> dict[str, Any]:
    return {k: v for k, v in map_run.items() if k != "taken"}


@pytest.fixture(scope="module")
def iter_state() -> dict[str, Any]:
    return {k: v for k, v in _mid_round_state(_iter_loader).items() if k != "taken"}


def _refused(make: Any, state: dict[str, Any], message: str) -> None:
    with pytest.raises(StateError, match=message):
        make().load_state_dict(state)
    with pytest.raises(StateError, match=message):
        youmu.merge_states([state])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("copies", [2, 100, 4_000])
def test_a_replayed_step_copied_is_refused_not_delivered_twice_or_waited_on(map_state, copies) -> None:
    forged = {**map_state, "replay": [map_state["replay"][0]] * copies + map_state["replay"][1:]}
    _refused(_map_loader, forged, r"sample key \d+ twice in its 'replay' steps and 'overflow'")


@pytest.mark.timeout(60)
def test_a_key_in_both_a_replayed_step_and_the_overflow_is_refused(map_state) -> None:
    key = map_state["replay"][0]["keys"][0]
    _refused(_map_loader, {**map_state, "overflow": [*map_state["overflow"], key]}, rf"sample key {key} twice")
    step = map_state["replay"][0]
    _refused(_map_loader, {**map_state, "replay": [{**step, "keys": [*step["keys"], step["keys"][0]]}]}, "twice")


@pytest.mark.timeout(60)
def test_more_pooled_samples_than_the_pool_holds_are_refused(map_state) -> None:
    # distinct keys, but more than one round's pool: a resume would wait for credits forever
    used = {k for e in map_state["replay"] for k in e["keys"]} | set(map_state["overflow"])
    fresh = [k for k in range(len(LENGTHS) // 2) if k not in used][: POOL + 1]
    forged = {**map_state, "overflow": [*map_state["overflow"], *fresh]}
    _refused(_map_loader, forged, rf"holds \d+ samples \('replay' and 'overflow'\) but its grouping pool holds {POOL}")


@pytest.mark.timeout(60)
def test_an_iterable_loaders_state_with_payloads_nobody_names_is_refused(iter_state) -> None:
    assert iter_state["payloads"]
    forged = {**iter_state, "payloads": {**iter_state["payloads"], 10**6: ({"ids": [1]}, 1, 1)}}
    _refused(_iter_loader, forged, r"'payloads' holds samples of keys no replayed step or overflow names")
    copies = {**iter_state, "replay": iter_state["replay"] * 2}
    _refused(_iter_loader, copies, "twice")


@pytest.mark.timeout(60)
def test_the_untouched_mid_round_state_still_resumes_exactly(map_run, map_state) -> None:
    # the checks refuse forgeries only: the state as saved resumes the rest of the epoch
    fresh = _map_loader()
    whole = [b for b, _ in fresh]
    fresh.close()
    resumed = _map_loader()
    resumed.load_state_dict(map_state)
    rest = [b for b, _ in resumed]
    resumed.close()
    assert rest and rest == whole[map_run["taken"]:]
