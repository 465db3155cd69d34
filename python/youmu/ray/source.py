"""What a source of a disaggregated deployment is, and how its rows are read without
torch: :class:`Source` (a Parquet source's settings — a :class:`youmu.streams.spec.StreamSpec`
— or a function building a position-addressable stream), whose streams are
:class:`youmu.streams.parquet.ParquetStream` s (the stream ``YoumuDataset`` adapts for torch,
read here by position and by window), and the compact :class:`Record` s a loader
returns for the planner (MegaScale-Data, §3: metadata for planning, payloads fetched
later). The actor that serves them is :mod:`youmu.ray.source_actor`.

Reading in a loader actor without torch matters: an actor that imported it would carry
hundreds of MB more (the CUDA build of torch costs ~520 MB of private memory per
process), and holding sources in few processes is the point of disaggregation
(MegaScale-Data, §2.4).

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

from youmu._internal.args import callable_arg
from youmu._internal.redaction import redacted_repr
from youmu.distributed import describe
from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.order.resume import Level
from youmu.streams.parquet import ParquetStream
from youmu.streams.spec import SpecAttributes, StreamSpec, describe_paths

__all__ = ["Source", "Record", "Records", "MeasureFns"]


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
    (e.g. a :class:`youmu.mixture.mapstream.MapStream`, which imports no torch in the
    loader; ``youmu.torch.MapStream`` works too, at the cost of torch in every loader
    process). A ``pack(...)`` stream is no source: its positions are (row, tokens
    taken) pairs, not counts of items, so it cannot be read at a position.

    ``settings`` are ``YoumuDataset``'s (``columns``, ``shuffle``, ``buffer_size``,
    ``seed``, ``transform``, ``drop_last``, ``output``, ``memory_budget``,
    ``read_ahead``, ``page_slices``, ``storage_options``: they mean what they mean
    there), given as keywords or as a ready :class:`youmu.streams.spec.StreamSpec`
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
        spec = StreamSpec.given(spec, settings, "a Source")
        spec.check_paths(paths, portable=True)
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "spec", spec)

    def __repr__(self) -> str:
        return redacted_repr(self)  # its spec's storage_options and URL paths hold credentials

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

    def build(self, index: Any, rank: int, world_size: int, *, epoch: int = 0, levels: Sequence[Level] = ()) -> Any:
        """Rank ``rank``'s stream of this source in ``epoch`` (a
        :class:`~youmu.streams.parquet.ParquetStream` over ``index`` for a Parquet source); with
        ``levels``, the stream of a job that resumed the epoch after those jobs
        (:mod:`youmu.order.resume`), as loading their merged states would resume it."""
        if self.stream is None:
            stream: Any = ParquetStream(index, self.spec, rank=rank, world_size=world_size)
        else:
            stream = self._function_stream(rank, world_size)
        if not levels:
            if hasattr(stream, "set_epoch"):
                stream.set_epoch(epoch)
            return stream
        if not callable(getattr(stream, "resume_after", None)):
            raise ArgumentTypeError(f"the stream function returned a {type(stream).__name__}, which cannot resume an "
                                    "epoch on another topology (resume_after): return a youmu stream (MapStream, "
                                    "YoumuDataset, ...)")
        stream.resume_after(epoch, levels)
        return stream

    def _function_stream(self, rank: int, world_size: int) -> Any:
        assert self.stream is not None
        stream = self.stream(rank, world_size)
        if not hasattr(stream, "iter_positions"):
            raise ArgumentTypeError(f"the stream function returned a {type(stream).__name__}, which has no "
                                    "iter_positions(start): return a youmu stream (MapStream, YoumuDataset, ...)")
        return stream

    def describe(self) -> dict[str, Any]:
        """The settings that shape the stream, by value (for fingerprints)."""
        where = ["stream", describe(self.stream)] if self.paths is None else describe_paths(self.paths)
        return self.spec.describe(where)
