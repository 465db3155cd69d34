"""The chain of jobs of an epoch has one wire form (:mod:`youmu.state.jobs`), whoever
records it: a youmu stream, a ``DynamicBatchLoader`` and the Ray step planner write
:func:`~youmu.state.jobs.encode_chain`'s form, and still read the states the earlier
versions wrote.

``loader_chains_v1.json`` holds states made by youmu before the loaders' chains took
the one form (version 1: a ``DynamicBatchLoader`` level held one flat position per
rank, a Ray planner's chain was a list of jobs of ``positions[rank][source]``): a
``DynamicBatchLoader``'s merged state, the live state of a rank resumed from it and
the merged state of that (a chain of two jobs), each with the batches a loader then
delivered; Ray planner states resized once and twice, with each source's levels.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from where import SUPPORT

import youmu
from youmu.order.resume import Level
from youmu.state.jobs import decode_chain, decode_chains, encode_chain, encode_chains

FIXTURES = json.loads((SUPPORT / "loader_chains_v1.json").read_text())


def test_a_stream_chain_is_written_as_before() -> None:
    """A stream's levels were already in the one form: the merged states saved by an
    earlier youmu decode and encode back to the same bytes."""
    cases = json.loads((SUPPORT / "merged_states_v1.json").read_text())
    for merged in (cases["mapstream_chain"]["merged"], cases["pack"]["merged"]["dataset"]):
        chain = merged["resumed"]
        assert encode_chain(decode_chain(chain, "MapStream", tokens=True)) == chain


def test_one_form_for_every_kind_of_level() -> None:
    stream = Level(2, (1, 2), ((3,), (2, 0)), tokens=((1,), (0, 0)))
    loader = Level(2, (1, 1), ((4,), (3,)), pending=((1, 2), ()))
    raw = encode_chain([stream]) + encode_chain([loader])
    assert raw[0] == {"world_size": 2, "num_workers": [1, 2], "positions": [[3], [2, 0]], "tokens": [[1], [0, 0]]}
    assert raw[1] == {"world_size": 2, "num_workers": [1, 1], "positions": [[4], [3]], "pending": [[1, 2], []]}
    assert decode_chain(raw[:1], "MapStream", tokens=True) == [stream]
    assert decode_chain(raw[1:], "DynamicBatchLoader", pending=True, one_worker=True) == [loader]
    per_source = [[Level(2, (1, 1), ((4,), (3,)))], [Level(2, (1, 1), ((2,), (1,)))]]
    assert encode_chains(per_source) == [encode_chain(c) for c in per_source]
    assert decode_chains(encode_chains(per_source), "planner", count=2) == per_source


def test_a_loader_chain_of_version_1_decodes_to_the_same_levels() -> None:
    from youmu.batching.merge import sampler_level
    from youmu.batching.state import loader_levels

    levels = [sampler_level(2, (3, 2), ((1,), ())), sampler_level(3, (1, 0, 2), ((), (), (0, 1)))]
    v1 = FIXTURES["DynamicBatchLoader"]["chain"]
    assert "num_workers" not in v1[0]
    assert loader_levels(v1, "DynamicBatchLoader") == levels
    assert loader_levels(encode_chain(levels), "DynamicBatchLoader") == levels


# -- DynamicBatchLoader ---------------------------------------------------------------------------
def _loader() -> Any:
    pytest.importorskip("torch")
    from batching_mp import LengthDataset, collate_ids, sample_len, sample_tok, token_counts

    from youmu.batching import DynamicBatchLoader

    lengths = [8 + i % 5 for i in range(40)]
    return DynamicBatchLoader(LengthDataset(lengths, token_counts(lengths)), token_budget=64, length_fn=sample_len,
                              token_count_fn=sample_tok, collate_fn=collate_ids, pool_size=8, num_workers=0,
                              timeout=20, heartbeat=0.1)


def _batches(loader: Any) -> list[list[int]]:
    try:
        return [list(b[0]) if isinstance(b, tuple) else list(b) for b in loader]
    finally:
        loader.close()


@pytest.mark.parametrize("saved", ["merged", "live", "merged2"])
def test_dynamic_batch_loader_states_of_version_1_deliver_the_same_batches(saved: str) -> None:
    case = FIXTURES["DynamicBatchLoader"]
    loader = _loader()
    loader.load_state_dict(case[saved])
    assert _batches(loader) == case[f"{saved}_rows"]


def test_a_dynamic_batch_loader_resumed_from_version_1_saves_and_merges_the_one_form() -> None:
    case = FIXTURES["DynamicBatchLoader"]
    for saved in ("merged", "live"):
        loader = _loader()
        loader.load_state_dict(case[saved])
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        loader.close()
        assert all(lv["num_workers"] == [1] * lv["world_size"] for lv in state["resumed"])
        merged = youmu.merge_states([state])
        assert [lv.world_size for lv in decode_chain(merged["resumed"], "m", pending=True, one_worker=True)] == [1, 1]
        again = _loader()
        again.load_state_dict(merged)  # a merge regroups what is left: the same samples, exactly once
        assert sorted(x for b in _batches(again) for x in b) == sorted(x for b in case[f"{saved}_rows"][1:] for x in b)


# -- the Ray planner -------------------------------------------------------------------------------
@pytest.mark.parametrize("saved,world", [("resized", 3), ("resized_twice", 2)])
def test_ray_planner_states_of_version_1_load_to_the_same_chain(saved: str, world: int) -> None:
    from youmu.ray.state import PlannerState

    old = FIXTURES["ray_planner"][saved]
    state = PlannerState.from_dict(old, world_size=world, num_sources=2)
    raw = state.to_dict()
    assert raw["resumed"] == encode_chains([[Level(lv["world_size"], (1,) * lv["world_size"],
                                                   tuple((p[c],) for p in lv["positions"]))
                                             for lv in old["resumed"]] for c in range(2)])
    assert {k: v for k, v in raw.items() if k != "resumed"} == {k: v for k, v in old.items() if k != "resumed"}
    assert PlannerState.from_dict(json.loads(json.dumps(raw)), world_size=world, num_sources=2) == state
    if saved == "resized_twice":
        chain = state.chain(["web", "code"])
        assert chain is not None
        got = {f"{n}/{d}": [[list(p) for p in lv.positions] for lv in chain.levels(n, d)]
               for n in ("web", "code") for d in (1, 2)}
        assert got == FIXTURES["ray_planner"]["levels"]
