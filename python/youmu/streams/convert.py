"""Arrow chunks → per-row items (``"python"``, ``"numpy"``, ``"torch"``, ``"arrow"``).

Token columns (``list<int>`` without nulls) become 1-D arrays/tensors that are views of
the Arrow buffer: no per-row copy. ``import torch`` happens only for ``"torch"``.

Example:
    >>> import pyarrow as pa
    >>> from youmu.streams.convert import rows
    >>> t = pa.table({"ids": [[1, 2], [3]], "n": [1, 2]})
    >>> [r["ids"].tolist() for r in rows(t, "numpy")]
    [[1, 2], [3]]
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from youmu.errors import InvalidArgumentError

__all__ = ["OUTPUTS", "rows", "column_rows"]

OUTPUTS = ("torch", "numpy", "arrow", "python")


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _to_torch(values: np.ndarray):
    import torch

    # Arrow buffers are read-only; the tensors are views of them on purpose (no copy).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(values)


def column_rows(arr: pa.Array, output: str, compact: bool = False) -> list[Any] | np.ndarray:
    """Per-row values of one column. ``compact`` gives each row its own small buffer
    instead of a view of the shared one: needed when rows cross a process boundary
    (DataLoader workers), where torch would otherwise move the *whole* shared storage
    into shared memory for every row."""
    t = arr.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type) and not pa.types.is_boolean(
        t.value_type
    ):
        if arr.null_count == 0 and arr.values.null_count == 0:
            offsets = arr.offsets.to_numpy(zero_copy_only=False)
            values = arr.values.to_numpy(zero_copy_only=True)
            if output == "torch":
                values = _to_torch(values)
            if compact:
                return [values[offsets[i] : offsets[i + 1]].clone() if output == "torch"
                        else values[offsets[i] : offsets[i + 1]].copy() for i in range(len(arr))]
            return [values[offsets[i] : offsets[i + 1]] for i in range(len(arr))]
    if _numeric(t) and not pa.types.is_boolean(t) and arr.null_count == 0:
        values = arr.to_numpy(zero_copy_only=True)
        if output == "torch":
            t = _to_torch(values.copy() if compact else values)
            return [t[i].clone() for i in range(len(t))] if compact else list(t)
        return values
    return arr.to_pylist()


# Rows are converted this many at a time, so a consumer never waits for a whole
# shuffle window to be converted at once (that showed up as p99 latency spikes)...
CONVERT_CHUNK = 256
# ... and fewer where rows are large (images): a chunk's Python copies stay about this size.
CONVERT_CHUNK_BYTES = 16 << 20


def rows(table: pa.Table | pa.RecordBatch, output: str, compact: bool = False) -> Iterator[Any]:
    """Yield the rows of ``table`` as dicts of column values (``"arrow"``: 1-row batches)."""
    if output not in OUTPUTS:
        raise InvalidArgumentError(f"output must be one of {OUTPUTS}, got {output!r}")
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    # chunk by chunk: combining a multi-chunk table first would copy all of it
    per_row = table.nbytes // max(table.num_rows, 1)
    batches = table.to_batches(max_chunksize=max(1, min(CONVERT_CHUNK, CONVERT_CHUNK_BYTES // max(per_row, 1))))
    for batch in batches:
        if output == "arrow":
            for i in range(batch.num_rows):
                yield batch.slice(i, 1)
            continue
        if output == "python":
            yield from batch.to_pylist()
            continue
        names = batch.schema.names
        cols = [column_rows(batch.column(j), output, compact) for j in range(batch.num_columns)]
        for i in range(batch.num_rows):
            yield {n: c[i] for n, c in zip(names, cols)}
