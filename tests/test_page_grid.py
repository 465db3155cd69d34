"""Which column's pages are the index's pages: the first selected column's, kept as
it was (streams and saved states stay what they were), and said with a warning where
``columns=None`` puts the pages on a column holding little of the data — the files
Hugging Face ``datasets`` writes, an ``id`` column (one page per row group) before
the image column (many pages)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import youmu
from youmu.page_grid import column_bytes, small_page_column
from youmu.torch import YoumuDataset

sys.path.insert(0, str(Path(__file__).parent))
from s3util import S3  # noqa: E402


@pytest.fixture(scope="module")
def hf_like(tmp_path_factory) -> Path:
    """200 rows of 50 KB "images" after an int64 id, row groups of 100, pages of ~64 KB."""
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes() for _ in range(200)]
    t = pa.table({"id": pa.array(np.arange(200), pa.int64()), "image": pa.array(images, pa.binary())})
    path = tmp_path_factory.mktemp("grid") / "hf.parquet"
    pq.write_table(t, path, row_group_size=100, data_page_size=64 << 10, write_batch_size=4,
                   write_page_index=True, compression="none")
    return path


def test_the_bytes_of_every_column_come_from_the_footer(hf_like) -> None:
    sizes, groups = column_bytes(youmu.PageIndex(hf_like))
    md = pq.read_metadata(hf_like)
    assert groups == md.num_row_groups == 2
    assert sizes == [(name, sum(md.row_group(g).column(c).total_compressed_size for g in range(2)))
                     for c, name in enumerate(["id", "image"])]
    assert dict(sizes)["image"] > 100 * dict(sizes)["id"]
    assert youmu.PageIndex(hf_like).columns[0] == "id"  # the page column: the first


def test_columns_none_on_a_small_first_column_warns_and_names_the_column_to_page_by(hf_like) -> None:
    with pytest.warns(youmu.YoumuWarning, match=r"column 'id'.*holds 0\.\d% of the bytes; column 'image' holds "
                                                r"the most.*columns=\['image', \.\.\.\]"):
        coarse = YoumuDataset(hf_like, output="python")
    assert small_page_column(coarse.index)[:2] == ("id", "image")
    # what the warning offers: the image column's pages, many more of them
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fine = YoumuDataset(hf_like, output="python", columns=["image", "id"])
        YoumuDataset(hf_like, output="python", columns=["id", "image"])  # an explicit choice is the user's
        YoumuDataset(hf_like, output="python", columns=["id"])
    assert len(coarse.index) == 2 and len(fine.index) > 20
    assert sorted(r["id"] for r in fine) == list(range(200))


def test_a_first_column_that_holds_the_data_is_quiet(tmp_path) -> None:
    path = tmp_path / "text.parquet"
    pq.write_table(pa.table({"text": ["x" * 500] * 100, "id": np.arange(100)}), path)
    # a token corpus: a small id first, but every column one page per row group
    tokens = tmp_path / "tokens.parquet"
    pq.write_table(pa.table({"id": np.arange(4000), "input_ids": [list(range(64))] * 4000}), tokens,
                   row_group_size=500)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        YoumuDataset(path, output="python")
        YoumuDataset(tokens, output="python")


def test_an_object_in_a_store_gets_the_same_warning(hf_like) -> None:
    """The footer the index holds is enough: no second read, and a store is no exception
    (a data set published in a bucket is the usual image set)."""
    s3 = S3()
    try:
        s3.put_file("hf/hf.parquet", hf_like)
        index = youmu.PageIndex(s3.url("hf/hf.parquet"), storage_options=s3.options())
        s3.proxy.reset()
        with pytest.warns(youmu.YoumuWarning, match=r"column 'id'.*column 'image' holds the most"):
            ds = YoumuDataset(index, output="python")
        assert small_page_column(ds.index) == small_page_column(youmu.PageIndex(hf_like))
        assert not s3.proxy.gets()  # the warning read nothing: footers came with the index
    finally:
        s3.stop()
