"""Early-epoch diversity of a stream: how many distinct pages (and sources) the first
rows of a shard's stream draw from.

A measuring tool for ``shuffle_quality.py`` and the stream tests, not part of the
installed package.

A page-shuffled stream is a sequence of windows of a few pages each, so its first rows
come from those few pages only, where a full row shuffle draws every row from a
different page. Short runs (fine-tuning, the first steps of pretraining) see only that
start. These functions count it. They are pure functions of a :class:`~youmu.order.shuffle.ShardPlan`
and the page row counts (no I/O, no torch): the rows a plan delivers are the rows the
stream yields.

Example:
    >>> import numpy as np
    >>> from youmu.order.shuffle import ShardPlan
    >>> from diversity import plan_rows, rows_to_pages, running_distinct
    >>> page_rows = np.array([4] * 10)
    >>> plan = ShardPlan.build(page_rows, "none", window_pages=2, seed=0, epoch=0)
    >>> rows = plan_rows(plan, page_rows, 10)
    >>> rows.tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    >>> running_distinct(rows_to_pages(rows, page_rows)).tolist()
    [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from youmu.errors import InvalidArgumentError, PageOutOfRangeError
from youmu.order.shuffle import ShardPlan

__all__ = [
    "batch_bounds",
    "block_distinct",
    "early_diversity",
    "page_first_rows",
    "per_batch_distinct",
    "plan_rows",
    "rows_for_tokens",
    "rows_to_pages",
    "running_distinct",
    "window_distinct_pages",
    "window_global_rows",
]


def page_first_rows(page_rows: np.ndarray) -> np.ndarray:
    """Global row id of the first row of every page (pages in index order)."""
    page_rows = np.asarray(page_rows, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(page_rows)[:-1]]).astype(np.int64)


def rows_to_pages(rows: np.ndarray, page_rows: np.ndarray) -> np.ndarray:
    """Page id of each global row id."""
    ends = np.cumsum(np.asarray(page_rows, dtype=np.int64))
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and (rows.min() < 0 or rows.max() >= (ends[-1] if len(ends) else 0)):
        raise PageOutOfRangeError("row id outside the pages' rows")
    return np.searchsorted(ends, rows, side="right").astype(np.int64)


def window_global_rows(
    plan: ShardPlan, page_rows: np.ndarray, i: int, first_rows: np.ndarray | None = None
) -> np.ndarray:
    """Global row ids of the ``i``-th window (row-mode chunk) of ``plan``, in stream order
    (the whole window: :func:`plan_rows` keeps the shard's part of it)."""
    if plan.mode.permutes_rows:
        return np.asarray(plan.rows_of(i), dtype=np.int64)
    page_rows = np.asarray(page_rows, dtype=np.int64)
    first = page_first_rows(page_rows) if first_rows is None else first_rows
    pages = np.asarray(plan.pages_of(i), dtype=np.int64)
    counts = page_rows[pages]
    # concatenated rows of the window's pages, in window (page) order
    starts = np.repeat(first[pages] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    rows = starts + np.arange(int(counts.sum()), dtype=np.int64)
    order = plan.row_order(i)
    return rows if order is None else rows[np.asarray(order, dtype=np.int64)]


def plan_rows(plan: ShardPlan, page_rows: np.ndarray, n: int | None = None) -> np.ndarray:
    """Global row ids of the first ``n`` positions of the shard's stream (all of them
    when ``n`` is None): exactly the rows :class:`youmu.RowStream` yields, in order."""
    total = plan.total_rows if n is None else min(int(n), plan.total_rows)
    first = page_first_rows(page_rows)
    out: list[np.ndarray] = []
    have = 0
    i = 0
    while have < total:
        rows = window_global_rows(plan, page_rows, i, first)
        if not plan.mode.permutes_rows:  # the shard's part of the window (drop_last splits some)
            skip = int(plan.window_skip[i])
            rows = rows[skip : skip + int(plan.window_rows[i])]
        out.append(rows[: total - have])
        have += len(out[-1])
        i += 1
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def running_distinct(labels: np.ndarray) -> np.ndarray:
    """``c[k]`` = number of distinct values among ``labels[: k + 1]``."""
    labels = np.asarray(labels)
    if len(labels) == 0:
        return np.zeros(0, dtype=np.int64)
    _, first = np.unique(labels, return_index=True)
    new = np.zeros(len(labels), dtype=np.int64)
    new[first] = 1
    return np.cumsum(new)


def block_distinct(labels: np.ndarray, block: int) -> np.ndarray:
    """Distinct values in each consecutive block of ``block`` labels (the last block may
    be short): e.g. sources per batch of rows."""
    if block < 1:
        raise InvalidArgumentError("block must be >= 1")
    labels = np.asarray(labels)
    return np.array([len(np.unique(labels[s : s + block])) for s in range(0, len(labels), block)], dtype=np.int64)


def window_distinct_pages(plan: ShardPlan, page_rows: np.ndarray, page_labels: np.ndarray | None = None) -> np.ndarray:
    """Distinct pages (or distinct ``page_labels[page]``, e.g. sources) of every window
    (row-mode chunk) of the plan, in stream order."""
    out = []
    for i in range(len(plan.window_ids)):
        if plan.mode.permutes_rows:
            pages = np.unique(rows_to_pages(plan.rows_of(i), page_rows))
        else:
            pages = np.unique(np.asarray(plan.pages_of(i), dtype=np.int64))
        out.append(len(pages) if page_labels is None else len(np.unique(np.asarray(page_labels)[pages])))
    return np.array(out, dtype=np.int64)


def rows_for_tokens(row_tokens: np.ndarray, rows: np.ndarray, tokens: Iterable[int]) -> list[int]:
    """How many rows of the stream ``rows`` are needed to deliver each count in
    ``tokens`` (``row_tokens[r]`` tokens per row, e.g. length + 1 for an EOS): maps
    "the first N training steps" to "the first n rows"."""
    cum = np.cumsum(np.asarray(row_tokens, dtype=np.int64)[np.asarray(rows, dtype=np.int64)])
    return [min(int(np.searchsorted(cum, t, side="left")) + 1, len(rows)) for t in tokens]


def batch_bounds(row_tokens: np.ndarray, rows: np.ndarray, tokens_per_batch: int, n_batches: int) -> np.ndarray:
    """Rows packed back to back into batches of ``tokens_per_batch`` tokens (the way
    :func:`youmu.torch.pack` fills consecutive sequences): an ``(n, 2)`` array whose row
    ``i`` is the ``[start, stop)`` range of positions in ``rows`` whose tokens batch
    ``i`` holds (a row split over two batches counts in both). ``row_tokens[r]`` is the
    tokens row ``r`` contributes (its length, plus one for an EOS). Stops early when
    the rows run out.

    >>> batch_bounds(np.array([3, 3, 3]), np.array([0, 1, 2]), 4, 5).tolist()
    [[0, 2], [1, 3]]
    """
    if tokens_per_batch < 1:
        raise InvalidArgumentError("tokens_per_batch must be >= 1")
    cum = np.cumsum(np.asarray(row_tokens, dtype=np.int64)[np.asarray(rows, dtype=np.int64)])
    n = min(int(n_batches), int(cum[-1] // tokens_per_batch) if len(cum) else 0)
    edges = np.arange(n + 1, dtype=np.int64) * tokens_per_batch
    # batch i holds tokens [i*T, (i+1)*T): from the row containing token i*T to the one
    # containing token (i+1)*T - 1
    first = np.searchsorted(cum, edges[:-1], side="right")
    last = np.searchsorted(cum, edges[1:] - 1, side="right")
    return np.stack([first, last + 1], axis=1) if n else np.zeros((0, 2), dtype=np.int64)


def per_batch_distinct(labels: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Distinct labels (pages, sources) per batch, for ``bounds`` from :func:`batch_bounds`."""
    labels = np.asarray(labels)
    return np.array([len(np.unique(labels[a:b])) for a, b in bounds], dtype=np.int64)


def early_diversity(
    rows: np.ndarray,
    page_rows: np.ndarray,
    checkpoints: Sequence[int],
    row_source: np.ndarray | None = None,
    block: int | None = None,
) -> dict[str, list]:
    """Counters over the first rows of a stream (``rows``: global row ids, stream order).

    Returns, for each ``n`` in ``checkpoints`` (rows): ``pages[k]``, distinct pages
    among the first ``n`` rows; ``sources[k]`` the same for ``row_source`` (when given);
    and with ``block`` (rows per batch), ``sources_per_block[k]`` / ``pages_per_block[k]``,
    the mean distinct sources / pages per consecutive block of ``block`` rows among the
    first ``n``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    pages = rows_to_pages(rows, page_rows)
    rp = running_distinct(pages)
    ns = [max(1, min(int(n), len(rows))) for n in checkpoints]
    out: dict[str, list] = {"rows": ns, "pages": [int(rp[n - 1]) for n in ns]}
    src = None
    if row_source is not None:
        src = np.asarray(row_source)[rows]
        rs = running_distinct(src)
        out["sources"] = [int(rs[n - 1]) for n in ns]
    if block:
        out["pages_per_block"] = [float(block_distinct(pages[:n], block).mean()) for n in ns]
        if src is not None:
            out["sources_per_block"] = [float(block_distinct(src[:n], block).mean()) for n in ns]
    return out
