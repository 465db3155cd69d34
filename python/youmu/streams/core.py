"""The positional stream core: youmu's stream contract (:mod:`youmu.state.contract`)
implemented once — resume points per DataLoader worker, independent passes, versioned
and validated states, epochs that reach persistent workers, epochs resumed on another
topology — over a subclass's pure ``(shard, start) -> items`` pass. Torch-free: the
torch ``IterableDataset`` adapters (:mod:`youmu.torch`) and the Ray loaders
(:mod:`youmu.ray`) serve the same objects.

A subclass says what a pass over its shard yields from a start position
(:meth:`ShardedStream._pass`) and which settings shape the stream
(:meth:`ShardedStream._settings`); this class does the rest. Which items a shard owns
is :mod:`youmu.order.sharding`'s business.

Positions are per DataLoader worker (worker 0 in the main process): each worker
process holds its own copy of the stream, and torchdata's ``StatefulDataLoader``
saves and restores each worker's state on its own. Which worker the caller is comes
from :func:`current_worker`, which asks torch only where torch is already imported (a
process that never imported torch is no DataLoader worker).

Example:
    >>> from youmu.streams.core import ShardedStream, SKIP
    >>> class Evens(ShardedStream):
    ...     state_format = "example.Evens/1"
    ...     def _settings(self): return {}
    ...     def _start(self): return 0
    ...     def _pass(self, worker, num_workers, start):
    ...         for i in range(start, 6):
    ...             yield i + 1, (i if i % 2 == 0 else SKIP)
    >>> s = Evens()
    >>> it = iter(s); next(it), s.state_dict()["positions"]
    (0, {0: 1})
    >>> list(s)                                   # a new pass: independent of the first one
    [0, 2, 4]
    >>> t = Evens(); t.load_state_dict({**s.state_dict(), "positions": {0: 3}}); list(t)
    [4]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from youmu._internal.args import int_arg
from youmu._internal.shared_int import SharedEpoch, SharedInt
from youmu.errors import StateError
from youmu.order.resume import Level, Origin, Units, deal, remaining_after
from youmu.order.sharding import Shard
from youmu.state import stream as streamstate
from youmu.state.contract import check_epoch
from youmu.state.jobs import is_merged

__all__ = ["ShardedStream", "PositionalStream", "SKIP", "current_worker", "in_worker_process"]

T = TypeVar("T")
P = TypeVar("P")

#: Yielded by a pass for a position that produces no item (a row a transform dropped,
#: the end of a partial packed sequence): the position advances, nothing is emitted.
SKIP: Any = type("Skip", (), {"__repr__": lambda self: "SKIP"})()


def _worker_info() -> Any:
    # a DataLoader worker imported torch.utils.data before it built its dataset copy:
    # where it is not imported, this is no worker (and torch stays unimported)
    data = sys.modules.get("torch.utils.data")
    return None if data is None else data.get_worker_info()


def current_worker() -> tuple[int, int]:
    """``(worker id, number of workers)`` of the calling DataLoader worker, ``(0, 1)``
    outside one."""
    info = _worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def in_worker_process() -> bool:
    """Whether the caller runs in a DataLoader worker process."""
    return _worker_info() is not None


class ShardedStream(Generic[T, P]):
    """Base of youmu's iterable datasets (see the module doc).

    Subclasses set :attr:`state_format` and implement ``_settings``, ``_start`` and
    ``_pass``; positions with several parts (tuples) set :attr:`position_width`.
    """

    #: The versioned tag of this class's states, e.g. ``"youmu.YoumuDataset/1"``.
    state_format: ClassVar[str]
    #: Ints per position (1: an int; >1: a tuple of that many ints).
    position_width: ClassVar[int] = 1
    #: Settings a resumed epoch takes from its state instead of checking them (the
    #: window layout, which the first job of the epoch derived from its world size).
    resume_adopts: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        super().__init__()
        self._shared_epoch = SharedEpoch(0)
        self._epoch_seen = 0  # the epoch this copy's positions belong to
        self._resume: dict[int, P] = {}  # loaded positions: where each pass starts
        self._progress: dict[int, P] = {}  # the most recent pass's position, per worker
        self._num_workers_seen: int | None = None
        # 1 while the latest passes ran in DataLoader worker processes: their progress is
        # in the workers' copies, and a state taken from this (the main process's) copy
        # would replay everything they delivered
        self._in_workers = SharedInt(0)
        # an epoch resumed on another topology (youmu.merge_states): the jobs before
        # this one, and what they left (computed once)
        self._levels: list[Level] | None = None
        self._left: Units | None = None
        self._origin_block = False  # row mode: resumed jobs deal blocks of positions
        # the epoch of a loaded state whose resume point awaits the next pass (None:
        # none loaded, or a pass began since): set_epoch of that epoch keeps it
        self._loaded_epoch: int | None = None

    # -- subclass hooks -----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        """Settings that shape the stream: saved in the state, checked on load."""
        raise NotImplementedError

    def _start(self) -> P:
        """The position of an epoch's first item."""
        raise NotImplementedError

    def _pass(self, worker: int, num_workers: int, start: P) -> Iterator[tuple[P, Any]]:
        """``(position after the item, item or SKIP)`` for this shard from ``start``."""
        raise NotImplementedError

    def _state_fields(self) -> dict[str, Any]:
        """The values of this kind's own declared state fields
        (:data:`youmu.state.stream.STREAM_FORMATS`), written after the common ones."""
        return {}

    def _take_state_fields(self, values: Mapping[str, Any]) -> None:
        """Take back this kind's own fields from a loaded state (a rank's or a merged
        one), checked by their declarations; called after the state is installed."""


    # -- epochs ---------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._shared_epoch.value

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` and start it from the beginning; reaches DataLoader
        workers that already run. The one epoch rule (:mod:`youmu.state.contract`): a loaded
        state of ``epoch`` whose pass has not begun is kept, so the usual loop — load,
        then ``set_epoch(e)`` for each epoch — continues the loaded epoch."""
        epoch = check_epoch(epoch)
        if self._loaded_epoch == epoch and not self._in_workers.value:
            return  # no pass began since the load, here or in a DataLoader worker
        self._loaded_epoch = None
        self._shared_epoch.value = epoch
        self._epoch_seen = epoch
        self._resume, self._progress = {}, {}
        self._levels, self._left = None, None
        self._in_workers.value = 0

    def _sync_epoch(self) -> None:
        # set_epoch ran in the main process while this copy (a persistent worker's)
        # kept positions of the previous epoch: they do not apply to the new one
        if self._shared_epoch.value != self._epoch_seen:
            self._epoch_seen = self._shared_epoch.value
            self._resume, self._progress = {}, {}
            self._levels, self._left = None, None

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The stream's progress (see :mod:`youmu.state.contract`): format, settings, epoch,
        DataLoader workers and each worker's position.

        Called in the main process of a stream that DataLoader workers iterate, it
        raises :class:`~youmu.errors.StateError`: the rows went through the workers'
        copies, and this copy's state would resume the epoch from where it started.
        Checkpoint the loader instead (torchdata's ``StatefulDataLoader``, or youmu's
        ``DynamicBatchLoader`` / ``BalancedLoader``), which takes each worker's state
        where the rows were read."""
        if self._in_workers.value and not in_worker_process():
            name = type(self).__name__
            raise StateError(
                f"{name}.state_dict() in the main process, but DataLoader worker processes iterate this {name}: "
                "what they delivered is in their copies, so this state would resume the epoch from its start. "
                "Checkpoint the loader instead: torchdata's StatefulDataLoader (loader.state_dict() / "
                "loader.load_state_dict()) saves each worker's state (or use num_workers=0)"
            )
        positions = {**self._resume, **self._progress}
        return streamstate.encode(self.state_format, self._settings(), epoch=self.epoch,
                                  num_workers=self._num_workers_seen, positions=positions, chain=self._levels,
                                  own=self._state_fields())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` on the next ``iter()`` (the pass after that starts
        the epoch over)."""
        owner = type(self).__name__
        if is_merged(state):
            self._load_merged(state)
            return
        st = streamstate.decode(state, self.state_format, owner=owner, expect=self._settings(),
                                width=self.position_width, adopts=self.resume_adopts)
        self._install(st.fields, st.epoch, st.chain,
                      lambda: self._check_positions(st.positions, st.epoch, st.num_workers or 1))
        self._resume = dict(st.positions)
        self._num_workers_seen = st.num_workers
        self._take_state_fields(st.own)

    def _load_merged(self, state: Mapping[str, Any]) -> None:
        """A state of ``youmu.merge_states``: the rest of the epoch, on this topology."""
        st, epoch, chain = streamstate.decode_merged(state, self.state_format, owner=type(self).__name__,
                                                     expect=self._settings(), adopts=self.resume_adopts)
        self._install(st, epoch, chain, lambda: None)
        self._take_state_fields(streamstate.own_values(st, owner=type(self).__name__))

    def _install(self, st: Mapping[str, Any], epoch: int, levels: list[Level] | None,
                 check: Callable[[], None]) -> None:
        """Take ``epoch`` and the resumed chain (checked against the data: positions a
        job could not have reached are refused), starting every worker afresh."""
        saved = (self._shared_epoch.value, self._epoch_seen, self._levels, self._left, self._origin_block,
                 self._adopted_state())
        try:
            self._shared_epoch.value = epoch
            self._epoch_seen = epoch
            self._levels, self._left = levels, None
            if levels:
                self._adopt(st)
                self._remaining()
            check()
        except BaseException:
            (self._shared_epoch.value, self._epoch_seen, self._levels, self._left, self._origin_block,
             adopted) = saved
            self._restore_adopted(adopted)
            raise
        self._resume, self._progress = {}, {}
        self._num_workers_seen = None
        self._in_workers.value = 0
        self._loaded_epoch = epoch

    # -- resumed epochs (youmu.merge_states) ------------------------------------------------
    def _adopt(self, state: Mapping[str, Any]) -> None:
        """Take :attr:`resume_adopts` from a resumed state (validated)."""

    def _adopted_for(self, levels: list[Level]) -> dict[str, Any]:
        """:attr:`resume_adopts` of an epoch resumed after ``levels`` (what the epoch's
        first job's states held)."""
        return {}

    def _adopted_state(self) -> Any:
        return None

    def _restore_adopted(self, saved: Any) -> None:
        pass

    def _origin(self, levels: list[Level]) -> Origin:
        """How the epoch's first job dealt its units (streams that resume on another
        topology implement it, and :meth:`_dealt_to`)."""
        raise StateError(f"{type(self).__name__} cannot resume on another topology")

    def _dealt_to(self) -> tuple[int, int, bool]:
        """``(rank, world size, drop_last)``: where and how the units a resumed epoch
        left are dealt to this stream (streams that resume on another topology say)."""
        raise StateError(f"{type(self).__name__} cannot resume on another topology")

    def _remaining(self) -> Units:
        """The units the resumed chain left, in dealing order (computed once)."""
        if self._left is None:
            assert self._levels
            drop_last = self._dealt_to()[2]
            origin = self._origin(self._levels)
            self._origin_block = origin.block
            self._left = remaining_after(origin, self._levels, drop_last)
        return self._left

    def _resumed_units(self, worker: int, num_workers: int, epoch: int | None = None) -> Units | None:
        """This (rank, worker)'s units in a resumed epoch; ``None`` in any other."""
        if not self._levels or (epoch is not None and epoch != self.epoch):
            return None
        rank, world, drop_last = self._dealt_to()
        return deal(self._remaining(), Shard(rank, world, worker, num_workers), drop_last, self._origin_block)

    def _heads(self, worker: int, num_workers: int) -> dict[int, int]:
        """Positions of this shard whose row was partly packed before a resume, and the
        tokens of it already delivered (current epoch; synced by :meth:`_begin`)."""
        units = self._resumed_units(worker, num_workers)
        if units is None or not units.head.any():
            return {}
        starts = np.concatenate([[0], np.cumsum(units.rows)[:-1]])
        return {int(starts[i]): int(units.head[i]) for i in np.flatnonzero(units.head)}

    def resume_after(self, epoch: int, levels: Sequence[Level]) -> None:
        """Continue ``epoch`` after the jobs of ``levels`` (:mod:`youmu.order.resume`), as
        loading :func:`youmu.merge_states` of their states does, from the chain alone
        (a Ray source loader rebuilds a resized epoch's streams from its planner's).
        An empty chain starts ``epoch`` fresh."""
        epoch = check_epoch(epoch)
        if not levels:
            self.set_epoch(epoch)
            return
        chain = list(levels)
        self._install(self._adopted_for(chain), epoch, chain, lambda: None)

    def _check_positions(self, positions: dict[int, Any], epoch: int, num_workers: int) -> None:
        """Refuse positions no pass of ``epoch`` could have reached (subclasses know
        their shards)."""

    # -- iteration ------------------------------------------------------------------------
    def _begin(self) -> tuple[int, int, P]:
        """Worker, worker count and start position of a new pass (checks the worker
        count against a loaded state)."""
        worker, num_workers = current_worker()
        self._sync_epoch()
        if self._resume and self._num_workers_seen not in (None, num_workers):
            raise StateError(
                f"state was saved with {self._num_workers_seen} DataLoader workers; resume with the same number "
                f"(this DataLoader has {num_workers})"
            )
        self._num_workers_seen = num_workers
        self._in_workers.value = 1 if in_worker_process() else 0
        self._loaded_epoch = None  # this pass takes the resume point
        # the resume point applies to the next pass only; later passes start the epoch over
        return worker, num_workers, self._resume.pop(worker, self._start())

    def __iter__(self) -> Iterator[T]:
        worker, num_workers, start = self._begin()
        self._progress[worker] = start
        for after, item in self._pass(worker, num_workers, start):
            self._progress[worker] = after
            if item is SKIP:
                continue
            yield item
            # not held while the next item is made: that may read the next window, and an
            # image row held here is one more row beside the next page (memory_budget)
            del item


class PositionalStream(ShardedStream[T, int]):
    """A :class:`ShardedStream` whose position is a count of items: the shard's items
    in order, each passed through ``transform`` (``None`` drops it; its position still
    counts). Subclasses implement ``_items``; wrappers read them through
    :meth:`iter_positions`.
    """

    transform: Callable[[Any], Any] | None = None

    def _items(self, worker: int, num_workers: int, start: int) -> Iterator[Any]:
        """The shard's untransformed items from position ``start``."""
        raise NotImplementedError

    def _start(self) -> int:
        return 0

    def shard_length(self, worker: int, num_workers: int, epoch: int | None = None) -> int:
        """Items (before ``transform``) of this rank's ``worker``-th of ``num_workers``
        shards in ``epoch`` (default: the current one): the end position of a pass."""
        raise NotImplementedError

    def column_types(self) -> dict[str, Any] | None:
        """The Arrow type of each column of this stream's items, where the stream knows
        them before reading (a Parquet stream without a transform); ``None`` otherwise."""
        return None

    def _check_positions(self, positions: dict[int, Any], epoch: int, num_workers: int) -> None:
        for worker, pos in positions.items():
            total = self.shard_length(worker, num_workers, epoch)
            if pos > total:
                name = type(self).__name__
                raise StateError(
                    f"{name} state field 'positions'[{worker}]={pos} is past the end of worker {worker}'s shard "
                    f"({total} items in epoch {epoch})"
                )

    def _pass(self, worker: int, num_workers: int, start: int) -> Iterator[tuple[int, Any]]:
        pos = start
        for item in self._items(worker, num_workers, start):
            pos += 1
            if self.transform is not None:
                item = self.transform(item)
                if item is None:
                    yield pos, SKIP
                    continue
            yield pos, item

    def iter_positions(self, start: int | None = None) -> Iterator[tuple[int, Any]]:
        """``(position, item)`` of this process's shard from ``start`` (default: the
        resume point), transformed; items the transform drops are skipped (their
        positions still count). The stream's own progress does not move: this is how
        wrappers read a stream at positions they track."""
        for pos, item, _ in self.iter_with_heads(start):
            yield pos, item

    def iter_with_heads(self, start: int | None = None) -> Iterator[tuple[int, Any, int]]:
        """:meth:`iter_positions` with each item's *head*: how many of its tokens a job
        before a resume on another topology already delivered in packed sequences
        (:func:`youmu.torch.pack` skips them; :mod:`youmu.order.resume`), 0 for the others.
        The heads are the pass's epoch's: a persistent DataLoader worker's copy syncs to
        the epoch before it looks them up."""
        worker, num_workers, resume = self._begin()
        heads = self._heads(worker, num_workers)
        begin = resume if start is None else int_arg("start", start, minimum=0)
        prev = begin
        for after, item in self._pass(worker, num_workers, begin):
            if item is SKIP:
                continue
            # an item's position may cover rows skipped after it (youmu.streams.skips); only its
            # own row, somewhere in what it covers, has tokens and so a head
            head = heads.get(after - 1, 0) if not heads else \
                next((heads[p] for p in range(after - 1, prev - 1, -1) if p in heads), 0)
            prev = after
            yield after - 1, item, head
