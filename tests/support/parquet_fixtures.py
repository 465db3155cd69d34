"""The Parquet the tests read, one writer per shape.

Test support, not part of the installed package. Each shape the tests share has one
table builder (``*_table``) and one writer (``write_*``); the writers pass ``layout``
(``row_group_size``, ``data_page_size``, ``write_batch_size``, ``write_page_index``,
``use_dictionary``, ``compression``...) to ``pyarrow.parquet.write_table`` unchanged, so
a test that counts pages or resumes at a position keeps the layout it states.

A test writes Parquet itself only when it is about the writer's choices (hostile
files, odd encodings, a writer option under test); it says so where it does.

Shapes:

* :func:`write_ids` — one integer column ``start .. start + n`` (exactly-once checks).
* :func:`write_id_groups` — the same column, one row group (one page) per given size.
* :func:`write_token_rows` — ``input_ids`` rows filled with their own id, plus the id.
* :func:`write_unique_tokens` — ``id`` and ``input_ids`` where token ``t`` of row ``r``
  is ``r * 1000 + t``: every token of a corpus is unique.
* :func:`write_mixed_tokens` — tokens beside text, large text and nullable floats.
* :func:`write_image_rows` — ``id``, an HF ``image`` struct and a ``caption`` (images
  from :func:`flat_png` or the test's own).
* :func:`write_columns` — a one-off table given as columns.

Example:
    >>> import tempfile, pyarrow.parquet as pq
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> f = pq.ParquetFile(write_ids(d / "ids.parquet", 24, row_group_size=2))
    >>> f.metadata.num_row_groups, f.read().column("id").to_pylist()[:3]
    (12, [0, 1, 2])
    >>> token_rows_table([2, 0, 1], start=5).column("input_ids").to_pylist()
    [[5, 5], [], [7]]
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["IMAGE", "write_table", "parquet_bytes", "write_columns", "id_table", "write_ids", "write_id_groups",
           "token_rows_table", "write_token_rows", "unique_tokens_table", "write_unique_tokens",
           "mixed_tokens_table", "write_mixed_tokens", "flat_png", "image_rows_table", "write_image_rows"]

#: The Hugging Face ``Image`` feature as stored in Parquet.
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def write_table(path: Path | str, table: pa.Table, **layout: Any) -> Path:
    """``table`` at ``path`` (parent folders made) with the writer options ``layout``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **layout)
    return path


def parquet_bytes(table: pa.Table, **layout: Any) -> bytes:
    """``table`` as the bytes of a Parquet file (for object stores and the test Hub)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, **layout)
    return buf.getvalue()


def write_columns(path: Path | str, columns: dict[str, Any], **layout: Any) -> Path:
    """A one-off table given as ``{name: values}`` (types as ``pa.table`` infers them)."""
    return write_table(path, pa.table(columns), **layout)


def id_table(n: int, *, start: int = 0, column: str = "id", label_column: str | None = None) -> pa.Table:
    """One int64 column ``column`` holding ``start .. start + n - 1`` (and, given
    ``label_column``, a string ``"r{id}"`` per row)."""
    ids = np.arange(start, start + n)
    columns: dict[str, Any] = {column: pa.array(ids, pa.int64())}
    if label_column is not None:
        columns[label_column] = [f"r{i}" for i in ids.tolist()]
    return pa.table(columns)


def write_ids(path: Path | str, n: int, *, start: int = 0, column: str = "id", label_column: str | None = None,
              **layout: Any) -> Path:
    """:func:`id_table` at ``path``: every row names itself, so a reader's output shows
    a lost, repeated or reordered row at once."""
    return write_table(path, id_table(n, start=start, column=column, label_column=label_column), **layout)


def write_id_groups(path: Path | str, sizes: Iterable[int], *, column: str = "id") -> Path:
    """Ids ``0 ..`` in one row group (one page) per entry of ``sizes``: pages of
    uneven, chosen sizes."""
    path = Path(path)
    start = 0
    with pq.ParquetWriter(path, pa.schema([(column, pa.int64())])) as writer:
        for n in sizes:
            writer.write_table(id_table(int(n), start=start, column=column))
            start += int(n)
    return path


def token_rows_table(lengths: Sequence[int] | np.ndarray, *, start: int = 0, id_column: str = "id",
                     id_first: bool = False, column: str = "input_ids", dtype: Any = np.int32) -> pa.Table:
    """Row ``i`` holds ``lengths[i]`` tokens (``dtype``, in ``column``), all equal to its
    id ``start + i`` (int64, in ``id_column``): a batch's tokens say which rows it holds."""
    ids = np.arange(start, start + len(lengths))
    tokens = pa.array([np.full(int(m), start + i, dtype) for i, m in enumerate(lengths)],
                      pa.list_(pa.from_numpy_dtype(np.dtype(dtype))))
    id_array = pa.array(ids, pa.int64())
    columns = {id_column: id_array, column: tokens} if id_first else {column: tokens, id_column: id_array}
    return pa.table(columns)


def write_token_rows(path: Path | str, lengths: Sequence[int] | np.ndarray, *, start: int = 0, id_column: str = "id",
                     id_first: bool = False, column: str = "input_ids", dtype: Any = np.int32, **layout: Any) -> Path:
    """:func:`token_rows_table` at ``path``."""
    table = token_rows_table(lengths, start=start, id_column=id_column, id_first=id_first, column=column, dtype=dtype)
    return write_table(path, table, **layout)


def unique_tokens_table(ids: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray) -> pa.Table:
    """``id`` and ``input_ids`` (int64) where token ``t`` of row ``r`` is ``r * 1000 + t``
    (``lengths[k]`` tokens for ``ids[k]``): every token of the corpus is unique, so a
    packed sequence shows where each of its tokens came from."""
    toks = [[int(r) * 1000 + t for t in range(int(m))] for r, m in zip(ids, lengths)]
    return pa.table({"id": pa.array(np.asarray(ids), pa.int64()), "input_ids": pa.array(toks, pa.list_(pa.int64()))})


def write_unique_tokens(path: Path | str, ids: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray,
                        **layout: Any) -> Path:
    """:func:`unique_tokens_table` at ``path``."""
    return write_table(path, unique_tokens_table(ids, lengths), **layout)


def mixed_tokens_table(n: int, seed: int = 0, start: int = 0) -> pa.Table:
    """Token lists (0-299 int32 tokens, the same as int64 in ``ids64``) beside ``text``
    and ``big_text`` (every 11th null), a nullable float ``score`` and an ``id`` from
    ``start``: the unit column and the columns that follow it, of every kind."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 300, n)
    toks = [rng.integers(0, 50_000, int(k)).astype(np.int32) for k in lens]
    text = [None if i % 11 == 0 else f"doc {start + i} " + "x" * int(lens[i] % 40) for i in range(n)]
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n), pa.int64()),
            "input_ids": pa.array(toks, pa.list_(pa.int32())),
            "ids64": pa.array([t.astype(np.int64) for t in toks], pa.list_(pa.int64())),
            "text": pa.array(text, pa.string()),
            "big_text": pa.array(text, pa.large_string()),
            "score": pa.array([None if i % 7 == 0 else i * 0.5 for i in range(n)], pa.float64()),
        }
    )


def write_mixed_tokens(path: Path | str, n: int, seed: int = 0, start: int = 0, **layout: Any) -> Path:
    """:func:`mixed_tokens_table` at ``path``."""
    return write_table(path, mixed_tokens_table(n, seed, start), **layout)


def flat_png(i: int, height: int = 30, base_width: int = 40) -> bytes:
    """A PNG of ``height`` x ``base_width + i`` pixels all of value ``i``: a small image
    whose size and pixels name its row."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((height, base_width + i, 3), i, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def image_rows_table(images: Sequence[bytes], *, bad: Iterable[int] = (), captions: bool = True,
                     id_first: bool = True, suffix: str = ".png") -> pa.Table:
    """One row per encoded image: ``id``, ``image`` (HF struct, path ``{i}{suffix}``) and
    ``caption`` ``"row {i}"``; rows in ``bad`` hold ``b"not an image"`` instead."""
    broken = set(bad)
    items = [{"bytes": b"not an image" if i in broken else data, "path": f"{i}{suffix}"}
             for i, data in enumerate(images)]
    n = len(items)
    ids = pa.array(np.arange(n), pa.int64())
    columns: dict[str, Any] = {"id": ids} if id_first else {}
    columns["image"] = pa.array(items, IMAGE)
    if captions:
        columns["caption"] = [f"row {i}" for i in range(n)]
    if not id_first:
        columns["id"] = ids
    return pa.table(columns)


def write_image_rows(path: Path | str, images: Sequence[bytes], *, bad: Iterable[int] = (), captions: bool = True,
                     id_first: bool = True, suffix: str = ".png", **layout: Any) -> Path:
    """:func:`image_rows_table` at ``path``."""
    return write_table(path, image_rows_table(images, bad=bad, captions=captions, id_first=id_first, suffix=suffix),
                       **layout)
