"""Property tests of the resume math (youmu.order.resume): whatever the sequence of jobs
within an epoch — world sizes, worker counts, rows consumed per shard, resizes — the
union of what they deliver is the epoch exactly once (with drop_last: minus fewer than
world_size rows per job)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.errors import StateError
from youmu.order.modes import ShuffleMode
from youmu.order.resume import (
    Level,
    Origin,
    Units,
    deal,
    remaining,
    remaining_after,
    shard_plan,
)
from youmu.order.sharding import Shard
from youmu.order.shuffle import ShardPlan, row_range
from youmu.state.jobs import decode_chain, encode_chain


def _rows_of(units: Units, count: int) -> list[tuple[int, int]]:
    """The first ``count`` (base unit, row) pairs of a shard's units, in order."""
    out: list[tuple[int, int]] = []
    for b, lo, hi in zip(units.base.tolist(), units.lo.tolist(), units.hi.tolist()):
        for row in range(lo, hi):
            if len(out) == count:
                return out
            out.append((b, row))
    return out


def _epoch(origin: Origin) -> list[tuple[int, int]]:
    rows = origin.rows.tolist()
    if origin.dealing.startswith("block"):
        return [(0, i) for i in range(sum(rows))]
    return [(b, i) for b, n in enumerate(rows) for i in range(n)]


topologies = st.tuples(st.integers(1, 5), st.lists(st.integers(1, 3), min_size=5, max_size=5))


@st.composite
def scenarios(draw):
    dealing = draw(st.sampled_from(["rr", "balanced", "block", "block-balanced"]))
    if dealing.startswith("block"):
        rows = np.array([draw(st.integers(0, 60))], dtype=np.int64)
    else:
        rows = np.array(draw(st.lists(st.integers(0, 9), min_size=0, max_size=12)), dtype=np.int64)
    drop_last = dealing.endswith("balanced")
    jobs = draw(st.lists(topologies, min_size=1, max_size=4))
    fractions = draw(st.lists(st.floats(0, 1), min_size=64, max_size=64))
    return Origin(rows, dealing), drop_last, jobs, fractions


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_row_exactly_once_over_any_resizes(scenario):
    origin, drop_last, jobs, fractions = scenario
    epoch = _epoch(origin)
    delivered: list[tuple[int, int]] = []
    levels: list[Level] = []
    dropped_bound = 0
    frac = iter(fractions * 4)
    for j, (world, workers) in enumerate(jobs + [(jobs[-1][0], [1] * 5)]):
        last = j == len(jobs)  # the final job runs to the end of the epoch
        seq = remaining_after(origin, levels, drop_last) if levels else None
        positions = []
        for r in range(world):
            row = []
            for k in range(workers[r]):
                shard = Shard(r, world, k, workers[r])
                units = origin.units(shard) if seq is None else deal(seq, shard, drop_last, origin.block)
                total = int(units.rows.sum())
                p = total if last else int(round(next(frac) * total))
                delivered += _rows_of(units, p)
                row.append(p)
            positions.append(tuple(row))
        if drop_last:
            dropped_bound += world - 1
        # through the state encoding, as a merged state carries it
        levels = decode_chain(encode_chain([*levels, Level(world, tuple(workers[:world]), tuple(positions))]), "t",
                              tokens=True)
    assert len(delivered) == len(set(delivered))
    assert set(delivered) <= set(epoch)
    missing = len(epoch) - len(delivered)
    if drop_last:
        assert 0 <= missing <= dropped_bound
    else:
        assert missing == 0
    assert len(remaining_after(origin, levels, drop_last)) == 0


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.integers(1, 6))
def test_a_resumed_jobs_ranks_get_shares_within_one_row(scenario, world):
    """What is left after a preemption is whole and cut windows; the new ranks' shares
    differ by at most one row (drop_last: are equal), so a trainer that runs every rank
    the same number of steps leaves no row of the epoch out."""
    origin, drop_last, jobs, fractions = scenario
    frac = iter(fractions * 4)
    w0, workers = jobs[0]
    positions = []
    for r in range(w0):
        row = []
        for k in range(workers[r]):
            total = int(origin.units(Shard(r, w0, k, workers[r])).rows.sum())
            row.append(int(round(next(frac) * total)))
        positions.append(tuple(row))
    seq = remaining_after(origin, [Level(w0, tuple(workers[:w0]), tuple(positions))], drop_last)
    shares = [int(deal(seq, Shard(r, world), drop_last, origin.block).rows.sum()) for r in range(world)]
    assert max(shares) - min(shares) <= (0 if drop_last else 1), shares
    assert sum(shares) == int(seq.rows.sum()) - (int(seq.rows.sum()) % world if drop_last else 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=12), st.integers(1, 4), st.integers(1, 3), st.booleans(), st.integers(1, 9))
def test_first_level_is_what_the_stream_plans(rows, world, workers, drop_last, chunk):
    """Level 0 deals exactly as ShardPlan (the stream itself) does."""
    rows_arr = np.array(rows, dtype=np.int64)
    for r in range(world):
        for k in range(workers):
            shard = Shard(r, world, k, workers)
            plan = ShardPlan.build(np.maximum(rows_arr, 0), "none", window_pages=1, seed=0, epoch=0, rank=r,
                                   world_size=world, worker=k, num_workers=workers, balanced=drop_last)
            u = Origin(rows_arr, "balanced" if drop_last else "rr").units(shard)
            assert u.base.tolist() == plan.window_ids.tolist()
            assert u.lo.tolist() == plan.window_skip.tolist()
            assert u.rows.tolist() == plan.window_rows.tolist()
            n = int(rows_arr.sum())
            row_plan = ShardPlan.build(np.maximum(rows_arr, 0), "row", window_pages=1, seed=0, epoch=0, rank=r,
                                       world_size=world, worker=k, num_workers=workers, balanced=drop_last,
                                       window_rows=chunk) if n else None
            ru = Origin(np.array([n]), "block-balanced" if drop_last else "block").units(shard)
            if row_plan is not None and row_plan.total_rows:
                lo, hi = row_range(n, shard, drop_last)
                assert (ru.lo.tolist(), ru.hi.tolist()) == ([lo], [hi])
                # what the stream reads from the block, chunk by chunk, is that range
                rows = np.concatenate([row_plan.rows_of(i) for i in range(len(row_plan.window_ids))])
                resumed = shard_plan(ru, None, mode=ShuffleMode.ROW, page_rows=rows_arr, window_pages=chunk, seed=0, epoch=0,
                                     shard=shard, drop_last=drop_last, page_slices=1)
                again = np.concatenate([resumed.rows_of(i) for i in range(len(resumed.window_ids))])
                assert again.tolist() == rows.tolist()


def test_zero_and_one_row():
    for rows in ([], [0], [1], [0, 1, 0]):
        origin = Origin(np.array(rows, dtype=np.int64), "rr")
        level = Level(3, (1, 2, 1), ((0,), (0, 0), (0,)))
        seq = remaining_after(origin, [level], False)
        assert int(seq.rows.sum()) == sum(rows)
        done = Level(3, (1, 2, 1), ((0,), (0, 0), (sum(rows),)) if rows == [1] else ((0,), (sum(rows), 0), (0,)))
        if rows == [1]:  # the one window went to shard 0 (rank 0, worker 0)
            done = Level(3, (1, 2, 1), ((1,), (0, 0), (0,)))
        assert len(remaining_after(origin, [done], False)) == 0


def test_tokens_of_a_partly_packed_row_travel_with_its_unit():
    origin = Origin(np.array([4, 4]), "rr")
    level = Level(2, (1, 1), ((2,), (0,)), tokens=((5,), (0,)))
    seq = remaining_after(origin, [level], False)
    assert seq.base.tolist() == [0, 1] and seq.lo.tolist() == [2, 0] and seq.head.tolist() == [5, 0]
    # dealt to a shard of a new job: still 5 tokens into row 2 of window 0
    mine = deal(seq, Shard(0, 1), False)
    assert mine.head.tolist() == [5, 0]
    # that shard packs 3 more tokens of the row: the head becomes 8, not 5 + 3
    again = remaining(mine, 0, 8)
    assert again.head.tolist() == [8, 0]
    # it finishes the row: the next row starts clean
    assert remaining(mine, 1, 0).head.tolist() == [0, 0]


def test_positions_past_a_shard_are_refused():
    origin = Origin(np.array([4, 4]), "rr")
    with pytest.raises(StateError, match="level 0, rank 1"):
        remaining_after(origin, [Level(2, (1, 1), ((0,), (5,)))], False)
    with pytest.raises(StateError, match="tokens"):
        remaining_after(origin, [Level(2, (1, 1), ((4,), (0,)), tokens=((3,), (0,)))], False)


@pytest.mark.parametrize("bad, field", [
    ([{"world_size": 2, "num_workers": [1], "positions": [[0], [0]]}], "num_workers"),
    ([{"world_size": 1, "num_workers": [2], "positions": [[0]]}], "positions"),
    ([{"world_size": 1, "num_workers": [1], "positions": [[-1]]}], "positions"),
    ([{"world_size": True, "num_workers": [1], "positions": [[0]]}], "world_size"),
    ([], "resumed"),
])
def test_malformed_levels_name_the_field(bad, field):
    with pytest.raises(StateError, match=field):
        decode_chain(bad, "YoumuDataset", tokens=True)
