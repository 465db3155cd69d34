"""Shuffle plans: which rows a shard of a page-indexed dataset delivers, in which
order, per epoch.

Everything here is a pure function of (page row counts, mode, window size, seed, epoch,
shard, number of shards): no I/O, no state. The row at position ``k`` of a shard's
stream is determined by those integers alone, which is what makes the loader resumable
from a few integers and testable by property tests.

Shuffle modes:

* ``"page"`` — pages in keyed-permuted order, cut into *windows* of ``window_pages``
  consecutive permuted pages; the rows of a window are shuffled together by a second
  keyed permutation (Youmu's aggressive buffer shuffle, made stateless).
* ``"local"`` — pages in file order, windows shuffled internally: the streaming
  shuffle-buffer baseline other loaders use.
* ``"none"`` — file order.
* ``"row"`` — every row placed independently by a keyed permutation over all rows; read
  in chunks of ``window_rows`` positions (one page read per distinct page in a chunk).

Shards take whole windows round-robin (:func:`youmu.sharding.round_robin`), never row
stripes, so no two workers ever read the same page: window ``w`` belongs to rank
``w % world_size``, and among a rank's windows the k-th goes to worker
``k % num_workers``. A rank's rows therefore do not depend on how many DataLoader
workers it uses. In ``"row"`` mode each rank takes a contiguous block of the permuted
positions and each worker a contiguous sub-block of it (:func:`youmu.sharding.block`).

Example:
    >>> import numpy as np
    >>> from youmu.shuffle import ShardPlan
    >>> p = ShardPlan.build(np.array([3, 3, 2]), "none", window_pages=1, seed=0, epoch=0, rank=0, world_size=2)
    >>> p.total_rows, p.window_ids.tolist()
    (5, [0, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from youmu._args import choice_arg, int_arg
from youmu.errors import InvalidArgumentError, PageOutOfRangeError
from youmu.sharding import Shard, block, round_robin

__all__ = [
    "ShuffleMode",
    "SHUFFLE_MODES",
    "WINDOWS_IN_FLIGHT",
    "ShardPlan",
    "window_pages_for",
    "row_chunk_rows",
    "all_window_rows",
    "rank_caps",
    "positions_to_rows",
]

ShuffleMode = Literal["page", "row", "local", "none"]
SHUFFLE_MODES: tuple[str, ...] = ("page", "row", "local", "none")


def _permutation(n: int, seed: int, epoch: int, purpose: str) -> Any:
    from youmu._core import Permutation

    return Permutation(n, seed=seed, epoch=epoch, purpose=purpose)


#: Windows alive at once while streaming: the one being consumed, the next one (read
#: ahead by Rust threads) and, while that is assembled, its shuffled copy.
WINDOWS_IN_FLIGHT = 3


def window_pages_for(
    page_rows: np.ndarray,
    buffer_size: int,
    world_size: int = 1,
    *,
    page_bytes: np.ndarray | None = None,
    memory_budget: int | None = None,
) -> int:
    """Pages per window so a window holds about ``buffer_size`` rows — but never so
    many that some rank would get no window: a small dataset must still give every DDP
    rank data (a rank with none would leave the others waiting in their collectives).
    Depends on the world size only, so a rank's rows never depend on its worker count.

    With ``memory_budget`` (bytes) and ``page_bytes`` (estimated decoded bytes per page,
    :meth:`PageIndex.page_decoded_bytes`), windows are also small enough that
    :data:`WINDOWS_IN_FLIGHT` windows of the largest pages fit the budget; a budget
    that cannot hold that many single pages is an error, not a silent overrun.

    >>> window_pages_for(np.array([100] * 50), 1000)
    10
    >>> window_pages_for(np.array([100] * 50), 1000, page_bytes=np.array([1 << 20] * 50), memory_budget=12 << 20)
    4
    """
    int_arg("buffer_size", buffer_size, minimum=1)
    if len(page_rows) == 0:
        return 1
    mean = max(float(page_rows.mean()), 1.0)
    wanted = max(1, int(round(buffer_size / mean)))
    if memory_budget is not None:
        int_arg("memory_budget", memory_budget, minimum=1)
        if page_bytes is None or len(page_bytes) != len(page_rows):
            raise InvalidArgumentError("memory_budget needs the estimated decoded bytes of every page (page_bytes)")
        biggest = max(int(np.max(page_bytes)), 1)
        fit = int(memory_budget) // (WINDOWS_IN_FLIGHT * biggest)
        if fit < 1:
            raise InvalidArgumentError(
                f"memory_budget={int(memory_budget):,} bytes cannot hold {WINDOWS_IN_FLIGHT} windows of one page: "
                f"the largest page decodes to about {biggest:,} bytes, so at least "
                f"{WINDOWS_IN_FLIGHT * biggest:,} are needed"
            )
        wanted = min(wanted, fit)
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
    shard owns, in stream order; ``window_rows[i]`` their row counts; ``total_rows`` the
    rows it delivers (possibly capped by ``drop_last``).
    """

    mode: str
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

    @staticmethod
    def build(
        page_rows: np.ndarray,
        mode: str,
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
    ) -> ShardPlan:
        choice_arg("shuffle", mode, SHUFFLE_MODES)
        shard = Shard(rank, world_size, worker, num_workers)
        int_arg("window_pages", window_pages, minimum=1)
        page_rows = np.asarray(page_rows, dtype=np.int64)
        n_pages = len(page_rows)
        n_rows = int(page_rows.sum())
        if mode == "row":
            # A chunk of c random rows touches ~c distinct pages, and every one is read
            # and decoded whole: size chunks by pages in memory, not by rows.
            size = int(window_rows) if window_rows else max(1, window_pages)
            lo, hi = block(n_rows, shard)
            starts = np.arange(lo, hi, size, dtype=np.int64)
            rows = np.minimum(starts + size, hi) - starts
            ids = np.arange(len(starts), dtype=np.int64)  # chunk number within the block
        else:
            size = 0
            rows_all = all_window_rows(page_rows, mode, window_pages, seed, epoch)
            mine = round_robin(len(rows_all), shard)
            ids = np.arange(mine.start, mine.stop, mine.step, dtype=np.int64)
            rows = rows_all[ids]
        cum = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
        total = int(cum[-1])
        if cap is not None:
            total = min(total, int(cap))
        return ShardPlan(
            mode, n_pages, n_rows, window_pages, size, seed, epoch, rank, world_size, worker, num_workers, ids,
            rows, total, cum,
        )

    # -- positions ------------------------------------------------------------------
    def window_at(self, position: int) -> tuple[int, int]:
        """(index into ``window_ids``, offset within that window) of a stream position."""
        if not 0 <= position < self.total_rows:
            raise PageOutOfRangeError(f"position {position} outside the shard's {self.total_rows} rows")
        i = int(np.searchsorted(self.cum_rows, position, side="right") - 1)
        return i, position - int(self.cum_rows[i])

    def pages_of(self, i: int) -> np.ndarray:
        """Global page ids of the i-th window of this shard, in window order."""
        w = int(self.window_ids[i])
        if self.mode == "page":
            perm = _permutation(self.num_pages, self.seed, self.epoch, "pages")
            stop = min((w + 1) * self.window_pages, self.num_pages)
            return perm.range(w * self.window_pages, stop)
        if self.mode in ("local", "none"):
            stop = min((w + 1) * self.window_pages, self.num_pages)
            return np.arange(w * self.window_pages, stop, dtype=np.int64)
        raise InvalidArgumentError("row mode has no page windows; use rows_of()")

    def row_order(self, i: int) -> np.ndarray | None:
        """Order of the window's rows (indices into the window's concatenated pages),
        or None for identity."""
        n = int(self.window_rows[i])
        if self.mode in ("page", "local"):
            w = int(self.window_ids[i])
            return _permutation(n, self.seed, self.epoch, f"window-{self.mode}-{w}").range(0, n)
        return None

    def rows_of(self, i: int) -> np.ndarray:
        """Row mode: global row ids of the i-th chunk of this shard, in stream order."""
        if self.mode != "row":
            raise InvalidArgumentError("rows_of() is for row mode")
        lo, _ = block(self.num_rows, Shard(self.rank, self.world_size, self.worker, self.num_workers))
        start = lo + int(self.cum_rows[i])
        stop = start + int(self.window_rows[i])
        return _permutation(self.num_rows, self.seed, self.epoch, "rows").range(start, stop)


def all_window_rows(page_rows: np.ndarray, mode: str, window_pages: int, seed: int, epoch: int) -> np.ndarray:
    """Rows of every window of an epoch (page modes). One pass over the permutation;
    the permuted page order itself is not kept."""
    n = len(page_rows)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if mode == "page":
        order = _permutation(n, seed, epoch, "pages").range(0, n)
        in_order = page_rows[order]
        del order
    else:
        in_order = page_rows
    starts = np.arange(0, n, window_pages)
    return np.add.reduceat(in_order, starts).astype(np.int64)


def rank_caps(
    page_rows: np.ndarray,
    mode: str,
    *,
    window_pages: int,
    window_rows: int | None,
    seed: int,
    epoch: int,
    world_size: int,
    num_workers: int,
) -> tuple[dict[tuple[int, int], int], int]:
    """``drop_last`` caps: every rank delivers the same number of rows (the smallest
    rank's total); a rank's excess is removed from its last workers. Returns the cap of
    every (rank, worker) and the number of rows dropped in the epoch."""
    def total(r: int, w: int) -> int:
        return ShardPlan.build(
            page_rows, mode, window_pages=window_pages, window_rows=window_rows, seed=seed, epoch=epoch,
            rank=r, world_size=world_size, worker=w, num_workers=num_workers,
        ).total_rows

    totals = {(r, w): total(r, w) for r in range(world_size) for w in range(num_workers)}
    per_rank = [sum(totals[r, w] for w in range(num_workers)) for r in range(world_size)]
    target = min(per_rank)
    caps = dict(totals)
    for r in range(world_size):
        excess = per_rank[r] - target
        for w in reversed(range(num_workers)):
            cut = min(excess, caps[r, w])
            caps[r, w] -= cut
            excess -= cut
    return caps, sum(per_rank) - target * world_size


def positions_to_rows(plan: ShardPlan, page_rows: np.ndarray, positions: Sequence[int]) -> list[tuple[int, int]]:
    """(page id, row within page) for stream positions — the pure row map, used by tests
    and by resume checks. Page modes only."""
    out = []
    for pos in positions:
        i, off = plan.window_at(pos)
        pages = plan.pages_of(i)
        order = plan.row_order(i)
        r = int(order[off]) if order is not None else off
        cum = np.cumsum(page_rows[pages])
        j = int(np.searchsorted(cum, r, side="right"))
        before = int(cum[j - 1]) if j else 0
        out.append((int(pages[j]), r - before))
    return out
