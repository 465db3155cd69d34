"""Which stream positions a (rank, DataLoader worker) owns: pure functions, used by
every youmu stream and loader; nothing else computes a split.

A :class:`Shard` is one (rank, worker) of a job with ``world_size`` ranks of
``num_workers`` DataLoader workers each. Three ways to split ``n`` items, each a
partition (every item owned by exactly one shard, for any ``n`` including 0 and 1):

* :func:`round_robin` — item ``i`` belongs to rank ``i % world_size``, and a rank's
  ``k``-th item to worker ``k % num_workers``; so a rank's items never depend on how
  many workers it has. Page windows (``YoumuDataset``), runs of a map-style dataset
  (``MapStream``) and sampler indices (``DynamicBatchLoader``) are dealt this way.
* :func:`run_round_robin_length` / :func:`run_round_robin_index` — the same over
  *runs* of ``run`` consecutive items (the last run may be short).
* :func:`block` — a contiguous block per rank, split again into contiguous blocks per
  worker (row-mode shuffles, where positions are already random).

And one way to split a *count*: :func:`share` — ``total`` items per step over the
ranks, the remainder rotating with the step so that no rank always takes the extra one.

Example:
    >>> list(round_robin(10, Shard(rank=1, world_size=2, worker=0, num_workers=2)))
    [1, 5, 9]
    >>> block(10, Shard(rank=1, world_size=2, worker=1, num_workers=2))
    (7, 10)
    >>> [share(10, r, 4, offset=0) for r in range(4)]
    [3, 3, 2, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

from youmu._internal.args import int_arg
from youmu.errors import InvalidArgumentError

__all__ = ["Shard", "round_robin", "run_round_robin_length", "run_round_robin_index", "block", "share"]


@dataclass(frozen=True)
class Shard:
    """One (rank, worker) of ``world_size`` ranks × ``num_workers`` workers.

    >>> Shard(rank=1, world_size=2, worker=1, num_workers=3).index
    3
    """

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        int_arg("world_size", self.world_size, minimum=1)
        int_arg("num_workers", self.num_workers, minimum=1)
        int_arg("rank", self.rank, minimum=0)
        int_arg("worker", self.worker, minimum=0)
        if self.rank >= self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} is not in range(world_size={self.world_size})")
        if self.worker >= self.num_workers:
            raise InvalidArgumentError(f"worker {self.worker} is not in range(num_workers={self.num_workers})")

    @classmethod
    def _from_checked(cls, rank: int, world_size: int, worker: int, num_workers: int) -> Shard:
        """A shard of a (rank, world size) its owner checked already (a stream's, from
        :func:`youmu.distributed.world.rank_and_world`) and a worker the DataLoader
        numbered: built without checking them again."""
        shard = object.__new__(cls)
        for name, value in (("rank", rank), ("world_size", world_size), ("worker", worker),
                            ("num_workers", num_workers)):
            object.__setattr__(shard, name, value)
        return shard

    @property
    def index(self) -> int:
        """This shard's number in round-robin order: ``rank + world_size · worker``."""
        return self.rank + self.world_size * self.worker

    @property
    def count(self) -> int:
        """Shards in all: ``world_size · num_workers``."""
        return self.world_size * self.num_workers


def round_robin(n: int, shard: Shard) -> range:
    """The items of ``range(n)`` the shard owns, in order (see the module doc).

    >>> [list(round_robin(5, Shard(r, 2))) for r in range(2)]
    [[0, 2, 4], [1, 3]]
    """
    return range(shard.index, max(n, 0), shard.count)


def run_round_robin_length(n: int, run: int, shard: Shard) -> int:
    """Items the shard owns when runs of ``run`` consecutive items (``[q·run,
    (q+1)·run)``, the last one possibly short) are dealt round-robin.

    >>> [run_round_robin_length(10, 4, Shard(r, 2)) for r in range(2)]
    [6, 4]
    """
    if n <= 0:
        return 0
    runs = -(-n // run)
    mine = len(range(shard.index, runs, shard.count))
    if mine == 0:
        return 0
    last = shard.index + shard.count * (mine - 1)
    short = (last + 1) * run - n if last == runs - 1 else 0
    return mine * run - short


def run_round_robin_index(position: int, run: int, shard: Shard) -> int:
    """The item at the shard's ``position`` (0-based) under run dealing.

    >>> [run_round_robin_index(p, 4, Shard(1, 2)) for p in range(4)]
    [4, 5, 6, 7]
    """
    j, offset = divmod(position, run)
    return (shard.index + shard.count * j) * run + offset


def block(n: int, shard: Shard) -> tuple[int, int]:
    """``[lo, hi)``: the rank's contiguous block of ``range(n)``, then the worker's
    contiguous block of that.

    >>> [block(7, Shard(r, 2)) for r in range(2)]
    [(0, 3), (3, 7)]
    """
    n = max(n, 0)
    lo, hi = n * shard.rank // shard.world_size, n * (shard.rank + 1) // shard.world_size
    m = hi - lo
    return lo + m * shard.worker // shard.num_workers, lo + m * (shard.worker + 1) // shard.num_workers


def share(total: int, rank: int, world_size: int, *, offset: int = 0) -> int:
    """Rank ``rank``'s part of ``total`` items split over ``world_size`` ranks: equal
    parts, the ``total % world_size`` extra items going to the ranks from ``offset``
    on (rotate ``offset`` with the step so no rank always takes them).

    >>> [share(7, r, 3, offset=1) for r in range(3)]
    [2, 3, 2]
    """
    return total // world_size + (1 if (rank - offset) % world_size < total % world_size else 0)
