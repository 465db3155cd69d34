"""``MapStream``: any map-style dataset (``len`` + indexing) — a ``MixtureDataset``, a
``FlatMixture``, a ``RowDataset`` — as a positional stream sharded exactly once over
ranks × DataLoader workers, resumable from a few integers; and ``MixtureStream``, the
same dealing runs of consecutive indices. Torch-free (a Ray source loader maps a stream
without importing torch); :class:`youmu.torch.MapStream` is the same stream as a torch
``IterableDataset``.

Positions are dealt round-robin (:func:`youmu.order.sharding.run_round_robin_index`): run
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
    >>> from youmu.mixture.mapstream import MapStream, MixtureStream
    >>> mix = MixtureDataset({"a": list(range(100)), "b": list(range(10))}, {"a": 0.9, "b": 0.1},
    ...                      block_size=16, length=110)
    >>> items = list(MapStream(mix, rank=0, world_size=2))
    >>> len(list(MixtureStream(mix, rank=0, world_size=2)))   # runs 0, 2, 4, 6 of 16
    62
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from youmu._internal.args import bool_arg, callable_arg, int_arg
from youmu.distributed.world import rank_and_world
from youmu.errors import InvalidArgumentError, StateError
from youmu.mixture import change as mixture_change
from youmu.mixture.change import Switch
from youmu.order.resume import Level, Origin, Units, remaining_after
from youmu.order.sharding import Shard, run_round_robin_index, run_round_robin_length
from youmu.state.contract import MAX_STATE_INT, data_fingerprint, same_data
from youmu.state.jobs import is_merged
from youmu.state.stream import MAPSTREAM_FORMAT, RESUMED, chain_of
from youmu.streams.core import PositionalStream

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

    State (``state_dict``, see :mod:`youmu.state.contract`): items consumed per worker,
    ``world_size``, ``run``, ``drop_last`` and the number of workers; resume with the
    same settings (on another world size or worker count: load
    :func:`youmu.merge_states` of all ranks' states). ``set_epoch`` starts the index
    space over (a mixture's order is its own: a new epoch of the stream is the same
    order unless the dataset changes it).

    Over a :class:`~youmu.mixture.MixtureDataset` the state also records the mixture's
    weights, so a resume may change them: built over the same children with other
    weights (or another curriculum), the stream loads the job's merged state
    (:func:`youmu.merge_states`, on any world size) and takes the new weights from the
    switch point on, every row exactly once (:mod:`youmu.mixture.change`); the next
    epoch runs the new weights throughout.
    """

    state_format = MAPSTREAM_FORMAT

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
        if isinstance(dataset, Mapping) and not all(k in dataset for k in range(len(dataset))):
            # a map-style dataset is read at positions 0..len-1: a dict keyed otherwise
            # would fail at its first read, on one rank, mid-epoch
            raise InvalidArgumentError(f"dataset is a {type(dataset).__name__} whose keys are not "
                                       f"0..{len(dataset) - 1}: a map-style dataset is read at positions "
                                       "0..len(dataset)-1")
        self.dataset = dataset
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self._fingerprints: dict[int, str] = {}
        # a resumed epoch whose mixture weights changed at a resume: the mixture it runs
        # (old weights before the switch points, the dataset's after), the switches, and
        # the length of the epoch's first job's index space
        self._effective: Any = None
        self._effective_epoch: int | None = None
        self._switches: list[Switch] = []
        self._origin_len: int | None = None

    # -- the stream contract ----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "rank": self.rank, "run": self.run, "drop_last": self.drop_last,
                "data": self._data_fingerprint()}

    def _data_fingerprint(self) -> str:
        # once per dataset: state_dict may be called per item; a youmu mixture describes
        # its own settings and children, any other dataset its type and length
        data = self._data()
        fp = self._fingerprints.get(id(data))
        if fp is None:
            fp = self._fingerprints[id(data)] = data_fingerprint(data)
        return fp

    def _data(self) -> Any:
        """The dataset this epoch reads: the spliced mixture in an epoch resumed across a
        weight change, the stream's dataset otherwise."""
        if self._effective is not None and self._effective_epoch in (None, self.epoch):
            return self._effective
        return self.dataset

    def _is_mixture(self) -> bool:
        from youmu.mixture import MixtureDataset

        return isinstance(self.dataset, MixtureDataset)

    def _state_fields(self) -> dict[str, Any]:
        if not self._is_mixture():
            return {}
        spliced = self._data() is self._effective
        return {"mixture": mixture_change.state_field(
            self._data(), self._switches if spliced else [],
            self._origin_len if spliced and self._origin_len is not None else len(self.dataset))}

    def load_state_dict(self, state: Any) -> None:
        saved = (self._effective, self._effective_epoch, self._switches, self._origin_len)
        try:
            state = self._take_mixture(state)
            super().load_state_dict(state)
        except BaseException:
            self._effective, self._effective_epoch, self._switches, self._origin_len = saved
            raise
        if self._effective is not None:
            self._effective_epoch = self.epoch

    def _take_mixture(self, state: Any) -> Any:
        """Set up the mixture a state's epoch continues with (see the class doc); returns
        the state with its data fingerprint checked against that mixture."""
        self._effective, self._effective_epoch, self._switches, self._origin_len = None, None, [], None
        if not self._is_mixture() or not isinstance(state, Mapping) or "mixture" not in state:
            return state  # not a mixture, or a state from before weights were recorded: strict
        owner = type(self).__name__
        saved = mixture_change.read(state["mixture"], owner)
        mine = mixture_change.describe(self.dataset)
        if not saved.switches and {k: v for k, v in saved.desc.items() if k not in ("switches", "origin_len")} == mine:
            return state
        mixture_change.check_same_map(saved, self.dataset, owner)
        # the mixture the state was saved over (its length too: a map does not depend on it)
        old = self.dataset.with_stages(saved.stages, length=saved.desc["len"] if self.dataset.policy == "restart"
                                       else "same")
        if set(saved.desc["children"]) == set(self.dataset.names) and not same_data(state.get("data"),
                                                                                   data_fingerprint(old)):
            return state  # other data all the same: the usual check says so
        since = saved.switches[-1].at if saved.switches else 0
        if mixture_change.same_from(saved.stages, self.dataset.raw_stages, since):
            # the saved weights from the last switch on (a new length applies: a map does not depend on it)
            effective, switches = self.dataset.with_stages(saved.stages), list(saved.switches)
        else:
            if not is_merged(state) or RESUMED not in state:
                raise StateError(
                    f"{owner}: the mixture weights changed at this resume; the switch to the new weights must be at "
                    "the same index on every rank, and one rank's own state does not say how far the others got: "
                    "load youmu.merge_states([every rank's state]) on every rank (on the same world size too)")
            levels = chain_of(state, owner)
            self._effective, self._switches, self._origin_len = old, list(saved.switches), saved.origin_len
            origin = self._origin(levels)
            left = remaining_after(origin, levels, self.drop_last, mixture_change.splicer(self._switches, self.run))
            cover = saved.switches[-1].length if saved.switches else self._n(levels[0].world_size, saved.origin_len)
            at = mixture_change.switch_point(old, mixture_change.delivered_end(left, cover, self.run))
            effective = self.dataset.with_stages(mixture_change.spliced_stages(saved.stages,
                                                                               self.dataset.raw_stages, at))
            if len(effective) < at:
                raise StateError(f"{owner}: with the new weights the mixture ends at index {len(effective)} "
                                 f"(policy {self.dataset.policy!r}), before the resume point {at}")
            switches = [*saved.switches, Switch(len(levels), at, len(effective))]
        self._effective, self._switches, self._origin_len = effective, switches, saved.origin_len
        return {**state, "data": data_fingerprint(effective)}


    # -- shards ------------------------------------------------------------------------------
    def _n(self, world_size: int | None = None, n: int | None = None) -> int:
        n = len(self._data()) if n is None else n
        span = (world_size or self.world_size) * self.run
        return n - n % span if self.drop_last else n

    def _dealt_to(self) -> tuple[int, int, bool]:
        return self.rank, self.world_size, self.drop_last

    def _origin(self, levels: list[Level]) -> Origin:
        # the first job of the epoch dealt runs of the index space it cut for its world size
        # (of the mixture before any weight change of the epoch)
        spliced = self._origin_len is not None and self._data() is self._effective
        n = self._n(levels[0].world_size, self._origin_len if spliced else None)
        runs = -(-n // self.run)
        rows = np.full(runs, self.run, dtype=np.int64)
        if runs:
            rows[-1] = n - (runs - 1) * self.run
        return Origin(rows, "rr")

    def _remaining(self) -> Units:
        if self._left is None and self._switches and self._data() is self._effective:
            assert self._levels
            origin = self._origin(self._levels)
            self._origin_block = origin.block
            self._left = remaining_after(origin, self._levels, self.drop_last,
                                         mixture_change.splicer(self._switches, self.run))
        return super()._remaining()

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
        data = self._data()
        get_many = getattr(data, "__getitems__", None)
        while pos < count:
            # consecutive global indices: the rest of the current run, at most `chunk`
            if self.run == 1:  # one index per run: fetch a strided chunk at once
                stop = min(count, pos + self.chunk)
                idx = [run_round_robin_index(k, 1, shard) for k in range(pos, stop)]
            else:
                stop = min(count, (pos // self.run + 1) * self.run, pos + self.chunk)
                lo = run_round_robin_index(pos, self.run, shard)
                idx = list(range(lo, lo + stop - pos))
            yield from (get_many(idx) if get_many else [data[i] for i in idx])
            pos = stop

    def _resumed_items(self, worker: int, num_workers: int, start: int) -> Iterator[Any]:
        """A resumed epoch: the shard's units (index ranges of runs), from ``start``."""
        units = self._resumed_units(worker, num_workers)
        assert units is not None
        data = self._data()
        get_many = getattr(data, "__getitems__", None)
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
                yield from (get_many(idx) if get_many else [data[i] for i in idx])

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
