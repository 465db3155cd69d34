"""Which column's pages are the index's pages: the first selected column's; with
``columns=None`` a stream pages by the column that holds the data where the first holds
little — the files Hugging Face ``datasets`` writes, an ``id`` column (one page per
row group) before the image column (many pages) — while saved states keep their grid,
and a ready ``PageIndex`` paged by such a column is said with a warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import S3  # noqa: E402

import youmu
from youmu.streams.page_grid import column_bytes, dominant_columns, small_page_column
from youmu.torch import YoumuDataset


@pytest.fixture(scope="module")
def hf_like(tmp_path_factory) -> Path:
    """200 rows of 50 KB "images" after an int64 id, row groups of 100, pages of ~64 KB."""
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes() for _ in range(200)]
    t = pa.table({"id": pa.array(np.arange(200), pa.int64()), "image": pa.array(images, pa.binary())})
    path = tmp_path_factory.mktemp("grid") / "hf.parquet"
    # written here: the page layout (Hugging Face's writer's, pages split inside row groups) is under test
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


def test_columns_none_pages_a_stream_by_the_dominant_column(hf_like) -> None:
    """The files as Hugging Face writes them: a stream over them with ``columns=None``
    pages by the image column (many small pages, fine shuffle windows), not by the
    ``id`` column's one page per row group; it says nothing, having nothing to say."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = YoumuDataset(hf_like, output="python")
        chosen = YoumuDataset(hf_like, output="python", columns=["id", "image"])  # an explicit choice is the user's
    assert ds.index.columns == ["image", "id"]
    assert len(ds.index) == len(youmu.PageIndex(hf_like, columns=["image"])) > 20
    assert len(chosen.index) == 2
    assert sorted(r["id"] for r in ds) == list(range(200))
    assert dominant_columns(youmu.PageIndex(hf_like)) == ["image", "id"]


def test_a_ready_index_on_a_small_first_column_warns_and_names_the_column_to_page_by(hf_like) -> None:
    with pytest.warns(youmu.YoumuWarning, match=r"column 'id'.*holds 0\.\d% of the bytes; column 'image' holds "
                                                r"the most.*columns=\['image', \.\.\.\]"):
        coarse = YoumuDataset(youmu.PageIndex(hf_like), output="python")
    assert small_page_column(coarse.index)[:2] == ("id", "image")
    assert len(coarse.index) == 2


def test_a_state_saved_on_the_first_column_grid_resumes_on_it(hf_like) -> None:
    """A state saved while ``columns=None`` paged by the first column (before the
    default followed the dominant one; the same grid as ``columns=["id", "image"]``)
    resumes its own stream, not the new grid's."""
    old = YoumuDataset(hf_like, output="python", columns=["id", "image"], buffer_size=150, seed=3)
    it = iter(old)
    head = [next(it)["id"] for _ in range(70)]
    state = old.state_dict()
    rest = [r["id"] for r in it]
    new = YoumuDataset(hf_like, output="python", buffer_size=150, seed=3)
    assert len(new.index) > 20
    new.load_state_dict(state)
    assert len(new.index) == 2  # the saved grid
    assert [r["id"] for r in new] == rest
    assert sorted(head + rest) == list(range(200))
    fresh = YoumuDataset(hf_like, output="python", buffer_size=150, seed=3)
    fresh.load_state_dict(fresh.state_dict())  # a state of the new grid keeps it
    assert len(fresh.index) > 20


def test_a_first_column_that_holds_the_data_is_quiet(tmp_path) -> None:
    path = tmp_path / "text.parquet"
    # written here: each file's page layout (pyarrow's defaults, one page per row group) is under test
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
