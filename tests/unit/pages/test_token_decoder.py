"""The direct token-column decoder (``list<int32|int64>``, PLAIN, no nulls) returns
exactly what arrow-rs's general path returns, and hands every other page to it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import youmu


@pytest.fixture(autouse=True)
def _restore_fast_decode():
    yield
    youmu.set_fast_decode(True)


def _tokens(n: int, dtype, seed: int, empty: bool = False, nulls: bool = False) -> pa.Array:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0 if empty else 1, 300, n)
    rows = [rng.integers(0, 50_000, int(m)).astype(dtype) for m in lens]
    arr = pa.array(rows, pa.list_(pa.from_numpy_dtype(dtype)))
    if nulls:
        mask = rng.random(n) < 0.1
        arr = pa.array([None if m else r for r, m in zip(rows, mask)], arr.type)
    return arr


CASES = {
    "int32-zstd-v1": dict(dtype=np.int32, compression="zstd", data_page_version="1.0"),
    "int64-zstd-v2": dict(dtype=np.int64, compression="zstd", data_page_version="2.0"),
    "int32-snappy-v2": dict(dtype=np.int32, compression="snappy", data_page_version="2.0"),
    "int32-none-v1": dict(dtype=np.int32, compression="none", data_page_version="1.0"),
    "int32-gzip-v1 (general path)": dict(dtype=np.int32, compression="gzip", data_page_version="1.0", fast=False),
    "int32-dictionary (general path)": dict(dtype=np.int32, compression="zstd", use_dictionary=True, fast=False),
    # pages holding an empty list or a null row go to the general path, the others do not
    "empty lists (mixed)": dict(dtype=np.int32, compression="zstd", empty=True, fast="some"),
    "null rows (mixed)": dict(dtype=np.int32, compression="zstd", nulls=True, fast="some"),
    "no page index": dict(dtype=np.int32, compression="zstd", write_page_index=False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_direct_decoder_equals_the_general_path(tmp_path: Path, name: str) -> None:
    c = dict(CASES[name])
    fast = c.pop("fast", True)
    arr = _tokens(3000, c.pop("dtype"), seed=len(name), empty=c.pop("empty", False), nulls=c.pop("nulls", False))
    path = tmp_path / "t.parquet"
    # written here: the writer's encodings (CASES) are what picks the decoder under test
    pq.write_table(pa.table({"tokens": arr}), path, data_page_size=8192, row_group_size=1100,
                   use_dictionary=c.pop("use_dictionary", False), write_page_index=c.pop("write_page_index", True), **c)
    idx = youmu.PageIndex(path, columns=["tokens"])
    before = youmu.io_stats()["fast_decoded_pages"]
    youmu.set_fast_decode(True)
    direct = [idx.read_page(i) for i in range(len(idx))]
    used = youmu.io_stats()["fast_decoded_pages"] - before
    youmu.set_fast_decode(False)
    general = [idx.read_page(i) for i in range(len(idx))]
    assert len(idx) > 3
    for i, (a, b) in enumerate(zip(direct, general)):
        assert a.schema == b.schema, i
        assert a.equals(b), f"page {i} differs"
    assert pa.Table.from_batches(direct).column("tokens").combine_chunks().equals(arr)
    if fast == "some":
        assert 0 < used < len(idx)
    elif fast:
        assert used == len(idx)  # every page took the direct decoder
    else:
        assert used == 0


def _with_other_columns(n: int) -> pa.Table:
    """Token ids beside the columns that travel with them: an id, a string, a nullable
    float, a struct, and a second token column (a loss mask)."""
    rng = np.random.default_rng(7)
    return pa.table({
        "id": np.arange(n),
        "tokens": _tokens(n, np.int32, 1),
        "source": [f"s{i % 7}" for i in range(n)],
        "score": pa.array([None if i % 5 == 0 else float(i) for i in range(n)], pa.float64()),
        "meta": pa.array([{"a": i, "b": [i] * (i % 3)} for i in range(n)]),
        "mask": pa.array([rng.integers(0, 2, 1 + i % 40).astype(np.int64) for i in range(n)], pa.list_(pa.int64())),
    })


MULTI = {
    "tokens and an id": ["tokens", "id"],
    "the id first (its pages are the index's)": ["id", "tokens"],
    "every column, the user's order": ["mask", "meta", "tokens", "score", "source", "id"],
    "two token columns": ["tokens", "mask"],
}


@pytest.mark.parametrize("name", list(MULTI))
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_token_columns_of_a_multi_column_projection_are_decoded_directly(tmp_path: Path, name: str,
                                                                         version: str) -> None:
    """The token decoder reads the token columns whose pages a unit covers whole; arrow-rs
    reads the rest; the batch, in the user's order, equals the general path's and pyarrow's."""
    columns = MULTI[name]
    path = tmp_path / "t.parquet"
    table = _with_other_columns(2500)
    # written here: pages of a few KB and two row groups, so a unit spans several pages of some columns
    pq.write_table(table, path, data_page_size=4096, row_group_size=1300, use_dictionary=False, compression="zstd",
                   data_page_version=version, write_page_index=True)
    idx = youmu.PageIndex(path, columns=columns)
    before = youmu.io_stats()["fast_decoded_pages"]
    direct = [idx.read_page(i) for i in range(len(idx))]
    used = youmu.io_stats()["fast_decoded_pages"] - before
    windows = idx.read_window(list(reversed(range(len(idx)))), None)
    youmu.set_fast_decode(False)
    general = [idx.read_page(i) for i in range(len(idx))]
    assert len(idx) > 3
    for i, (a, b) in enumerate(zip(direct, general)):
        assert a.schema == b.schema, i
        assert a.equals(b), f"page {i} differs"
    assert pa.Table.from_batches(direct).equals(pq.read_table(path, columns=columns))
    assert windows.equals(pa.Table.from_batches(general[::-1]).combine_chunks().to_batches()[0])
    if columns[0] in ("tokens", "mask"):
        assert used >= len(idx)  # every unit's first column is read directly (its pages are the units)
    # else the token column's pages need not end where the id's do: either decoder may read them


def test_an_int96_column_keeps_the_general_path(tmp_path: Path) -> None:
    """INT96 timestamps are checked against a second decode of the same batch, so a
    projection holding one is read by arrow-rs whole."""
    path = tmp_path / "t.parquet"
    ts = pa.array(np.arange(500).astype("datetime64[s]").astype("datetime64[ns]"))
    pq.write_table(pa.table({"tokens": _tokens(500, np.int32, 1), "at": ts}), path, data_page_size=4096,
                   use_dictionary=False, use_deprecated_int96_timestamps=True, write_page_index=True)
    idx = youmu.PageIndex(path)
    before = youmu.io_stats()["fast_decoded_pages"]
    t = pa.Table.from_batches([idx.read_page(i) for i in range(len(idx))])
    assert youmu.io_stats()["fast_decoded_pages"] == before
    assert t.equals(pq.read_table(path))
