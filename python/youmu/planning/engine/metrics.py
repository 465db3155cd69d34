"""Balancing's results and metrics: how uneven an assignment of samples to (bucket,
bin) — (DP rank, micro-batch) — is (:class:`Imbalance`, :func:`imbalance`,
:func:`compare`), and what :func:`~youmu.planning.engine.balance.balance_detailed` returns
(:class:`BalanceResult`).

Example:
    >>> imbalance([4, 4, 2], [(0, 0), (1, 0), (1, 0)], num_buckets=2).bucket_costs.tolist()
    [4.0, 6.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu._internal.args import float_array, int_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["BalanceResult", "Imbalance", "MAX_SLOTS", "check_grid", "check_slots", "compare", "cost_array",
           "grid_stats", "imbalance"]

#: The most (bucket, bin) slots — (rank, micro-batch) pairs — one step may have:
#: 16,384 ranks × 64 micro-batches. The statistics of a result hold a float per slot
#: (``Imbalance.bin_costs``, ``BalanceResult.bin_sizes``), so a step costs a few
#: numpy words per slot even when it has fewer samples than slots; everything else
#: grows with the samples, except KK *placement* (``placement="kk"``, or
#: ``method="kk"`` with ``reorder_only``), whose equal-count differencing runs over
#: every slot. A larger grid is almost surely a mistake (``num_buckets`` given a
#: sample count, say) that would otherwise grow until the machine runs out of memory.
MAX_SLOTS = 1 << 20


def check_grid(num_buckets: Any, num_bins: Any, names: tuple[str, str] = ("num_buckets", "num_bins")) -> None:
    """``num_buckets`` × ``num_bins`` positive ints whose product is at most
    :data:`MAX_SLOTS` (``names``: the arguments as the caller calls them).

    >>> check_grid(10**9, 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: num_buckets × num_bins = 1,000,000,000 × 1 slots per step is more than ...
    """
    check_slots(int_arg(names[0], num_buckets, minimum=1), int_arg(names[1], num_bins, minimum=1), names)


def check_slots(n: int, m: int, names: tuple[str, str] = ("num_buckets", "num_bins")) -> None:
    """:func:`check_grid` of two ints checked already (each where it was given): their
    product at most :data:`MAX_SLOTS`.

    >>> check_slots(4, 2)
    """
    if n * m > MAX_SLOTS:
        raise InvalidArgumentError(f"{names[0]} × {names[1]} = {n:,} × {m:,} slots per step is more than "
                                   f"youmu.planning plans (MAX_SLOTS = {MAX_SLOTS:,})")


def cost_array(costs: Any, name: str = "costs") -> np.ndarray:
    """``costs`` as a float array of finite costs >= 0 (an argument error names ``name``)."""
    c = float_array(costs, name)
    if c.size and (not np.isfinite(c).all() or c.min() < 0):
        raise InvalidArgumentError(f"{name} must be finite and >= 0")
    return c


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
    c = cost_array(costs)
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
    return grid_stats(grid)


def grid_stats(grid: np.ndarray) -> Imbalance:
    """The :class:`Imbalance` of a (rank, micro-batch) grid of costs."""
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

    >>> from youmu.planning import balance_detailed
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
