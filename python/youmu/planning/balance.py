"""Workload balancing: samples → (bucket, bin), i.e. (DP rank, micro-batch).

Two problems, solved in this order:

1. **Packing** (sample level, MegaScale-Data's "intra-micro-batch" balance): split the
   step's samples into ``k = num_buckets × num_bins`` bins so that the most
   expensive bin is as cheap as possible, with at most ``capacity`` tokens per bin
   (the activation-memory limit ``L`` of MegaScale-Data §4).
2. **Placement** ("inter-micro-batch"): give each bucket (rank) exactly
   ``num_bins`` of those bins, with equal totals per rank (the DP all-reduce waits
   for the slowest rank), and number each rank's bins so that slot ``j`` holds
   similar costs on every rank (ranks synchronise per micro-batch under pipeline or
   context parallelism, and with a colocated encoder's all-to-all).

``reorder_only=True`` skips packing: each input is an already formed micro-batch
(e.g. a packed sequence), its composition is kept and only its placement changes, so
the global batch — and the summed gradient, with the loss scaling of
:mod:`youmu.planning.loader` — is exactly the unbalanced one's ("To keep the global
batch unchanged, users may optionally disable intra-microbatch reordering",
MegaScale-Data §3.3; its evaluated backbone balance does only this).

Methods:

* ``"greedy"`` — LPT: items by decreasing cost, each to the least-loaded bin that
  has room (a heap; ``O(N log k)``).
* ``"kk"`` — Karmarkar–Karp largest differencing, k-way: repeatedly merge the two
  partial partitions with the largest spread, pairing the heaviest subsets of one
  with the lightest of the other. It ignores capacity; a capacity violation falls
  back to greedy (recorded in :attr:`BalanceResult.method`).
* ``"interleave"`` (placement only) — bins by decreasing cost in tiers of
  ``num_buckets``; tier ``j`` becomes slot ``j``, dealt in snake order. Minimises
  ``Σ_j max_r cost(r, j)`` exactly for the given bins; per-rank totals are only
  approximately equal. It is the default placement after packing; ``placement=``
  chooses another.

Every function is a pure function of its arguments; ties are broken by input
position, so every rank computes the same assignment from the same metadata.

Example:
    >>> from youmu.planning import balance
    >>> balance([5, 4, 3, 3, 2, 1], num_buckets=2, method="greedy")
    [(0, 0), (1, 0), (1, 0), (0, 0), (1, 0), (0, 0)]
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from youmu._args import bool_arg, choice_arg, float_arg, float_array, int_arg, opt_int_arg
from youmu.errors import ArgumentTypeError, CapacityError, InvalidArgumentError

__all__ = [
    "METHODS",
    "BalanceResult",
    "CapacityError",
    "Imbalance",
    "balance",
    "balance_detailed",
    "imbalance",
    "compare",
]

METHODS = ("greedy", "kk", "interleave")
_OVERFLOW = ("error", "defer")

#: The most (bucket, bin) slots — (rank, micro-batch) pairs — one step may have:
#: 16,384 ranks × 64 micro-batches. The statistics of a result hold a float per slot
#: (``Imbalance.bin_costs``, ``BalanceResult.bin_sizes``), so a step costs a few
#: numpy words per slot even when it has fewer samples than slots; everything else
#: grows with the samples, except KK *placement* (``placement="kk"``, or
#: ``method="kk"`` with ``reorder_only``), whose equal-count differencing runs over
#: every slot. A larger grid is almost surely a mistake (``num_buckets`` given a
#: sample count, say) that would otherwise grow until the machine runs out of memory.
MAX_SLOTS = 1 << 20


# --------------------------------------------------------------------------------------
# results and metrics
# --------------------------------------------------------------------------------------
def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a == 0 else math.inf


@dataclass(frozen=True)
class Imbalance:
    """Load statistics of an assignment.

    Attributes:
        bucket_costs: ``(num_buckets,)`` total cost per bucket (rank).
        bin_costs: ``(num_buckets, num_bins)`` cost per (rank, micro-batch slot).
        bucket_max_over_mean, bucket_max_over_min: spread of the rank totals.
        bin_max_over_mean, bin_max_over_min: spread of the micro-batch costs.
        step_time: ``Σ_j max_r bin_costs[r, j]`` — the virtual-clock step time when
            ranks synchronise on every micro-batch.
        barrier_time: ``max_r bucket_costs[r]`` — the step time when ranks only wait
            for each other at the gradient all-reduce.
        ideal_time: ``Σ cost / num_buckets`` (a lower bound of both).

    >>> imb = imbalance([4, 1, 1, 2], [(0, 0), (1, 0), (1, 0), (1, 1)], num_buckets=2, num_bins=2)
    >>> imb.bin_costs.tolist(), imb.step_time, imb.barrier_time, imb.bucket_max_over_min
    ([[4.0, 0.0], [2.0, 2.0]], 6.0, 4.0, 1.0)
    """

    bucket_costs: np.ndarray
    bin_costs: np.ndarray
    bucket_max_over_mean: float
    bucket_max_over_min: float
    bin_max_over_mean: float
    bin_max_over_min: float
    step_time: float
    barrier_time: float
    ideal_time: float

    def summary(self) -> dict[str, float]:
        """The scalar fields, for logs and reports."""
        return {
            "bucket_max/mean": self.bucket_max_over_mean,
            "bucket_max/min": self.bucket_max_over_min,
            "bin_max/mean": self.bin_max_over_mean,
            "bin_max/min": self.bin_max_over_min,
            "step_time": self.step_time,
            "barrier_time": self.barrier_time,
            "ideal_time": self.ideal_time,
        }


def imbalance(
    costs: Sequence[float] | np.ndarray,
    assignment: Sequence[tuple[int, int] | None],
    num_buckets: int,
    num_bins: int = 1,
) -> Imbalance:
    """Load statistics of ``assignment`` (one ``(bucket, bin)`` or ``None`` per sample;
    ``None`` samples are not counted).

    >>> imb = imbalance([4, 1, 1, 2], [(0, 0), (1, 0), (1, 0), (1, 0)], num_buckets=2)
    >>> imb.bucket_max_over_min, imb.step_time
    (1.0, 4.0)
    """
    c = _costs(costs)
    check_grid(num_buckets, num_bins)
    if len(assignment) != c.size:
        raise InvalidArgumentError(f"assignment has {len(assignment)} entries for {c.size} costs")
    grid = np.zeros((num_buckets, num_bins), dtype=np.float64)
    for i, a in enumerate(assignment):
        if a is None:
            continue
        try:
            b, j = (int_arg(f"assignment[{i}]", x) for x in a)
        except (TypeError, ValueError):
            raise ArgumentTypeError(
                f"assignment[{i}] must be a (bucket, bin) pair of ints or None, got {a!r}"
            ) from None
        if not (0 <= b < num_buckets and 0 <= j < num_bins):
            raise InvalidArgumentError(f"sample {i} assigned to {a}, outside {num_buckets} buckets x {num_bins} bins")
        grid[b, j] += c[i]
    return _stats(grid)


def _stats(grid: np.ndarray) -> Imbalance:
    rank = grid.sum(axis=1)
    flat = grid.reshape(-1)
    return Imbalance(
        bucket_costs=rank,
        bin_costs=grid,
        bucket_max_over_mean=_ratio(float(rank.max()), float(rank.mean())),
        bucket_max_over_min=_ratio(float(rank.max()), float(rank.min())),
        bin_max_over_mean=_ratio(float(flat.max()), float(flat.mean())),
        bin_max_over_min=_ratio(float(flat.max()), float(flat.min())),
        step_time=float(grid.max(axis=0).sum()),
        barrier_time=float(rank.max()),
        ideal_time=float(rank.sum() / grid.shape[0]),
    )


def compare(
    costs: Sequence[float] | np.ndarray,
    before: Sequence[tuple[int, int] | None],
    after: Sequence[tuple[int, int] | None],
    num_buckets: int,
    num_bins: int = 1,
) -> dict[str, Any]:
    """Before/after statistics and the virtual-clock speed-ups of a re-assignment.

    >>> r = compare([4, 1, 1, 2], [(0, 0), (0, 0), (1, 0), (1, 0)], [(0, 0), (1, 0), (1, 0), (1, 0)], 2)
    >>> r["before"]["bucket_max/min"], r["after"]["bucket_max/min"], r["speedup_barrier"]
    (1.6666666666666667, 1.0, 1.25)
    """
    b = imbalance(costs, before, num_buckets, num_bins)
    a = imbalance(costs, after, num_buckets, num_bins)
    return {
        "before": b.summary(),
        "after": a.summary(),
        "speedup_step": _ratio(b.step_time, a.step_time),
        "speedup_barrier": _ratio(b.barrier_time, a.barrier_time),
    }


@dataclass(frozen=True)
class BalanceResult:
    """Everything :func:`balance_detailed` computed.

    Attributes:
        buckets, bins: int64 arrays, one entry per sample (``-1`` where deferred).
        num_buckets, num_bins: the grid.
        method: the method that produced the packing (``"kk"``, or e.g.
            ``"greedy (kk exceeded capacity)"`` after a fallback).
        deferred: positions of the samples that fit nowhere (``on_overflow="defer"``).
        stats: :class:`Imbalance` of the result.
        bin_sizes: ``(num_buckets, num_bins)`` tokens per bin when ``sizes`` were given.

    >>> r = balance_detailed([5, 4, 3, 3, 2, 1], num_buckets=2, num_bins=2, method="kk")
    >>> r.assignment[:3], r.method, r.stats.step_time, r.members(0, 0).tolist()
    ([(1, 0), (1, 1), (0, 1)], 'kk', 9.0, [3, 4])
    """

    buckets: np.ndarray
    bins: np.ndarray
    num_buckets: int
    num_bins: int
    method: str
    deferred: np.ndarray
    stats: Imbalance
    bin_sizes: np.ndarray | None = field(default=None)

    @property
    def assignment(self) -> list[tuple[int, int] | None]:
        """One ``(bucket, bin)`` per sample, ``None`` for deferred samples."""
        return [None if b < 0 else (b, j) for b, j in zip(self.buckets.tolist(), self.bins.tolist())]

    def members(self, bucket: int, bin: int) -> np.ndarray:
        """Positions of the samples in ``(bucket, bin)``, in input order."""
        return np.nonzero((self.buckets == bucket) & (self.bins == bin))[0]


# --------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------
def _costs(costs: Any, name: str = "costs") -> np.ndarray:
    c = float_array(costs, name)
    if c.size and (not np.isfinite(c).all() or c.min() < 0):
        raise InvalidArgumentError(f"{name} must be finite and >= 0")
    return c


def check_grid(num_buckets: Any, num_bins: Any, names: tuple[str, str] = ("num_buckets", "num_bins")) -> None:
    """``num_buckets`` × ``num_bins`` positive ints whose product is at most
    :data:`MAX_SLOTS` (``names``: the arguments as the caller calls them).

    >>> check_grid(10**9, 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: num_buckets × num_bins = 1,000,000,000 × 1 slots per step is more than ...
    """
    n = int_arg(names[0], num_buckets, minimum=1)
    m = int_arg(names[1], num_bins, minimum=1)
    if n * m > MAX_SLOTS:
        raise InvalidArgumentError(f"{names[0]} × {names[1]} = {n:,} × {m:,} slots per step is more than "
                                   f"youmu.planning plans (MAX_SLOTS = {MAX_SLOTS:,})")


def _order(c: np.ndarray) -> np.ndarray:
    """Positions by decreasing cost, ties by position (deterministic)."""
    return np.lexsort((np.arange(c.size), -c))


# --------------------------------------------------------------------------------------
# packing: samples -> k bins
# --------------------------------------------------------------------------------------
def _pack_greedy(c: np.ndarray, s: np.ndarray | None, k: int, cap: float | None) -> np.ndarray:
    """LPT with a capacity: each item, by decreasing cost, to the least-loaded bin with
    room, ties to the lower bin (-1: no bin has room)."""
    out = np.full(c.size, -1, dtype=np.int64)
    order = _order(c)
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


def _merge_members(x: list[int], y: list[int]) -> list[int]:
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
    for n, i in enumerate(_order(c).tolist()):
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
                paired.append((as_ + bs, _merge_members(am, bm)))
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


def _pack(c: np.ndarray, s: np.ndarray | None, k: int, method: str, cap: float | None) -> tuple[np.ndarray, str]:
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
                bins, used = _pack_greedy(c, s, k, cap), "greedy (kk exceeded capacity)"
    elif method == "greedy":
        bins = _pack_greedy(c, s, k, cap)
    else:
        raise InvalidArgumentError(
            f"method {method!r} cannot pack samples; use 'greedy' or 'kk' (or reorder_only=True)"
        )
    if cap is not None and s is not None and (bins < 0).any():
        ffd = _pack_ffd(s, k, cap)
        if (ffd < 0).sum() < (bins < 0).sum():
            bins, used = ffd, f"ffd ({used} could not fit every sample)"
    return _fill_empty(bins, c, k), used


# --------------------------------------------------------------------------------------
# placement: n*m units -> (bucket, slot), m per bucket
# --------------------------------------------------------------------------------------
def _place(u: np.ndarray, n: int, m: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Assign ``len(u) <= n*m`` units to (bucket, slot), each bucket ``m`` slots.

    The grid is filled up with empty (zero-cost) units that sort after every given
    unit (ties go by position), so the given units' places never depend on them:
    only KK, whose differencing pairs tiers of exactly ``n`` units, materialises
    them.
    """
    if u.size > n * m:
        raise InvalidArgumentError(f"{u.size} micro-batches do not fit in {n} buckets x {m} bins")
    order = _order(u)
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
        bucket[:] = _kk_equal(c, _order(c), n, m)[: u.size]
    else:
        raise InvalidArgumentError(f"unknown method {method!r}; expected one of {METHODS}")
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
        merged = [(a[i][0] + b[n - 1 - i][0], _merge_members(a[i][1], b[n - 1 - i][1])) for i in range(n)]
        merged.sort(key=key, reverse=True)
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), counter, merged))
        counter += 1
    out = np.empty(n * m, dtype=np.int64)
    for r, (_, members) in enumerate(heap[0][2]):
        out[members] = r
    return out


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def balance_detailed(
    costs: Sequence[float] | np.ndarray,
    num_buckets: int,
    num_bins: int = 1,
    method: str = "greedy",
    capacity: float | None = None,
    *,
    sizes: Sequence[float] | np.ndarray | None = None,
    reorder_only: bool = False,
    group_size: int | None = None,
    on_overflow: str = "error",
    placement: str | None = None,
) -> BalanceResult:
    """:func:`balance`, returning a :class:`BalanceResult` (assignment, statistics,
    method actually used, deferred samples); the arguments are :func:`balance`'s.

    >>> r = balance_detailed([9, 1, 1, 1, 8, 2], num_buckets=2, capacity=3, sizes=[2, 1, 1, 1, 2, 1],
    ...                      on_overflow="defer")
    >>> r.assignment, r.deferred.tolist(), r.bin_sizes.tolist()
    ([(0, 0), (0, 0), None, None, (1, 0), (1, 0)], [2, 3], [[3.0], [3.0]])
    """
    c = _costs(costs)
    check_grid(num_buckets, num_bins)
    choice_arg("method", method, METHODS)
    choice_arg("on_overflow", on_overflow, _OVERFLOW)
    reorder_only = bool_arg("reorder_only", reorder_only)
    if placement is None:
        placement = method if reorder_only else "interleave"
    choice_arg("placement", placement, METHODS)
    s: np.ndarray | None = None
    if sizes is not None:
        s = _costs(sizes, "sizes")
        if s.size != c.size:
            raise InvalidArgumentError(f"sizes has {s.size} entries for {c.size} costs")
    cap: float | None = None
    if capacity is not None:
        cap = float_arg("capacity", capacity, positive=True)
        if s is None:
            raise InvalidArgumentError("capacity is in tokens: pass sizes= (tokens per sample) with it")
    n, m = int(num_buckets), int(num_bins)
    g = n if group_size is None else opt_int_arg("group_size", group_size, minimum=1)
    assert g is not None
    if n % g:
        raise InvalidArgumentError(f"group_size must divide num_buckets={n}, got {group_size!r}")
    groups = n // g

    buckets = np.full(c.size, -1, dtype=np.int64)
    bins = np.full(c.size, -1, dtype=np.int64)
    used = method

    if reorder_only:
        if on_overflow != "error":
            raise InvalidArgumentError(
                "reorder_only keeps the global batch: every micro-batch is placed, nothing is deferred"
            )
        if c.size > n * m:
            raise InvalidArgumentError(
                f"reorder_only places whole micro-batches: got {c.size} for {n} buckets x {m} bins "
                f"(at most {n * m})"
            )
        if cap is not None and s is not None and s.size and s.max() > cap:
            raise CapacityError(f"a micro-batch holds {int(s.max())} tokens, above capacity {cap:g}",
                                np.nonzero(s > cap)[0].tolist())
        if groups == 1:
            buckets[:], bins[:] = _place(c, n, m, placement)
        else:
            # coarse: groups of g*m micro-batches each, then placement inside each group
            gb, _ = _place(c, groups, g * m, "greedy" if placement == "interleave" else placement)
            for q in range(groups):
                mine = np.nonzero(gb == q)[0]
                b, j = _place(c[mine], g, m, placement)
                buckets[mine], bins[mine] = b + q * g, j
    else:
        if method == "interleave":
            raise InvalidArgumentError("'interleave' places formed micro-batches; use it with reorder_only=True")
        if groups == 1:
            parts = [(0, np.arange(c.size))]
        else:
            gcap = None if cap is None else cap * g * m
            coarse, used = _pack(c, s, groups, method, gcap)
            # the samples of each group that has any, in input order (the others are
            # left deferred below); an empty group places nothing
            by_group = np.argsort(coarse, kind="stable")
            qs, starts = np.unique(coarse[by_group], return_index=True)
            parts = [(int(q), mine) for q, mine in zip(qs.tolist(), np.split(by_group, starts[1:])) if q >= 0]
        for q, mine in parts:
            k = g * m
            packed, fine_used = _pack(c[mine], None if s is None else s[mine], k, method, cap)
            if fine_used != method:
                used = fine_used
            ok = packed >= 0
            # the bins in use are a prefix (see _pack): place those
            unit = np.bincount(packed[ok], weights=c[mine][ok], minlength=int(packed.max(initial=-1)) + 1)
            ub, uj = _place(unit, g, m, placement)
            buckets[mine[ok]] = ub[packed[ok]] + q * g
            bins[mine[ok]] = uj[packed[ok]]
        unplaced = np.nonzero(buckets < 0)[0]
        if unplaced.size and on_overflow == "error":
            raise CapacityError(
                f"{unplaced.size} sample(s) fit in no bin: capacity {cap:g} tokens x {n * m} bins "
                f"for {int(s.sum()) if s is not None else 0} tokens; use on_overflow='defer' to carry them over",
                unplaced.tolist(),
            )
    grid = np.zeros((n, m))
    ok = buckets >= 0
    np.add.at(grid, (buckets[ok], bins[ok]), c[ok])
    bin_sizes = None
    if s is not None:
        bin_sizes = np.zeros((n, m))
        np.add.at(bin_sizes, (buckets[ok], bins[ok]), s[ok])
    return BalanceResult(
        buckets=buckets, bins=bins, num_buckets=n, num_bins=m, method=used,
        deferred=np.nonzero(~ok)[0], stats=_stats(grid), bin_sizes=bin_sizes,
    )


def balance(
    costs: Sequence[float] | np.ndarray,
    num_buckets: int,
    num_bins: int = 1,
    method: str = "greedy",
    capacity: float | None = None,
    *,
    sizes: Sequence[float] | np.ndarray | None = None,
    reorder_only: bool = False,
    group_size: int | None = None,
    on_overflow: str = "error",
    placement: str | None = None,
) -> list[tuple[int, int] | None]:
    """Assign samples to ``(bucket, bin)`` — (DP rank, micro-batch) — minimising the
    most expensive bin and rank.

    Args:
        costs: modelled cost per sample (e.g. :func:`~youmu.planning.attention_cost`).
        num_buckets: ranks (the distribute axis: DP, DP×CP, or all ranks).
        num_bins: micro-batches per rank.
        method: ``"greedy"`` (LPT), ``"kk"`` (Karmarkar–Karp) or, with
            ``reorder_only``, ``"interleave"`` (snake tiers).
        capacity: tokens per bin (``sizes`` required); samples that fit nowhere
            raise :class:`CapacityError` or, with ``on_overflow="defer"``, get ``None``
            (carry them to the next step).
        sizes: tokens per sample (for ``capacity``; reported per bin otherwise).
        reorder_only: each cost is a formed micro-batch; keep its composition and only
            choose its (rank, slot); at most ``num_buckets * num_bins`` of them.
        group_size: balance hierarchically: first over ``num_buckets / group_size``
            groups, then inside each group (faster for many buckets; MegaScale-Data's
            ``distribute(group_size=)``).
        on_overflow: ``"error"`` or ``"defer"``.
        placement: how bins become (rank, slot): ``"interleave"`` (default after
            packing) minimises ``Σ_j max_r cost(r, j)`` exactly — for ranks that
            synchronise on every micro-batch (pipeline/context parallelism, a colocated
            encoder's all-to-all); ``"greedy"``/``"kk"`` give every rank ``num_bins``
            bins with equal totals — for ranks that only meet at the gradient
            all-reduce. Default with ``reorder_only``: ``method``.

    Returns:
        One ``(bucket, bin)`` per sample (``None`` if deferred). Bin ``j`` of every
        bucket holds similar costs (heaviest first), and no bin is left empty while
        another holds two samples.

    >>> balance([9, 1, 1, 1, 8, 2], num_buckets=2, num_bins=1, method="kk")  # 9+1+1 | 1+8+2
    [(1, 0), (1, 0), (0, 0), (1, 0), (0, 0), (0, 0)]
    >>> balance([3, 2, 2, 1], num_buckets=2, num_bins=2, reorder_only=True, method="interleave")
    [(0, 0), (1, 0), (1, 1), (0, 1)]
    """
    return balance_detailed(
        costs, num_buckets, num_bins, method, capacity, sizes=sizes, reorder_only=reorder_only,
        group_size=group_size, on_overflow=on_overflow, placement=placement,
    ).assignment
