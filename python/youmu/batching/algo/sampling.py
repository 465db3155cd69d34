"""Which dataset indices a rank draws, as a pure function of (seed, epoch, iteration).

Iteration 0 of an epoch is exactly ``torch.utils.data.DistributedSampler`` with
``drop_last=False``: the same permutation (``torch.randperm`` seeded with
``seed + epoch``), the same tail padding (the first ``P`` indices repeated), the same
stride sharding. Later iterations (the non-join mode's chained logical iterations)
reshuffle with a seed derived from ``(seed, epoch, iteration)``.

``DynamicBatchLoader`` uses ``pad=False`` by default (the same permutation, strided
without the tail repeats), so an epoch emits every sample exactly once.

Ranks take the indices round-robin (:func:`youmu.order.sharding.round_robin`, as every youmu
stream does). Only :func:`rank_indices` with ``shuffle=True`` needs torch, imported on call.

Example:
    >>> sampler_quota(1000, 3)
    SamplerQuota(per_rank=334, views=1002, padding=2)
    >>> rank_indices(5, 2, 1, shuffle=False)
    [1, 3, 0]
"""

from __future__ import annotations

from typing import NamedTuple

from youmu.errors import InvalidArgumentError
from youmu.order.sharding import Shard, round_robin

__all__ = ["SamplerQuota", "sampler_quota", "rank_indices", "iteration_seed", "logical_discard_bound"]

_MASK63 = (1 << 63) - 1


class SamplerQuota(NamedTuple):
    """``q = ceil(N/W)`` views per rank, ``M = W*q`` views in all, ``P = M - N`` repeats."""

    per_rank: int
    views: int
    padding: int


def sampler_quota(n: int, world_size: int) -> SamplerQuota:
    """Sampler arithmetic of ``DistributedSampler(drop_last=False)``.

    >>> sampler_quota(57284, 8)
    SamplerQuota(per_rank=7161, views=57288, padding=4)
    """
    if n < 0:
        raise InvalidArgumentError(f"dataset size must be >= 0, got {n}")
    if world_size < 1:
        raise InvalidArgumentError(f"world_size must be >= 1, got {world_size}")
    q = -(-n // world_size)
    return SamplerQuota(q, q * world_size, q * world_size - n)


def logical_discard_bound(world_size: int, depth: int, n: int) -> float:
    """ODB, Lemma 4: per logical iteration at most ``W*D`` fetched views go undelivered.

    >>> round(100 * logical_discard_bound(8, 4096, 157712), 1)
    20.8
    """
    if n <= 0:
        raise InvalidArgumentError(f"dataset size must be > 0, got {n}")
    return world_size * depth / n


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def iteration_seed(seed: int, epoch: int, iteration: int) -> int:
    """Generator seed of a logical iteration; ``seed + epoch`` for iteration 0.

    >>> iteration_seed(7, 3, 0)
    10
    """
    if iteration == 0:
        return seed + epoch
    return _splitmix64(((seed + epoch) & 0xFFFFFFFFFFFFFFFF) ^ _splitmix64(iteration)) & _MASK63


def rank_indices(
    n: int,
    world_size: int,
    rank: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    iteration: int = 0,
    shuffle: bool = True,
    pad: bool = True,
) -> list[int]:
    """Dataset indices rank ``rank`` draws in one logical iteration.

    ``pad=True`` (``DistributedSampler``): ``q`` indices on every rank, the tail padded
    by repeating the first ``P``. ``pad=False``: the same permutation, strided without
    padding, so every index is drawn exactly once and ranks differ by at most one.

    >>> rank_indices(7, 3, 0, shuffle=False), rank_indices(7, 3, 2, shuffle=False)
    ([0, 3, 6], [2, 5, 1])
    >>> rank_indices(7, 3, 2, shuffle=False, pad=False)
    [2, 5]
    """
    if not 0 <= rank < world_size:
        raise InvalidArgumentError(f"rank {rank} is not in range(world_size={world_size})")
    quota = sampler_quota(n, world_size)
    if n == 0:
        return []
    if shuffle:
        import torch

        g = torch.Generator()
        g.manual_seed(iteration_seed(seed, epoch, iteration))
        indices: list[int] = torch.randperm(n, generator=g).tolist()
    else:
        indices = list(range(n))
    shard = Shard(rank=rank, world_size=world_size)
    if not pad:
        return [indices[i] for i in round_robin(n, shard)]
    padding = quota.padding
    if padding:
        # as DistributedSampler: repeat from the start (cyclically if P > N)
        indices += (indices * (-(-padding // n)))[:padding]
    return [indices[i] for i in round_robin(quota.views, shard)]
