"""Resume on another topology: the pure math (numpy, no torch, no I/O).

An epoch of a youmu stream is a sequence of *units*: windows of the permuted page order
(``"page"``, ``"local"``, ``"none"``), runs of indices (``MapStream``), or in
``"row"`` mode each shard's block of permuted positions (row-mode jobs deal
contiguous blocks of the positions left, :func:`deal`). A job of ``W`` ranks × ``K_r`` DataLoader workers deals
them to its shards (:mod:`youmu.order.sharding`), and a shard at position ``p`` has delivered
a prefix of its units: whole units, then part of one (the row order inside a unit is a
pure function too). So what a job left undelivered is described by its layout and one
position per shard — a *level*. The remaining units (the partial ones trimmed at their
offset), in the order the old job dealt them, are the unit sequence of the next job,
which deals them anew round-robin over its own shards (``drop_last``: contiguous equal
row ranges per rank, as at the first level). A chain of levels composes any number of
resizes within an epoch (4 ranks → 3 → 8).

A unit is ``(base, lo, hi, head)``: rows ``[lo, hi)`` of base unit ``base`` (a window,
a run; row mode has one base unit, the permuted positions), and ``head`` tokens of row
``lo`` already packed (:func:`youmu.torch.pack`). Units are only ever trimmed, never
merged, so reading one is reading a window and slicing it: no row is read or skipped
to get back, and a resume costs index math over the epoch's units, independent of the
position.

State size: a level holds, per old rank, its worker count and per worker one position
(two ints with packing): about ``3`` ints per old shard, independent of the rows
consumed. A chain holds one level per job that ran in the epoch.

Example:
    >>> import numpy as np
    >>> origin = Origin(rows=np.array([4, 4, 4, 4, 2]), dealing="rr")
    >>> first = Level(world_size=2, num_workers=(1, 1), positions=((5,), (4,)))   # rank 0: 5 rows, rank 1: 4
    >>> units = resolve(origin, [first], rank=0, world_size=1, worker=0, num_workers=1, drop_last=False)
    >>> units.base.tolist(), units.lo.tolist(), units.hi.tolist()   # window 2 from row 1, windows 3 and 4
    ([2, 3, 4], [1, 0, 0], [4, 4, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from youmu.errors import StateError
from youmu.order.modes import ShuffleMode
from youmu.order.sharding import Shard, round_robin
from youmu.order.shuffle import ShardPlan, balanced_windows, row_chunk_rows, row_range

__all__ = [
    "Level", "Units", "Origin", "resolve", "remaining", "remaining_after", "deal", "shard_plan",
]

_I64 = np.int64


@dataclass(frozen=True)
class Level:
    """One job of an epoch's chain: its ``world_size`` ranks, ``num_workers[r]`` shards
    on rank ``r``, and per shard its ``positions[r][k]`` (rows or sampler positions
    delivered), ``tokens[r][k]`` (tokens of the next row already packed, or ``None``)
    and ``pending[r]`` (positions read but not delivered, or ``None``: a
    ``DynamicBatchLoader``'s held samples).

    >>> Level(2, (1, 1), ((3,), (2,))).shards
    2
    """

    world_size: int
    num_workers: tuple[int, ...]
    positions: tuple[tuple[int, ...], ...]
    tokens: tuple[tuple[int, ...], ...] | None = None
    pending: tuple[tuple[int, ...], ...] | None = None

    @property
    def shards(self) -> int:
        """Ranks × workers."""
        return sum(self.num_workers)


@dataclass(frozen=True)
class Units:
    """A sequence of units (see the module doc), as parallel int64 arrays; ``key``
    orders units of one level (their index in the sequence the level dealt)."""

    base: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    head: np.ndarray
    key: np.ndarray

    @staticmethod
    def make(base: Any, lo: Any, hi: Any, head: Any = None, key: Any = None) -> Units:
        base = np.asarray(base, dtype=_I64)
        z = np.zeros(len(base), dtype=_I64)
        return Units(base, np.asarray(lo, dtype=_I64), np.asarray(hi, dtype=_I64),
                     z.copy() if head is None else np.asarray(head, dtype=_I64),
                     base.copy() if key is None else np.asarray(key, dtype=_I64))

    def __len__(self) -> int:
        return len(self.base)

    @property
    def rows(self) -> np.ndarray:
        return self.hi - self.lo

    def take(self, idx: Any) -> Units:
        return Units(self.base[idx], self.lo[idx], self.hi[idx], self.head[idx], self.key[idx])

    @staticmethod
    def concat(parts: Sequence[Units]) -> Units:
        if not parts:
            return Units.make([], [], [])
        return Units(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("base", "lo", "hi", "head", "key")))


@dataclass(frozen=True)
class Origin:
    """How the epoch's first job dealt its units.

    ``rows``: rows of every base unit in order. ``dealing``: ``"rr"`` (units
    round-robin: page windows, ``MapStream`` runs), ``"balanced"`` (page modes with
    ``drop_last``: equal contiguous row ranges per rank), ``"block"`` / ``"block-balanced"``
    (row mode: ``rows`` is ``[N]``, and a shard's one unit is its contiguous block of
    permuted positions; resumed jobs deal blocks too, see :func:`deal`).
    """

    rows: np.ndarray
    dealing: str = "rr"

    @property
    def block(self) -> bool:
        """Row mode: shards take contiguous blocks of positions, not whole units."""
        return self.dealing.startswith("block")

    def units(self, shard: Shard) -> Units:
        rows = np.asarray(self.rows, dtype=_I64)
        if self.dealing == "rr":
            r = round_robin(len(rows), shard)
            ids = np.arange(r.start, r.stop, r.step, dtype=_I64)
            return Units.make(ids, np.zeros(len(ids), dtype=_I64), rows[ids])
        if self.dealing == "balanced":
            ids, skip, take = balanced_windows(rows, shard)
            return Units.make(ids, skip, skip + take)
        lo, hi = row_range(int(rows.sum()), shard, self.dealing == "block-balanced")
        return Units.make([0], [lo], [hi], key=[0]).take(slice(0, 1 if hi > lo else 0))


def _cut(units: Units, cum: np.ndarray, lo: int, hi: int) -> Units:
    """Rows ``[lo, hi)`` of the concatenated ``units`` (``cum``: their prefix sums)."""
    if hi <= lo:
        return units.take(slice(0, 0))
    first = int(np.searchsorted(cum, lo, side="right")) - 1
    last = int(np.searchsorted(cum, hi, side="left")) - 1
    ids = np.arange(first, last + 1, dtype=_I64)
    mine = units.take(ids)
    start = np.maximum(cum[ids], lo) - cum[ids]
    stop = np.minimum(cum[ids + 1], hi) - cum[ids]
    head = np.where(start == 0, mine.head, 0)  # a unit cut at its front starts at a fresh row
    mine = Units(mine.base, mine.lo + start, mine.lo + stop, head, mine.key)
    return mine.take(mine.rows > 0)


def deal(units: Units, shard: Shard, drop_last: bool, block: bool = False) -> Units:
    """The units a shard of a resumed job takes from the remaining ``units``: rank
    ``r`` takes rows ``[⌊r·N/W⌋, ⌊(r+1)·N/W⌋)`` of them (``drop_last``:
    ``[r·T, (r+1)·T)``, ``T = ⌊N/W⌋``), then every ``num_workers``-th unit of the
    rank's goes to the worker. With ``block`` (row mode, where positions are already
    random): a contiguous block of the rank's rows per worker, as
    :func:`youmu.order.sharding.block` splits an epoch.

    Rows, not units, are dealt: what a preempted job leaves is whole windows and
    windows cut anywhere, and dealing those round-robin gave new ranks shares far apart
    (20, 15 and 16 rows of 51), which a trainer that runs every rank the same number of
    steps cuts to the smallest. The remaining units are in the shuffled order of the
    epoch, so a rank's contiguous run of them is as random as a dealt one.

    >>> u = Units.make([0, 1, 2, 3], [0, 0, 0, 0], [3, 3, 3, 1])
    >>> deal(u, Shard(1, 2), drop_last=False).lo.tolist(), deal(u, Shard(1, 2), drop_last=True).lo.tolist()
    ([2, 0, 0], [2, 0, 0])
    """
    cum = np.concatenate([[0], np.cumsum(units.rows, dtype=_I64)])
    total, w, r = int(cum[-1]), shard.world_size, shard.rank
    lo, hi = (r * (total // w), (r + 1) * (total // w)) if drop_last else (total * r // w, total * (r + 1) // w)
    if not block:
        mine = _cut(units, cum, lo, hi)
        return mine.take(slice(shard.worker, None, shard.num_workers))
    m, k, nw = hi - lo, shard.worker, shard.num_workers
    return _cut(units, cum, lo + m * k // nw, lo + m * (k + 1) // nw)


def remaining(units: Units, position: int, tokens: int = 0, *, where: str = "") -> Units:
    """What a shard that delivered ``position`` rows of ``units`` (and ``tokens`` of
    the next row, packing) has left: the unit it stopped in, trimmed, and those after.

    >>> remaining(Units.make([5, 7], [0, 0], [4, 4]), 6).lo.tolist()
    [2]
    """
    rows = units.rows
    cum = np.concatenate([[0], np.cumsum(rows, dtype=_I64)])
    total = int(cum[-1])
    if position > total or (tokens and position >= total):
        raise StateError(f"state field 'positions'{where}={position}" + (f" (tokens {tokens})" if tokens else "")
                         + f" is past the end of that shard ({total} rows)")
    c = int(np.searchsorted(cum, position, side="right")) - 1
    rest = units.take(slice(c, None))
    if len(rest):
        offset = position - int(cum[c])
        lo, head = rest.lo.copy(), rest.head.copy()
        lo[0] += offset
        head[0] = tokens if tokens else (head[0] if offset == 0 else 0)
        rest = Units(rest.base, lo, rest.hi, head, rest.key)
    return rest.take(rest.rows > 0)


def _next_sequence(parts: Sequence[Units]) -> Units:
    """The remaining units of one level in the order that level dealt them (then by
    row offset: a unit split between two ranks keeps its rows in order)."""
    cat = Units.concat(parts)
    order = np.lexsort((cat.lo, cat.key))
    out = cat.take(order)
    return Units(out.base, out.lo, out.hi, out.head, np.arange(len(out), dtype=_I64))


def remaining_after(origin: Origin, levels: Sequence[Level], drop_last: bool,
                    between: Callable[[int, Units], Units] | None = None) -> Units:
    """The units no job of the chain delivered, in dealing order. ``between(depth,
    units)`` may rewrite what the jobs before level ``depth`` left, before that level
    deals it (``depth == len(levels)``: after the last one) — a mixture whose weights
    changed at a resume replaces the units past its switch point
    (:mod:`youmu.mixture.change`)."""
    seq: Units | None = None
    for depth, level in enumerate(levels):
        if seq is not None and between is not None:
            seq = between(depth, seq)
        parts = []
        for r in range(level.world_size):
            for k in range(level.num_workers[r]):
                shard = Shard(r, level.world_size, k, level.num_workers[r])
                units = origin.units(shard) if seq is None else deal(seq, shard, drop_last, origin.block)
                tok = level.tokens[r][k] if level.tokens is not None else 0
                parts.append(remaining(units, level.positions[r][k], tok,
                                       where=f" of level {depth}, rank {r}, worker {k}"))
        seq = _next_sequence(parts)
    if seq is None:
        raise StateError("a merged state holds no level")
    return seq if between is None else between(len(levels), seq)


def resolve(origin: Origin, levels: Sequence[Level], *, rank: int, world_size: int, worker: int, num_workers: int,
            drop_last: bool) -> Units:
    """The units of one shard of a job that resumes after ``levels``."""
    shard = Shard(rank, world_size, worker, num_workers)
    return deal(remaining_after(origin, levels, drop_last), shard, drop_last, origin.block)


def shard_plan(units: Units, window_rows: np.ndarray | None, *, mode: ShuffleMode, page_rows: np.ndarray,
               window_pages: int, seed: int, epoch: int, shard: Shard, drop_last: bool, page_slices: int) -> ShardPlan:
    """The :class:`~youmu.order.shuffle.ShardPlan` that reads ``units`` (of a resumed epoch):
    each unit is a window (``window_rows``: rows of every window) sliced at ``[lo, hi)``,
    or in row mode a range of permuted positions, read in chunks of
    :func:`~youmu.order.shuffle.row_chunk_rows` positions."""
    row_mode = mode.permutes_rows
    if row_mode:
        size = row_chunk_rows(window_pages)
        starts = [np.arange(lo, hi, size, dtype=_I64) for lo, hi in zip(units.lo.tolist(), units.hi.tolist())]
        stops = [np.minimum(st + size, hi) for st, hi in zip(starts, units.hi.tolist())]
        units = Units.make(np.zeros(sum(map(len, starts)), dtype=_I64), np.concatenate([np.zeros(0, _I64), *starts]),
                           np.concatenate([np.zeros(0, _I64), *stops]))
    rows = units.rows
    cum = np.concatenate([[0], np.cumsum(rows, dtype=_I64)])
    page_rows = np.asarray(page_rows, dtype=_I64)
    return ShardPlan(
        mode=mode, num_pages=len(page_rows), num_rows=int(page_rows.sum()), window_pages=window_pages,
        window_rows_size=row_chunk_rows(window_pages) if row_mode else 0, seed=seed, epoch=epoch, rank=shard.rank,
        world_size=shard.world_size, worker=shard.worker, num_workers=shard.num_workers,
        window_ids=np.arange(len(units), dtype=_I64) if row_mode else units.base, window_rows=rows,
        total_rows=int(cum[-1]), cum_rows=cum,
        window_skip=np.zeros(len(units), dtype=_I64) if row_mode else units.lo, balanced=drop_last,
        window_full_rows=rows if window_rows is None else np.asarray(window_rows, dtype=_I64)[units.base],
        page_slices=page_slices, page_rows=page_rows if page_slices > 1 else np.zeros(0, dtype=_I64),
        row_starts=units.lo if row_mode else None,
    )
