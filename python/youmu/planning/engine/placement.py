"""Placement, the second half of balancing (:mod:`youmu.planning.engine.balance`):
``n × m`` packed bins (or formed micro-batches) → (bucket, slot), ``m`` per bucket —
"interleave" tiers in snake order, or equal-count greedy / Karmarkar–Karp for equal
rank totals. Pure functions; ties by input position.

Example:
    >>> import numpy as np
    >>> [a.tolist() for a in place_units(np.array([4.0, 3, 2, 1]), 2, 2, "interleave")]
    [[0, 1, 1, 0], [0, 0, 1, 1]]
"""

from __future__ import annotations

import heapq
from operator import itemgetter

import numpy as np

from youmu.errors import InvalidArgumentError
from youmu.planning.engine.packers import cost_order, merge_members

__all__ = ["place_units"]

_PLACEMENTS = ("greedy", "kk", "interleave")  # youmu.planning.engine.balance.METHODS


# --------------------------------------------------------------------------------------
# placement: n*m units -> (bucket, slot), m per bucket
# --------------------------------------------------------------------------------------
def place_units(u: np.ndarray, n: int, m: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Assign ``len(u) <= n*m`` units to (bucket, slot), each bucket ``m`` slots.

    The grid is filled up with empty (zero-cost) units that sort after every given
    unit (ties go by position), so the given units' places never depend on them:
    only KK, whose differencing pairs tiers of exactly ``n`` units, materialises
    them.
    """
    if u.size > n * m:
        raise InvalidArgumentError(f"{u.size} micro-batches do not fit in {n} buckets x {m} bins")
    order = cost_order(u)
    bucket = np.empty(u.size, dtype=np.int64)
    slot = np.empty(u.size, dtype=np.int64)
    if method == "interleave" or n == 1:
        # tier j = the j-th n heaviest units -> slot j, dealt in snake order
        p = np.arange(u.size)
        tier, t = p // n, p % n
        bucket[order] = np.where(tier % 2 == 1, n - 1 - t, t)
        slot[order] = tier
        return bucket, slot
    if method == "greedy":
        # after t units at most t ranks are loaded or full, so the least-loaded rank
        # is always one of the first len(u)
        r_used = min(n, u.size)
        heap = [(0.0, r) for r in range(r_used)]
        count = [0] * r_used
        cl = u.tolist()
        for i in order.tolist():
            load, r = heapq.heappop(heap)
            bucket[i] = r
            count[r] += 1
            if count[r] < m:
                heapq.heappush(heap, (load + cl[i], r))
    elif method == "kk":
        c = np.concatenate([u, np.zeros(n * m - u.size)])
        bucket[:] = _kk_equal(c, cost_order(c), n, m)[: u.size]
    else:
        raise InvalidArgumentError(f"unknown method {method!r}; expected one of {_PLACEMENTS}")
    # within a bucket, heaviest unit first: slot j then holds the j-th heaviest unit
    # of every rank, so per-micro-batch maxima line up across ranks
    by_bucket = np.lexsort((np.arange(u.size), -u, bucket))
    starts = np.searchsorted(bucket[by_bucket], bucket[by_bucket], side="left")
    slot[by_bucket] = np.arange(u.size) - starts
    return bucket, slot


def _kk_equal(c: np.ndarray, order: np.ndarray, n: int, m: int) -> np.ndarray:
    """Equal-cardinality KK: the initial partial partitions are the tiers of ``n``
    consecutive units in decreasing order (one unit per subset), so every merge keeps
    every subset at the same count."""
    cl = c.tolist()
    heap = []
    for j in range(m):
        tier = order[j * n:(j + 1) * n].tolist()
        subsets = [(cl[i], [i]) for i in tier]  # already descending
        heap.append((-(subsets[0][0] - subsets[-1][0]), j, subsets))
    heapq.heapify(heap)
    counter = m
    key = itemgetter(0)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = [(a[i][0] + b[n - 1 - i][0], merge_members(a[i][1], b[n - 1 - i][1])) for i in range(n)]
        merged.sort(key=key, reverse=True)
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), counter, merged))
        counter += 1
    out = np.empty(n * m, dtype=np.int64)
    for r, (_, members) in enumerate(heap[0][2]):
        out[members] = r
    return out
