"""``DynamicBatchLoader`` resumed on another topology: the states of every rank of a job,
merged with ``youmu.merge_states``, load into every rank of a job of another world
size, ``num_workers``, ``token_budget`` or ``pool_size``, and the rest of the epoch is
emitted exactly once with the step count continuing and every rank at the same step."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import numpy as np
import pytest
from batching_mp import LengthDataset, collate_ids, run_world, sample_len, sample_tok, token_counts
from hypothesis import given, settings
from hypothesis import strategies as st
from resume_odb_mp import job_scenario
from synthetic import synthetic_lengths

import youmu
from youmu.batching import DynamicBatchLoader, rank_indices
from youmu.batching.merge import rank_order, sampler_level
from youmu.errors import StateError
from youmu.order.resume import Level

LENGTHS = synthetic_lengths("uniform-wide", 300, seed=2)


def _loader(ds=None, **kw):
    args = dict(token_budget=4096, length_fn=sample_len, token_count_fn=sample_tok, collate_fn=collate_ids,
                pool_size=32, num_workers=0, timeout=20, heartbeat=0.1)
    args.update(kw)
    return DynamicBatchLoader(ds if ds is not None else LengthDataset(LENGTHS, token_counts(LENGTHS)), **args)


def _steps(loader, n=None):
    """(ids, step numbers) of ``n`` steps (None: to the end); the loader's state after."""
    ids, steps = [], []
    it = iter(loader)
    for batch, info in it:
        ids += batch
        steps.append(info.step)
        if n is not None and len(steps) >= n:
            break
    state = loader.state_dict()
    loader.close()
    return ids, steps, state


# -- the pure part: orders of resumed jobs ------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 60), world=st.integers(1, 7), seed=st.integers(0, 3), shuffle=st.booleans(),
       pad=st.booleans(), epoch=st.integers(0, 2))
def test_the_first_job_reads_the_samplers_order(n, world, seed, shuffle, pad, epoch):
    """A level where nothing was read leaves the first job's order itself: its ranks
    read exactly what :func:`rank_indices` (``DistributedSampler``) gives them."""
    s = {"n": n, "seed": seed, "shuffle": shuffle, "pad_sampler": pad}
    untouched = sampler_level(world, (0,) * world, ((),) * world)
    for r in range(world):
        want = rank_indices(n, world, r, seed=seed, epoch=epoch, shuffle=shuffle, pad=pad)
        assert rank_order(s, epoch, [untouched], rank=r, world_size=world).tolist() == want


@st.composite
def _chains(draw):
    n = draw(st.integers(0, 80))
    s = {"n": n, "seed": draw(st.integers(0, 3)), "shuffle": draw(st.booleans()), "pad_sampler": False}
    levels: list[Level] = []
    for _ in range(draw(st.integers(1, 4))):
        world = draw(st.integers(1, 6))
        positions, pending = [], []
        for r in range(world):
            mine = len(rank_order(s, 0, levels, rank=r, world_size=world)) if levels else len(range(r, n, world))
            p = draw(st.integers(0, mine))
            keys = draw(st.lists(st.integers(0, max(p - 1, 0)), unique=True, max_size=min(p, 6))) if p else []
            positions.append(p)
            pending.append(tuple(keys))
        levels.append(sampler_level(world, tuple(positions), tuple(pending)))
    return s, levels, draw(st.integers(1, 7))


@settings(max_examples=80, deadline=None)
@given(_chains())
def test_a_chain_of_jobs_delivers_every_sample_once(chain):
    """What each job delivered (its read prefix minus its pending keys) plus what the
    next job's ranks read is the dataset, each sample once, and the new ranks' shares
    differ by at most one."""
    s, levels, new_world = chain
    delivered: list[int] = []
    for depth, lv in enumerate(levels):
        for r in range(lv.world_size):
            order = (rank_order(s, 0, levels[:depth], rank=r, world_size=lv.world_size) if depth else
                     np.asarray(rank_indices(s["n"], lv.world_size, r, seed=s["seed"], shuffle=s["shuffle"],
                                             pad=False)))
            delivered += [int(x) for k, x in enumerate(order[: lv.positions[r][0]]) if k not in lv.pending[r]]
    shares = [rank_order(s, 0, levels, rank=r, world_size=new_world).tolist() for r in range(new_world)]
    assert sorted(delivered + [x for sh in shares for x in sh]) == list(range(s["n"]))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_pending_keys_must_be_read_and_distinct():
    s = {"n": 10, "seed": 0, "shuffle": False, "pad_sampler": False}
    with pytest.raises(StateError, match="pending"):
        rank_order(s, 0, [sampler_level(1, (3,), ((5,),))], rank=0, world_size=1)
    with pytest.raises(StateError, match="pending"):
        rank_order(s, 0, [sampler_level(1, (3,), ((1, 1),))], rank=0, world_size=1)
    with pytest.raises(StateError, match="position"):
        rank_order(s, 0, [sampler_level(2, (6, 0), ((), ()))], rank=0, world_size=1)


# -- one process: a chain of single-rank jobs with new settings ------------------------------------
def test_resume_with_a_new_budget_and_pool_continues_the_steps():
    ids, steps, state = _steps(_loader(), 9)
    assert state["replay"] or state["overflow"]  # the checkpoint falls inside a round
    merged = youmu.merge_states([json.loads(json.dumps(state))])
    assert merged["step"] == steps[-1] + 1
    second = _loader(token_budget=8192, pool_size=16)
    second.load_state_dict(merged)
    more, steps2, state2 = _steps(second, 5)
    assert steps2 == list(range(steps[-1] + 1, steps[-1] + 6))
    merged2 = youmu.merge_states([pickle.loads(pickle.dumps(state2))])
    assert len(merged2["resumed"]) == 2
    third = _loader(num_workers=2, multiprocessing_context="fork")
    third.load_state_dict(merged2)
    rest, steps3, _ = _steps(third)
    assert steps3[0] == steps2[-1] + 1
    assert sorted(ids + more + rest) == list(range(len(LENGTHS)))


def test_a_resumed_rank_reloads_its_own_state_exactly():
    _, _, state = _steps(_loader(), 4)
    merged = youmu.merge_states([state])
    a = _loader(token_budget=2048)
    a.load_state_dict(merged)
    _, _, mid = _steps(a, 3)
    assert mid["resumed"]
    b = _loader(token_budget=2048)
    b.load_state_dict(mid)
    c = _loader(token_budget=2048)
    c.load_state_dict(pickle.loads(pickle.dumps(mid)))
    assert _steps(b)[:2] == _steps(c)[:2]


# -- bad states ---------------------------------------------------------------------------------
def _two_rank_states(**kw):
    """States of a 2-rank job, from a one-rank state relabelled (merge checks fields, not runs)."""
    _, _, state = _steps(_loader(**kw), 2)
    base = {**state, "world_size": 2, "replay": [], "overflow": [], "position": 1}
    return [{**base, "rank": 0}, {**base, "rank": 1}]


def test_bad_merges_name_the_problem():
    states = _two_rank_states()
    youmu.merge_states(states)  # the pair itself merges
    with pytest.raises(StateError, match=r"rank\(s\) \[1\] are missing"):
        youmu.merge_states(states[:1])
    with pytest.raises(StateError, match="rank 0 appears twice"):
        youmu.merge_states([states[0], states[0]])
    with pytest.raises(StateError, match="'seed'"):
        youmu.merge_states([states[0], _two_rank_states(seed=1)[1]])
    with pytest.raises(StateError, match="'epoch'"):
        youmu.merge_states([states[0], {**states[1], "epoch": 3}])
    other = LengthDataset(LENGTHS[::-1], token_counts(LENGTHS))
    with pytest.raises(StateError, match="'data'"):  # another size
        youmu.merge_states([states[0], _two_rank_states(ds=LengthDataset(LENGTHS[:-1]))[1]])
    with pytest.raises(StateError, match="'token_budget'"):  # one job runs one budget
        youmu.merge_states([states[0], _two_rank_states(token_budget=1024)[1]])
    assert _two_rank_states(ds=other)[1]["settings"]["data"] == states[1]["settings"]["data"]  # same type and size
    with pytest.raises(StateError, match="'data'"):
        youmu.merge_states([states[0], _two_rank_states(ds=[{"len": n, "tok": n, "id": i}
                                                            for i, n in enumerate(LENGTHS)])[1]])
    with pytest.raises(StateError, match="not a DynamicBatchLoader"):
        youmu.merge_states([states[0], {"format": "youmu.MapStream/1"}])
    with pytest.raises(StateError, match="join=False"):
        youmu.merge_states(_two_rank_states(join=False))
    with pytest.raises(StateError, match="'settings'"):
        youmu.merge_states([{k: v for k, v in s.items() if k != "settings"} for s in states])
    with pytest.raises(StateError, match="'step'"):
        youmu.merge_states([states[0], {**states[1], "step": states[1]["step"] + 1}])
    with pytest.raises(StateError, match="'position'"):
        youmu.merge_states([states[0], {**states[1], "position": 10**4}])


def test_merged_state_into_a_different_loader_is_refused():
    merged = youmu.merge_states(_two_rank_states())
    with pytest.raises(StateError, match="seed=0 but this DynamicBatchLoader has seed=1"):
        _loader(seed=1).load_state_dict(merged)
    with pytest.raises(StateError, match="shuffle"):
        _loader(shuffle=False).load_state_dict(merged)
    with pytest.raises(StateError, match="n=300 but .* n=299"):
        _loader(ds=LengthDataset(LENGTHS[:-1])).load_state_dict(merged)
    with pytest.raises(StateError, match="MapStream"):
        from youmu.torch import MapStream

        MapStream(list(range(9))).load_state_dict(merged)
    edited = {**merged, "stream": "youmu.MapStream/1"}
    with pytest.raises(StateError, match="merged state of a 'youmu.MapStream/1'"):
        _loader().load_state_dict(edited)
    edited = json.loads(json.dumps(merged))
    edited["resumed"][0]["positions"][0][0] = 10**4  # rank 0's one sampler position
    loader = _loader()
    with pytest.raises(StateError, match="position"):
        loader.load_state_dict(edited)
    assert sorted(_steps(loader)[0]) == list(range(len(LENGTHS)))  # a refused state leaves the loader as it was


# -- across processes: 2 ranks (2 workers) → 3 ranks → 2 ranks (1 worker) --------------------------
def _chain(cfgs, takes, worlds):
    delivered: list[int] = []
    merged = None
    per_job = []
    for j, (cfg, w) in enumerate(zip(cfgs, worlds)):
        out = run_world(job_scenario, w, cfg, merged, takes[j], timeout=240)
        per_job.append(out)
        for r in out:
            delivered += r["ids"]
        merged = pickle.dumps(youmu.merge_states([pickle.loads(r["state"]) for r in out]))
        m = pickle.loads(merged)
        if j + 1 < len(worlds):
            assert m["step"] == out[0]["steps"][-1] + 1
    return delivered, per_job


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
@pytest.mark.timeout(600)
def test_elastic_chain_map_style_with_workers():
    base = dict(dist="uniform-wide", n=600, buffer=32, uneven="pad")
    cfgs = [dict(base, workers=2), dict(base, budget=6000, buffer=24), dict(base, workers=1)]
    delivered, jobs = _chain(cfgs, [7, 9, None], [2, 3, 2])
    counts = Counter(delivered)
    assert sorted(counts) == list(range(600)) and max(counts.values()) == 1
    for j, out in enumerate(jobs):
        steps = [r["steps"] for r in out]
        assert all(s == steps[0] for s in steps), f"job {j}: ranks took different steps"
        if j:
            assert steps[0][0] == jobs[j - 1][0]["steps"][-1] + 1  # the step count continues


@pytest.fixture(scope="module")
def parquet_ids(tmp_path_factory):
    pytest.importorskip("pyarrow")
    from parquet_fixtures import write_columns

    path = tmp_path_factory.mktemp("odb") / "rows.parquet"
    write_columns(path, {"id": np.arange(len(LENGTHS), dtype=np.int64), "len": np.asarray(LENGTHS, dtype=np.int64),
                         "tok": np.asarray(token_counts(LENGTHS), dtype=np.int64)}, row_group_size=9)
    return str(path)


@pytest.mark.timeout(600)
def test_elastic_chain_over_a_youmu_dataset(parquet_ids):
    cfg = dict(path=parquet_ids, buffer=24, budget=3000)
    delivered, jobs = _chain([cfg, dict(cfg, budget=5000), cfg], [5, 6, None], [2, 3, 2])
    counts = Counter(delivered)
    assert sorted(counts) == list(range(len(LENGTHS))) and max(counts.values()) == 1
    for out in jobs[:2]:
        assert len({len(r["steps"]) for r in out}) == 1


@pytest.mark.slow  # a multi-process job of 15-45 s: make test-system
@pytest.mark.timeout(600)
def test_chats_templated_in_workers_resume_on_other_world_sizes(tmp_path):
    """The README's SFT recipe (ChatTemplate in 2 DataLoader workers per rank) saved
    mid-epoch by 2 ranks, resumed by 3 with 1 worker each through merge_states: every
    chat delivered exactly once, the ranks in step."""
    from textutil import ultrachat, write_chats

    path = str(write_chats(tmp_path / "chats.parquet", ultrachat(120, seed=6)))
    cfg = dict(path=path, chat=True, workers=2, buffer=16, budget=600)
    delivered, jobs = _chain([cfg, dict(cfg, workers=1)], [3, None], [2, 3])
    counts = Counter(delivered)
    assert sorted(counts) == list(range(120)) and max(counts.values()) == 1
    assert len({len(r["steps"]) for r in jobs[0]}) == 1


def test_a_finished_rank_counts_as_delivered():
    """A rank whose data ran out (join mode) saves a done state: all of its order was
    delivered, and the new job deals only the live ranks' rest."""
    _, steps, live = _steps(_loader(), 2)
    _, _, done = _steps(_loader())
    assert done["done"] and not live["done"]
    states = [{**live, "world_size": 2, "rank": 0, "replay": [], "overflow": [], "position": 1},
              {**done, "world_size": 2, "rank": 1}]
    merged = youmu.merge_states(states)
    assert not merged["done"] and merged["step"] == live["step"]
    assert merged["resumed"][0]["positions"] == [[1], [len(range(1, len(LENGTHS), 2))]]  # one sampler per rank
    loader = _loader()
    loader.load_state_dict(merged)
    rest = _steps(loader)[0]
    assert sorted(rest) == sorted(rank_indices(len(LENGTHS), 2, 0, pad=False)[1:])


def test_iterable_states_need_the_datasets_own_state():
    from batching_mp import StatefulRankIterable

    fresh = _loader(StatefulRankIterable([LENGTHS], 0)).state_dict()  # before any step: no dataset state yet
    with pytest.raises(StateError, match="'source_state'"):
        youmu.merge_states([fresh])
