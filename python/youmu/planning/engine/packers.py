"""Packing, the first half of balancing (:mod:`youmu.planning.engine.balance`): a step's
samples → ``k`` bins, the most expensive bin as cheap as possible, at most ``capacity``
tokens per bin. One algorithm in three variants sharing their tie-breaking: LPT
greedy (a heap), Karmarkar–Karp k-way largest differencing, first-fit decreasing by
size (the capacity fallback). Pure functions over numpy arrays; ties by input
position, so every rank packs alike.

Example:
    >>> import numpy as np
    >>> pack_buckets(np.array([5.0, 4, 3, 3, 2, 1]), None, 2, "greedy", None)[0].tolist()
    [0, 1, 1, 0, 1, 0]
"""

from __future__ import annotations

import bisect
import heapq
import math
from operator import itemgetter

import numpy as np

from youmu.errors import InvalidArgumentError

__all__ = ["cost_order", "merge_members", "pack_buckets", "pack_greedy"]


def cost_order(c: np.ndarray) -> np.ndarray:
    """Positions by decreasing cost, ties by position (deterministic)."""
    return np.lexsort((np.arange(c.size), -c))


# --------------------------------------------------------------------------------------
# packing: samples -> k bins
# --------------------------------------------------------------------------------------
def pack_greedy(c: np.ndarray, s: np.ndarray | None, k: int, cap: float | None) -> np.ndarray:
    """LPT with a capacity: each item, by decreasing cost, to the least-loaded bin with
    room, ties to the lower bin (-1: no bin has room)."""
    out = np.full(c.size, -1, dtype=np.int64)
    order = cost_order(c)
    costs = c.tolist()
    if s is None or cap is None:
        # while empty bins remain, LPT gives the t-th positive-cost item bin t (an empty
        # bin has the least load and ties go to the lower bin): do that part at once
        q = min(k, int((c > 0).sum()))
        out[order[:q]] = np.arange(q)
        heap = [(costs[i], b) for b, i in enumerate(order[:q].tolist())] + [(0.0, b) for b in range(q, k)]
        heapq.heapify(heap)
        replace = heapq.heapreplace
        for i in order[q:].tolist():
            load, b = heap[0]
            replace(heap, (load + costs[i], b))
            out[i] = b
        return out
    heap = [(0.0, b) for b in range(k)]  # (load, bin)
    sizes = s.tolist()
    load = [0.0] * k
    free = [float(cap)] * k
    # numpy mirrors for the vectorised slow path; a closed bin gets free = -inf
    free_np = np.full(k, float(cap))
    load_np = np.zeros(k)
    # the smallest item still to come: a bin with less room is closed for good
    tail_min = np.minimum.accumulate(s[order][::-1])[::-1].tolist() + [math.inf]
    closed = [False] * k
    pop, push = heapq.heappop, heapq.heappush
    for pos, i in enumerate(order.tolist()):
        size = sizes[i]
        # the heap is updated lazily: an entry is current if its load is the bin's load
        while heap:
            top_load, top = heap[0]
            if closed[top] or top_load != load[top]:
                pop(heap)
                continue
            break
        if heap and free[heap[0][1]] >= size:
            b = pop(heap)[1]  # fast path: the least-loaded bin has room
        else:
            # slow path: the least-loaded bin among those with room (vectorised)
            masked = np.where(free_np >= size, load_np, np.inf)
            b = int(masked.argmin())
            if masked[b] == np.inf:
                continue
        lb = load[b] + costs[i]
        load[b] = lb
        load_np[b] = lb
        fb = free[b] - size
        free[b] = fb
        out[i] = b
        if fb < tail_min[pos + 1]:
            closed[b] = True
            free_np[b] = -np.inf
        else:
            free_np[b] = fb
            push(heap, (lb, b))
    return out


def _neg_sum(x: tuple[float, list[int]]) -> float:
    return -x[0]


def merge_members(x: list[int], y: list[int]) -> list[int]:
    """The members of two merged groups, in one list."""
    # small-to-large keeps the total copying O(N log N)
    if len(x) < len(y):
        x, y = y, x
    x.extend(y)
    return x


def _pack_kk(c: np.ndarray, k: int) -> np.ndarray:
    """k-way Karmarkar–Karp (largest differencing method).

    A partial partition is the list of its non-empty subsets as ``(sum, members)``,
    sorted by decreasing sum; the other ``k - len`` subsets are empty (sum 0), which
    keeps early merges O(items) instead of O(k).
    """
    out = np.zeros(c.size, dtype=np.int64)
    if c.size == 0:
        return out
    if k == 1:
        return out
    costs = c.tolist()
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []
    for n, i in enumerate(cost_order(c).tolist()):
        heap.append((-costs[i], n, [(costs[i], [i])]))
    heapq.heapify(heap)
    counter = len(heap)
    key = itemgetter(0)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        la, lb = len(a), len(b)
        # pair a[i] (descending) with b ascending, whose first k - lb entries are empty
        z = k - lb
        merged: list[tuple[float, list[int]]] = a[: min(la, z)]  # untouched, still sorted
        paired: list[tuple[float, list[int]]] = []
        for i in range(z, k):
            bs, bm = b[k - 1 - i]
            if i < la:
                as_, am = a[i]
                paired.append((as_ + bs, merge_members(am, bm)))
            else:
                paired.append((bs, bm))
        if len(paired) <= 8:
            # few changed subsets (typically a lone sample joining a partition):
            # binary insertion beats re-sorting k subsets
            for item in paired:
                bisect.insort(merged, item, key=_neg_sum)
        else:
            merged.extend(paired)
            merged.sort(key=key, reverse=True)
        spread = merged[0][0] - (merged[-1][0] if len(merged) == k else 0.0)
        heapq.heappush(heap, (-spread, counter, merged))
        counter += 1
    for bin_id, (_, members) in enumerate(heap[0][2]):
        out[members] = bin_id
    return out


def _pack_ffd(s: np.ndarray, k: int, cap: float) -> np.ndarray:
    """First-fit decreasing on sizes: a feasibility fallback (-1: fits nowhere)."""
    out = np.full(s.size, -1, dtype=np.int64)
    free = np.full(k, float(cap))
    for i in np.lexsort((np.arange(s.size), -s)).tolist():
        fits = np.nonzero(free >= s[i])[0]
        if fits.size:
            b = int(fits[0])
            free[b] -= s[i]
            out[i] = b
    return out


def _fill_empty(bins: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Move single items into empty bins while some bin holds two or more. Never raises
    the maximum (an empty bin receives one item of a bin at least that heavy) and never
    breaks a capacity (one item alone fits, since it fitted somewhere)."""
    placed = bins >= 0
    counts = np.bincount(bins[placed], minlength=k)
    if counts.min(initial=1) > 0 or counts.max(initial=0) < 2:
        return bins  # no empty bin, or nothing to spare
    empty = np.nonzero(counts == 0)[0].tolist()
    bins = bins.copy()
    loads = np.bincount(bins[placed], weights=c[placed], minlength=k)
    for e in empty:
        # the bin with most items (heaviest first among those)
        donors = np.lexsort((-loads, -counts))
        d = int(donors[0])
        if counts[d] < 2:
            break
        members = np.nonzero(bins == d)[0]
        victim = int(members[np.lexsort((members, c[members]))[0]])  # cheapest, then first
        bins[victim] = e
        counts[d] -= 1
        counts[e] += 1
        loads[d] -= c[victim]
        loads[e] += c[victim]
    return bins


def pack_buckets(c: np.ndarray, s: np.ndarray | None, k: int, method: str, cap: float | None) -> tuple[np.ndarray, str]:
    """Pack the items into ``k`` bins (ids ``0..k-1``, ``-1`` where an item fits nowhere).

    Every packer fills a prefix of the bins: LPT and first-fit open the lowest empty
    bin (an empty bin is least loaded and has the most room; ties go to the lower
    bin), KK numbers its non-empty subsets from 0, and :func:`_fill_empty` uses the
    lowest empty bins. With ``N`` items no bin past ``N`` is ever used, so packing into
    ``min(k, N)`` bins gives the same assignment without a heap entry or list slot
    per bin that stays empty.
    """
    k = max(1, min(k, c.size))
    used = method
    if method == "kk":
        bins = _pack_kk(c, k)
        if cap is not None and s is not None:
            sizes = np.bincount(bins, weights=s, minlength=k)
            if (sizes > cap).any():
                bins, used = pack_greedy(c, s, k, cap), "greedy (kk exceeded capacity)"
    elif method == "greedy":
        bins = pack_greedy(c, s, k, cap)
    else:
        raise InvalidArgumentError(
            f"method {method!r} cannot pack samples; use 'greedy' or 'kk' (or reorder_only=True)"
        )
    if cap is not None and s is not None and (bins < 0).any():
        ffd = _pack_ffd(s, k, cap)
        if (ffd < 0).sum() < (bins < 0).sum():
            bins, used = ffd, f"ffd ({used} could not fit every sample)"
    return _fill_empty(bins, c, k), used
