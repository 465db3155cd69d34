"""Batched transforms: a stream's ``transform`` that takes a page's rows at a time as
an Arrow table instead of one row at a time, as Hugging Face ``datasets``'
``map(batched=True)`` does — what tokenizers need to run in Rust over many texts at
once (``tokenizers``' ``encode_batch``) rather than once per row from Python.

A transform is batched when it has a true ``batched`` attribute
(:class:`youmu.text.Tokenize` and :class:`youmu.text.ChatTemplate` are). It is called
with a ``pyarrow.Table`` of at most ``batch_rows`` consecutive stream rows (its
attribute; default :data:`BATCH_ROWS`) and returns either

* a ``pyarrow.Table`` (or ``RecordBatch``) with one row per row given, or
* ``(table, keep)``: ``keep`` a boolean array, one per row; the rows it marks
  ``False`` are dropped (their positions still count, as a per-row transform's
  ``None``), or
* ``(table, keep, errors)``: as ``(table, keep)``, and ``errors`` the
  :class:`~youmu.errors.RowError` of each row it skipped (``batch_row`` set, marked
  ``skip``; that row is ``False`` in ``keep``): what an ``on_error="skip"`` policy
  returns, so one bad row does not take the good rows of its batch with it. The
  stream locates each (file, row, position) and reports it (:mod:`youmu.streams.skips`) when
  the transform has a true ``reports_rows`` attribute; otherwise the first is raised.

The first call of a pass gets :data:`FIRST_ROWS` rows, each next one twice as many
up to ``batch_rows``, so the first sample leaves after a few rows are templated and
tokenized, not a whole window's (a DataLoader worker's first batch, the trainer's
first step), while the rest of the pass still shares ``batch_rows`` rows per call.
The result is converted to items with the stream's ``output`` (``"torch"``: token
columns become tensors). A batched transform must map each row on its own (a row's
result may not depend on which rows share its batch): then a stream resumed at any
row yields exactly what the uninterrupted stream would, and states keep counting
rows, never tokens. An error it raises for one row is a :class:`~youmu.errors.RowError`
with ``batch_row`` set: the stream names the Parquet file and row.

Example:
    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> class Lengths:
    ...     batched = True
    ...     def __call__(self, table):
    ...         n = pc.utf8_length(table.column("text"))
    ...         return table.append_column("n", n), pc.greater(n, 0)
    >>> tables = [pa.table({"text": ["ab", "", "abc"]})]
    >>> [(pos, item and item["n"]) for pos, item in batched_pass(tables, Lengths(), "python", start=0)]
    [(1, 2), (2, None), (3, 3)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from youmu._internal.args import int_arg
from youmu.errors import ArgumentTypeError, RowError
from youmu.streams.convert import rows as convert_rows

__all__ = ["BATCH_ROWS", "FIRST_ROWS", "is_batched", "apply_batched", "batched_pass", "chunk_sizes"]

#: Rows a batched transform gets at a time by default: enough for a tokenizer's
#: threads to share, few enough that a call's result stays a page's size.
BATCH_ROWS = 1024
#: Rows of a pass's first call of a batched transform; each next call doubles it up
#: to ``batch_rows``: a trainer's first step waits for these rows, not for a window's
#: (``benches/bench_sft.py --trace``).
FIRST_ROWS = 16


def chunk_sizes(batch_rows: int, first: int = FIRST_ROWS) -> Iterator[int]:
    """The rows of each call of a pass: ``first``, doubling up to ``batch_rows``, then
    ``batch_rows`` for ever (which rows share a call never changes a row's result).

    >>> import itertools
    >>> list(itertools.islice(chunk_sizes(100), 6))
    [16, 32, 64, 100, 100, 100]
    """
    size = max(min(first, batch_rows), 1)
    while True:
        yield size
        size = min(size * 2, batch_rows)


def is_batched(transform: Any) -> bool:
    """Whether ``transform`` takes tables of rows (a true ``batched`` attribute)."""
    return transform is not None and getattr(transform, "batched", False) is True


def _name(transform: Any) -> str:
    return getattr(transform, "__qualname__", None) or type(transform).__name__


def apply_batched(table: pa.Table, transform: Callable[[pa.Table], Any], output: str, *,
                  compact: bool = False) -> list[Any]:
    """``transform(table)`` as one item per row of ``table`` (``None`` for a row it
    drops), converted with ``output`` (:func:`youmu.streams.convert.rows`)."""
    got = transform(table)
    keep = None
    errors: Any = ()
    if isinstance(got, tuple) and len(got) == 3:
        got, keep, errors = got
    elif isinstance(got, tuple) and len(got) == 2:
        got, keep = got
    if isinstance(got, pa.RecordBatch):
        got = pa.Table.from_batches([got])
    if not isinstance(got, pa.Table):
        raise ArgumentTypeError(f"batched transform {_name(transform)} returned {type(got).__name__}; it must "
                                "return a pyarrow Table (or (table, keep)) with one row per row it was given")
    if got.num_rows != table.num_rows:
        raise ArgumentTypeError(f"batched transform {_name(transform)} returned {got.num_rows} rows for "
                                f"{table.num_rows}: it must return one per row (drop rows with (table, keep))")
    if keep is not None:
        keep = np.asarray(keep.to_numpy(zero_copy_only=False) if isinstance(keep, (pa.Array, pa.ChunkedArray))
                          else keep)
        if keep.dtype != np.bool_ or keep.shape != (table.num_rows,):
            raise ArgumentTypeError(f"batched transform {_name(transform)} returned a keep mask of "
                                    f"{keep.dtype} {keep.shape}; expected {table.num_rows} booleans")
    items = list(convert_rows(got, output, compact=compact))
    if keep is not None:
        items = [item if k else None for item, k in zip(items, keep)]
    for e in errors:
        if not (isinstance(e, RowError) and e.skip and isinstance(e.batch_row, int)
                and 0 <= e.batch_row < table.num_rows and items[e.batch_row] is None):
            raise ArgumentTypeError(f"batched transform {_name(transform)} returned {e!r} among the rows it skipped; "
                                    "each must be a RowError marked skip whose batch_row it dropped from keep")
        items[e.batch_row] = e
    return items


def batched_pass(tables: Iterable[pa.Table], transform: Callable[[pa.Table], Any], output: str, start: int, *,
                 where: Callable[[int], dict[str, Any]] | None = None, compact: bool = False,
                 in_worker: bool = False) -> Iterator[tuple[int, Any]]:
    """``(position after the row, item, None or a skipped row's RowError)`` of the
    stream rows in ``tables`` (which begin at position ``start``) through a batched
    ``transform``, called on :func:`chunk_sizes` rows at a time (a few first, then
    ``batch_rows``). A :class:`~youmu.errors.RowError` naming its ``batch_row`` is
    raised located, after the rows before it, and a skipped row's is yielded located:
    ``where(position)`` gives its ``file`` and ``row`` (``in_worker``: in a DataLoader
    worker, whose errors torch rebuilds from their message,
    :meth:`~youmu.errors.RowError.for_worker`). An error of the batch as a whole (no
    ``batch_row``: a column of the wrong type) names the file of the batch's first
    row."""
    sizes = chunk_sizes(int_arg("batch_rows", getattr(transform, "batch_rows", BATCH_ROWS), minimum=1))
    pos = start
    for table in tables:
        lo = 0
        while lo < table.num_rows:
            chunk = table.slice(lo, next(sizes))
            lo += chunk.num_rows
            try:
                items = apply_batched(chunk, transform, output, compact=compact)
            except RowError as e:
                if e.batch_row is None or not 0 <= e.batch_row < chunk.num_rows:
                    if e.file is not None or where is None:
                        raise
                    located = e.located(file=where(pos).get("file"))
                    raise (located.for_worker() if in_worker else located) from e
                at = pos + e.batch_row
                located = e.located(**{"position": at, **(where(at) if where is not None else {})})
                # the good rows before the bad one are delivered, as a per-row transform's would be
                for item in apply_batched(chunk.slice(0, e.batch_row), transform, output, compact=compact):
                    pos += 1
                    yield pos, _located(item, pos - 1, where)
                raise (located.for_worker() if in_worker else located) from e
            for item in items:
                pos += 1
                yield pos, _located(item, pos - 1, where)
            del items, chunk


def _located(item: Any, position: int, where: Callable[[int], dict[str, Any]] | None) -> Any:
    """``item``, or the error of a row the transform skipped named where it is."""
    if not isinstance(item, RowError):
        return item
    return item.located(**{"position": position, **(where(position) if where is not None else {})})
