"""Where a rank's samples come from: a dataset turned into the ordered stream of
measured :class:`~youmu.batching.algo.protocol.Item` the aligner groups.

* **measurement** — each sample's realised length (``length_fn``) and loss tokens
  (``token_count_fn``), taken where the sample is made (in the DataLoader workers when
  there are any, which hand samples over in chunks without changing their order:
  :mod:`youmu.batching.runtime.handoff`);
* **order** — a map-style dataset is read in its rank's sampler order
  (:func:`~youmu.batching.algo.sampling.rank_indices`), keyed by sampler position; an
  iterable one in arrival order, keyed by arrival number;
* **resume** — a state names the samples of the round it interrupted (replay and
  overflow) and where the source stood: a map-style source reads those positions
  first, then continues; an iterable one takes them from the state's payloads and
  restores the dataset's own state;
* **credits** — a :class:`SampleFeed` draws the stream on a
  :class:`~youmu.distributed.Producer` thread, one credit per sample, so at most
  ``max_outstanding`` samples per rank sit between the source and the trainer (a
  sample keeps its credit until the trainer consumes the batch it went into, or skips
  the IDLE slot it answered).

torch is imported only when a DataLoader or an ``IterableDataset`` is made.

Example:
    >>> measure(len, [1, 2, 3], "length_fn")
    3
    >>> measure(len, [1, 2, 3], "length_fn") == MeasuredMap([[1, 2, 3]], len, len)[(0, 0)][3]
    True
    >>> MeasuredMap([[1, 2, 3]], len, len, extra_fn=sum)[(0, 0)][5]     # a second budget's count
    6
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from youmu._internal.args import index_of
from youmu.batching.algo.protocol import Item
from youmu.batching.algo.sampling import rank_indices
from youmu.batching.payloads import unpack_sample
from youmu.batching.runtime.handoff import (
    Chunk,
    ChunkCollate,
    ChunkedPairs,
    collect,
    flatten,
    round_robin,
    worker_chunks,
)
from youmu.distributed.producer import END, Credits, Failure, Producer
from youmu.errors import ArgumentTypeError, DataStallError, InvalidArgumentError, LoaderError, StateError
from youmu.streams.core import current_worker

if TYPE_CHECKING:  # pragma: no cover
    from youmu.batching.config import LoaderConfig

__all__ = ["measure", "MeasuredMap", "measured_iterable", "map_positions", "resume_keys", "SampleFeed"]


def measure(fn: Callable[[Any], Any], sample: Any, what: str) -> int:
    """``fn(sample)`` as a count (an int, numpy or 0-d tensor integer; never negative)."""
    value = fn(sample)
    try:
        n = index_of(value, what)
    except ArgumentTypeError:
        raise ArgumentTypeError(f"{what} must return an integer, got {type(value).__name__}") from None
    if n < 0:
        raise InvalidArgumentError(f"{what} returned a negative count ({n})")
    return n


def measure_extra(fn: Callable[[Any], Any] | None, sample: Any) -> int:
    """The sample's count of the second budget (``encoder_fn``; 0 without one)."""
    return 0 if fn is None else measure(fn, sample, "encoder_fn")


class MeasuredMap:
    """``dataset[index]`` with its length, loss tokens and second-budget count, read by
    ``(position, index)`` (the position travels with the sample so the aligner knows
    its sampler key)."""

    def __init__(self, dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any],
                 extra_fn: Callable[[Any], Any] | None = None) -> None:
        self.dataset = dataset
        self.length_fn = length_fn
        self.token_fn = token_fn
        self.extra_fn = extra_fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, int, Any, int, int, int]:
        pos, idx = key
        sample = self.dataset[idx]
        length = measure(self.length_fn, sample, "length_fn")
        tokens = measure(self.token_fn, sample, "token_count_fn")
        return pos, idx, sample, length, tokens, measure_extra(self.extra_fn, sample)

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> Chunk:
        """A DataLoader worker's chunk of keys, measured (a sample that raises ends it,
        after the samples before it: :mod:`youmu.batching.runtime.handoff`)."""
        return collect(self.__getitem__, keys)


def measured_iterable(dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any],
                      extra_fn: Callable[[Any], Any] | None = None, worker_states: Sequence[Any] | None = None) -> Any:
    """An ``IterableDataset`` of each DataLoader worker's ``(sample, length, tokens,
    extra, state)`` over ``dataset`` (measured in the workers), in
    :class:`~youmu.batching.runtime.handoff.Chunk` s. ``state``: the worker's copy's
    ``state_dict()`` just after the sample (``None`` for a dataset without one);
    ``worker_states``: what each worker's copy loads before its pass (``None``: the
    copy as it came from this process)."""
    return _measured_iterable_class()(dataset, length_fn, token_fn, extra_fn, worker_states)


@functools.cache
def _measured_iterable_class() -> type:
    # defined on first use: subclassing IterableDataset imports torch
    from torch.utils.data import IterableDataset

    class MeasuredIterable(IterableDataset):
        def __init__(self, dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any],
                     extra_fn: Callable[[Any], Any] | None = None, worker_states: Sequence[Any] | None = None) -> None:
            super().__init__()
            self.dataset = dataset
            self.length_fn = length_fn
            self.token_fn = token_fn
            self.extra_fn = extra_fn
            self.worker_states = worker_states

        def __iter__(self) -> Iterator[Chunk]:
            if self.worker_states is not None:
                # a resumed pass: this worker's copy continues where the samples taken from it end
                own = self.worker_states[current_worker()[0]]
                if own is not None:
                    self.dataset.load_state_dict(own)
            return worker_chunks(self._measured())

        def _measured(self) -> Iterator[tuple[Any, int, int, int, Any]]:
            stateful = hasattr(self.dataset, "state_dict")
            for sample in self.dataset:
                length = measure(self.length_fn, sample, "length_fn")
                tokens = measure(self.token_fn, sample, "token_count_fn")
                state = self.dataset.state_dict() if stateful else None
                yield sample, length, tokens, measure_extra(self.extra_fn, sample), state

        def __reduce__(self) -> Any:  # spawned workers rebuild it through the module-level factory
            return measured_iterable, (self.dataset, self.length_fn, self.token_fn, self.extra_fn, self.worker_states)

    return MeasuredIterable


def resume_keys(resume: dict[str, Any]) -> list[int]:
    """The keys a resumed round takes first: its undelivered steps', then its overflow."""
    return [k for step in resume["replay"] for k in step["keys"]] + list(resume["overflow"])


def map_positions(
    config: LoaderConfig, epoch: int, iteration: int, resume: dict[str, Any] | None
) -> tuple[list[tuple[int, int]], int]:
    """``(position, dataset index)`` pairs a map-style source reads in this logical
    iteration, and how many of them are a resumed round's samples (read first)."""
    if resume is not None and resume.get("resumed") is not None:
        # a job resumed on another topology: this rank's share of what the old jobs left
        from youmu.batching.merge import rank_order
        from youmu.batching.state import loader_levels

        indices = rank_order(config.resume_settings, epoch, loader_levels(resume["resumed"], "DynamicBatchLoader"),
                             rank=config.rank, world_size=config.world_size).tolist()
    else:
        indices = rank_indices(
            len(config.dataset), config.world_size, config.rank, seed=config.seed, epoch=epoch, iteration=iteration,
            shuffle=config.shuffle, pad=config.pad_sampler,
        )
    if resume is None:
        return list(enumerate(indices)), 0
    pre = resume_keys(resume)
    start = int(resume["position"])
    if any(not 0 <= k < len(indices) for k in pre) or not 0 <= start <= len(indices):
        raise StateError("the resume state does not fit this dataset (positions out of range)")
    return [(k, indices[k]) for k in pre] + [(k, indices[k]) for k in range(start, len(indices))], len(pre)


def _dataloader(config: LoaderConfig, dataset: Any, pairs: Sequence[tuple[int, int]] | None = None) -> Any:
    """The DataLoader of a source read by workers: map-style ``pairs`` in consecutive
    chunks, or an iterable's chunks one per item (see :mod:`youmu.batching.runtime.handoff`)."""
    from torch.utils.data import DataLoader

    kw: dict[str, Any] = dict(
        collate_fn=ChunkCollate(),  # a sample that cannot leave its worker fails there, not silently
        num_workers=config.num_workers,
        worker_init_fn=config.worker_init_fn,
        multiprocessing_context=config.multiprocessing_context,
    )
    if config.prefetch_factor is not None:
        kw["prefetch_factor"] = config.prefetch_factor
    if pairs is not None:
        kw["batch_sampler"] = ChunkedPairs(pairs, config.num_workers)
    else:
        kw["batch_size"] = None
    return DataLoader(dataset, **kw)


class SampleFeed:
    """One logical iteration's samples on this rank, in order, as the aligner takes
    them: a resumed round's preloaded samples first, then what the producer thread
    draws (one credit each).

    It also tracks where a resume would restart the source: the position after the
    last sample taken (samples of a resumed round do not advance it) and, for a
    stateful iterable dataset, its state as of that sample: read in this process, the
    dataset's own; read by DataLoader workers, each worker's copy's state as of the
    last sample taken from it, and whose turn the rotation is at
    (:func:`~youmu.batching.runtime.handoff.round_robin`) — :meth:`workers_state`.
    """

    def __init__(
        self, config: LoaderConfig, epoch: int, iteration: int, resume: dict[str, Any] | None, credits: Credits,
        source_state: Any = None,
    ) -> None:
        self.credits = credits
        self.preloaded: deque[Item] = deque()
        self.taken = 0  # samples taken in this logical iteration
        self.source_state = source_state
        # DataLoader workers of an iterable source: each one's state as of the last sample
        # taken from it (None: none taken, it starts where the pass does) and the next turn
        self.worker_states: list[Any] | None = None
        self.turn = 0
        if config.kind == "map":
            make = self._map_source(config, epoch, iteration, resume)
        else:
            make = self._iterable_source(config, epoch, resume)
        self.producer: Producer[Item] | None = Producer(
            make, credits=credits, name=f"youmu-fetcher-r{config.rank}",
            what=f"DynamicBatchLoader (rank {config.rank}) drawing its samples ahead")
        self.producer.start()

    # -- the source ------------------------------------------------------------------------
    def _map_source(
        self, config: LoaderConfig, epoch: int, iteration: int, resume: dict[str, Any] | None
    ) -> Callable[[], Iterator[Item]]:
        pairs, self.n_pre = map_positions(config, epoch, iteration, resume)
        self.position = int(resume["position"]) if resume is not None else 0
        measured = MeasuredMap(config.dataset, config.length_fn, config.token_count_fn, config.encoder_fn)

        def make() -> Iterator[Item]:
            if config.num_workers == 0:
                rows: Iterator[Any] = (measured[p] for p in pairs)
            else:
                rows = flatten(_dataloader(config, measured, pairs))
            return (Item(pos, idx, sample, length, tokens, extra=extra)
                    for pos, idx, sample, length, tokens, extra in rows)

        return make

    def _iterable_source(self, config: LoaderConfig, epoch: int,
                         resume: dict[str, Any] | None) -> Callable[[], Iterator[Item]]:
        ds = config.dataset
        nw = config.num_workers
        self.n_pre = 0
        start = 0
        if resume is not None:
            payloads = resume.get("payloads") or {}
            keys = resume_keys(resume)
            for k in keys:
                sample, length, tokens, *extra = payloads[k]
                sample = unpack_sample(sample, where=f"'payloads'[{k}]")
                self.preloaded.append(Item(k, None, sample, length, tokens, extra=int(extra[0]) if extra else 0))
            self.n_pre = len(keys)
            start = int(resume["position"])
            if resume.get("source_state") is not None:
                ds.load_state_dict(resume["source_state"])
            elif nw and hasattr(ds, "set_epoch"):
                ds.set_epoch(epoch)  # the workers' copies start the state's epoch (or load their own state)
        self.position = start
        self.source_state = resume.get("source_state") if resume is not None else None
        stateful = nw == 0 and hasattr(ds, "state_dict")
        worker_states: list[Any] | None = None
        if nw:
            saved = resume.get("workers") if resume is not None else None
            if saved is not None:  # the loader checked that it is this number of workers'
                self.worker_states, self.turn = list(saved["states"]), int(saved["turn"])
                worker_states = self.worker_states[:]
            else:
                self.worker_states = [None] * nw
            if self.source_state is not None:
                # what the workers' copies start from (a merged state's chain): this
                # process's copy as loaded, which a merge of this rank's state reads
                self.source_state = ds.state_dict()

        def make() -> Iterator[Item]:
            if config.num_workers == 0:

                def read() -> Iterator[Item]:
                    k = start
                    for sample in ds:
                        state = ds.state_dict() if stateful else None
                        yield Item(
                            k, None, sample,
                            measure(config.length_fn, sample, "length_fn"),
                            measure(config.token_count_fn, sample, "token_count_fn"),
                            state,
                            extra=measure_extra(config.encoder_fn, sample),
                        )
                        k += 1

                return read()
            chunks = _dataloader(config, measured_iterable(ds, config.length_fn, config.token_count_fn,
                                                           config.encoder_fn, worker_states))
            rows = round_robin(chunks, nw, start=self.turn, tagged=True)
            return (Item(k, None, s, n, t, state, extra=e, worker=w)
                    for k, (w, (s, n, t, e, state)) in enumerate(rows, start=start))

        return make

    # -- the aligner's side ------------------------------------------------------------------
    def take(self, timeout: float) -> Item | Failure | Any:
        """The next sample, :data:`~youmu.distributed.END`, a :class:`Failure` of the source,
        or ``None`` when nothing came within ``timeout`` seconds."""
        if self.preloaded:
            return self._taken(self.preloaded.popleft())
        if self.producer is None:  # stopped: nothing more will come
            time.sleep(max(timeout, 0.0))
            return None
        try:
            x = self.producer.get(timeout=max(timeout, 0.0))
        except BaseException as e:  # noqa: BLE001 - the source's own error, raised on every rank by the aligner
            return Failure(e)
        return self._taken(x) if isinstance(x, Item) else x

    def take_item(self, heartbeat: float, data_timeout: float) -> Item:
        """The next sample, which must exist (a resumed round's samples)."""
        deadline = time.monotonic() + data_timeout
        while True:
            x = self.take(min(heartbeat, max(deadline - time.monotonic(), 0.0)))
            if isinstance(x, Item):
                return x
            if isinstance(x, Failure):
                raise x.exc
            if x is END:
                raise LoaderError("the data source ended while restoring a checkpoint (dataset changed?)")
            if time.monotonic() > deadline:
                raise DataStallError(f"no sample within {data_timeout:.0f}s while restoring a checkpoint")

    def _taken(self, item: Item) -> Item:
        self.taken += 1
        if self.taken > self.n_pre:
            self.position = item.key + 1
            if item.worker >= 0 and self.worker_states is not None:
                if item.state is not None:
                    self.worker_states[item.worker] = item.state
                self.turn = (item.worker + 1) % len(self.worker_states)
            elif item.state is not None:
                self.source_state = item.state
        return item

    def workers_state(self) -> dict[str, Any] | None:
        """Where the DataLoader workers of an iterable source stand as of the last sample
        taken: ``{"states": [each worker's state or None], "turn": next worker}``
        (``None`` without workers)."""
        if self.worker_states is None:
            return None
        return {"states": list(self.worker_states), "turn": self.turn}

    def stalled_for(self) -> float:
        """Seconds the source has been blocked producing its current sample."""
        return self.producer.stalled_for() if self.producer is not None else 0.0

    def pending(self) -> int:
        """Samples fetched or preloaded but not taken (queue markers included)."""
        return (self.producer.queue.qsize() if self.producer is not None else 0) + len(self.preloaded)

    def drop_preloaded(self) -> int:
        """Discard the preloaded samples not taken; how many there were."""
        n = len(self.preloaded)
        self.preloaded.clear()
        return n

    def stop(self) -> None:
        """Stop the producer and hand back the credits of what it fetched and nobody took."""
        p = self.producer
        if p is None:
            return
        p.stop(timeout=5.0)
        self.credits.release(p.drain())
        self.producer = None
