"""``RowDataset``: map-style access to the rows of Parquet files (``len`` and ``ds[i]``),
so youmu sources compose with generic map-style tooling and mixtures.

By default each requested row is read on its own (a one-row selection inside its page:
the decoder skips the rest of the page), which suits random access such as mixtures.
With ``cache_pages > 0`` whole pages are decoded and kept in an LRU instead, which suits
access with locality (neighbouring rows).

Example:
    >>> from youmu import RowDataset
    >>> ds = RowDataset("data/", columns=["input_ids"])   # doctest: +SKIP
    >>> len(ds), ds[0]["input_ids"][:5]                      # doctest: +SKIP
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from youmu._internal.args import choice_arg, int_arg, int_array, storage_options_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError, PageOutOfRangeError
from youmu.streams.convert import OUTPUTS
from youmu.streams.convert import rows as convert_rows

__all__ = ["RowDataset"]


class RowDataset:
    """Map-style dataset over the rows of Parquet files.

    Args:
        paths: file, directory, glob or list of these (or a ready ``PageIndex``).
        columns: top-level columns to read (default: all).
        output: ``"python"`` (default), ``"numpy"``, ``"torch"`` or ``"arrow"``.
        cache_pages: 0 (default) reads single rows; > 0 keeps that many decoded pages
            per process (LRU) and serves rows from them.
        storage_options: object-store settings (``endpoint``, ``region``, keys, ...)
            for URLs, as :class:`youmu.PageIndex` takes them.
    """

    def __init__(self, paths: Any, columns: Sequence[str] | None = None, output: str = "python", cache_pages: int = 0,
                 storage_options: Mapping[str, str] | None = None):
        from youmu._core import PageIndex

        if isinstance(columns, (str, bytes)):
            raise ArgumentTypeError(f"columns must be a list of column names, got {type(columns).__name__} {columns!r}")
        storage_options = storage_options_arg(storage_options)
        if isinstance(paths, PageIndex):
            if storage_options is not None:
                raise InvalidArgumentError("storage_options apply to paths: pass them to the PageIndex instead")
            self.index = paths
        else:
            self.index = PageIndex(paths, columns=list(columns) if columns else None, storage_options=storage_options)
        self.output = choice_arg("output", output, OUTPUTS)
        self.cache_pages = int_arg("cache_pages", cache_pages, minimum=0)
        self._cache: OrderedDict[int, pa.RecordBatch] = OrderedDict()

    def __len__(self) -> int:
        return self.index.num_rows

    def _pages(self, ids: np.ndarray) -> dict[int, pa.RecordBatch]:
        missing = [int(p) for p in np.unique(ids) if int(p) not in self._cache]
        if missing:
            for p, b in zip(missing, self.index.read_pages(missing)):
                self._cache[p] = b
        out = {}
        for p in np.unique(ids):
            p = int(p)
            self._cache.move_to_end(p)
            out[p] = self._cache[p]
        while len(self._cache) > max(self.cache_pages, len(out)):
            self._cache.popitem(last=False)
        return out

    def take(self, indices: Sequence[int] | np.ndarray) -> pa.Table:
        """Rows at ``indices`` as one Arrow table (in the given order)."""
        idx = int_array(indices, "indices")
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            bad = int(idx[(idx < -n) | (idx >= n)][0])
            raise PageOutOfRangeError(f"row {bad} is out of range (length {n})")
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size == 0:
            return self.index.schema.empty_table()
        if self.cache_pages == 0:
            return pa.Table.from_batches([self.index.read_rows(idx)])
        pages, offs = self.index.locate_rows(idx)
        cache = self._pages(pages)
        order = sorted(cache)
        table = pa.Table.from_batches([cache[p] for p in order], schema=cache[order[0]].schema if order else None)
        starts = dict(zip(order, np.concatenate([[0], np.cumsum([cache[p].num_rows for p in order])])[:-1]))
        take = np.array([starts[int(p)] + o for p, o in zip(pages, offs)], dtype=np.int64)
        return table.take(pa.array(take))

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise ArgumentTypeError(f"RowDataset indices must be integers, got {type(i).__name__}")
        return next(convert_rows(self.take([int(i)]), self.output))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Batch access (used by torch's DataLoader with a batch sampler)."""
        return list(convert_rows(self.take(indices), self.output))

    def _state_fingerprint(self) -> Any:
        """What identifies these rows for stream states: the files' (see
        :func:`youmu.state.contract.data_fingerprint`)."""
        from youmu.state.contract import describe_data

        return describe_data(self.index)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"] = OrderedDict()
        return state
