"""Pure tests of the alignment (ODB, Eq. 3, Alg. 1) and the round plan."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.batching.algo.alignment import (
    FINISHED,
    NOT_READY,
    ProtocolError,
    RankReport,
    align_groups,
    align_sizes,
    decode_report,
    encode_report,
    keep_largest_groups,
    message_bytes,
    message_length,
    plan_round,
    second_gather_bytes,
    split_groups,
    step_order,
    target_group_count,
)
from youmu.distributed import CLOSED, FAILED


def _groups(sizes: list[int]) -> list[list[tuple[int, int]]]:
    """Placeholder groups: element (group, position); positions ascend like lengths."""
    return [[(i, p) for p in range(s)] for i, s in enumerate(sizes)]


def _reference_split(groups: list[list], target: int) -> list[list]:
    """Alg. 1 lines 3-5 literally: rescan from the end after every extraction."""
    groups = [list(g) for g in groups]
    while len(groups) < target:
        for i in range(len(groups) - 1, -1, -1):
            if len(groups[i]) >= 2:
                x = groups[i].pop()
                groups.insert(i + 1, [x])
                break
        else:
            break
    return groups


# -- A3: worked cases -----------------------------------------------------------------------
def test_a3_first_worked_case() -> None:
    # r0=[4,1,1], r1=[5,1], r2=[2] (short -> long), capacity = samples -> T = min(3, 2) = 2
    reps = [RankReport(6, 3, (4, 1, 1)), RankReport(6, 2, (5, 1)), RankReport(2, 1, (2,))]
    plan = plan_round(reps, join=True)
    assert (plan.action, plan.target, plan.changed) == ("emit", 2, True)
    assert [a.sizes for a in plan.aligned] == [(4, 1), (5, 1), (1, 1)]
    assert [a.overflow for a in plan.aligned] == [1, 0, 0]
    # r0 recirculates its longest singleton (the last group), keeps [4] and the first [1]
    kept, overflow = align_groups(_groups([4, 1, 1]), 2)
    assert [len(g) for g in kept] == [4, 1] and overflow == [(2, 0)]
    # r2 splits its longest sample off
    kept, overflow = align_groups([["a", "b"]], 2)
    assert kept == [["a"], ["b"]] and overflow == []


def test_a3_second_worked_case() -> None:
    reps = [RankReport(8, 3, (6, 1, 1)), RankReport(6, 2, (5, 1)), RankReport(3, 1, (3,))]
    plan = plan_round(reps, join=True)
    assert plan.target == 3
    assert [a.sizes for a in plan.aligned] == [(6, 1, 1), (4, 1, 1), (1, 1, 1)]
    # r1: the longest sample of [5-group] becomes a singleton right after it
    kept, _ = align_groups([[1, 2, 3, 4, 5], [6]], 3)
    assert kept == [[1, 2, 3, 4], [5], [6]]


def test_split_takes_longest_of_longest_multi_sample_group() -> None:
    assert split_groups([[1, 2], [3, 4], [5]], 4) == [[1, 2], [3], [4], [5]]
    assert split_groups([[1, 2, 3], [4], [5]], 5) == [[1], [2], [3], [4], [5]]
    assert split_groups([[1], [2]], 5) == [[1], [2]]  # nothing left to split


def test_overflow_keeps_largest_stably() -> None:
    kept, overflow = keep_largest_groups([[1, 2], [3], [4, 5], [6]], 2)
    assert kept == [[1, 2], [4, 5]] and overflow == [3, 6]
    kept, overflow = keep_largest_groups([[1], [2], [3]], 2)  # ties -> earlier (shorter) groups
    assert kept == [[1], [2]] and overflow == [3]


# -- A4: empty / finished ranks do not collapse the target ------------------------------------
def test_a4_target_ignores_inactive_ranks() -> None:
    assert target_group_count([-1, 4, 6], [0, 10, 10], [0, 10, 10]) == 6
    assert target_group_count([0, 4, 6], [0, 10, 10], [0, 10, 10]) == 6
    assert target_group_count([-1, -1], [0, 0], [0, 0]) is None
    assert target_group_count([3, 5], [2, 9], [9, 9]) == 2  # capacity binds
    assert target_group_count([3, 5], [9, 9], [4, 9]) == 4  # samples bind
    plan = plan_round([RankReport(0, FINISHED), RankReport(10, 4, (3, 3, 2, 2)), RankReport(10, 6, (5, 1, 1, 1, 1, 1))], join=True)
    assert plan.action == "emit" and plan.target == 6 and plan.active == (1, 2)
    assert plan.aligned[0] is None


# -- properties of Alg. 1 ---------------------------------------------------------------------
sizes_st = st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40)


@settings(max_examples=400, deadline=None)
@given(sizes_st, st.integers(min_value=1, max_value=80))
def test_align_postconditions(sizes: list[int], target: int) -> None:
    groups = _groups(sizes)
    kept, overflow = align_groups(groups, target)
    total = sum(sizes)
    # conservation: kept + overflow = buffer
    assert Counter(x for g in kept for x in g) + Counter(overflow) == Counter(x for g in groups for x in g)
    if target <= total:
        assert len(kept) == target
    else:
        assert len(kept) == total  # all singletons, cannot go further
    assert all(kept)  # no empty group
    if len(groups) < target:
        assert overflow == []
        assert kept == _reference_split(groups, target)  # the O(n) split equals Alg. 1 literally
    elif len(groups) > target:
        kept_sizes = sorted((len(g) for g in kept), reverse=True)
        assert kept_sizes == sorted(sizes, reverse=True)[:target]
        # original short -> long order of the kept groups is preserved
        firsts = [g[0][0] for g in kept]
        assert firsts == sorted(firsts)
    # sizes-only alignment (what every rank computes for every other rank) agrees
    a = align_sizes(sizes, target)
    assert list(a.sizes) == [len(g) for g in kept]
    assert a.overflow == len(overflow)
    assert [k for _, k in a.origins] == list(a.sizes)
    assert [g[0][0] for g in kept] == [i for i, _ in a.origins]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.just(-1), st.just(0), sizes_st), min_size=1, max_size=6), st.booleans())
def test_plan_round_is_consistent(rank_groups: list, join: bool) -> None:
    reports = []
    for g in rank_groups:
        if g == -1:
            reports.append(RankReport(0, FINISHED))
        elif g == 0:
            reports.append(RankReport(3, NOT_READY))
        else:
            reports.append(RankReport(sum(g), len(g), tuple(g), tuple(10 * s for s in g)))
    plan = plan_round(reports, join=join)
    finished = [r.n_groups == FINISHED for r in reports]
    if join and all(finished):
        assert plan.action == "finish"
    elif not join and any(finished):
        assert plan.action == "stop"
    elif any(r.n_groups == NOT_READY for r in reports):
        assert plan.action == "skip"
    else:
        assert plan.action == "emit"
        active = [r for r, rep in enumerate(reports) if rep.n_groups > 0]
        assert list(plan.active) == active
        T = plan.target
        assert 1 <= T <= max(reports[r].n_groups for r in active)
        assert T <= min(reports[r].samples for r in active)
        for r in active:
            assert len(plan.aligned[r].sizes) == T  # every active rank: exactly T groups
        assert plan.changed == any(reports[r].n_groups != T for r in active)
        # the plan is a pure function of the reports
        assert plan == plan_round(list(reports), join=join)


def test_plan_precedence_fail_close_stop() -> None:
    ok = RankReport(4, 2, (2, 2), (8, 8))
    assert plan_round([ok, RankReport(0, FAILED), RankReport(5, CLOSED)], join=True).action == "fail"
    p = plan_round([ok, RankReport(7, CLOSED)], join=True)
    assert p.action == "close" and p.ranks == (1,) and p.reports[1].capacity == 7
    p = plan_round([ok, RankReport(0, FINISHED)], join=False)
    assert p.action == "stop" and p.ranks == (1,)
    assert plan_round([ok, RankReport(0, FINISHED)], join=True).action == "emit"
    assert plan_round([RankReport(0, 2, (1, 1))], join=True).action == "skip"  # zero capacity
    with pytest.raises(ProtocolError):
        plan_round([RankReport(0, -7)], join=True)
    with pytest.raises(ProtocolError):
        plan_round([RankReport(3, 2, (3,))], join=True)


# -- A9: message layout and sizes -------------------------------------------------------------
def test_a9_message_sizes() -> None:
    assert message_bytes(8, 1024) == 131_200  # (2 + 2*1024) * 8 ranks * 8 bytes ~ 128 KiB
    assert message_bytes(8, 1024, with_tokens=False) == 65_664
    assert second_gather_bytes(8, 1024) == 65_536  # the paper's max_groups-long vector
    assert message_length(1024) == 2050


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=16), st.data())
def test_encode_decode_roundtrip(max_groups: int, data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=-3, max_value=max_groups))
    if n > 0:
        sizes = tuple(data.draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n)))
        tokens = tuple(data.draw(st.lists(st.integers(0, 10**9), min_size=n, max_size=n)))
        rep = RankReport(data.draw(st.integers(0, 10**6)), n, sizes, tokens)
    else:
        rep = RankReport(data.draw(st.integers(0, 10**6)), n)
    row = encode_report(rep, max_groups)
    assert len(row) == message_length(max_groups)
    back = decode_report(row, max_groups)
    assert back.capacity == rep.capacity and back.n_groups == rep.n_groups and back.sizes == rep.sizes
    if n > 0:
        assert back.tokens == rep.tokens


def test_encode_rejects_overfull() -> None:
    with pytest.raises(ValueError):
        encode_report(RankReport(5, 3, (1, 1, 1)), max_groups=2)
    with pytest.raises(ProtocolError):
        decode_report([0, 1, 1], max_groups=2)


def test_step_order_is_stateless_and_shared() -> None:
    a = step_order(50, seed=3, epoch=1, iteration=0, round_id=7)
    assert a == step_order(50, seed=3, epoch=1, iteration=0, round_id=7)
    assert sorted(a) == list(range(50)) and a != list(range(50))
    assert a != step_order(50, seed=3, epoch=1, iteration=0, round_id=8)
    assert step_order(5, seed=0, epoch=0, iteration=0, round_id=0, shuffle=False) == [0, 1, 2, 3, 4]
