"""One Parquet pass for every reader: a ``ParquetStream`` read as a pass
(``iter_positions``, what the torch adapter iterates), a window at a time
(``iter_windows``) or row by row (``rows_at``) — the last two are how a Ray source
loader measures and re-reads rows — yields the same items at the same positions, for
each kind of transform: plain, batched (a page's rows at a time, as ``youmu.text``'s)
and row-reporting (bad rows located, skipped and reported, as
``VisionTransform(on_error="skip")``'s), the reports included. And a Ray deployment's
loaders (in process here; on a Ray cluster in tests/integrations/test_ray_transforms.py) deliver
those items, however often a row falls out of their cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from youmu.errors import ImageError, LoaderError, TextError
from youmu.streams.parquet import ParquetStream

BAD = {0, 3, 4, 9, 10, 11, 17}  # the first row, runs across page (and window) boundaries


class Double:
    """A batched transform: a table of rows at a time."""

    batched = True
    batch_rows = 3

    def __call__(self, table: pa.Table) -> pa.Table:
        return pa.table({"x": table["x"], "y": pc.multiply(table["x"], 2)})


class SkipBad:
    """A row-reporting transform that finds the rows of ``BAD`` bad and skips them."""

    reports_rows = True

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if row["x"] in BAD:
            raise ImageError(f"bad image in row {row['x']}", column="x", skip=True)
        return {"x": row["x"], "y": 2 * row["x"]}


class SkipBadBatched:
    """A batched transform that skips the rows of ``BAD`` (as ``Tokenize(on_error="skip")``
    does: the errors of the rows it skips returned beside the good rows of the batch)."""

    batched = True
    batch_rows = 3
    reports_rows = True

    def __call__(self, table: pa.Table) -> tuple[pa.Table, list[bool], list[TextError]]:
        xs = table["x"].to_pylist()
        errors = [TextError(f"bad text in row {x}", column="x", batch_row=i, skip=True)
                  for i, x in enumerate(xs) if x in BAD]
        return pa.table({"x": table["x"], "y": pc.multiply(table["x"], 2)}), [x not in BAD for x in xs], errors


def drop_odd(row: dict[str, Any]) -> dict[str, Any] | None:
    return None if row["x"] % 2 else row


@pytest.fixture(scope="module")
def path(ids_file: Callable[..., str]) -> str:
    return ids_file(24, column="x", row_group_size=2)  # 12 pages of 2 rows


def _stream(path: str, transform: Any, shuffle: str, rank: int = 0, world: int = 1) -> ParquetStream:
    kw: dict[str, Any] = {"page_slices": 2} if shuffle == "page-slices" else {}
    return ParquetStream(path, shuffle=shuffle.split("-")[0], buffer_size=4, seed=5, output="python",
                         transform=transform, rank=rank, world_size=world, **kw)


TRANSFORMS = {"plain": drop_odd, "batched": Double(), "reporting": SkipBad(), "batched-reporting": SkipBadBatched()}


@pytest.mark.parametrize("shuffle", ["none", "page", "row", "local", "page-slices"])
@pytest.mark.parametrize("kind", sorted(TRANSFORMS))
@pytest.mark.parametrize("world", [1, 2])
def test_windows_and_rows_at_are_the_pass(path: str, kind: str, shuffle: str, world: int) -> None:
    for rank in range(world):
        s = _stream(path, TRANSFORMS[kind], shuffle, rank, world)
        for start in (0, 5):
            want = list(s.iter_positions(start))
            assert want or start
            windows = list(s.iter_windows(start))
            assert [x for _, w in windows for x in w] == want
            assert windows[-1][0] == s.shard_length(0, 1)  # the last window ends the shard
            ends = [after for after, _ in windows]
            assert ends == sorted(ends) and all(p < after for after, w in windows for p, _ in w)
            # row by row, in any order (how a loader re-reads rows its cache no longer holds): the
            # samples of the shard's pass (a pass from 5, a skipped row, has the skips before its first)
            full = dict(s.iter_positions(0))
            some = [p for p, _ in want][::-1]
            assert s.rows_at(some) == [full[p] for p in some]


@pytest.mark.parametrize("transform", [SkipBad(), SkipBadBatched()], ids=["per-row", "batched"])
def test_skipped_rows_are_reported_once_by_the_pass_and_by_its_windows(path: str, transform: Any) -> None:
    s = _stream(path, transform, "none")
    reports = [r["position"] for _, item in s.iter_positions(0) for r in item.get("skipped", [])]
    assert reports == sorted(BAD)
    # the first sample carries the rows skipped before it, the others those after them
    first = next(item for _, item in s.iter_positions(0))
    assert first["x"] == 1 and [r["position"] for r in first["skipped"]] == [0]
    assert [r["row"] for _, w in s.iter_windows(0) for _, item in w for r in item.get("skipped", [])] == sorted(BAD)
    # a sample's position covers the rows skipped after it: a pass resumed after it never sees them again
    after_2 = next(p for p, item in s.iter_positions(0) if item["x"] == 2)
    assert after_2 == 4 and [item["x"] for _, item in s.iter_positions(after_2 + 1)][:1] == [5]


def test_a_measured_position_that_the_transform_drops_is_an_error(path: str) -> None:
    s = _stream(path, drop_odd, "none")
    with pytest.raises(LoaderError, match="dropped position 3"):
        s.rows_at([2, 3])


@pytest.mark.parametrize("kind", sorted(TRANSFORMS))
def test_a_deployment_delivers_the_pass_whatever_its_cache_holds(path: str, kind: str) -> None:
    """Ray's source loaders (in process): every sample of the epoch, each once and as the
    in-process streams yield it — with a cache of one row, nearly every payload is re-read."""
    from youmu.ray import RayLoaders, Source

    src = Source(path, shuffle="page", buffer_size=4, seed=5, output="python", transform=TRANSFORMS[kind])
    want = sorted((item for r in range(2) for _, item in _stream(path, TRANSFORMS[kind], "page", r, 2)
                   .iter_positions(0)), key=lambda item: item["x"])
    for cache_rows in (8192, 1):
        loaders = RayLoaders(src, world_size=2, num_microbatches=1, global_batch_size=4, collate_fn=list,
                             length_fn=lambda item: 1, local=True, cache_rows=cache_rows)
        got = [item for r in range(2) for batch, _ in loaders.client(r, prefetch=0) for item in batch or []]
        assert sorted(got, key=lambda item: item["x"]) == want


class Held:
    """A plain transform whose items say, when the next one is made, whether the item
    before it is still alive (held by the pass)."""

    def __init__(self) -> None:
        import weakref

        self._ref: Callable[[], Any] = lambda: None
        self._weakref = weakref.ref
        self.alive_at_next: list[bool] = []

    def __call__(self, row: dict[str, Any]) -> Any:
        self.alive_at_next.append(self._ref() is not None)
        item = _Item(row)
        self._ref = self._weakref(item)
        return item


class _Item:
    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row


def test_an_item_the_consumer_dropped_is_not_held_while_the_next_is_made(tmp_path) -> None:
    """An image row is as large as a page's worth of text: a pass that kept the last item
    while making the next (and reading the next window, read alone for large pages) held
    one row more beside the next page than the ``memory_budget`` accounts for."""
    from parquet_fixtures import write_ids

    from youmu.torch import YoumuDataset

    held = Held()
    ds = YoumuDataset(write_ids(tmp_path / "ids.parquet", 40, row_group_size=8), shuffle="page", output="python",
                      transform=held, seed=0, buffer_size=8)
    n = 0
    for item in ds:
        n += 1
        del item
    assert n == 40
    assert not any(held.alive_at_next), held.alive_at_next
