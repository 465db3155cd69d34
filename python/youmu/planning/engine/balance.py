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
:mod:`youmu.planning.balanced_loader` — is exactly the unbalanced one's ("To keep the global
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

from collections.abc import Sequence

import numpy as np

from youmu._internal.args import bool_arg, choice_arg, float_arg, opt_int_arg
from youmu.errors import CapacityError, InvalidArgumentError

# results and metrics, packing and placement live in their own modules
from youmu.planning.engine.metrics import BalanceResult, check_grid, cost_array, grid_stats
from youmu.planning.engine.packers import pack_buckets
from youmu.planning.engine.placement import place_units

__all__ = ["METHODS", "balance", "balance_detailed", "sizes_and_capacity"]

METHODS = ("greedy", "kk", "interleave")
_OVERFLOW = ("error", "defer")

# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def sizes_and_capacity(
    sizes: Sequence[float] | np.ndarray | None, capacity: float | None, n: int, of: str
) -> tuple[np.ndarray | None, float | None]:
    """The per-sample ``sizes`` (one per entry of ``of``) and the per-bin ``capacity``
    in the same unit, checked together: a capacity needs sizes to be measured against."""
    s: np.ndarray | None = None
    if sizes is not None:
        s = cost_array(sizes, "sizes")
        if s.size != n:
            raise InvalidArgumentError(f"sizes has {s.size} entries for {n} {of}")
    cap: float | None = None
    if capacity is not None:
        cap = float_arg("capacity", capacity, positive=True)
        if s is None:
            raise InvalidArgumentError("capacity is in tokens: pass sizes= (tokens per sample) with it")
    return s, cap


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
    c = cost_array(costs)
    check_grid(num_buckets, num_bins)
    choice_arg("method", method, METHODS)
    choice_arg("on_overflow", on_overflow, _OVERFLOW)
    reorder_only = bool_arg("reorder_only", reorder_only)
    if placement is None:
        placement = method if reorder_only else "interleave"
    choice_arg("placement", placement, METHODS)
    s, cap = sizes_and_capacity(sizes, capacity, c.size, "costs")
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
            buckets[:], bins[:] = place_units(c, n, m, placement)
        else:
            # coarse: groups of g*m micro-batches each, then placement inside each group
            gb, _ = place_units(c, groups, g * m, "greedy" if placement == "interleave" else placement)
            for q in range(groups):
                mine = np.nonzero(gb == q)[0]
                b, j = place_units(c[mine], g, m, placement)
                buckets[mine], bins[mine] = b + q * g, j
    else:
        if method == "interleave":
            raise InvalidArgumentError("'interleave' places formed micro-batches; use it with reorder_only=True")
        if groups == 1:
            parts = [(0, np.arange(c.size))]
        else:
            gcap = None if cap is None else cap * g * m
            coarse, used = pack_buckets(c, s, groups, method, gcap)
            # the samples of each group that has any, in input order (the others are
            # left deferred below); an empty group places nothing
            by_group = np.argsort(coarse, kind="stable")
            qs, starts = np.unique(coarse[by_group], return_index=True)
            parts = [(int(q), mine) for q, mine in zip(qs.tolist(), np.split(by_group, starts[1:])) if q >= 0]
        for q, mine in parts:
            k = g * m
            packed, fine_used = pack_buckets(c[mine], None if s is None else s[mine], k, method, cap)
            if fine_used != method:
                used = fine_used
            ok = packed >= 0
            # the bins in use are a prefix (see pack_buckets): place those
            unit = np.bincount(packed[ok], weights=c[mine][ok], minlength=int(packed.max(initial=-1)) + 1)
            ub, uj = place_units(unit, g, m, placement)
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
        deferred=np.nonzero(~ok)[0], stats=grid_stats(grid), bin_sizes=bin_sizes,
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
