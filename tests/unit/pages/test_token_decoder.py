"""The direct token-column decoder (``list<int32|int64>``, PLAIN, no nulls) returns
exactly what arrow-rs's general path returns, and hands every other page to it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_fixtures import write_columns

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


def test_a_multi_column_projection_uses_the_general_path(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_columns(path, {"tokens": _tokens(500, np.int32, 1), "id": np.arange(500)}, data_page_size=4096,
                  use_dictionary=False)
    idx = youmu.PageIndex(path)
    before = youmu.io_stats()["fast_decoded_pages"]
    t = pa.Table.from_batches([idx.read_page(i) for i in range(len(idx))])
    assert youmu.io_stats()["fast_decoded_pages"] == before
    assert t.equals(pq.read_table(path))
