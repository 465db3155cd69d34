"""Source loaders: each data source's stream is opened **once**, in a loader actor,
instead of once per source × DataLoader worker × rank inside the training processes
(MegaScale-Data, §3: "dedicated actors for specific data sources" that "decouple
file access states from worker processes").

* :class:`Source` — how a loader builds one source's stream for each origin rank: the
  rows a :class:`~youmu.torch.YoumuDataset` over the source's Parquet files would
  yield (its settings, a :class:`youmu.streams.spec.StreamSpec`; read by a
  :class:`youmu.streams.parquet.ParquetStream`, without importing torch), or any
  position-addressable stream a function builds (a :class:`~youmu.mixture.mapstream.MapStream`
  over a ``RowDataset``/``MixtureDataset``: torch-free, like the Parquet stream).
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
row (:func:`youmu.order.shuffle.positions_to_rows`) and a random row read
(:meth:`youmu.PageIndex.read_rows`).

Example (a loader in this process; :class:`youmu.ray.RayLoaders` makes it an actor):
    >>> from youmu.mixture.mapstream import MapStream
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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from youmu._internal.args import index_of, int_arg
from youmu.errors import InvalidArgumentError, LoaderError
from youmu.planning.steps.rank_sources import Measure
from youmu.ray.source import MeasureFns, Record, Records, Source
from youmu.ray.state import Chain
from youmu.state.contract import check_epoch

__all__ = ["SourceLoader", "node_id"]

#: a row position further than this past the last one read is re-read by a new pass
#: (seeking) rather than by reading through the rows in between
_SEEK_GAP = 1024


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
        import youmu.streams.convert  # noqa: F401
        import youmu.streams.rowstream  # noqa: F401
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
            s = self.sources[name].build(self.indexes[name], rank, world, epoch=epoch, levels=levels)
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
        # an actor method is a process boundary: its caller's checks do not travel with the call
        epoch = check_epoch(epoch)
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
        # an actor method is a process boundary: its caller's checks do not travel with the call
        epoch = check_epoch(epoch)
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
        return {"pid": os.getpid(), "node": node_id(), "sources": sorted(self.sources),
                "rows": {n: (None if i is None else int(i.num_rows)) for n, i in self.indexes.items()}}

    def stats(self) -> dict[str, Any]:
        """Rows read and held (for benchmarks and failover checks)."""
        return {"pid": os.getpid(), "rows_read": dict(self.rows_read), "cached_rows": len(self._rows),
                "open_passes": len(self._passes), "streams": len(self._streams)}


_MISSING: Any = object()
#: a stream of a loader: (source, stream number, epoch, resized epoch's chain or None)
_Key = tuple[str, int, int, "Chain | None"]


def node_id() -> str | None:
    """The Ray node this runs on (``None`` in process)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().get_node_id())
