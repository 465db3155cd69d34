"""The Ray step planner's remote stream views: rank ``r``'s stream of each source as
a sequence of :class:`~youmu.ray.source.Record`\\ s fetched from that source's loader in
chunks, a few steps ahead (:class:`View`, :class:`Fetcher`: one ``records`` call per
loader actor), and :class:`RecordMeasure`, which holds each record as the rank's
loader would hold the sample. The planner (:mod:`youmu.ray.planner_actor`) runs planning's
readers over them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from youmu.planning.steps.rank_sources import Held, Measure
from youmu.ray.calls import Actor, Call
from youmu.ray.source import Record, Records
from youmu.ray.state import Chain

__all__ = ["Fetcher", "RecordMeasure", "View"]

# records fetched per (rank, source) beyond a step's share: about this many steps ahead
LOOKAHEAD_STEPS = 2
MIN_CHUNK = 4


class RecordMeasure(Measure):
    """A rank's :class:`~youmu.planning.steps.rank_sources.Measure` over records: the loader
    measured the sample; this holds it (capacity check, arrival id ``k·W + r`` or the
    ``id_fn`` id) with ``(origin stream, position)`` as the payload (``origin``: the
    number of the rank's streams, :class:`youmu.ray.state.PlannerState`; its rank when
    the epoch was never resized).

    >>> m = RecordMeasure(rank=1, world_size=2)
    >>> m.measure(Record(7, [30, 70], 100, None), source=2)
    Held(id=1, source=2, docs=[30, 70], tokens=100, payload=(1, 7))
    """

    def __init__(self, *, origin: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.origin = self.rank if origin is None else int(origin)

    def measure(self, sample: Any, source: int) -> Held:
        rec: Record = sample
        return self.hold(list(rec.docs), int(rec.tokens), source, (self.origin, int(rec.position)), uid=rec.uid)


class View:
    """A rank's stream of one source as the planner reads it (``stream``: its number,
    the rank's in an epoch never resized): records fetched from the source's loader
    ahead of use. ``position``: the next record not consumed."""

    def __init__(self, fetcher: Fetcher, name: str, number: int, stream: int, position: int) -> None:
        self.fetcher, self.name, self.number, self.stream = fetcher, name, number, stream
        self.position = position
        self.fetch_at = position
        self.ended = False
        self.chunks: deque[Records] = deque()
        self.at = 0  # next record of chunks[0]
        self.buffered = 0
        self.pending: _Batch | None = None

    def add(self, recs: Records) -> None:
        if len(recs):
            self.chunks.append(recs)
            self.buffered += len(recs)
        self.fetch_at = recs.next
        self.ended = recs.ended

    def __iter__(self) -> Iterator[Record]:
        while True:
            if not self.buffered:
                if self.pending is not None:
                    self.fetcher.wait(self.pending)
                elif self.ended:
                    return
                else:
                    self.fetcher.fetch([(self, MIN_CHUNK)])
                continue
            chunk = self.chunks[0]
            rec = chunk[self.at]
            self.at += 1
            self.buffered -= 1
            if self.at == len(chunk):
                self.chunks.popleft()
                self.at = 0
            self.position = rec.position + 1
            yield rec


class _Batch:
    __slots__ = ("call", "views")

    def __init__(self, call: Call, views: list[View]) -> None:
        self.call, self.views = call, views


class Fetcher:
    """Metadata requests of the planner's views, one ``records`` call per loader actor."""

    def __init__(self, loaders: Sequence[Actor], group_of: Sequence[int], epoch: int, timeout: float,
                 chain: Chain | None = None) -> None:
        self.loaders, self.group_of, self.epoch, self.timeout = loaders, group_of, epoch, timeout
        self.chain = chain

    def fetch(self, wants: Sequence[tuple[View, int]]) -> None:
        by_group: dict[int, list[tuple[View, int]]] = {}
        for v, n in wants:
            if v.pending is None and not v.ended:
                by_group.setdefault(self.group_of[v.number], []).append((v, n))
        for g, items in by_group.items():
            call = self.loaders[g].submit("records", self.epoch, [(v.name, v.stream, v.fetch_at, n) for v, n in items],
                                          self.chain, timeout=self.timeout)
            batch = _Batch(call, [v for v, _ in items])
            for v in batch.views:
                v.pending = batch

    def wait(self, batch: _Batch) -> None:
        try:
            results = batch.call.result()
        finally:
            for v in batch.views:
                v.pending = None
        for v, recs in zip(batch.views, results):
            v.add(recs)
