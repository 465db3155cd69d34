"""Which column's pages are an index's pages, and saying so where that column holds
little of the data.

An index's pages are the data pages of one column: the first selected column (with
``columns=None``, the file's first column). Every shuffle mode draws rows page by page,
so the pages of that column are the grain of the shuffle and of every read. Files
written by Hugging Face ``datasets`` start with a small ``id`` column whose one page
covers a whole row group, while the image column beside it has hundreds of pages: with
``id`` first, a window holds a few row-group-sized pages rather than many small ones
(measured on a 2.3 GB image set: 25 pages instead of 473; 5.09 distinct 50-row blocks
per 32 samples instead of 16.67, and 0.81x the speed).

So a *stream* over paths with ``columns=None`` pages by the dominant column
(:func:`dominant_columns`): where the first column holds under :data:`SMALL_SHARE` of
the stored bytes (from the footer the index holds: local files and objects in stores
alike) while another column holds the most and averages at least :data:`SPLIT_BYTES`
a row group (so a writer's default 1 MiB pages split it into several pages per row
group: token corpora whose every column is one page per row group keep their first
column), the stream's columns are that column first, then the others in file order.
A state saved while such a stream paged by the first column (before this default)
resumes on that grid (:meth:`youmu.streams.parquet.ParquetStream.load_state_dict`). A
``PageIndex`` built by hand is taken as it is, and :func:`warn_small_page_column`
says when its first column is likely a poor grid; ``columns=[...]`` (the first listed
sets the pages) is always the user's choice.

Example:
    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os, youmu
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> t = pa.table({"id": list(range(5000)), "text": ["x" * 1000] * 5000})
    >>> pq.write_table(t, path, use_dictionary=False, compression="none")  # 5 MB of text: 5 pages
    >>> small_page_column(youmu.PageIndex(path))
    ('id', 'text', 0.008)
"""

from __future__ import annotations

import warnings
from typing import Any

from youmu.errors import YoumuWarning

__all__ = ["SMALL_SHARE", "SPLIT_BYTES", "column_bytes", "dominant_columns", "small_page_column",
           "warn_small_page_column"]

#: A page column holding less than this share of the bytes is said ...
SMALL_SHARE = 0.1
#: ... where the largest column averages at least this many stored bytes per row group:
#: twice the 1 MiB data page size pyarrow and arrow-rs write by default.
SPLIT_BYTES = 2 << 20


def column_bytes(index: Any, file: int = 0) -> tuple[list[tuple[str, int]], int]:
    """Bytes (as stored: compressed) of every top-level column of file ``file`` of
    ``index``, in file order, and its row groups — from the footer the index already
    holds (:meth:`PageIndex.column_chunks`), so objects in stores cost no read."""
    out: dict[str, int] = {}
    groups: set[int] = set()
    for chunk in index.column_chunks(file):
        out[chunk["column"]] = out.get(chunk["column"], 0) + max(int(chunk["compressed_bytes"]), 0)
        groups.add(int(chunk["row_group"]))
    return list(out.items()), len(groups)


def small_page_column(index: Any) -> tuple[str, str, float] | None:
    """``(page column, largest column, the page column's share of the bytes)`` where the
    index's page column (its first column) holds under :data:`SMALL_SHARE` of the bytes
    of its columns in its first file while another holds the most, at least
    :data:`SPLIT_BYTES` a row group, else ``None``. From the first file's footer, local
    or in a store."""
    columns = list(getattr(index, "columns", []) or [])
    if not columns or not getattr(index, "num_files", 0):
        return None
    all_sizes, row_groups = column_bytes(index)
    sizes = [(c, b) for c, b in all_sizes if c in columns]
    page, total = columns[0], sum(b for _, b in sizes)
    largest, most = max(sizes, key=lambda cb: cb[1], default=(page, 0))
    share = dict(sizes).get(page, 0) / total if total else 1.0
    if largest != page and most >= SPLIT_BYTES * max(row_groups, 1) and share < SMALL_SHARE:
        return page, largest, round(share, 3)
    return None


def dominant_columns(index: Any) -> list[str] | None:
    """The columns of ``index`` with the dominant one first (the others in their order),
    where :func:`small_page_column` finds the first column a poor grid; else ``None``
    (the first column stays the grid).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os, youmu
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> t = pa.table({"id": list(range(5000)), "text": ["x" * 1000] * 5000})
    >>> pq.write_table(t, path, use_dictionary=False, compression="none")
    >>> dominant_columns(youmu.PageIndex(path))
    ['text', 'id']
    """
    found = small_page_column(index)
    if found is None:
        return None
    largest = found[1]
    return [largest, *(c for c in index.columns if c != largest)]


def warn_small_page_column(index: Any, stacklevel: int = 2) -> None:
    """A :class:`~youmu.errors.YoumuWarning` where :func:`small_page_column` finds one."""
    found = small_page_column(index)
    if found is None:
        return
    page, largest, share = found
    warnings.warn(
        f"the index's pages are column {page!r}'s (the first column), which holds {share:.1%} of the bytes; "
        f"column {largest!r} holds the most. If its pages are finer (Hugging Face datasets' files: one {page!r} "
        f"page per row group), columns=[{largest!r}, ...] (the first column listed sets the pages) gives more, "
        f"smaller pages to shuffle and read",
        YoumuWarning,
        stacklevel=stacklevel + 1,
    )
