"""Shuffle plans: which rows a shard of a page-indexed dataset delivers, in which
order, per epoch.

Everything here is a pure function of (page row counts, mode, window size, seed, epoch,
shard, number of shards): no I/O, no state. The row at position ``k`` of a shard's
stream is determined by those integers alone, which is what makes the loader resumable
from a few integers and testable by property tests.

Shuffle modes (:mod:`youmu.order.modes`: one file each, a registry by name) give the
orders; a plan asks them and never which mode it holds:

* ``"page"`` — pages in keyed-permuted order, cut into *windows* of ``window_pages``
  consecutive permuted pages; the rows of a window are shuffled together by a second
  keyed permutation (Youmu's aggressive buffer shuffle, made stateless). With
  ``page_slices = k > 1`` the permuted units are *page slices* (every page cut into
  ``k`` row ranges): a window of about the same rows then draws from ``k`` times as
  many pages, each contributing a ``1/k`` slice, at ``k`` times the page reads (every
  page is read once per slice). What a model sees early in an epoch depends mostly on
  the distinct pages per window (``benches/shuffle_quality.py``).
* ``"local"`` — pages in file order, windows shuffled internally: the streaming
  shuffle-buffer baseline other loaders use.
* ``"none"`` — file order.
* ``"row"`` — every row placed independently by a keyed permutation over all rows; read
  in chunks of ``window_rows`` positions (one page read per distinct page in a chunk).

A page-window mode's windows are consecutive runs of its one unit order
(:meth:`~youmu.order.modes.ShuffleMode.page_order`, units being pages or page slices):
the epoch's window sizes (:func:`all_window_rows`) and each window's pages
(:meth:`ShardPlan.pages_of`) are both read from it, by :func:`_window_units`.

Shards take whole windows round-robin (:func:`youmu.order.sharding.round_robin`), never row
stripes, so no two workers ever read the same page: window ``w`` belongs to rank
``w % world_size``, and among a rank's windows the k-th goes to worker
``k % num_workers``. A rank's rows therefore do not depend on how many DataLoader
workers it uses. In ``"row"`` mode each rank takes a contiguous block of the permuted
positions and each worker a contiguous sub-block of it (:func:`youmu.order.sharding.block`).

Example:
    >>> import numpy as np
    >>> from youmu.order.shuffle import ShardPlan
    >>> p = ShardPlan.build(np.array([3, 3, 2]), "none", window_pages=1, seed=0, epoch=0, rank=0, world_size=2)
    >>> p.total_rows, p.window_ids.tolist()
    (5, [0, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu._internal.args import choice_arg, int_arg, opt_int_arg
from youmu.errors import InvalidArgumentError, PageOutOfRangeError
from youmu.order.modes import MODES, ShuffleMode
from youmu.order.sharding import Shard, block, round_robin

__all__ = [
    "DEFAULT_WINDOW_ROWS",
    "DEFAULT_WINDOW_PAGES",
    "WINDOWS_IN_FLIGHT",
    "ShardPlan",
    "window_pages_for",
    "row_chunk_rows",
    "all_window_rows",
    "slice_rows",
    "MAX_PAGE_SLICES",
    "dropped_rows",
    "positions_to_rows",
    "global_rows",
    "shuffle_args",
    "window_args",
    "row_range",
    "balanced_windows",
]


#: The most slices a page may be cut into (``page_slices``).
MAX_PAGE_SLICES = 64

def shuffle_args(shuffle: Any, page_slices: Any) -> tuple[ShuffleMode, int]:
    """``(shuffle, page_slices)`` checked together (the one place they are): a mode of
    :data:`~youmu.order.modes.MODES`, parsed to its :class:`ShuffleMode`, and 1 to
    :data:`MAX_PAGE_SLICES` slices per page, more than one only where the mode
    :attr:`~ShuffleMode.slices_pages`.

    >>> shuffle_args("page", 4)
    ('page', 4)
    >>> shuffle_args("row", 2)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: page_slices=2 needs shuffle='page' (got shuffle='row')
    """
    mode = ShuffleMode(choice_arg("shuffle", shuffle, tuple(MODES)))
    k = int_arg("page_slices", page_slices, minimum=1, maximum=MAX_PAGE_SLICES)
    if k > 1 and not mode.slices_pages:
        sliced = ", ".join(repr(m.value) for m in ShuffleMode if m.slices_pages)
        raise InvalidArgumentError(f"page_slices={k} needs shuffle={sliced} (got shuffle={mode!r})")
    return mode, k


def window_args(buffer_size: Any, memory_budget: Any, read_ahead: Any = None) -> tuple[int | None, ...]:
    """``(buffer_size, memory_budget, read_ahead)`` checked (the one place they are):
    each ``None`` or an int, at least 1 (``read_ahead``: at least 0).

    >>> window_args(4096, None, 0)
    (4096, None, 0)
    >>> window_args(0, None)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: buffer_size must be a positive int, got 0
    """
    return (opt_int_arg("buffer_size", buffer_size, minimum=1), opt_int_arg("memory_budget", memory_budget, minimum=1),
            opt_int_arg("read_ahead", read_ahead, minimum=0))


#: Windows alive at once while streaming with one window read ahead (the default for
#: local files): the one being consumed, the next one (read ahead by Rust threads)
#: and, while that is assembled, its shuffled copy. A ``memory_budget`` sizes windows
#: for this many, whatever the read-ahead, the storage or the I/O options, so the
#: window layout (the shuffle) depends on the data and the settings alone; deeper
#: read-ahead fits only where the budget leaves room for it
#: (:func:`youmu.streams.rowstream.window_layout`).
WINDOWS_IN_FLIGHT = 3


#: Rows per window when ``buffer_size`` is left to youmu...
DEFAULT_WINDOW_ROWS = 8192
#: ... and the fewest pages a default window holds: windows of 32 pages or more trained
#: as well as a full row shuffle in ``benches/shuffle_quality.py`` (fewer pages per
#: window keep part of the no-shuffle degradation: 34% with 8).
DEFAULT_WINDOW_PAGES = 32


def window_pages_for(
    page_rows: np.ndarray,
    buffer_size: int | None,
    world_size: int = 1,
    *,
    page_bytes: np.ndarray | None = None,
    memory_budget: int | None = None,
    in_flight: int = WINDOWS_IN_FLIGHT,
    checked: bool = False,
) -> int:
    """Pages per window so a window holds about ``buffer_size`` rows (``None``: about
    :data:`DEFAULT_WINDOW_ROWS` rows and at least :data:`DEFAULT_WINDOW_PAGES` pages) —
    but never so many that some rank would get no window: a small dataset must still give every DDP
    rank data (a rank with none would leave the others waiting in their collectives).
    Depends on the world size only, so a rank's rows never depend on its worker count.

    With ``memory_budget`` (bytes) and ``page_bytes`` (estimated decoded bytes per page,
    :meth:`PageIndex.page_decoded_bytes`), windows are sized in bytes, not rows: small
    enough that ``in_flight`` windows of the largest pages fit the budget
    (:data:`WINDOWS_IN_FLIGHT`, whatever the read-ahead: the window is part of the
    shuffle, the read-ahead only of how it is read), so 64 rows of 8 MB images make a smaller window than 64 text
    rows. A budget that cannot hold ``in_flight`` single pages gives windows of one
    page: the stream then reads them one at a time, without read-ahead
    (:func:`youmu.streams.rowstream.window_layout`), rather than refusing the data.

    ``buffer_size`` and ``memory_budget`` are checked here (as
    :class:`~youmu.streams.spec.StreamSpec` checks them) unless ``checked`` says a spec did.

    >>> window_pages_for(np.array([100] * 50), 1000)
    10
    >>> window_pages_for(np.array([100] * 50), 1000, page_bytes=np.array([1 << 20] * 50), memory_budget=12 << 20)
    4
    >>> window_pages_for(np.array([25] * 50), 1000, page_bytes=np.array([25 << 20] * 50), memory_budget=64 << 20)
    1
    """
    if not checked:
        window_args(buffer_size, memory_budget)
    if len(page_rows) == 0:
        return 1
    mean = max(float(page_rows.mean()), 1.0)
    if buffer_size is None:
        wanted = max(int(round(DEFAULT_WINDOW_ROWS / mean)), DEFAULT_WINDOW_PAGES)
    else:
        wanted = max(1, int(round(buffer_size / mean)))
    if memory_budget is not None:
        if page_bytes is None or len(page_bytes) != len(page_rows):
            raise InvalidArgumentError("memory_budget needs the estimated decoded bytes of every page (page_bytes)")
        biggest = max(int(np.max(page_bytes)), 1)
        wanted = min(wanted, max(1, int(memory_budget) // (in_flight * biggest)))
    return max(1, min(wanted, len(page_rows) // max(world_size, 1)))


def row_chunk_rows(window_pages: int) -> int:
    """Row mode reads this many random rows at a time: about ``window_pages`` distinct
    pages, i.e. the memory of one page-mode window (at least 16 rows so page reads
    still run in parallel)."""
    return max(16, window_pages)


@dataclass(frozen=True)
class ShardPlan:
    """The rows one shard delivers in one epoch.

    ``window_ids`` are the windows (page windows, or row chunks in ``"row"`` mode) the
    shard owns, in stream order; ``window_rows[i]`` the rows it takes from each,
    starting ``window_skip[i]`` rows into the window's shuffled rows (non-zero only
    where ``drop_last`` splits a window between two ranks); ``total_rows`` the rows it
    delivers.

    ``drop_last`` (``balanced=True``): every rank delivers exactly ``⌊N / world_size⌋``
    of the epoch's ``N`` rows, so at most ``world_size − 1`` rows are dropped. The
    epoch's windows are cut into ``world_size`` contiguous row ranges instead of being
    dealt round-robin; a window on a boundary is read by both ranks that share it (at
    most ``world_size − 1`` windows per epoch), and a rank's windows go round-robin to
    its workers.
    """

    mode: ShuffleMode
    num_pages: int
    num_rows: int
    window_pages: int
    window_rows_size: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    worker: int
    num_workers: int
    window_ids: np.ndarray
    window_rows: np.ndarray
    total_rows: int
    cum_rows: np.ndarray = field(repr=False)
    window_skip: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    balanced: bool = False
    #: rows of each whole window (what its row order permutes), page modes
    window_full_rows: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: page mode: row-range slices per page (1: whole pages)
    page_slices: int = 1
    #: rows of every page (kept when page slices need them to cut pages)
    page_rows: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: row mode, resumed on another topology (:mod:`youmu.order.resume`): each chunk's first
    #: permuted position (``None``: chunks are consecutive from the shard's block)
    row_starts: np.ndarray | None = field(repr=False, default=None)

    @staticmethod
    def build(
        page_rows: np.ndarray,
        mode: ShuffleMode | str,
        *,
        window_pages: int,
        seed: int,
        epoch: int,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        window_rows: int | None = None,
        cap: int | None = None,
        balanced: bool = False,
        page_slices: int = 1,
    ) -> ShardPlan:
        mode, k = shuffle_args(mode, page_slices)
        shard = Shard(rank, world_size, worker, num_workers)
        int_arg("window_pages", window_pages, minimum=1)
        return ShardPlan._from_checked(page_rows, mode, shard, window_pages=window_pages, seed=seed, epoch=epoch,
                                       window_rows=window_rows, cap=cap, balanced=balanced, page_slices=k)

    @staticmethod
    def _from_checked(page_rows: np.ndarray, mode: ShuffleMode, shard: Shard, *, window_pages: int, seed: int,
                      epoch: int, window_rows: int | None = None, cap: int | None = None, balanced: bool = False,
                      page_slices: int = 1) -> ShardPlan:
        """:meth:`build` from settings checked already (a :class:`youmu.streams.spec.StreamSpec`'s,
        laid out by its :class:`~youmu.streams.spec.StreamLayout`): nothing checked again."""
        rank, world_size, worker, num_workers, k = (shard.rank, shard.world_size, shard.worker,
                                                    shard.num_workers, page_slices)
        page_rows = np.asarray(page_rows, dtype=np.int64)
        n_pages = len(page_rows)
        n_rows = int(page_rows.sum())
        skip = None
        full = None
        if mode.permutes_rows:
            # A chunk of c random rows touches ~c distinct pages, and every one is read
            # and decoded whole: size chunks by pages in memory, not by rows.
            size = int(window_rows) if window_rows else max(1, window_pages)
            lo, hi = row_range(n_rows, shard, balanced)
            starts = np.arange(lo, hi, size, dtype=np.int64)
            rows = np.minimum(starts + size, hi) - starts
            ids = np.arange(len(starts), dtype=np.int64)  # chunk number within the block
        else:
            size = 0
            rows_all = all_window_rows(page_rows, mode, window_pages, seed, epoch, page_slices=k)
            if balanced:
                ids, skip, rows = balanced_windows(rows_all, shard)
            else:
                mine = round_robin(len(rows_all), shard)
                ids = np.arange(mine.start, mine.stop, mine.step, dtype=np.int64)
                rows = rows_all[ids]
            full = rows_all[ids]
        if skip is None:
            skip = np.zeros(len(ids), dtype=np.int64)
        if full is None:
            full = rows
        cum = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
        total = int(cum[-1])
        if cap is not None:
            total = min(total, int(cap))
        return ShardPlan(
            mode=mode, num_pages=n_pages, num_rows=n_rows, window_pages=window_pages, window_rows_size=size,
            seed=seed, epoch=epoch, rank=rank, world_size=world_size, worker=worker, num_workers=num_workers,
            window_ids=ids, window_rows=rows, total_rows=total, cum_rows=cum, window_skip=skip,
            balanced=bool(balanced), window_full_rows=full, page_slices=k,
            page_rows=page_rows if k > 1 else np.zeros(0, dtype=np.int64),
        )

    # -- positions ------------------------------------------------------------------
    def window_at(self, position: int) -> tuple[int, int]:
        """(index into ``window_ids``, offset within that window) of a stream position."""
        if not 0 <= position < self.total_rows:
            raise PageOutOfRangeError(f"position {position} outside the shard's {self.total_rows} rows")
        i = int(np.searchsorted(self.cum_rows, position, side="right") - 1)
        return i, position - int(self.cum_rows[i])

    def pages_of(self, i: int) -> np.ndarray:
        """Global page ids of the i-th window of this shard, in window order (with page
        slices: each page once, in the order its first slice appears)."""
        if self.mode.permutes_rows:
            raise InvalidArgumentError("row mode has no page windows; use rows_of()")
        units = _window_units(self.mode, self.num_pages, self.window_pages, self.seed, self.epoch,
                              self.page_slices, int(self.window_ids[i]))
        if self.page_slices == 1:
            return units
        pages = units // self.page_slices
        _, first = np.unique(pages, return_index=True)
        return pages[np.sort(first)]

    def row_order(self, i: int) -> np.ndarray | None:
        """Order of the window's rows (indices into the window's concatenated pages),
        or None for identity."""
        n = int(self.window_full_rows[i])
        order = self.mode.window_order(n, self.seed, self.epoch, int(self.window_ids[i]))
        if order is None:
            return None
        if self.page_slices > 1:
            # the window's slices as indices into its pages' concatenated rows, shuffled
            return self._slice_rows(i)[order.range(0, n)]
        return order.range(0, n)

    def _slice_rows(self, i: int) -> np.ndarray:
        """Page slices: the rows of the i-th window's slices, in unit order, as indices
        into the concatenated rows of :meth:`pages_of`."""
        k = self.page_slices
        units = _window_units(self.mode, self.num_pages, self.window_pages, self.seed, self.epoch, k,
                              int(self.window_ids[i]))
        pages = self.pages_of(i)
        offset = dict(zip(pages.tolist(), np.concatenate([[0], np.cumsum(self.page_rows[pages])[:-1]]).tolist()))
        parts = []
        for u in units.tolist():
            p, s = divmod(u, k)
            r = int(self.page_rows[p])
            lo, hi = r * s // k, r * (s + 1) // k
            parts.append(np.arange(offset[p] + lo, offset[p] + hi, dtype=np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def rows_of(self, i: int) -> np.ndarray:
        """Row mode: global row ids of the i-th chunk of this shard, in stream order."""
        if not self.mode.permutes_rows:
            raise InvalidArgumentError("rows_of() is for row mode")
        shard = Shard._from_checked(self.rank, self.world_size, self.worker, self.num_workers)  # checked at build
        if self.row_starts is not None:
            start = int(self.row_starts[i])
        else:
            lo, _ = row_range(self.num_rows, shard, self.balanced)
            start = lo + int(self.cum_rows[i])
        stop = start + int(self.window_rows[i])
        return self.mode.position_order(self.num_rows, self.seed, self.epoch).range(start, stop)


def row_range(n_rows: int, shard: Shard, balanced: bool) -> tuple[int, int]:
    """Row mode: the shard's block of the permuted positions; with ``balanced`` every
    rank's block has exactly ``⌊n / world_size⌋`` positions (the rest is dropped)."""
    if not balanced:
        return block(n_rows, shard)
    per_rank = n_rows // shard.world_size
    lo = shard.rank * per_rank
    return lo + per_rank * shard.worker // shard.num_workers, lo + per_rank * (shard.worker + 1) // shard.num_workers


def balanced_windows(rows_all: np.ndarray, shard: Shard) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``drop_last`` in page modes: (window ids, rows skipped at each window's start,
    rows taken from each) of the shard. Rank ``r`` takes rows ``[r·T, (r+1)·T)`` of the
    epoch's window sequence, ``T = ⌊N / world_size⌋``; its k-th window goes to worker
    ``k % num_workers``."""
    cum = np.concatenate([[0], np.cumsum(rows_all, dtype=np.int64)])
    per_rank = int(cum[-1]) // shard.world_size
    lo, hi = shard.rank * per_rank, (shard.rank + 1) * per_rank
    empty = np.zeros(0, dtype=np.int64)
    if per_rank == 0:
        return empty, empty, empty
    first = int(np.searchsorted(cum, lo, side="right")) - 1
    last = int(np.searchsorted(cum, hi, side="left")) - 1
    ids = np.arange(first, last + 1, dtype=np.int64)
    starts = np.maximum(cum[ids], lo)
    stops = np.minimum(cum[ids + 1], hi)
    keep = stops > starts  # empty windows (no rows) carry nothing
    ids, starts, stops = ids[keep], starts[keep], stops[keep]
    mine = slice(shard.worker, None, shard.num_workers)
    return ids[mine], (starts - cum[ids])[mine], (stops - starts)[mine]


def slice_rows(page_rows: np.ndarray, k: int) -> np.ndarray:
    """Rows of every page slice (unit ``page · k + s`` holds rows
    ``[R·s // k, R·(s+1) // k)`` of its page of ``R`` rows).

    >>> slice_rows(np.array([5, 2]), 2).tolist()
    [2, 3, 1, 1]
    """
    page_rows = np.asarray(page_rows, dtype=np.int64)
    s = np.arange(k, dtype=np.int64)
    return ((page_rows[:, None] * (s + 1)) // k - (page_rows[:, None] * s) // k).reshape(-1)


def _window_units(mode: ShuffleMode, num_pages: int, window_pages: int, seed: int, epoch: int, page_slices: int,
                  window: int) -> np.ndarray:
    """The units (pages, or page slices ``page · k + s``) of page window ``window``, in
    order: its run of the mode's unit order."""
    k = page_slices
    lo, hi = window * window_pages * k, min((window + 1) * window_pages * k, num_pages * k)
    order = mode.page_order(num_pages * k, seed, epoch, k)
    return np.arange(lo, hi, dtype=np.int64) if order is None else order.range(lo, hi)


def all_window_rows(
    page_rows: np.ndarray, mode: ShuffleMode, window_pages: int, seed: int, epoch: int, *, page_slices: int = 1
) -> np.ndarray:
    """Rows of every window of an epoch (page modes): the mode's unit order read once,
    whole, and summed by window; the order itself is not kept."""
    if len(page_rows) == 0:
        return np.zeros(0, dtype=np.int64)
    units = page_rows if page_slices == 1 else slice_rows(page_rows, page_slices)
    order = mode.page_order(len(units), seed, epoch, page_slices)
    in_order = units if order is None else units[order.range(0, len(units))]
    del order
    return np.add.reduceat(in_order, np.arange(0, len(units), window_pages * page_slices)).astype(np.int64)


def dropped_rows(num_rows: int, world_size: int) -> int:
    """Rows ``drop_last`` leaves out of an epoch of ``num_rows``: fewer than ``world_size``.

    >>> dropped_rows(310, 3)
    1
    """
    return num_rows % world_size


def global_rows(plan: ShardPlan, page_rows: np.ndarray, positions: Sequence[int],
                page_starts: np.ndarray | None = None) -> np.ndarray:
    """The global row ids (rows counted over all files) at stream ``positions`` of
    ``plan``, in any mode; ``page_starts``: every page's first global row, where the
    caller keeps them (else computed from ``page_rows``)."""
    if plan.mode.permutes_rows:
        return np.asarray([int(plan.rows_of(i)[off]) for i, off in map(plan.window_at, positions)], dtype=np.int64)
    if page_starts is None:
        page_starts = np.concatenate([[0], np.cumsum(page_rows, dtype=np.int64)])
    return np.asarray([int(page_starts[p]) + r for p, r in positions_to_rows(plan, page_rows, positions)],
                      dtype=np.int64)


def positions_to_rows(plan: ShardPlan, page_rows: np.ndarray, positions: Sequence[int]) -> list[tuple[int, int]]:
    """(page id, row within page) for stream positions — the pure row map, used by tests
    and by resume checks. Page modes only."""
    out = []
    for pos in positions:
        i, off = plan.window_at(pos)
        off += int(plan.window_skip[i])
        pages = plan.pages_of(i)
        order = plan.row_order(i)
        r = int(order[off]) if order is not None else off
        cum = np.cumsum(page_rows[pages])
        j = int(np.searchsorted(cum, r, side="right"))
        before = int(cum[j - 1]) if j else 0
        out.append((int(pages[j]), r - before))
    return out
