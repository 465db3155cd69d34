"""The shard maps are partitions: every item is owned by exactly one (rank, worker),
for any world size, worker count and length (0 and 1 included), and a rank's items do
not depend on its worker count where the stream promises it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.order.sharding import Shard, block, round_robin, run_round_robin_index, run_round_robin_length, share

lengths = st.integers(min_value=0, max_value=500)
worlds = st.integers(min_value=1, max_value=9)
workers = st.integers(min_value=1, max_value=5)
runs = st.integers(min_value=1, max_value=40)


def shards(world: int, num_workers: int) -> list[Shard]:
    return [Shard(r, world, w, num_workers) for r in range(world) for w in range(num_workers)]


@settings(max_examples=300, deadline=None)
@given(lengths, worlds, workers)
def test_round_robin_owns_every_item_exactly_once(n: int, world: int, num_workers: int) -> None:
    owned = Counter(i for s in shards(world, num_workers) for i in round_robin(n, s))
    assert owned == Counter(range(n))


@settings(max_examples=300, deadline=None)
@given(lengths, worlds, workers)
def test_a_ranks_round_robin_items_do_not_depend_on_its_worker_count(n: int, world: int, num_workers: int) -> None:
    for rank in range(world):
        alone = set(round_robin(n, Shard(rank, world)))
        split = set().union(*(set(round_robin(n, Shard(rank, world, w, num_workers))) for w in range(num_workers)))
        assert alone == split


@settings(max_examples=300, deadline=None)
@given(lengths, runs, worlds, workers)
def test_runs_are_dealt_exactly_once_and_positions_map_onto_them(n: int, run: int, world: int, workers: int) -> None:
    owned: Counter[int] = Counter()
    for s in shards(world, workers):
        length = run_round_robin_length(n, run, s)
        items = [run_round_robin_index(p, run, s) for p in range(length)]
        assert items == sorted(items)  # a shard reads its runs in order
        owned.update(items)
    assert owned == Counter(range(n))


@settings(max_examples=300, deadline=None)
@given(lengths, worlds, workers)
def test_blocks_tile_the_range_in_shard_order(n: int, world: int, num_workers: int) -> None:
    bounds = [block(n, s) for s in shards(world, num_workers)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 2  # rank blocks differ by <= 1, worker blocks again by <= 1


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), worlds, st.integers(min_value=0, max_value=100))
def test_shares_sum_to_the_total_and_differ_by_at_most_one(total: int, world: int, offset: int) -> None:
    parts = [share(total, r, world, offset=offset) for r in range(world)]
    assert sum(parts) == total
    assert max(parts) - min(parts) <= 1


def test_the_extra_items_rotate_with_the_offset() -> None:
    takers = [[r for r in range(4) if share(5, r, 4, offset=step) == 2] for step in range(4)]
    assert takers == [[0], [1], [2], [3]]


def test_a_shard_outside_its_job_is_refused_naming_the_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="rank 2 is not in range"):
        Shard(rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError, match="worker 3 is not in range"):
        Shard(worker=3, num_workers=3)
    with pytest.raises(InvalidArgumentError, match="world_size must be a positive int"):
        Shard(world_size=0)
    with pytest.raises(ArgumentTypeError, match="rank must be an int"):
        Shard(rank=0.0)  # type: ignore[arg-type]
