"""Pure tests of the grouping (ODB, Eq. 1). No torch, no processes."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.batching.algo.alignment import split_groups
from youmu.batching.algo.grouping import batch_size_for, form_groups, padded_tokens, trace_groups


# -- A1: App. D's worked example, exactly ------------------------------------------------------
def test_app_d_worked_example() -> None:
    lengths = [100, 200, 500, 800]
    groups, walk = trace_groups(lengths, 1000)
    as_lengths = [[lengths[i] for i in g] for g in groups]
    assert as_lengths == [[100, 200], [500], [800]]  # short -> long, each ascending
    assert [padded_tokens(g) for g in as_lengths] == [400, 500, 800]
    # the walk, longest first: (sample, group size, threshold compared, closed?, next threshold)
    assert [(t.length, t.group_size, t.threshold, t.closed, t.next_threshold) for t in walk] == [
        (800, 1, 1, True, 1),
        (500, 1, 1, True, 2),
        (200, 1, 2, False, 2),
        (100, 2, 2, True, 10),
    ]
    real = sum(lengths)
    padded = sum(padded_tokens(g) for g in as_lengths)
    assert (real, padded) == (1600, 1700)


def test_app_d_example_is_order_independent() -> None:
    lengths = [800, 100, 500, 200]
    assert [[lengths[i] for i in g] for g in form_groups(lengths, 1000)] == [[100, 200], [500], [800]]


def test_batch_size_for() -> None:
    assert batch_size_for(100, 1000) == 10
    assert batch_size_for(1000, 1000) == 1
    assert batch_size_for(1001, 1000) == 1  # clamped: an over-long sample still forms a group
    assert batch_size_for(0, 1000) == 1000  # zero length counts as one token
    with pytest.raises(ValueError):
        batch_size_for(-1, 1000)
    with pytest.raises(ValueError):
        batch_size_for(10, 0)


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        form_groups([3, -1], 10)
    with pytest.raises(ValueError, match="token_budget"):
        form_groups([3], 0)
    assert form_groups([], 10) == []


def test_ties_keep_arrival_order() -> None:
    # equal lengths: the stable sort keeps arrival order, so grouping is deterministic
    # walk 3 (t=1, closes; t=B(5)=2), 2+1 (close), 0 (trailing remainder)
    assert form_groups([5, 5, 5, 5], 10) == [[0], [1, 2], [3]]
    # 7 closes alone (t=1 -> B(7)=1); the later 5 (index 2) alone (t -> B(5)=2); then [3, 5 (index 1)]
    assert form_groups([7, 5, 5, 3], 10) == [[3, 1], [2], [0]]


# -- A2: padded-area bound and structure, as properties -----------------------------------------
lengths_st = st.lists(st.integers(min_value=0, max_value=20_000), min_size=0, max_size=300)
budget_st = st.integers(min_value=1, max_value=40_000)


def _check_structure(lengths: list[int], groups: list[list[int]], budget: int) -> None:
    # conservation: every sample exactly once
    assert Counter(i for g in groups for i in g) == Counter(range(len(lengths)))
    for g in groups:
        ls = [lengths[i] for i in g]
        assert ls == sorted(ls), "each group ascending"
        if len(g) >= 2:
            assert len(g) * max(ls) <= budget, "padded-area bound"
        elif ls and ls[0] > budget:
            assert len(g) == 1  # only a singleton may exceed the budget
    # groups ordered short -> long
    for a, b in zip(groups, groups[1:]):
        assert max(lengths[i] for i in a) <= min(lengths[i] for i in b)


@settings(max_examples=300, deadline=None)
@given(lengths_st, budget_st)
def test_padded_area_bound_and_conservation(lengths: list[int], budget: int) -> None:
    _check_structure(lengths, form_groups(lengths, budget), budget)


@settings(max_examples=200, deadline=None)
@given(lengths_st, budget_st, st.integers(min_value=1, max_value=400))
def test_bound_holds_after_split(lengths: list[int], budget: int, target: int) -> None:
    groups = form_groups(lengths, budget)
    split = split_groups(groups, min(target, len(lengths)) or 1)
    _check_structure(lengths, split, budget)


@settings(max_examples=200, deadline=None)
@given(lengths_st, budget_st)
def test_threshold_carry_over(lengths: list[int], budget: int) -> None:
    """Each closed group's size is B of the previous (longer) group's shortest sample;
    only the first group (the shortest samples) may be a smaller trailing remainder."""
    groups = form_groups(lengths, budget)
    for k in range(len(groups) - 1, 0, -1):  # from the long end
        g, shorter = groups[k], groups[k - 1]
        nxt = batch_size_for(lengths[g[0]], budget)  # threshold after closing g
        if k - 1 > 0:
            assert len(shorter) == nxt
        else:
            assert len(shorter) <= nxt
    if groups:
        assert len(groups[-1]) == 1  # the longest sample closes the first group at t = 1


def test_pure_modules_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import youmu.batching as b\n"
        "import youmu.batching.algo.grouping, youmu.batching.algo.alignment, youmu.batching.algo.protocol\n"
        "import youmu.batching.algo.simulation, youmu.batching.algo.sampling\n"
        "import youmu.batching.algo.loss, youmu.batching.runtime.metrics, youmu.batching.algo.step_info\n"
        "b.simulate_ranks([[1, 2, 3]], 10, 2)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert 'youmu._core' not in sys.modules, 'native core imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
