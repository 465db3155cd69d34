"""BalancedLoader resumed on another topology: the states every rank saved, merged with
``youmu.merge_states`` and loaded by every rank of a job of another world size (and
DataLoader workers under the sources), deliver every remaining sample exactly once
from the same step — with a new batch size or mixing schedule from that step on.

Ranks run as threads over real Gloo channels (one process, a HashStore), and as
spawned processes with torchdata ``StatefulDataLoader`` workers (the 2×2 → 3×1 → 2×3
chain)."""

from __future__ import annotations

import itertools
import pickle
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
import planning_mp as mp  # noqa: E402

import youmu  # noqa: E402
from youmu.distributed import GlooChannel  # noqa: E402
from youmu.errors import StateError  # noqa: E402
from youmu.planning import BalancedLoader, MixingSchedule  # noqa: E402
from youmu.torch import MapStream  # noqa: E402

_prefix = itertools.count()
DATA = mp.dataset(90, seed=1)


def _ranks(fn: Callable[[int, int, GlooChannel], Any], world: int) -> list[Any]:
    """``fn(rank, world, channel)`` on ``world`` threads, each with its own Gloo channel."""
    import torch.distributed as dist

    store, prefix = dist.HashStore(), f"youmu/test/merge{next(_prefix)}"
    out: list[Any] = [None] * world
    errors: list[str] = []

    def run(r: int) -> None:
        try:
            out[r] = fn(r, world, GlooChannel.from_store(store, r, world, prefix=prefix, timeout=30))
        except BaseException:  # noqa: BLE001 - reported below
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    return out


def _job(world: int, make: Callable[[int, int, GlooChannel], BalancedLoader], state: Any,
         steps: int | None) -> tuple[list[list[tuple[int, list[Any]]]], list[dict[str, Any]]]:
    """One job: every rank loads ``state`` (None: the epoch's start), runs ``steps``
    steps (None: to the end); per rank its steps ``(step, delivered samples)`` and its
    state."""

    def rank(r: int, w: int, ch: GlooChannel) -> tuple[list[tuple[int, list[Any]]], dict[str, Any]]:
        loader = make(r, w, ch)
        if state is not None:
            loader.load_state_dict(state)
        got: list[tuple[int, list[Any]]] = []
        for items in loader.iter_steps():
            got.append((items[0][1].step, [s for b, info in items if not info.is_padding for s in b]))
            if steps is not None and len(got) == steps:
                break
        st = pickle.loads(pickle.dumps(loader.state_dict()))
        loader.close()
        return got, st

    res = _ranks(rank, world)
    return [g for g, _ in res], [s for _, s in res]


def _chain(jobs: list[tuple[int, int | None]], make: Any, check_job: Any = None) -> tuple[list[Any], list[Any]]:
    """Jobs of (world size, steps) resumed one from the other's merged states; every
    delivered sample and the merged states."""
    delivered: list[Any] = []
    state = None
    merged_states = []
    for j, (world, steps) in enumerate(jobs):
        per_rank, states = _job(world, make(j), state, steps)
        step_lists = [[s for s, _ in got] for got in per_rank]
        assert all(sl == step_lists[0] for sl in step_lists), "every rank runs the same steps"
        if state is not None and step_lists[0]:
            assert step_lists[0][0] == state["step"], "the job starts at the merged step"
        if check_job is not None:
            check_job(j, per_rank)
        delivered += [x for got in per_rank for _, samples in got for x in samples]
        if steps is not None:
            state = youmu.merge_states(states)
            merged_states.append(state)
    return delivered, merged_states


def _stream(r: int, w: int) -> MapStream:
    return MapStream(DATA, rank=r, world_size=w, run=3)


@pytest.mark.parametrize("size", [dict(global_batch_size=12, capacity=1500), dict(token_budget=2500, capacity=1500)])
def test_resize_chain_delivers_every_sample_once(size: dict[str, int]) -> None:
    def make(j: int) -> Any:
        # capacity is tight for a step: deferred samples are carried over the resizes
        return lambda r, w, ch: BalancedLoader(_stream(r, w), num_microbatches=1, id_fn=mp._sid, channel=ch,
                                               prefetch=j % 2, cost="llama-12b", **size)

    delivered, merged = _chain([(2, 2), (3, 2), (1, 1), (2, None)], make)
    assert Counter(s["id"] for s in delivered) == Counter(range(len(DATA)))
    assert any(m["carry"] for m in merged), "carried samples were dealt (the test would miss them otherwise)"


def test_the_global_batch_of_a_step_does_not_depend_on_the_world_size() -> None:
    sizes: dict[int, int] = {}

    def check(j: int, per_rank: list[Any]) -> None:
        for k in range(len(per_rank[0])):
            sizes[per_rank[0][k][0]] = sum(len(got[k][1]) for got in per_rank)

    def make(j: int) -> Any:
        # a new global batch size from the third job's first step on
        g = 10 if j < 2 else 7
        return lambda r, w, ch: BalancedLoader(_stream(r, w), num_microbatches=2, global_batch_size=g,
                                               id_fn=mp._sid, channel=ch, prefetch=0)

    delivered, _ = _chain([(2, 2), (3, 3), (2, None)], make, check)
    assert Counter(s["id"] for s in delivered) == Counter(range(len(DATA)))
    last = max(sizes)
    assert [sizes[s] for s in range(last)] == [10] * 5 + [7] * (last - 5)
    assert 0 < sizes[last] <= 7


@pytest.mark.parametrize("new_world", [2, 3])
def test_mixture_change_at_a_resume_keeps_each_components_positions(new_world: int) -> None:
    a = [{"id": k, "src": "a", "input_ids": [0] * (k % 9 + 1)} for k in range(70)]
    b = [{"id": 1000 + k, "src": "b", "input_ids": [0] * (k % 5 + 1)} for k in range(40)]
    old, new = {"a": 3, "b": 1}, {"a": 1, "b": 3}
    per_step: dict[int, Counter] = {}

    def check(j: int, per_rank: list[Any]) -> None:
        for k in range(len(per_rank[0])):
            per_step[per_rank[0][k][0]] = Counter(s["src"] for got in per_rank for s in got[k][1])

    def make(j: int) -> Any:
        return lambda r, w, ch: BalancedLoader(
            {"a": MapStream(a, rank=r, world_size=w), "b": MapStream(b, rank=r, world_size=w)}, num_microbatches=2,
            global_batch_size=8, schedule=old if j == 0 else new, id_fn=mp._sid, channel=ch, prefetch=0)

    delivered, merged = _chain([(2, 3), (new_world, None)], make, check)
    # every row of each component once: consumed positions kept, nothing repeated
    assert Counter(s["id"] for s in delivered) == Counter(range(70)) + Counter(range(1000, 1040))
    sched = {0: MixingSchedule(old), 1: MixingSchedule(new)}
    for step, got in sorted(per_step.items()):
        want = sched[step >= 3].counts(step, 8)
        if sum(got.values()) == 8 and all(got[n] == want[n] for n in want):
            continue
        # the tail: a component ran out, and its share is not made up
        b_left = 40 - sum(c["b"] for s, c in per_step.items() if s < step)
        assert step >= 3 and got["a"] <= want["a"] and got["b"] <= max(want["b"], b_left), (step, got, want)
    assert merged[0]["step"] == 3


# -- bad states ---------------------------------------------------------------------------
def _states(world: int = 2, steps: int = 2, data: Any = None, **kw: Any) -> list[dict[str, Any]]:
    args = {**dict(num_microbatches=2, global_batch_size=8, capacity=1600, id_fn=mp._sid, prefetch=0), **kw}

    def make(r: int, w: int, ch: GlooChannel) -> BalancedLoader:
        return BalancedLoader(MapStream(DATA if data is None else data, rank=r, world_size=w), channel=ch, **args)

    return _job(world, make, None, steps)[1]


def test_bad_merges_name_the_problem() -> None:
    states = _states()
    with pytest.raises(StateError, match=r"rank\(s\) \[1\] are missing"):
        youmu.merge_states(states[:1])
    with pytest.raises(StateError, match="rank 0 appears twice"):
        youmu.merge_states([states[0], states[0]])
    with pytest.raises(StateError, match="differ in 'seed'"):
        youmu.merge_states([states[0], _states(seed=3)[1]])
    with pytest.raises(StateError, match="differ in 'capacity'"):
        youmu.merge_states([states[0], _states(capacity=1550)[1]])
    with pytest.raises(StateError, match="differ in 'config'"):
        youmu.merge_states([states[0], _states(global_batch_size=6)[1]])
    with pytest.raises(StateError, match="differ in 'epoch'"):
        youmu.merge_states([states[0], {**states[1], "epoch": 4}])
    with pytest.raises(StateError, match="differ in 'step'"):
        youmu.merge_states([states[0], _states(steps=3)[1]])
    other = [dict(s, id=s["id"], input_ids=s["input_ids"][:3]) for s in DATA[:50]]
    with pytest.raises(StateError, match="source 'default'.*'data'"):
        youmu.merge_states([states[0], _states(data=other)[1]])
    with pytest.raises(StateError, match=r"not a BalancedLoader \(youmu.planning.BalancedLoader/2\) state"):
        youmu.merge_states([states[0], MapStream(DATA, rank=1, world_size=2).state_dict()])
    with pytest.raises(StateError, match="field 'mode' is 'replay'"):
        youmu.merge_states([states[0], dict(states[1], mode="replay")])
    with pytest.raises(StateError, match="inside step 2"):
        youmu.merge_states([dict(s, microbatch=1) for s in states])
    ended = [dict(s, streams=[dict(s["streams"][0], done=True, source_state=None)]) for s in states]
    ended[0]["streams"][0].pop("end_state", None)
    ended[1] = states[1]
    with pytest.raises(StateError, match="ended on rank 0"):
        youmu.merge_states(ended)


def test_a_merged_state_into_a_loader_with_other_settings_is_refused() -> None:
    def first(r: int, w: int, ch: GlooChannel) -> BalancedLoader:
        return BalancedLoader(MapStream(DATA, rank=r, world_size=w), num_microbatches=2, global_batch_size=8,
                              capacity=1600, id_fn=mp._sid, channel=ch, prefetch=0)

    per_rank, states = _job(2, first, None, 2)
    merged = youmu.merge_states(states)

    def loader(**kw: Any) -> BalancedLoader:
        args = dict(num_microbatches=2, global_batch_size=8, capacity=1600, id_fn=mp._sid, prefetch=0)
        return BalancedLoader(MapStream(DATA), **{**args, **kw})

    with pytest.raises(StateError, match="capacity=1600 but this BalancedLoader has capacity=1000"):
        loader(capacity=1000).load_state_dict(merged)
    with pytest.raises(StateError, match="seed=0 but this BalancedLoader has seed=2"):
        loader(seed=2).load_state_dict(merged)
    with pytest.raises(StateError, match="'streams' has sources"):
        BalancedLoader({"x": MapStream(DATA)}, num_microbatches=2, global_batch_size=8, capacity=1600,
                       schedule={"x": 1}, prefetch=0).load_state_dict(dict(merged, settings=dict(
                           merged["settings"], sources=["x"])))
    with pytest.raises(StateError, match="stateful"):
        loader(resume_mode="replay").load_state_dict(merged)
    with pytest.raises(StateError, match="'carry'"):
        loader().load_state_dict(dict(merged, carry=[[1, "nope", [3], 3, None]]))
    with pytest.raises(StateError, match="MapStream"):  # a merged stream state is not a loader's
        loader().load_state_dict(youmu.merge_states([MapStream(DATA, rank=0).state_dict()]))
    # the same settings (world size 1, a new batch size) load, and deliver the rest once
    ok = loader(global_batch_size=5)
    ok.load_state_dict(merged)
    assert ok.state_dict() == merged  # loaded, not started: the same point
    rest = [s["id"] for b, info in ok if not info.is_padding for s in b]
    before = [s["id"] for got in per_rank for _, samples in got for s in samples]
    assert Counter(before + rest) == Counter(range(len(DATA)))


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
def test_resize_with_dataloader_workers_over_gloo_processes() -> None:
    """2 ranks × 2 workers → 3 ranks × 1 worker → 2 ranks × 3 workers, as spawned
    processes: every sample once, the same steps on every rank of a job."""
    delivered: list[int] = []
    merged = None
    last_step = None
    for tag, (world, workers, stop) in enumerate([(2, 2, 3), (3, 1, 2), (2, 3, None)]):
        res = mp.run_world(mp.scenario_resize, world, workers, merged, stop, str(tag), timeout=150)
        assert all(st == "ok" for st, _ in res), res
        steps = [[s for s, _ in out["steps"]] for _, out in res]
        assert all(s == steps[0] for s in steps), steps
        if last_step is not None:
            assert steps[0][0] == last_step
        delivered += [i for _, out in res for _, ids in out["steps"] for i in ids]
        if stop is not None:
            assert len(steps[0]) == stop
            merged = youmu.merge_states([out["state"] for _, out in res])
            last_step = merged["step"]
    assert Counter(delivered) == Counter(range(mp.N_SAMPLES))
