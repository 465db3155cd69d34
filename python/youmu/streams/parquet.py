"""``ParquetStream``: rows of Parquet files, shuffled at page granularity, sharded
exactly once over ranks × DataLoader workers and resumable from a few integers — the
stream behind :class:`youmu.torch.YoumuDataset` (its ``IterableDataset`` adapter) and
behind a Ray deployment's Parquet sources (:mod:`youmu.ray.source`, rows read in a
loader actor without torch). One object, so the same settings read the same windows of
the same pages in the same order wherever the rows are read.

A stream is a :class:`youmu.streams.spec.StreamSpec` (the settings, checked once) laid out over
the files for a world size (:class:`youmu.streams.spec.StreamLayout`), read by the positional
stream core (:mod:`youmu.streams.core`: passes, epochs, states, resumed epochs).

Example:
    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=2)    # 5 pages
    >>> s = ParquetStream(path, rank=1, world_size=2, shuffle="none", buffer_size=2, output="python")
    >>> [(p, r["x"]) for p, r in s.iter_positions(2)]
    [(2, 6), (3, 7)]
    >>> [w for _, w in s.iter_windows(0)][0], s.rows_at([3, 0])
    ([(0, {'x': 2}), (1, {'x': 3})], [{'x': 7}, {'x': 2}])
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from youmu._internal.args import int_arg
from youmu.distributed.world import rank_and_world
from youmu.errors import LoaderError, RowError
from youmu.order.resume import Level, Origin
from youmu.order.sharding import Shard
from youmu.order.shuffle import global_rows
from youmu.state.contract import state_int
from youmu.state.stream import PARQUET_STREAM_FORMAT
from youmu.streams.batched import batched_pass, is_batched
from youmu.streams.convert import rows as convert_rows
from youmu.streams.core import SKIP, PositionalStream, current_worker, in_worker_process
from youmu.streams.rowstream import RowStream
from youmu.streams.skips import SkipLog, locate, report_skips, reporting_pass
from youmu.streams.spec import SpecAttributes, StreamLayout, StreamSpec

__all__ = ["ParquetStream"]


class ParquetStream(SpecAttributes, PositionalStream[Any]):
    """Rows of Parquet files, shuffled at page granularity (see the module doc and
    :class:`youmu.torch.YoumuDataset`, whose arguments are this stream's).

    Args:
        paths: file, directory, glob or list of these, a ``youmu.PageIndex``, or a
            ``youmu.FlatMixture`` of Parquet sources.
        spec: the settings as a ready :class:`youmu.streams.spec.StreamSpec`, or
        **settings: the settings as keywords (``columns``, ``shuffle``, ``buffer_size``,
            ``seed``, ``transform``, ``drop_last``, ``output``, ``memory_budget``,
            ``read_ahead``, ``page_slices``, ``storage_options``).
        rank, world_size: default from ``torch.distributed`` when initialised.
    """

    state_format = PARQUET_STREAM_FORMAT
    resume_adopts = ("window_pages",)

    def __init__(self, paths: Any, spec: StreamSpec | None = None, *, rank: int | None = None,
                 world_size: int | None = None, _stacklevel: int = 1, **settings: Any) -> None:
        super().__init__()
        #: the settings, checked once (youmu.streams.spec); ``s.shuffle``, ``s.seed``, ... read them
        self.spec = StreamSpec.given(spec, settings, "a ParquetStream")
        self.rank, self.world_size = rank_and_world(rank, world_size)
        #: the windows over these files for this world size (a pure function of both: computed once)
        self.layout: StreamLayout = self.spec._layout(paths, self.world_size)  # checked by rank_and_world
        self._paths = paths
        # a resumed epoch reads the windows of the job that started it (youmu.order.resume)
        self._resumed_wp: int | None = None
        self._page_starts: np.ndarray | None = None
        #: rows the transform skipped in this process (``on_error="skip"``; see youmu.streams.skips)
        self.skip_log = SkipLog()
        self.layout.check_rank_gets_rows(self.rank, stacklevel=_stacklevel + 1)

    @property
    def index(self) -> Any:
        """The :class:`youmu.PageIndex` the rows are read from."""
        return self.layout.index

    @property
    def read_ahead(self) -> int:
        """Windows read ahead of the one being consumed (the default resolved, and
        lowered where ``memory_budget`` binds)."""
        return self.layout.read_ahead

    @property
    def transform(self) -> Callable[[Any], Any] | None:  # type: ignore[override]  # read-only: the spec's
        return self.spec.transform

    def column_types(self) -> dict[str, Any] | None:
        """The Arrow type of each column of this stream's rows, or ``None`` where a
        ``transform`` makes the rows (their columns are known only once read)."""
        if self.spec.transform is not None:
            return None
        schema = self.index.schema
        return {name: schema.field(name).type for name in self.index.columns}

    # -- the stream contract ----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        return self.layout.settings(self.rank, self._window_pages())

    def shard_length(self, worker: int, num_workers: int, epoch: int | None = None) -> int:
        Shard(self.rank, self.world_size, worker, num_workers)  # a caller's worker numbers: checked
        return len(self._stream(worker, num_workers, epoch))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` on the next ``iter()``; a state saved when
        ``columns=None`` paged by the first column rather than the dominant one (before
        that default, :mod:`youmu.streams.page_grid`) resumes on its own grid."""
        self._keep_saved_grid(state)
        super().load_state_dict(state)

    def _keep_saved_grid(self, state: Any) -> None:
        """Switch to the first-column grid where ``state``'s data fingerprint is that
        grid's and not this layout's (the fingerprint holds the columns in grid order)."""
        data = state.get("data") if isinstance(state, Mapping) else None
        if (not isinstance(data, str) or data == self.layout.data or self.spec.columns is not None
                or self.spec.check_paths(self._paths) != "paths"):
            return
        old = self.spec._layout(self._paths, self.world_size, first_column_grid=True)
        if old.data == data:
            self.layout = old
            self._page_starts = None

    # -- sizes ----------------------------------------------------------------------------
    @property
    def window_pages(self) -> int:
        """Pages per shuffle window (page and local modes): what shuffle quality depends
        on — windows of 32 pages or more trained as well as a full row shuffle in
        ``benches/shuffle_quality.py``; with ``page_slices=k`` a window draws from about
        ``k`` times as many pages. An epoch resumed from a merged state keeps the
        windows of the job that started it."""
        return self._window_pages()

    def _window_pages(self) -> int:
        return self._resumed_wp if self._levels and self._resumed_wp else self.layout.window_pages

    def dropped_rows(self) -> int:
        """Rows ``drop_last`` leaves out of this epoch (0 without ``drop_last``)."""
        return self.layout.dropped_rows()

    def __len__(self) -> int:
        """Rows this rank delivers in the current epoch."""
        return len(self._stream(0, 1))

    # -- resumed epochs (youmu.merge_states) ------------------------------------------------
    def _adopt(self, state: Mapping[str, Any]) -> None:
        self._resumed_wp = state_int(state, "window_pages", owner=type(self).__name__, minimum=1)

    def _adopted_for(self, levels: list[Level]) -> dict[str, Any]:
        # the epoch's first job laid the windows out for its own world size
        return {"window_pages": self.spec.layout(self.index, levels[0].world_size).window_pages}

    def _adopted_state(self) -> Any:
        return self._resumed_wp

    def _restore_adopted(self, saved: Any) -> None:
        self._resumed_wp = saved

    def _dealt_to(self) -> tuple[int, int, bool]:
        return self.rank, self.world_size, self.spec.drop_last

    def _origin(self, levels: Any) -> Origin:
        return self.layout.origin(self.epoch, self._window_pages())

    # -- iteration ------------------------------------------------------------------------
    def _stream(self, worker: int, num_workers: int, epoch: int | None = None) -> RowStream:
        epoch = self.epoch if epoch is None else epoch
        # rank and world size checked when the stream was built, the worker numbered by the DataLoader
        shard = Shard._from_checked(self.rank, self.world_size, worker, num_workers)
        return self.layout._stream(shard, epoch, window_pages=self._window_pages(),
                                   units=self._resumed_units(worker, num_workers, epoch))

    def _pass(self, worker: int, num_workers: int, start: int) -> Iterator[tuple[int, Any]]:
        stream = self._stream(worker, num_workers)
        return self._transformed(stream.iter_tables(start), start, self._where(stream))

    def _where(self, stream: RowStream) -> Callable[[int], dict[str, Any]]:
        """``{"file", "row", "position"}`` of a position of ``stream`` (errors and skip reports name them)."""
        return lambda pos: locate(self.index, stream.plan, self.layout.page_rows, pos)

    def _transformed(self, tables: Iterable[pa.Table], start: int, where: Callable[[int], dict[str, Any]], *,
                     log: SkipLog | None = None, whole: bool = True) -> Iterator[tuple[int, Any]]:
        """The one Parquet pass: ``(position after, item or SKIP)`` of the consecutive
        stream rows in ``tables`` (from position ``start``) through the transform, of
        whichever kind — a plain one row by row (``None`` drops a row), a batched one a
        page's rows at a time (:mod:`youmu.streams.batched`), and either of them reporting rows
        (``reports_rows``, :mod:`youmu.streams.skips`: bad rows located, raised or skipped and
        reported with the sample before them, whose position then covers them). Every reader goes
        through it — a pass (the torch adapter), :meth:`iter_windows` and
        :meth:`rows_at` (a Ray source loader) — so a transform works in all or none."""
        transform, output, compact = self.spec.transform, self.spec.output, in_worker_process()
        reports = getattr(transform, "reports_rows", False)
        log = self.skip_log if log is None else log
        if is_batched(transform):
            outcomes = batched_pass(tables, transform, output, start,  # type: ignore[arg-type]
                                    where=where, compact=compact, in_worker=compact)
            if reports:  # on_error="skip": rows skipped are reported
                yield from report_skips(((p, SKIP if x is None else x) for p, x in outcomes), start, log,
                                        whole=whole)
                return
            for pos, item in outcomes:
                if isinstance(item, RowError):  # skipped by a transform that does not say it reports rows
                    raise item.located(skip=False).for_worker() if compact else item.located(skip=False)
                yield pos, SKIP if item is None else item
                del item
            return
        rows = _rows_of(tables, output, compact)
        if reports:
            yield from reporting_pass(rows, transform, start, where, log, whole=whole)  # type: ignore[arg-type]
            return
        pos = start
        # each row let go once handed on (not held while the next window is read)
        if transform is None:
            for item in rows:
                pos += 1
                yield pos, item
                del item
            return
        for row in rows:
            pos += 1
            item = transform(row)
            del row
            yield pos, SKIP if item is None else item
            del item

    # -- reads by window and by position (a Ray source loader's) ------------------------------
    def iter_windows(self, start: int = 0) -> Iterator[tuple[int, list[tuple[int, Any]]]]:
        """The pass from ``start`` (:meth:`iter_positions`' items and positions), a
        window at a time: ``(position the pass is at, [(position, item), ...])`` once
        it is past the end of a window (rows the transform drops are left out; the
        pass may be further where the sample that ends a window covers rows skipped
        after it). The stream's own progress does not move."""
        worker, num_workers, _ = self._begin()
        start = int_arg("start", start, minimum=0)
        stream = self._stream(worker, num_workers)
        ends: deque[int] = deque()  # where each window read so far ends

        def tables() -> Iterator[pa.Table]:
            end = start
            for table in stream.iter_tables(start):
                end += table.num_rows
                ends.append(end)
                yield table
                del table  # not held while the next window is read

        out: list[tuple[int, Any]] = []
        for after, item in self._transformed(tables(), start, self._where(stream)):
            if item is not SKIP:
                out.append((after - 1, item))
            if ends and after >= ends[0]:
                while ends and ends[0] <= after:
                    ends.popleft()
                yield after, out
                out = []

    def rows_at(self, positions: Sequence[int]) -> list[Any]:
        """What :meth:`iter_positions` yields at ``positions`` of this process's shard
        (the rows read one by one through the row map: a page read per row, no
        window), through the same pass. A transform that drops one of them is a
        :class:`~youmu.errors.LoaderError` (it was measured there: a transform must be
        a pure function of the row). With a transform that reports rows, a sample
        comes with the reports of the rows skipped after it (and, the first sample of
        the shard, before it) as in the pass: those rows are read too."""
        if not len(positions):
            return []
        worker, num_workers = current_worker()
        self._sync_epoch()
        stream = self._stream(worker, num_workers)
        where = self._where(stream)
        if getattr(self.spec.transform, "reports_rows", False):
            return self._reported_at(stream, [int(p) for p in positions])
        table = self._read_at(stream, positions)
        out = []
        for (_, item), pos in zip(self._transformed([table], 0, lambda k: where(int(positions[k]))), positions):
            if item is SKIP:
                raise _dropped(int(pos))
            out.append(item)
        return out

    def _reported_at(self, stream: RowStream, positions: list[int]) -> list[Any]:
        """:meth:`rows_at` with a transform that reports rows: position ``q``'s sample is
        the last of the pass over rows ``lo..q``, where ``lo`` is a row the transform
        keeps (its sample carries no earlier reports) or the shard's first; ``lo``
        starts at ``q - 1`` and moves back, doubling, past skipped rows."""
        where = self._where(stream)
        lo = {q: max(q - 1, 0) for q in positions}
        got: dict[int, Any] = {}
        pending = sorted(set(positions))
        while pending:
            wanted = sorted({p for q in pending for p in range(lo[q], q + 1)})
            table = self._read_at(stream, wanted)
            at = {p: i for i, p in enumerate(wanted)}
            again = []
            for q in pending:
                rows = table.slice(at[lo[q]], q + 1 - lo[q])
                passed = list(self._transformed([rows], lo[q], where, log=SkipLog(), whole=False))
                if passed[0][1] is SKIP and lo[q] > 0:  # a skipped row: its report may belong to a sample before
                    lo[q] = max(0, q - 2 * (q + 1 - lo[q]))
                    again.append(q)
                    continue
                after, item = passed[-1]
                if item is SKIP or after != q + 1:
                    raise _dropped(q)
                got[q] = item
            pending = again
        return [got[q] for q in positions]

    def _read_at(self, stream: RowStream, positions: Sequence[int]) -> pa.Table:
        """The untransformed rows at ``positions`` of ``stream`` (through its row map)."""
        if self._page_starts is None:
            self._page_starts = np.concatenate([[0], np.cumsum(self.layout.page_rows)])
        ids = global_rows(stream.plan, self.layout.page_rows, positions, self._page_starts).tolist()
        return pa.Table.from_batches([stream._conform(self.index.read_rows(ids))])


def _rows_of(tables: Iterable[pa.Table], output: str, compact: bool) -> Iterator[Any]:
    for table in tables:
        yield from convert_rows(table, output, compact=compact)
        del table  # not held while the next window is read (image windows are large)


def _dropped(position: int) -> LoaderError:
    return LoaderError(f"the transform dropped position {position}, which the planner measured (a transform must "
                       "be a pure function of the row)")
