"""What a source of a disaggregated deployment is, and how its rows are read without
torch: :class:`Source` (a Parquet source's settings — a :class:`youmu.spec.StreamSpec`
— or a function building a position-addressable stream), :class:`ParquetRows` (rank
``r``'s rows of a Parquet source by position) and the compact :class:`Record` s a
loader returns for the planner (MegaScale-Data, §3: metadata for planning, payloads
fetched later). The actor that serves them is :mod:`youmu.ray.source_actor`.

Example:
    >>> src = Source("data/web/", shuffle="row", buffer_size=512)
    >>> src.shuffle, src.buffer_size
    ('row', 512)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from youmu._args import callable_arg, int_arg
from youmu.distributed import describe
from youmu.errors import ArgumentTypeError, InvalidArgumentError, LoaderError
from youmu.jobstates import Level
from youmu.resume import resolve
from youmu.spec import SpecAttributes, StreamSpec, describe_paths
from youmu.stateful import check_epoch

__all__ = ["Source", "ParquetRows", "Record", "Records", "MeasureFns"]


class Record(NamedTuple):
    """What the planner learns about one sample: its position in its (source, rank)
    stream, its documents, its loss tokens and its ``id_fn`` id (``None`` without one)."""

    position: int
    docs: list[int]
    tokens: int
    uid: int | None


@dataclass(frozen=True)
class Records:
    """Records of consecutive samples of one (source, rank) stream, in columns (a few
    integers per sample: cheap to send and to keep ahead of use); ``next``: the
    position after them; ``ended``: the stream has no more.

    >>> r = Records.of([Record(0, [3, 4], 7, None), Record(2, [5], 5, None)], next=3, ended=True)
    >>> len(r), r[1], r.next
    (2, Record(position=2, docs=[5], tokens=5, uid=None), 3)
    """

    positions: np.ndarray
    tokens: np.ndarray
    doc_offsets: np.ndarray
    doc_lengths: np.ndarray
    uids: np.ndarray | None
    next: int
    ended: bool

    @classmethod
    def of(cls, records: Sequence[Record], *, next: int, ended: bool) -> Records:
        counts = np.fromiter((len(r.docs) for r in records), dtype=np.int64, count=len(records))
        offsets = np.zeros(len(records) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        lengths = np.fromiter((d for r in records for d in r.docs), dtype=np.int64, count=int(offsets[-1]))
        has_uid = bool(records) and records[0].uid is not None
        return cls(np.fromiter((r.position for r in records), dtype=np.int64, count=len(records)),
                   np.fromiter((r.tokens for r in records), dtype=np.int64, count=len(records)), offsets, lengths,
                   np.fromiter((r.uid for r in records), dtype=np.int64, count=len(records)) if has_uid else None,
                   int(next), bool(ended))

    def __len__(self) -> int:
        return int(self.positions.size)

    def __getitem__(self, i: int) -> Record:
        a, b = int(self.doc_offsets[i]), int(self.doc_offsets[i + 1])
        return Record(int(self.positions[i]), self.doc_lengths[a:b].tolist(), int(self.tokens[i]),
                      None if self.uids is None else int(self.uids[i]))

    def __iter__(self) -> Iterator[Record]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True)
class MeasureFns:
    """The user's measuring functions (they run in the source loaders)."""

    length_fn: Callable[[Any], int] | None = None
    docs_fn: Callable[[Any], Any] | None = None
    token_count_fn: Callable[[Any], int] | None = None
    id_fn: Callable[[Any], int] | None = None

    def describe(self) -> dict[str, str | None]:
        return {k: None if v is None else describe(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True, init=False)
class Source(SpecAttributes):
    """One data source, as a loader opens it for every origin rank.

    Either ``paths`` — a file, directory, glob or URL (or a list of them) or a ready
    :class:`~youmu.PageIndex` — read as ``YoumuDataset(index, rank=r,
    world_size=W, **settings)``; or ``stream`` — a function ``(rank, world_size) ->
    stream`` returning a youmu stream with ``iter_positions(start)`` and ``set_epoch``
    (e.g. a ``MapStream``).

    ``settings`` are ``YoumuDataset``'s (``columns``, ``shuffle``, ``buffer_size``,
    ``seed``, ``transform``, ``drop_last``, ``output``, ``memory_budget``,
    ``read_ahead``, ``page_slices``, ``storage_options``: they mean what they mean
    there), given as keywords or as a ready :class:`youmu.spec.StreamSpec`
    (``spec=dataset.spec``); they are checked by the spec, when the ``Source`` is
    built, and read as its attributes (``source.shuffle``).

    The same source, seed and settings give the same stream as the in-process
    ``YoumuDataset``: a loader only moves where it is read. ``output="numpy"`` (or
    ``"arrow"``) reaches the trainer zero-copy through Ray's object store; ``"torch"``
    tensors are pickled. ``storage_options`` (object-store settings for URL
    ``paths``, as :class:`youmu.PageIndex` takes them) travel to the loaders; the
    deployment's fingerprint keeps the endpoint and region, not the credentials.

    >>> Source("data/web/", shuffle="row", buffer_size=512).shuffle
    'row'
    >>> Source.of(["a.parquet", "b.parquet"]).paths
    ['a.parquet', 'b.parquet']
    """

    paths: Any
    stream: Callable[[int, int], Any] | None
    spec: StreamSpec

    def __init__(self, paths: Any = None, *, stream: Callable[[int, int], Any] | None = None,
                 spec: StreamSpec | None = None, **settings: Any) -> None:
        if (paths is None) == (stream is None):
            raise InvalidArgumentError("a Source needs exactly one of paths= (Parquet files or a PageIndex) or "
                                       "stream= (a function (rank, world_size) -> stream)")
        callable_arg("stream", stream, optional=True)
        if spec is None:
            spec = StreamSpec.of(settings)
        elif not isinstance(spec, StreamSpec):
            raise ArgumentTypeError(f"spec must be a youmu.spec.StreamSpec, got {type(spec).__name__}")
        elif settings:
            raise InvalidArgumentError(f"pass a Source's settings as spec= or as keywords, not both (got spec= and "
                                       f"{sorted(settings)})")
        spec.check_paths(paths, portable=True)
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "spec", spec)

    @classmethod
    def of(cls, value: Any, what: str = "source") -> Source:
        """A :class:`Source` from a ``Source``, paths, a ``PageIndex`` or a stream function."""
        if isinstance(value, Source):
            return value
        if isinstance(value, (str, os.PathLike, list, tuple)) or type(value).__name__ == "PageIndex":
            return cls(paths=list(value) if isinstance(value, tuple) else value)
        if callable(value):
            return cls(stream=value)
        raise ArgumentTypeError(f"{what} must be a youmu.ray.Source, Parquet paths, a PageIndex or a function "
                                f"(rank, world_size) -> stream; got {type(value).__name__}")

    def open(self) -> Any:
        """The source's page index (``None`` for a ``stream`` source): built once per
        loader from the files' footers, or the given one."""
        return None if self.paths is None else self.spec.open(self.paths)

    def build(self, index: Any, rank: int, world_size: int, *, epoch: int = 0, levels: Sequence[Level] = (),
              first_world_size: int | None = None) -> Any:
        """Rank ``rank``'s stream of this source in ``epoch``; with ``levels``, the
        stream of a job that resumed the epoch after those jobs (:mod:`youmu.resume`;
        ``first_world_size``: the world size of the epoch's first job)."""
        if self.stream is None:
            rows = ParquetRows(index, self, rank, world_size, levels=levels, first_world_size=first_world_size)
            rows.set_epoch(epoch)
            return rows
        if not levels:
            return self._function_stream(rank, world_size, epoch)
        # a stream function's youmu stream resumes from a merged state (youmu.merge_states)
        # of the previous job's streams, each at its position: built job by job
        from youmu.merge import merge_states

        worlds = [lv.world_size for lv in levels] + [world_size]
        merged: dict[int, Any] = {}

        def stream_at(depth: int, r: int) -> Any:
            s = self._function_stream(r, worlds[depth], epoch)
            if depth:
                if depth not in merged:
                    lv = levels[depth - 1]
                    states = []
                    for k in range(lv.world_size):
                        st = dict(stream_at(depth - 1, k).state_dict())
                        st.update(positions={0: lv.positions[k][0]}, num_workers=1)
                        states.append(st)
                    merged[depth] = merge_states(states)
                s.load_state_dict(merged[depth])
            return s

        return stream_at(len(levels), rank)

    def _function_stream(self, rank: int, world_size: int, epoch: int) -> Any:
        assert self.stream is not None
        stream = self.stream(rank, world_size)
        if not hasattr(stream, "iter_positions"):
            raise ArgumentTypeError(f"the stream function returned a {type(stream).__name__}, which has no "
                                    "iter_positions(start): return a youmu stream (MapStream, YoumuDataset, ...)")
        if hasattr(stream, "set_epoch"):
            stream.set_epoch(epoch)
        return stream

    def describe(self) -> dict[str, Any]:
        """The settings that shape the stream, by value (for fingerprints)."""
        where = ["stream", describe(self.stream)] if self.paths is None else describe_paths(self.paths)
        return self.spec.describe(where)


class ParquetRows:
    """Rank ``rank``'s rows of a Parquet source by position: what
    ``YoumuDataset(index, rank=rank, world_size=W, ...).iter_positions(start)`` yields,
    read with the same pieces — the source's :class:`youmu.spec.StreamLayout` (its
    windows and ``RowStream``) and :func:`youmu.convert.rows` — but without torch: a
    loader actor that imported it would carry hundreds of MB more (the CUDA build of
    torch costs ~520 MB of private memory per process), and holding sources in few
    processes is the point of disaggregation (MegaScale-Data, §2.4).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq, youmu
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=2)    # 5 pages
    >>> src = Source(path, shuffle="none", buffer_size=2, output="python")
    >>> [(p, r["x"]) for p, r in ParquetRows(youmu.PageIndex(path), src, rank=1, world_size=2).iter_positions(2)]
    [(2, 6), (3, 7)]
    """

    def __init__(self, index: Any, source: Source, rank: int, world_size: int, *, levels: Sequence[Level] = (),
                 first_world_size: int | None = None) -> None:
        self.source, self.spec = source, source.spec
        self.layout = source.spec.layout(index, world_size)
        self.index = self.layout.index
        self.rank, self.world_size = rank, world_size
        # a resumed epoch (youmu.resume): the rows the jobs of ``levels`` left, read with
        # the windows of the epoch's first job, as YoumuDataset reads them
        self.levels = list(levels)
        self._window_pages = None if not self.levels else source.spec.layout(
            self.index, first_world_size or self.levels[0].world_size).window_pages
        self.epoch = 0
        self._page_starts = np.concatenate([[0], np.cumsum(self.layout.page_rows)])
        self._plan_epoch: int | None = None
        self._rowstream: Any = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_epoch(epoch)

    def _stream(self) -> Any:
        if self._plan_epoch != self.epoch:
            units = None
            if self.levels:
                origin = self.layout.origin(self.epoch, self._window_pages)
                units = resolve(origin, self.levels, rank=self.rank, world_size=self.world_size, worker=0,
                                num_workers=1, drop_last=self.spec.drop_last)
            self._rowstream = self.layout.stream(self.rank, epoch=self.epoch, window_pages=self._window_pages,
                                                 units=units)
            self._plan_epoch = self.epoch
        return self._rowstream

    def iter_windows(self, start: int = 0) -> Iterator[tuple[int, list[tuple[int, Any]]]]:
        """The rest of each window from ``start``: ``(position after the window, [(position,
        row), ...])``, transformed (rows the transform drops are left out)."""
        from youmu.convert import rows

        s = self.spec
        pos = int_arg("start", start, minimum=0)
        for table in self._stream().iter_tables(pos):
            out = []
            for row in rows(table, s.output, compact=False):  # compact: only inside DataLoader workers
                if s.transform is not None:
                    row = s.transform(row)
                pos += 1
                if row is not None or s.transform is None:
                    out.append((pos - 1, row))
            yield pos, out

    def iter_positions(self, start: int = 0) -> Iterator[tuple[int, Any]]:
        """``(position, row)`` from ``start``, transformed; rows the transform drops are
        skipped (their positions still count), as ``PositionalStream.iter_positions``."""
        for _, window in self.iter_windows(start):
            yield from window

    def rows_at(self, positions: Sequence[int]) -> list[Any]:
        """The rows at ``positions``, read one by one through the row map (a page read
        per row, no window): what :meth:`iter_positions` yields at them."""
        from youmu.convert import rows
        from youmu.shuffle import positions_to_rows

        if not len(positions):
            return []
        plan = self._stream().plan
        if plan.mode == "row":
            ids = [int(plan.rows_of(i)[off]) for i, off in map(plan.window_at, positions)]
        else:
            starts = self._page_starts
            ids = [int(starts[p]) + r for p, r in positions_to_rows(plan, self.layout.page_rows, positions)]
        batch = self.index.read_rows(ids)
        schema = self.index.schema
        if not batch.schema.equals(schema):  # files may differ in nullability, as RowStream conforms them
            import pyarrow as pa

            batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        out = []
        s = self.spec
        for pos, row in zip(positions, rows(batch, s.output, compact=False)):
            if s.transform is not None:
                row = s.transform(row)
                if row is None:
                    raise LoaderError(f"the transform dropped position {pos}, which the planner measured (a "
                                      "transform must be a pure function of the row)")
            out.append(row)
        return out
