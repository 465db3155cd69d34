"""``MapStream``: any map-style dataset (``len`` + indexing) — a ``MixtureDataset``, a
``FlatMixture``, a ``RowDataset`` — as an ``IterableDataset`` sharded exactly once over
DDP ranks × DataLoader workers, resumable from a few integers; and ``MixtureStream``,
the same dealing runs of consecutive indices.

Positions are dealt round-robin (:func:`youmu.sharding.run_round_robin_index`): run
``q`` (indices ``[q·run, (q+1)·run)``) goes to rank ``q % world_size``, and a rank's
k-th run to worker ``k % num_workers`` (so a rank's items do not depend on its worker
count). With ``run=1`` (``MapStream``'s default) index ``i`` goes to rank
``i % world_size``: striding, unlike contiguous blocks, keeps every rank at the same
region of the global index at the same step, which is what makes mixture stages
(curricula, defined on the global index) switch at the same step on every rank.
Map-style reads are random access anyway, so striding costs no I/O locality.

Why runs (``MixtureStream``): with chunk-local child orders
(``MixtureDataset(child_chunk=...)``, the default for Parquet children), consecutive
indices of a mixture draw neighbouring rows of each child, so a worker that takes a
run of indices reads each Parquet page it touches once (its
``RowDataset(cache_pages=...)`` serves the rest of the page). Dealing single indices
spreads every child's consecutive draws over all ranks × workers, and each of them
decodes the page. The price: ranks reach a given global index up to one run apart (a
curriculum stage starts up to ``run`` items earlier on one worker than on another).

Example:
    >>> from youmu.mixture import MixtureDataset
    >>> from youmu.torch import MapStream, MixtureStream
    >>> mix = MixtureDataset({"a": list(range(100)), "b": list(range(10))}, {"a": 0.9, "b": 0.1},
    ...                      block_size=16, length=110)
    >>> items = list(MapStream(mix, rank=0, world_size=2))
    >>> len(list(MixtureStream(mix, rank=0, world_size=2)))   # runs 0, 2, 4, 6 of 16
    62
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from youmu._args import bool_arg, callable_arg, int_arg
from youmu.distributed.world import rank_and_world
from youmu.jobstates import Level
from youmu.resume import Origin
from youmu.sharding import Shard, run_round_robin_index, run_round_robin_length
from youmu.stateful import MAX_STATE_INT, data_fingerprint
from youmu.torch.sharded import PositionalStream

__all__ = ["MapStream", "MixtureStream"]


class MapStream(PositionalStream[Any]):
    """Iterate a map-style dataset's positions, sharded and resumable.

    Args:
        dataset: anything with ``len`` and ``[i]`` (``__getitems__`` is used when present).
        rank, world_size: default from ``torch.distributed`` when initialised.
        drop_last: every rank delivers the same number of items: the index space is cut
            to a multiple of ``world_size · run``.
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: positions fetched per ``__getitems__`` call.
        run: consecutive indices dealt together (1: index by index; see
            :class:`MixtureStream` for why runs help Parquet children).

    State (``state_dict``, see :mod:`youmu.stateful`): items consumed per worker,
    ``world_size``, ``run``, ``drop_last`` and the number of workers; resume with the
    same settings (on another world size or worker count: load
    :func:`youmu.merge_states` of all ranks' states). ``set_epoch`` starts the index
    space over (a mixture's order is its own: a new epoch of the stream is the same
    order unless the dataset changes it).
    """

    state_format = "youmu.MapStream/1"

    def __init__(
        self,
        dataset: Any,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        chunk: int = 256,
        run: int = 1,
    ) -> None:
        super().__init__()
        self.run = int_arg("run", run, minimum=1, maximum=MAX_STATE_INT)
        self.chunk = int_arg("chunk", chunk, minimum=1, maximum=MAX_STATE_INT)
        self.drop_last = bool_arg("drop_last", drop_last)
        self.transform = callable_arg("transform", transform, optional=True)
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            from youmu.errors import ArgumentTypeError

            raise ArgumentTypeError(f"dataset must be map-style (len and [i]), got {type(dataset).__name__}")
        self.dataset = dataset
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self._fingerprint: str | None = None

    # -- the stream contract ----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "rank": self.rank, "run": self.run, "drop_last": self.drop_last,
                "data": self._data_fingerprint()}

    def _data_fingerprint(self) -> str:
        # once per stream: state_dict may be called per item; a youmu mixture describes
        # its own settings and children, any other dataset its type and length
        if self._fingerprint is None:
            self._fingerprint = data_fingerprint(self.dataset)
        return self._fingerprint


    # -- shards ------------------------------------------------------------------------------
    def _n(self, world_size: int | None = None) -> int:
        n = len(self.dataset)
        span = (world_size or self.world_size) * self.run
        return n - n % span if self.drop_last else n

    def _origin(self, levels: list[Level]) -> Origin:
        # the first job of the epoch dealt runs of the index space it cut for its world size
        n = self._n(levels[0].world_size)
        runs = -(-n // self.run)
        rows = np.full(runs, self.run, dtype=np.int64)
        if runs:
            rows[-1] = n - (runs - 1) * self.run
        return Origin(rows, "rr")

    def _shard(self, worker: int, num_workers: int) -> Shard:
        return Shard(self.rank, self.world_size, worker, num_workers)

    def _count(self, worker: int, num_workers: int) -> int:
        """Items of a (rank, worker) shard."""
        units = self._resumed_units(worker, num_workers)
        if units is not None:
            return int(units.rows.sum())
        return run_round_robin_length(self._n(), self.run, self._shard(worker, num_workers))

    def shard_length(self, worker: int, num_workers: int, epoch: int | None = None) -> int:
        return self._count(worker, num_workers)

    def __len__(self) -> int:
        return self._count(0, 1)

    # -- iteration ------------------------------------------------------------------------
    def _items(self, worker: int, num_workers: int, start: int) -> Iterator[Any]:
        if self._levels:
            yield from self._resumed_items(worker, num_workers, start)
            return
        shard = self._shard(worker, num_workers)
        count = self._count(worker, num_workers)
        pos = start
        get_many = getattr(self.dataset, "__getitems__", None)
        while pos < count:
            # consecutive global indices: the rest of the current run, at most `chunk`
            if self.run == 1:  # one index per run: fetch a strided chunk at once
                stop = min(count, pos + self.chunk)
                idx = [run_round_robin_index(k, 1, shard) for k in range(pos, stop)]
            else:
                stop = min(count, (pos // self.run + 1) * self.run, pos + self.chunk)
                lo = run_round_robin_index(pos, self.run, shard)
                idx = list(range(lo, lo + stop - pos))
            yield from (get_many(idx) if get_many else [self.dataset[i] for i in idx])
            pos = stop

    def _resumed_items(self, worker: int, num_workers: int, start: int) -> Iterator[Any]:
        """A resumed epoch: the shard's units (index ranges of runs), from ``start``."""
        units = self._resumed_units(worker, num_workers)
        assert units is not None
        get_many = getattr(self.dataset, "__getitems__", None)
        pos = 0
        for base, lo, hi in zip(units.base.tolist(), units.lo.tolist(), units.hi.tolist()):
            if pos + hi - lo <= start:
                pos += hi - lo
                continue
            first = base * self.run + lo + max(start - pos, 0)
            stop = base * self.run + hi
            pos += hi - lo
            for a in range(first, stop, self.chunk):
                idx = list(range(a, min(a + self.chunk, stop)))
                yield from (get_many(idx) if get_many else [self.dataset[i] for i in idx])

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}({self.dataset!r}, rank={self.rank}, world_size={self.world_size}, run={self.run})"


class MixtureStream(MapStream):
    """Iterate a map-style dataset in runs of consecutive indices, sharded exactly once.

    A :class:`MapStream` whose ``run`` defaults to the mixture's ``block_size`` (1024
    for datasets without one) and whose ``chunk`` is larger (see the module doc).

    Args:
        dataset: anything with ``len`` and ``[i]`` (``__getitems__`` is used when present).
        rank, world_size: default from ``torch.distributed`` when initialised.
        run: consecutive indices dealt together.
        drop_last: every rank delivers the same number of items: the index space is cut
            to a multiple of ``world_size · run`` (fewer than that many are dropped).
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: indices fetched per ``__getitems__`` call (at most one run).
    """

    def __init__(
        self,
        dataset: Any,
        rank: int | None = None,
        world_size: int | None = None,
        run: int | None = None,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        chunk: int = 4096,
    ) -> None:
        run = run if run is not None else getattr(dataset, "block_size", 1024)
        super().__init__(dataset, rank=rank, world_size=world_size, drop_last=drop_last, transform=transform,
                         chunk=chunk, run=run)
