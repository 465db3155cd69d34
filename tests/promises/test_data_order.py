"""The data order is a pure function of the data and the settings.

The same Parquet files give the same stream — the same rows in the same order, read in
the same windows — wherever they are (a local directory, the same files under another
root, a copy on an object store: moto on 127.0.0.1) and however the I/O is done
(``youmu.set_io_options(max_inflight=...)``, ``read_ahead``), with and without a
``memory_budget``. Only the read-ahead adapts to the storage and to what the budget
leaves; a budget too small for the windows the settings ask for is said, never
silently taken out of the shuffle.

A state follows the data, not its location: a state saved over the original files
resumes over the same files moved to another directory or copied to an object store
(and back), while a state saved over other data is still refused.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from parquet_fixtures import write_columns
from s3util import S3  # noqa: E402

import youmu
from youmu.errors import StateError, YoumuWarning
from youmu.order.shuffle import DEFAULT_WINDOW_PAGES
from youmu.torch import YoumuDataset

pytest.importorskip("moto")
pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore:memory_budget=.*holds windows of:youmu.errors.YoumuWarning")]

# Four files, one of them in a subdirectory; row groups of 40 rows (one page each):
# 40 pages of about the same decoded size.
FILES = {"part-0.parquet": 400, "part-1.parquet": 320, "part-2.parquet": 360, "sub/part-3.parquet": 520}
ROWS_PER_PAGE = 40
WORLD = 2
SEED = 11


def _write(path: Path, first: int, n: int) -> None:
    rng = np.random.default_rng(first)
    toks = [rng.integers(0, 30_000, 64).astype(np.int32) for _ in range(n)]
    write_columns(path, {"id": pa.array(np.arange(first, first + n), pa.int64()),
                         "input_ids": pa.array(toks, pa.list_(pa.int32()))}, row_group_size=ROWS_PER_PAGE)


@pytest.fixture(scope="module")
def places(s3: S3, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """The same files in three places: ``{place: (paths, storage_options)}``."""
    local = tmp_path_factory.mktemp("order") / "data"
    first = 0
    for name, n in FILES.items():
        _write(local / name, first, n)
        s3.put_file(f"order/{name}", local / name)
        first += n
    moved = tmp_path_factory.mktemp("elsewhere") / "deeper" / "copy"
    shutil.copytree(local, moved)
    return {"local": (str(local), None), "moved": (str(moved), None), "s3": (s3.url("order/"), s3.options())}


@pytest.fixture(scope="module")
def page_bytes(places: dict[str, tuple[str, dict[str, Any] | None]]) -> int:
    """Decoded bytes of the largest page (what a memory budget is counted in)."""
    return int(youmu.PageIndex(places["local"][0]).page_decoded_bytes().max())


@pytest.fixture
def io_options() -> Iterator[None]:
    before = youmu.io_options()
    yield
    youmu.set_io_options(**before)


def _dataset(place: tuple[str, dict[str, Any] | None], rank: int, **kw: Any) -> YoumuDataset:
    paths, options = place
    return YoumuDataset(paths, shuffle="page", seed=SEED, rank=rank, world_size=WORLD, output="python",
                        storage_options=options, **kw)


def _ids(rows: Any) -> list[int]:
    return [int(r["id"]) for r in rows]


def _streams(place: tuple[str, dict[str, Any] | None], **kw: Any) -> tuple[int, list[list[int]]]:
    """(pages per window, every rank's rows of epochs 0 and 1) over ``place``."""
    out, window = [], set()
    for rank in range(WORLD):
        ds = _dataset(place, rank, **kw)
        window.add(ds.window_pages)
        for epoch in (0, 1):
            ds.set_epoch(epoch)
            out.append(_ids(ds))
    assert len(window) == 1
    return window.pop(), out


# budgets in largest pages: 30 pages hold windows of 10 (3 windows in flight); 96 pages
# would hold 32, more than two ranks' share of 40 pages (20)
BUDGETS = [None, 30, 96]


@pytest.mark.parametrize("budget_pages", BUDGETS)
def test_the_order_depends_on_neither_the_place_nor_the_io_settings(
        places: dict[str, tuple[str, dict[str, Any] | None]], page_bytes: int, budget_pages: int | None,
        io_options: None) -> None:
    budget = None if budget_pages is None else budget_pages * page_bytes
    want_window, want = _streams(places["local"], memory_budget=budget)
    ids = sorted(i for rank_epoch in want[0::2] for i in rank_epoch)
    assert ids == list(range(sum(FILES.values())))  # every row once per epoch over the ranks
    seen = {}
    for place in ("local", "moved", "s3"):
        for max_inflight in (4, 64):
            youmu.set_io_options(max_inflight=max_inflight)
            for read_ahead in (None, 0, 2, 6):
                window, got = _streams(places[place], memory_budget=budget, read_ahead=read_ahead)
                seen[(place, max_inflight, read_ahead)] = window
                assert got == want, f"{place}, max_inflight={max_inflight}, read_ahead={read_ahead}: another order"
    assert set(seen.values()) == {want_window}, f"window pages by (place, max_inflight, read_ahead): {seen}"


def test_a_budget_lowers_the_read_ahead_never_the_window(
        places: dict[str, tuple[str, dict[str, Any] | None]], page_bytes: int, io_options: None) -> None:
    budget = 30 * page_bytes
    youmu.set_io_options(max_inflight=64)
    local = _dataset(places["local"], 0, memory_budget=budget)
    remote = _dataset(places["s3"], 0, memory_budget=budget)
    assert local.window_pages == remote.window_pages == 10
    # what the budget leaves after the window consumed and the one being assembled
    for ds in (local, remote):
        assert ds.read_ahead * ds.window_pages * page_bytes <= budget - 2 * ds.window_pages * page_bytes
    # without a budget, object stores read further ahead than local files
    assert _dataset(places["s3"], 0).read_ahead > _dataset(places["local"], 0).read_ahead


def test_a_budget_that_shrinks_the_windows_says_so(places: dict[str, tuple[str, dict[str, Any] | None]],
                                                   page_bytes: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", YoumuWarning)  # room for the windows asked for: nothing to say
        assert _dataset(places["local"], 0, buffer_size=5 * ROWS_PER_PAGE,
                        memory_budget=15 * page_bytes).window_pages == 5
    with pytest.warns(YoumuWarning) as caught:
        ds = _dataset(places["local"], 0, memory_budget=30 * page_bytes)
    assert ds.window_pages == 10
    message = str(caught[0].message)
    assert "windows of 10 pages" in message, message
    assert f"{DEFAULT_WINDOW_PAGES} pages" in message and "Page shuffle and pages per window" in message, message


# -- a state follows the data ---------------------------------------------------------------
def _resumes(saved_at: tuple[str, dict[str, Any] | None], resumed_at: tuple[str, dict[str, Any] | None],
             budget: int | None) -> None:
    for rank in range(WORLD):
        whole = _ids(_dataset(saved_at, rank, memory_budget=budget))
        ds = _dataset(saved_at, rank, memory_budget=budget)
        it = iter(ds)
        head = [int(next(it)["id"]) for _ in range(57)]
        state = ds.state_dict()
        again = _dataset(resumed_at, rank, memory_budget=budget)
        again.load_state_dict(state)
        assert head + _ids(again) == whole


@pytest.mark.parametrize("budget_pages", [None, 30])
@pytest.mark.parametrize("saved, resumed", [("local", "moved"), ("moved", "local"), ("local", "s3"),
                                            ("s3", "local")])
def test_a_state_resumes_over_the_same_files_elsewhere(
        places: dict[str, tuple[str, dict[str, Any] | None]], page_bytes: int, saved: str, resumed: str,
        budget_pages: int | None) -> None:
    _resumes(places[saved], places[resumed], None if budget_pages is None else budget_pages * page_bytes)


def test_a_state_over_other_data_is_refused(places: dict[str, tuple[str, dict[str, Any] | None]],
                                            tmp_path: Path) -> None:
    changed = tmp_path / "changed"
    shutil.copytree(places["local"][0], changed)
    _write(changed / "part-1.parquet", 400, FILES["part-1.parquet"] - 1)  # one row fewer
    ds = _dataset(places["local"], 0)
    next(iter(ds))
    with pytest.raises(StateError, match="other data"):
        _dataset((str(changed), None), 0).load_state_dict(ds.state_dict())
    # the same names and sizes in another arrangement of directories is other data too
    flat = tmp_path / "flat"
    shutil.copytree(places["local"][0], flat)
    (flat / "sub" / "part-3.parquet").rename(flat / "part-3.parquet")
    (flat / "sub").rmdir()
    with pytest.raises(StateError, match="other data"):
        _dataset((str(flat), None), 0).load_state_dict(ds.state_dict())
