"""Source loaders: each data source's stream is opened **once**, in a loader actor,
instead of once per source × DataLoader worker × rank inside the training processes
(MegaScale-Data, §3: "dedicated actors for specific data sources" that "decouple
file access states from worker processes").

* :class:`Source` — how a loader builds one source's stream for each origin rank: the
  rows a :class:`~youmu.torch.YoumuDataset` over the source's Parquet files would
  yield (its settings, a :class:`youmu.spec.StreamSpec`; read by :class:`ParquetRows`,
  without importing torch), or any position-addressable stream a function builds (a
  :class:`~youmu.torch.MapStream` over a ``RowDataset``/``MixtureDataset``).
* :class:`SourceLoader` — holds the :class:`~youmu.PageIndex` of each of its sources
  and builds rank ``r``'s stream on demand. Its two methods are **pure functions of
  their arguments**: :meth:`SourceLoader.records` measures positions
  ``[start, start + count)`` of rank ``r``'s stream (documents, loss tokens and an
  ``id_fn`` id — the measuring functions run here, where the data is) and
  :meth:`SourceLoader.payloads` returns the samples at given positions. A loader that
  Ray restarts rebuilds its indexes in ``__init__`` and needs nothing else: Ray
  resubmits the interrupted call, which returns what the first attempt would have
  (MegaScale-Data, §6.1, checkpoints loader buffers differentially and replays planner
  state; youmu's positions are pure functions of (seed, epoch, position), so a loader
  has no buffer worth saving).

Memory does not grow with the number of sources or ranks: a loader keeps no stream
open between calls. The metadata pass reads whole windows (a window is decoded whole
anyway: its rows are permuted across its pages) and returns their records, compact;
the decoded rows wait for their payload pass in one LRU cache per loader
(``cache_rows``), and a row evicted from it (or asked of a standby, or of a restarted
loader) is read again by position — youmu's row map from stream position to page
row (:func:`youmu.shuffle.positions_to_rows`) and a random row read
(:meth:`youmu.PageIndex.read_rows`).

Example (a loader in this process; :class:`youmu.ray.RayLoaders` makes it an actor):
    >>> from youmu.torch import MapStream
    >>> rows = [{"input_ids": list(range(n))} for n in (3, 9, 4, 7, 5, 2)]
    >>> src = Source(stream=lambda rank, world_size: MapStream(rows, rank=rank, world_size=world_size))
    >>> loader = SourceLoader({"web": src}, world_size=2)
    >>> recs = loader.records(0, [("web", 1, 0, 2)])[0]            # rank 1's first two: rows 1, 3
    >>> [(r.position, r.docs) for r in recs], recs.next, recs.ended
    ([(0, [9]), (1, [7])], 2, False)
    >>> [len(s["input_ids"]) for s in loader.payloads(0, [("web", 1, [1, 0])])[0]]
    [7, 9]
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from youmu._args import callable_arg, index_of, int_arg
from youmu.distributed import describe
from youmu.errors import ArgumentTypeError, InvalidArgumentError, LoaderError
from youmu.planning.rank_sources import Measure
from youmu.ray.state import Chain
from youmu.resume import Level, resolve
from youmu.spec import SpecAttributes, StreamSpec, describe_paths

__all__ = ["Source", "SourceLoader", "ParquetRows", "Record", "Records", "MeasureFns"]

#: a row position further than this past the last one read is re-read by a new pass
#: (seeking) rather than by reading through the rows in between
_SEEK_GAP = 1024


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
        self.epoch = int_arg("epoch", epoch, minimum=0)

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


class SourceLoader:
    """Holds some sources and serves their per-rank streams by position (see the module
    doc). Runs as a Ray actor (``max_restarts=-1``) or, for tests, in process.

    Args:
        sources: ``{name: Source}`` this loader serves.
        world_size: training ranks ``W`` (each source is sharded over them exactly as
            in process).
        measure: the user's measuring functions.
        defer_errors: keep an error opening the sources and raise it from
            :meth:`ping` (as a Ray actor: see there) instead of from the constructor.
        cache_rows: rows measured and not yet delivered, kept for the payload pass
            (beyond it a payload is re-read by position).
        open_passes: passes over streams kept open between metadata reads.
    """

    def __init__(self, sources: Mapping[str, Source], world_size: int, *, measure: MeasureFns | None = None,
                 cache_rows: int = 8192, open_passes: int = 64, defer_errors: bool = False) -> None:
        self.world_size = int_arg("world_size", world_size, minimum=1)
        self.cache_rows = int_arg("cache_rows", cache_rows, minimum=1)
        self.open_passes = int_arg("open_passes", open_passes, minimum=1)
        self.sources = {str(n): Source.of(s, f"sources[{n!r}]") for n, s in sources.items()}
        self._init_error: BaseException | None = None
        try:
            self.indexes = {n: s.open() for n, s in self.sources.items()}
        except Exception as e:
            if not defer_errors:
                raise
            # An actor whose constructor raises dies with an ActorDiedError that keeps
            # the error as text only; kept here, ping() raises it as itself, and
            # RayLoaders re-raises it (a YoumuIOError, a ColumnNotFoundError, ...)
            self._init_error = e
            self.indexes = {}
        # the read path, imported now rather than in the first call: a restart pays it before it serves
        import youmu.convert  # noqa: F401
        import youmu.stream  # noqa: F401
        fns = measure or MeasureFns()
        self.id_fn = fns.id_fn
        self._measure = Measure(rank=0, world_size=1, length_fn=fns.length_fn, docs_fn=fns.docs_fn,
                                token_count_fn=fns.token_count_fn)
        # streams are keyed by (source, stream number, epoch, chain): a resized epoch's
        # stream numbers mean other streams (youmu.ray.state)
        self._streams: OrderedDict[_Key, Any] = OrderedDict()
        self._passes: OrderedDict[_Key, tuple[int, Iterator[tuple[int, Any]]]] = OrderedDict()
        self._rows: OrderedDict[tuple[_Key, int], Any] = OrderedDict()
        #: rows read by each pass (metadata, payload misses): how much work failover costs
        self.rows_read = {"records": 0, "payload_misses": 0}
        self._lock = threading.Lock()  # in process, the planner and clients call from their own threads

    # -- streams ---------------------------------------------------------------------------
    def _stream(self, key: _Key) -> Any:
        s = self._streams.get(key)
        if s is None:
            name, number, epoch, chain = key
            if name not in self.sources:
                raise InvalidArgumentError(f"this loader serves {sorted(self.sources)}, not {name!r}")
            if chain is None:
                if not 0 <= number < self.world_size:
                    raise InvalidArgumentError(f"rank {number} outside range({self.world_size})")
                depth, rank, world = 0, number, self.world_size
            else:
                depth, rank, world = chain.locate(number, self.world_size)
            levels = [] if chain is None else chain.levels(name, depth)
            first = None if chain is None else chain.first_world_size
            s = self.sources[name].build(self.indexes[name], rank, world, epoch=epoch, levels=levels,
                                         first_world_size=first)
            self._streams[key] = s
            while len(self._streams) > 2 * len(self.sources) * self.world_size:
                self._streams.popitem(last=False)
        else:
            self._streams.move_to_end(key)
        return s

    def _pass_at(self, key: _Key, start: int) -> Iterator[tuple[int, Any]]:
        """A pass over the stream from ``start``: the open one if it stopped there."""
        kept = self._passes.pop(key, None)
        if kept is not None and kept[0] == start:
            return kept[1]
        return self._stream(key).iter_positions(start)

    def _keep_pass(self, key: _Key, next_start: int, it: Iterator[tuple[int, Any]]) -> None:
        self._passes[key] = (next_start, it)
        while len(self._passes) > self.open_passes:
            self._passes.popitem(last=False)

    def _cache(self, key: tuple[_Key, int], item: Any) -> None:
        self._rows[key] = item
        while len(self._rows) > self.cache_rows:
            self._rows.popitem(last=False)

    # -- the two pure methods --------------------------------------------------------------
    def records(self, epoch: int, requests: Sequence[tuple[str, int, int, int]],
                chain: Chain | None = None) -> list[Records]:
        """For each ``(source, stream, start, count)``: the :class:`Records` of at least
        ``count`` samples of that stream (rank ``stream``'s, or with ``chain`` the
        stream so numbered in a resized epoch, :mod:`youmu.ray.state`) from position
        ``start`` (positions a transform drops are skipped; a Parquet source's records
        run to the end of the last window read), unless the stream ends first."""
        epoch = int_arg("epoch", epoch, minimum=0)
        with self._lock:
            return [self._records((name, int(stream), epoch, chain), start, count)
                    for name, stream, start, count in requests]

    def _measure_row(self, key: _Key, pos: int, item: Any) -> Record:
        docs, tokens = self._measure.measured(item)
        uid = None if self.id_fn is None else index_of(self.id_fn(item), "id_fn's result")
        self._cache((key, pos), item)
        return Record(pos, docs, tokens, uid)

    def _records(self, key: _Key, start: int, count: int) -> Records:
        int_arg("start", start, minimum=0)
        int_arg("count", count, minimum=0)
        stream = self._stream(key)
        recs: list[Record] = []
        nxt, ended = start, True
        if hasattr(stream, "iter_windows"):
            # whole windows: nothing of the pass is kept, the next call starts at a window
            for after, window in stream.iter_windows(start):
                nxt = after
                recs += [self._measure_row(key, pos, item) for pos, item in window]
                if len(recs) >= count:
                    ended = False
                    break
        else:
            it = self._pass_at(key, start)
            ended = False
            while len(recs) < count:
                try:
                    pos, item = next(it)
                except StopIteration:
                    ended = True
                    break
                recs.append(self._measure_row(key, pos, item))
                nxt = pos + 1
            if not ended:
                self._keep_pass(key, nxt, it)
        self.rows_read["records"] += len(recs)
        return Records.of(recs, next=nxt, ended=ended)

    def payloads(self, epoch: int, requests: Sequence[tuple[str, int, Sequence[int]]],
                 chain: Chain | None = None) -> list[list[Any]]:
        """For each ``(source, stream, positions)``: the (transformed) samples at those
        positions of that stream (as in :meth:`records`), in that order."""
        epoch = int_arg("epoch", epoch, minimum=0)
        with self._lock:
            return [self._payloads((name, int(stream), epoch, chain), positions)
                    for name, stream, positions in requests]

    def _payloads(self, key: _Key, positions: Sequence[int]) -> list[Any]:
        got: dict[int, Any] = {}
        missing = []
        for p in map(int, positions):
            # a delivered row leaves the cache: each is fetched once (a padding slot or a
            # repeated call reads it again)
            item = self._rows.pop((key, p), _MISSING)
            if item is not _MISSING:
                got[p] = item
            elif p not in got:
                missing.append(p)
        if missing:
            missing = sorted(set(missing))
            self.rows_read["payload_misses"] += len(missing)
            stream = self._stream(key)
            if hasattr(stream, "rows_at"):
                got.update(zip(missing, stream.rows_at(missing)))
            else:
                got.update(self._reread(stream, key, missing))
        return [got[int(p)] for p in positions]

    def _reread(self, stream: Any, key: _Key, wanted: list[int]) -> dict[int, Any]:
        """Items of a stream without a row map, no longer cached, read again by position."""
        found: dict[int, Any] = {}
        i = 0
        while i < len(wanted):
            for pos, item in stream.iter_positions(wanted[i]):
                if pos < wanted[i]:
                    continue  # reading through to the next wanted row
                if pos > wanted[i]:
                    raise self._lost(key, wanted[i])
                found[pos] = item
                i += 1
                if i == len(wanted) or wanted[i] - pos > _SEEK_GAP:
                    break  # done, or seek with a new pass rather than read the gap
            else:
                raise self._lost(key, wanted[i])
        return found

    def _lost(self, key: _Key, position: int) -> LoaderError:
        name, stream, epoch, _ = key
        return LoaderError(f"source {name!r}, stream {stream}, epoch {epoch}: position {position} yields no sample "
                           "(the stream differs from the one the planner measured: the same Source settings and "
                           "files on every loader?)")

    def ping(self) -> dict[str, Any]:
        """Who answers: the process, its sources and their sizes (readiness checks);
        raises the error that kept this loader from opening its sources."""
        if self._init_error is not None:
            raise self._init_error
        return {"pid": os.getpid(), "node": _node_id(), "sources": sorted(self.sources),
                "rows": {n: (None if i is None else int(i.num_rows)) for n, i in self.indexes.items()}}

    def stats(self) -> dict[str, Any]:
        """Rows read and held (for benchmarks and failover checks)."""
        return {"pid": os.getpid(), "rows_read": dict(self.rows_read), "cached_rows": len(self._rows),
                "open_passes": len(self._passes), "streams": len(self._streams)}


_MISSING: Any = object()
#: a stream of a loader: (source, stream number, epoch, resized epoch's chain or None)
_Key = tuple[str, int, int, "Chain | None"]


def _node_id() -> str | None:
    """The Ray node this runs on (``None`` in process)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().get_node_id())
