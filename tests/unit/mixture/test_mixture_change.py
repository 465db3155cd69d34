"""Mixture weights changed at a resume of a MixtureDataset stream: the new weights (or a
new curriculum) apply from the switch point on, on the same or another world size;
every row of the epoch is delivered exactly once; the next epoch runs the new weights.

Children hold unique items and the mixture is shorter than every child, so every draw
is in its child's first pass and an item repeated is a row delivered twice."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu import merge_states
from youmu.errors import StateError
from youmu.mixture import MixtureDataset
from youmu.torch import MapStream, MixtureStream

N = 1200
CHILDREN = {n: [(n, i) for i in range(N + 500)] for n in "abc"}
OLD = {"a": 0.5, "b": 0.3, "c": 0.2}
NEW = {"a": 0.1, "c": 0.9}


def mix(weights, children=CHILDREN, **kw):
    kw.setdefault("block_size", 16)
    return MixtureDataset(children, weights, length=N, seed=5, **kw)


def run_job(ds, world, take, *, run=8, state=None, stream=MixtureStream):
    """Each rank's stream over ``ds`` (loading ``state``), ``take[r]`` items each (None: all)."""
    got, states = [], []
    for r in range(world):
        s = stream(ds, rank=r, world_size=world, run=run)
        if state is not None:
            s.load_state_dict(state)
        it = iter(s)
        n = 0
        for item in it:
            got.append(item)
            n += 1
            if take is not None and n == take[r]:
                break
        states.append(s.state_dict())
    return got, states


def switch_of(state):
    (level, at, length), = state["mixture"]["switches"]
    return at


@pytest.mark.parametrize("world, world2", [(2, 2), (2, 3), (3, 1)])
def test_new_weights_from_the_switch_point_every_row_once(world, world2):
    before, states = run_job(mix(OLD), world, [90 + 7 * r for r in range(world)])
    after, states2 = run_job(mix(NEW), world2, None, state=merge_states(states))
    at = switch_of(states2[0])
    # every row of the epoch once: the old job's and the resumed job's items together
    assert len(before) + len(after) == N
    assert len(set(before + after)) == N
    # the switch point is the block boundary after the last index the old job delivered
    index = {x: i for i, x in enumerate(mix(OLD))}
    last = max(index[x] for x in before)
    assert last < at <= last + 16
    # and the epoch is exactly the curriculum that switches there
    assert Counter(before + after) == Counter(mix([(0, OLD), (at, NEW)]))
    # b has weight 0 from the switch on: only what was owed before it
    assert sum(1 for c, _ in after if c == "b") == sum(1 for i in range(at) if mix(OLD)[i][0] == "b") - sum(
        1 for c, _ in before if c == "b")


def test_next_epoch_runs_the_new_weights():
    _, states = run_job(mix(OLD), 2, [50, 60])
    streams = [MixtureStream(mix(NEW), rank=r, world_size=3, run=8) for r in range(3)]
    for s in streams:
        s.load_state_dict(merge_states(states))
        list(s)
        s.set_epoch(1)
    assert Counter(x for s in streams for x in s) == Counter(mix(NEW))


def test_set_epoch_of_the_loaded_epoch_keeps_the_spliced_resume_point():
    before, states = run_job(mix(OLD), 2, [50, 60])
    s = MixtureStream(mix(NEW), rank=0, world_size=1, run=8)
    s.load_state_dict(merge_states(states))
    s.set_epoch(0)
    assert len(before) + len(list(s)) == N


def test_a_new_curriculum_applies_its_later_stages_too():
    before, states = run_job(mix(OLD), 2, [40, 40])
    curriculum = [(0, OLD), (400, NEW), (800, {"b": 1.0})]
    after, states2 = run_job(mix(curriculum), 2, None, state=merge_states(states))
    at = switch_of(states2[0])
    assert at < 400
    assert len(set(before + after)) == N == len(before) + len(after)
    assert Counter(before + after) == Counter(mix([(0, OLD), (at, OLD), (400, NEW), (800, {"b": 1.0})]))


def test_killed_again_in_the_resumed_epoch_same_weights_from_each_rank_state():
    before, states = run_job(mix(OLD), 2, [50, 60])
    mid, states2 = run_job(mix(NEW), 2, [100, 80], state=merge_states(states))
    # same new weights: each rank's own state resumes (no merge needed)
    rest = []
    for r in range(2):
        s = MixtureStream(mix(NEW), rank=r, world_size=2, run=8)
        s.load_state_dict(states2[r])
        rest += list(s)
    assert len(before) + len(mid) + len(rest) == N == len(set(before + mid + rest))


def test_changed_twice_in_one_epoch_on_three_world_sizes():
    before, states = run_job(mix(OLD), 2, [50, 60])
    mid, states2 = run_job(mix(NEW), 3, [120, 100, 110], state=merge_states(states))
    third = {"a": 0.3, "b": 0.7}
    rest, states3 = run_job(mix(third), 1, None, state=merge_states(states2))
    assert [s[0] for s in states3[0]["mixture"]["switches"]] == [1, 2]
    assert len(before) + len(mid) + len(rest) == N == len(set(before + mid + rest))
    (_, t1, _), (_, t2, _) = states3[0]["mixture"]["switches"]
    assert Counter(before + mid + rest) == Counter(mix([(0, OLD), (t1, NEW), (t2, third)]))


def test_map_stream_and_pack_free_index_dealing_too():
    before, states = run_job(mix(OLD), 2, [33, 41], run=1, stream=MapStream)
    after, _ = run_job(mix(NEW), 3, None, run=1, stream=MapStream, state=merge_states(states))
    assert len(before) + len(after) == N == len(set(before + after))


def test_a_child_added_at_a_resume_is_honoured():
    more = {**CHILDREN, "d": [("d", i) for i in range(N + 500)]}
    before, states = run_job(mix(OLD), 2, [50, 60])
    after, _ = run_job(mix({"a": 0.2, "d": 0.8}, children=more), 2, None, state=merge_states(states))
    assert len(before) + len(after) == N == len(set(before + after))
    assert sum(1 for c, _ in after if c == "d") > 600


def test_a_child_removed_at_a_resume_is_refused_saying_why():
    _, states = run_job(mix(OLD), 2, [50, 60])
    fewer = {n: CHILDREN[n] for n in "ac"}
    s = MixtureStream(mix(NEW, children=fewer), rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match="lacks.*weight 0 instead"):
        s.load_state_dict(merge_states(states))


def test_a_weight_change_from_one_ranks_own_state_is_refused_saying_why():
    _, states = run_job(mix(OLD), 2, [50, 60])
    s = MixtureStream(mix(NEW), rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match="merge_states"):
        s.load_state_dict(states[0])


@pytest.mark.parametrize("change, match", [
    ({"seed": 6}, "seed=5 but this one has seed=6"),
    ({"block_size": 32}, "block_size"),
])
def test_other_mixture_settings_are_refused(change, match):
    _, states = run_job(mix(OLD), 2, [50, 60])
    kw = {"seed": 5, "block_size": 16, **change}
    other = MixtureDataset(CHILDREN, NEW, length=N, **kw)
    s = MixtureStream(other, rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match=match):
        s.load_state_dict(merge_states(states))


def test_other_child_data_is_refused():
    _, states = run_job(mix(OLD), 2, [50, 60])
    changed = {**CHILDREN, "b": CHILDREN["b"][:-1]}
    s = MixtureStream(mix(NEW, children=changed), rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match="child 'b' is other data"):
        s.load_state_dict(merge_states(states))


def test_states_from_before_weights_were_recorded_load_with_unchanged_weights_only():
    before, states = run_job(mix(OLD), 2, [50, 60])
    old_style = [{k: v for k, v in s.items() if k != "mixture"} for s in states]
    after, _ = run_job(mix(OLD), 2, None, state=merge_states(old_style))
    assert len(before) + len(after) == N == len(set(before + after))
    s = MixtureStream(mix(NEW), rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match="saved over other data"):
        s.load_state_dict(merge_states(old_style))


def test_unchanged_weights_given_otherwise_scaled_resume_from_each_rank_state():
    before, states = run_job(mix(OLD), 2, [50, 60])
    scaled = {k: 10 * v for k, v in OLD.items()}
    after = []
    for r in range(2):
        s = MixtureStream(mix(scaled), rank=r, world_size=2, run=8)
        s.load_state_dict(states[r])
        after += list(s)
    assert len(before) + len(after) == N == len(set(before + after))


def test_a_stop_policy_continues_to_the_new_exhaustion_point():
    short = {n: [(n, i) for i in range(200)] for n in "abc"}
    old = MixtureDataset(short, OLD, block_size=16, policy="stop", seed=5)
    before, states = run_job(old, 2, [150, 150])
    new = MixtureDataset(short, {"b": 1.0}, block_size=16, policy="stop", seed=5)
    after, _ = run_job(new, 2, None, state=merge_states(states))
    # b's 200 rows, a's and c's owed before the switch, each once
    assert len(set(before + after)) == len(before + after)
    assert sum(1 for c, _ in before + after if c == "b") == 200


def test_a_new_length_ending_before_the_resume_point_is_refused():
    _, states = run_job(mix(OLD), 2, [150, 150])
    shorter = MixtureDataset(CHILDREN, NEW, length=200, seed=5, block_size=16)
    s = MixtureStream(shorter, rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match="before the resume point"):
        s.load_state_dict(merge_states(states))


@pytest.mark.parametrize("field, value, match", [
    ("switches", [[1, "x", 3]], "switches"),
    ("stages", [[0, {"a": -1.0}]], "positive weight"),
    ("stages", [[5, {"a": 1.0}]], "begin at 0"),
    ("children", {"a": 3}, "fingerprint, length, chunk"),
])
def test_an_edited_mixture_field_is_refused(field, value, match):
    _, states = run_job(mix(OLD), 2, [50, 60])
    merged = merge_states(states)
    merged["mixture"] = {**merged["mixture"], field: value}
    s = MixtureStream(mix(NEW), rank=0, world_size=2, run=8)
    with pytest.raises(StateError, match=match):
        s.load_state_dict(merged)


weights = st.dictionaries(st.sampled_from("abc"), st.integers(1, 9), min_size=1)


@settings(max_examples=25, deadline=None)
@given(old=weights, new=weights, world=st.integers(1, 3), world2=st.integers(1, 3),
       take=st.lists(st.integers(0, 300), min_size=3, max_size=3), run=st.sampled_from([1, 5, 16]))
def test_property_random_weight_changes_deliver_every_row_once(old, new, world, world2, take, run):
    before, states = run_job(mix(old), world, take[:world], run=run)
    after, states2 = run_job(mix(new), world2, None, run=run, state=merge_states(states))
    assert len(before) + len(after) == N
    assert len(set(before + after)) == N
    switches = states2[0]["mixture"]["switches"]
    at = switches[0][1] if switches else 0
    expected = mix([(0, old), (at, new)]) if 0 < at < N else mix(new if at == 0 else old)
    if switches or old != new:
        assert Counter(before + after) == Counter(expected)


def test_pack_over_a_mixture_changes_weights_too():
    """``pack`` nests its stream's state: the weight change reaches the mixture inside, and
    every token of the epoch is packed once (rows of two equal tokens, one id per row)."""
    import numpy as np

    from youmu.torch import pack

    rows = {n: [{"input_ids": np.array([k * 1000 + i] * 2, dtype=np.int64)} for i in range(800)]
            for k, n in enumerate("abc")}

    def packed(weights, rank, world):
        m = MixtureDataset(rows, weights, block_size=16, length=600, seed=5)
        return pack(MixtureStream(m, rank=rank, world_size=world, run=8), seq_len=5)

    got, states = [], []
    for r in range(2):
        p = packed(OLD, r, 2)
        it = iter(p)
        got += [next(it)["input_ids"] for _ in range(30)]
        states.append(p.state_dict())
    for r in range(3):
        p = packed(NEW, r, 3)
        p.load_state_dict(merge_states(states))
        got += [x["input_ids"] for x in p]
    tokens = Counter(np.concatenate(got).tolist())
    assert len(tokens) == 600 and set(tokens.values()) == {2}
