"""Early-epoch diversity counters (tests/support/diversity.py): the rows a plan says a stream
delivers are the rows RowStream yields, and the counters match hand-computed values on
a small clustered corpus."""

from __future__ import annotations

import doctest

import diversity as div  # noqa: E402
import numpy as np
import pytest
from parquet_fixtures import write_token_rows

import youmu
from youmu.order.shuffle import ShardPlan
from youmu.streams.rowstream import RowStream

ROWS_PER_PAGE = 5
SOURCES = [37, 23, 40]  # rows per source (one file each, written in source order)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[youmu.PageIndex, np.ndarray]:
    d = tmp_path_factory.mktemp("diversity")
    start = 0
    row_source = []
    for s, n in enumerate(SOURCES):
        write_token_rows(d / f"{s}.parquet", 1 + np.arange(start, start + n) % 7, start=start, id_column="row_id",
                         row_group_size=ROWS_PER_PAGE, write_page_index=True, use_dictionary=False)
        row_source += [s] * n
        start += n
    idx = youmu.PageIndex(sorted(d.glob("*.parquet")), columns=["input_ids", "row_id"])
    return idx, np.array(row_source)


def streamed(idx, mode: str, window_pages: int, seed: int = 3, rank: int = 0, world_size: int = 1) -> np.ndarray:
    s = RowStream(idx, shuffle=mode, window_pages=window_pages, seed=seed, rank=rank, world_size=world_size)
    return np.concatenate([t.column("row_id").to_numpy() for t in s.iter_tables()])


def test_doctests() -> None:
    assert doctest.testmod(div).failed == 0


@pytest.mark.parametrize("mode", ["page", "local", "none", "row"])
@pytest.mark.parametrize("world_size", [1, 2])
def test_plan_rows_are_the_streamed_rows(corpus, mode, world_size) -> None:
    idx, _ = corpus
    page_rows = idx.page_num_rows()
    for rank in range(world_size):
        plan = ShardPlan.build(page_rows, mode, window_pages=3, seed=3, epoch=0, rank=rank, world_size=world_size,
                               window_rows=16 if mode == "row" else None)
        assert np.array_equal(div.plan_rows(plan, page_rows), streamed(idx, mode, 3, rank=rank, world_size=world_size))
        assert np.array_equal(div.plan_rows(plan, page_rows, 7), div.plan_rows(plan, page_rows)[:7])


def test_page_counts(corpus) -> None:
    idx, row_source = corpus
    page_rows = idx.page_num_rows()
    # 37 -> 8 pages (last has 2 rows), 23 -> 5, 40 -> 8
    assert len(page_rows) == 21 and page_rows.sum() == 100
    assert div.rows_to_pages(np.array([0, 4, 5, 36, 37, 99]), page_rows).tolist() == [0, 0, 1, 7, 8, 20]
    with pytest.raises(IndexError):
        div.rows_to_pages(np.array([100]), page_rows)


def test_windows_hold_window_pages_distinct_pages(corpus) -> None:
    idx, _ = corpus
    page_rows = idx.page_num_rows()
    for wp in (1, 2, 4):
        plan = ShardPlan.build(page_rows, "page", window_pages=wp, seed=1, epoch=0)
        d = div.window_distinct_pages(plan, page_rows)
        assert d[:-1].tolist() == [wp] * (len(d) - 1) and 1 <= d[-1] <= wp
        assert d.sum() == len(page_rows)


def test_none_mode_counts_by_hand(corpus) -> None:
    idx, row_source = corpus
    page_rows = idx.page_num_rows()
    plan = ShardPlan.build(page_rows, "none", window_pages=2, seed=0, epoch=0)
    rows = div.plan_rows(plan, page_rows, 60)
    assert rows.tolist() == list(range(60))
    out = div.early_diversity(rows, page_rows, [1, 5, 6, 40, 60], row_source=row_source, block=10)
    # source 0: rows 0..36 in 8 pages (the last of 2 rows); source 1: 5-row pages from row 37
    assert out["pages"] == [1, 1, 2, 9, 13]
    assert out["sources"] == [1, 1, 1, 2, 2]
    assert out["sources_per_block"][-1] == pytest.approx(7 / 6)  # rows 30..39 straddle sources 0 and 1


def test_shuffles_raise_early_diversity(corpus) -> None:
    idx, row_source = corpus
    page_rows = idx.page_num_rows()
    got = {}
    for mode in ("none", "local", "page", "row"):
        plan = ShardPlan.build(page_rows, mode, window_pages=2, seed=5, epoch=0,
                               window_rows=16 if mode == "row" else None)
        n = 10 if mode == "row" else int(plan.window_rows[0])  # the first window
        rows = div.plan_rows(plan, page_rows, n)
        got[mode] = div.early_diversity(rows, page_rows, [n], row_source=row_source)["pages"][0]
    # a window of 2 pages holds 2 pages; 10 random rows of 100 hit >= 6 of 21 pages
    assert got["none"] == got["local"] == got["page"] == 2
    assert got["row"] >= 6


def test_rows_for_tokens() -> None:
    row_tokens = np.array([3, 1, 4, 1, 5])
    rows = np.array([4, 0, 2])  # 5, 3, 4 tokens
    assert div.rows_for_tokens(row_tokens, rows, [1, 5, 6, 8, 12, 100]) == [1, 1, 2, 2, 3, 3]


def test_batch_bounds() -> None:
    row_tokens = np.array([5, 2, 2, 8, 1])
    rows = np.array([0, 1, 2, 3, 4])  # tokens: [0,5) [5,7) [7,9) [9,17) [17,18)
    b = div.batch_bounds(row_tokens, rows, 4, 10)
    assert b.tolist() == [[0, 1], [0, 3], [2, 4], [3, 4]]  # 18 tokens: 4 full batches
    assert div.per_batch_distinct(np.array([7, 7, 8, 9, 9]), b).tolist() == [1, 2, 2, 1]
    assert div.batch_bounds(row_tokens, rows, 4, 2).tolist() == [[0, 1], [0, 3]]


def test_block_and_running_distinct() -> None:
    assert div.running_distinct(np.array([3, 3, 1, 3, 2])).tolist() == [1, 1, 2, 2, 3]
    assert div.block_distinct(np.array([0, 0, 1, 2, 2, 2, 5]), 3).tolist() == [2, 1, 1]
    with pytest.raises(ValueError):
        div.block_distinct(np.array([1]), 0)



@pytest.mark.parametrize("mode", ["page", "local", "none", "row"])
def test_plan_rows_follow_drop_last_splits_of_windows(corpus, mode: str) -> None:
    """Under drop_last a window can be split between two ranks: the plan's rows are
    still exactly what the stream yields."""
    idx, _ = corpus
    page_rows = idx.page_num_rows()
    for rank in range(3):
        s = RowStream(idx, shuffle=mode, buffer_size=20, seed=3, rank=rank, world_size=3, drop_last=True)
        got = np.concatenate([t.column("row_id").to_numpy() for t in s.iter_tables()])
        assert np.array_equal(div.plan_rows(s.plan, page_rows), got)
