"""``TrainerLoader``: youmu's batches in the shape trainers expect — one object that every
integration (:mod:`~youmu.integrations.hf`, :mod:`~youmu.integrations.accelerate`,
:mod:`~youmu.integrations.lightning`, :mod:`~youmu.integrations.mesh`) hands to its trainer.

What it guarantees, whatever the source:

* **youmu shards, the trainer does not.** It is not a ``torch.utils.data.DataLoader``, so
  Lightning injects no ``DistributedSampler`` and Accelerate neither re-shards nor
  dispatches from rank 0 (``dispatch_batches`` broadcasts rank 0's batch and fails when
  ranks' batch shapes differ, which dynamic batching produces by design).
* **Every rank takes the same number of steps.** A sized stream (``YoumuDataset``,
  ``MapStream``) gives ``len()`` = the smallest rank's batch count (one all-reduce at
  construction); an unsized one (``pack``) agrees each step with one tiny all-reduce and
  stops when any rank is out; ``DynamicBatchLoader`` aligns itself (DGAP) — use
  ``uneven="pad"`` so that holds in join mode's tail too.
* **Epochs are the loader's own**: each new ``iter()`` after a finished pass starts the
  next epoch (``set_epoch`` on the source), so a resumed run continues the loader's epoch
  whatever epoch number the trainer believes in. A loop may call :meth:`TrainerLoader.set_epoch`
  itself, under the one epoch rule (:mod:`youmu.state.contract`); the trainer integrations
  never forward a trainer's own epoch count (the Hugging Face ``Trainer`` restarts it at
  0 when it resumes a loader of unknown length).
* **Exact resume, per rank, in constant time**: ``state_dict()`` is this rank's
  position (the source's own state, or torchdata ``StatefulDataLoader``'s over a stream);
  :meth:`gathered_state_dict` collects every rank's in one dict for trainers that save
  one checkpoint file from rank 0 (Accelerate, Lightning). Nothing is skipped or replayed.
* **Resume on another number of ranks**: :meth:`load_state_dict` also takes every rank's
  state of a job of another world size (the gathered dict, or the list of per-rank
  states): :func:`youmu.merge_states` turns them into one state for this topology, and
  the new job delivers the rest of the epoch exactly once (see :meth:`load_state_dict`).
* **The loader contract** (:class:`youmu.loaders.passes.PassLoader`: read-only ``epoch``,
  ``close(timeout=None)``, ``with``), but for one thing: a new ``iter()`` after a
  finished pass is the *next* epoch (above).
* **Metrics**: :meth:`metrics` gives tokens/s, samples/s, padding ratio, the wait for
  data (p50/p99) and mixture shares, ready for a trainer's logger.

Batches: a stream's items collated by ``collate_fn``; a ``DynamicBatchLoader``'s or
``BalancedLoader``'s ``(batch, info)`` become the batch dict with ``info`` under
:data:`~youmu.integrations.trainer.batch_info.INFO_KEY` (see :mod:`~youmu.integrations.trainer.batch_info`).

Example:
    >>> from youmu.torch import MapStream
    >>> rows = [{"id": i, "input_ids": [i] * (1 + i % 3)} for i in range(10)]
    >>> loader = TrainerLoader(MapStream(rows, drop_last=True), batch_size=4)
    >>> len(loader), [b["id"].tolist() for b in loader]
    (3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
    >>> second = [b["id"].tolist() for b in loader]                  # the next pass: epoch 1
    >>> loader.epoch, second[0]
    (1, [0, 1, 2, 3])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu._internal.args import bool_arg, callable_arg, instance_arg, int_arg, opt_int_arg, workers_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError, StateError
from youmu.integrations.trainer.batch_info import INFO_KEY, device_arg, trainer_batch
from youmu.integrations.trainer.channels import pairs_channel, stream_channel
from youmu.integrations.trainer.consumption import Consumption
from youmu.integrations.trainer.metrics import LoaderFigures
from youmu.integrations.trainer.states import (
    GATHERED_FORMAT,
    GATHERED_STATE,
    TRAINER_LOADER_FORMAT,
    TRAINER_STATE,
    check_rank_state,
    gather_objects,
    job_states,
    other_workers,
    saved_world,
)
from youmu.integrations.trainer.steps import stream_batches_per_epoch
from youmu.loaders.passes import PassCursor, PassLoader
from youmu.state.contract import yields_pairs

__all__ = ["TrainerLoader", "MAX_BATCH_SIZE"]

#: The largest ``batch_size`` taken: torch's batch sampler lists every index of a batch
#: before the first sample is read (an iterable source's are ``batch_size`` Nones), so an
#: absurd size allocates without end instead of failing.
MAX_BATCH_SIZE = 1 << 20


@dataclass(frozen=True)
class _ResumePoint:
    """A loaded state's point: the source's state for the next pass (``None``: in it already)."""

    source: dict[str, Any] | None


class TrainerLoader(PassLoader):
    """Batches from a youmu source for a trainer (see the module doc).

    Args:
        source: a youmu stream — ``YoumuDataset``, ``MapStream``/``MixtureStream`` (over a
            ``MixtureDataset``), ``pack(...)``, any ``IterableDataset`` with
            ``state_dict`` — batched here by torchdata's ``StatefulDataLoader``; or a
            loader of ``(batch, info)`` pairs (:func:`youmu.state.contract.yields_pairs`:
            ``DynamicBatchLoader``, ``BalancedLoader``, a ``RayBalancedLoader`` client),
            already batched, with step info.
        batch_size: samples per batch (streams only).
        collate_fn: turns a list of samples into a batch (streams only; default
            :func:`youmu.torch.collate_pad`).
        num_workers: ``StatefulDataLoader`` workers (streams only).
        steps_per_epoch: the number of batches an epoch has on every rank (micro-batches
            for a ``BalancedLoader``), when the trainer needs it and youmu cannot know it
            without reading the data (a dynamic-batch epoch:
            :func:`youmu.integrations.trainer.steps.odb_steps_per_epoch` computes it). An epoch
            ends after this many batches at the latest; a stream's ranks still agree each
            step (``even``), so with a bound above the data they stop together when one
            runs out.
        even: unsized streams (or ``steps_per_epoch`` given): agree each step (one
            all-reduce) so every rank stops at the same step. Turn off only when the
            ranks are known to have equal counts.
        source_key: batch field naming each sample's source (a mixture's child), for the
            ``mixture/<name>`` shares in :meth:`metrics`.
        device: move tensors of each batch there (default: leave them on the CPU).
        channel: a :class:`~youmu.distributed.GlooChannel` over the data-parallel ranks
            (default: a loader's own channel, else a new Gloo group over the default
            group, created here — build the loader at the same point on every rank).
    """

    def __init__(
        self,
        source: Any,
        batch_size: int | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        *,
        num_workers: int = 0,
        steps_per_epoch: int | None = None,
        even: bool = True,
        source_key: str | None = None,
        device: Any = None,
        channel: Any = None,
    ) -> None:
        callable_arg("collate_fn", collate_fn, optional=True)
        num_workers = workers_arg(num_workers)
        self._steps = opt_int_arg("steps_per_epoch", steps_per_epoch, minimum=1)
        self._user_steps = steps_per_epoch is not None
        self.even = bool_arg("even", even)
        self.source_key = instance_arg("source_key", source_key, (str, type(None)), "a str (a batch field) or None")
        self.device = device_arg(device)
        self.source = source
        self.pairs = yields_pairs(source)
        if self.pairs:
            if batch_size is not None or collate_fn is not None:
                raise InvalidArgumentError(
                    f"{type(source).__name__} forms its own batches: pass collate_fn to it, not "
                    "batch_size/collate_fn here"
                )
            self.channel = pairs_channel(source, channel)
            where = (getattr(source, "rank", self.channel.rank), getattr(source, "world_size", self.channel.world_size))
            if where != (self.channel.rank, self.channel.world_size):
                raise InvalidArgumentError(
                    f"{type(source).__name__} is rank {where[0]} of {where[1]} but the channel is rank "
                    f"{self.channel.rank} of {self.channel.world_size}: build it for this rank of the job"
                )
            self._loader = source
        else:
            if not (hasattr(source, "__iter__") and hasattr(source, "state_dict")):
                raise ArgumentTypeError(
                    f"source must be a youmu stream (YoumuDataset, MapStream, pack(...)) or a loader of (batch, info) "
                    f"pairs (DynamicBatchLoader, BalancedLoader, RayBalancedLoader), got {type(source).__name__}"
                )
            batch_size = int_arg("batch_size", 1 if batch_size is None else batch_size, minimum=1,
                                 maximum=MAX_BATCH_SIZE)
            from torchdata.stateful_dataloader import StatefulDataLoader

            from youmu.torch.collate import collate_pad
            from youmu.torch.sendable import SendCollate

            self.channel = stream_channel(channel)
            # kept to build a fresh loader over a stream resumed from a merged state
            collate = collate_fn or collate_pad
            self._loader_args = {"batch_size": batch_size, "num_workers": num_workers,
                                 "collate_fn": SendCollate(collate) if num_workers else collate}
            self._loader = StatefulDataLoader(source, **self._loader_args)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.rank, self.world_size = self.channel.rank, self.channel.world_size
        # a stream whose ranks' batch counts are not known here (unsized, or a bound given as steps_per_epoch)
        # agrees each step: a rank out of data early would leave the others in a collective it never joins
        self._agree_each_step = not self.pairs and self._steps is not None
        if not self.pairs and self._steps is None:
            mine = stream_batches_per_epoch(source, batch_size, num_workers)  # type: ignore[arg-type]
            if mine is not None:
                self._steps = min(int(t[0]) for t in self.channel.all_gather_int64([mine]))
            else:
                self._agree_each_step = True
        # the epoch and a loaded resume point (a _ResumePoint) that the next pass takes
        self._pass = PassCursor()
        self._taken = 0  # steps delivered in the current epoch
        self._finished = False  # the current epoch's pass ran out
        self._running: Generator[Any, None, None] | None = None  # the pass in progress (close() stops it)
        # the current epoch's steps when they differ from a full epoch's: an epoch resumed on
        # another number of ranks is the steps taken before plus what is left
        self._epoch_steps: int | None = None
        self._positioned = False  # the source was loaded from a merged state: no set_epoch
        # what the trainer consumed, as against what it fetched (see follow_consumption)
        self._consumption = Consumption()
        #: An integration that follows each pass (Accelerate's GradientState, see
        #: youmu.integrations.accelerate): it gets the pass's batches and returns what the trainer iterates.
        self.on_pass: Callable[[Iterator[Any]], Iterator[Any]] | None = None
        self._metrics = LoaderFigures(source_key)

    # -- sizes and epochs -----------------------------------------------------------------
    def _limit(self) -> int | None:
        """Steps of the epoch the next batch belongs to (``None``: unknown)."""
        if self._epoch_steps is not None and not self._finished:
            return self._epoch_steps
        return self._steps

    def __len__(self) -> int:
        """Steps per epoch on every rank (known for sized streams or ``steps_per_epoch``).
        An epoch resumed on another number of ranks has ``steps taken + steps left`` (see
        :meth:`load_state_dict`) until it ends; the epochs after it are full ones."""
        steps = self._limit()
        if steps is None:
            # a TypeError (ArgumentTypeError is one) is len()'s protocol for "no length":
            # trainers (HF's has_length, Lightning's has_len) catch it and use max_steps
            raise ArgumentTypeError(
                f"{type(self.source).__name__} has no known number of steps per epoch; pass steps_per_epoch"
            )
        return steps

    @property
    def epoch_ended(self) -> bool:
        """Whether the current pass has delivered its epoch's last batch: known as that batch
        is delivered when ``len()`` is (an unsized stream learns it one request later)."""
        return self._finished

    @property
    def epoch_steps(self) -> int | None:
        """The current epoch's steps when they differ from a full epoch's — an epoch
        resumed on another number of ranks, until it ends — else ``None``."""
        return None if self._finished else self._epoch_steps

    def has_length(self) -> bool:
        """Whether ``len()`` is known (sized streams, or ``steps_per_epoch`` given)."""
        return self._limit() is not None

    def set_epoch(self, epoch: int) -> None:
        """The one epoch rule (:mod:`youmu.state.contract`): the epoch of a loaded state, before
        its pass begins, keeps the resume point; any other call starts ``epoch`` fresh at the
        next ``iter()``. Trainers' own calls are not forwarded (see the module doc)."""
        self._pass.set_epoch(epoch)
        if self._pass.point is None:  # else the loaded state's epoch: its resume point stays
            self._restart_epoch()
            self._consumption.restart()

    def _restart_epoch(self) -> None:
        self._taken, self._finished, self._epoch_steps, self._positioned = 0, False, None, False

    def _source_set_epoch(self, epoch: int) -> None:
        if hasattr(self.source, "set_epoch"):
            self.source.set_epoch(epoch)

    # -- iteration --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self._stop_pass()
        point: _ResumePoint | None = self._pass.begin()  # this pass takes the resume point
        if self._finished or (point is None and not self._positioned):
            # the last pass ended (maybe before a resume): the next epoch; else this epoch afresh
            if self._finished:
                self._pass.set_epoch(self.epoch + 1)
            point = None
            self._restart_epoch()
            self._source_set_epoch(self.epoch)
        if point is not None and point.source is not None:
            self._loader.load_state_dict(point.source)
        self._running = running = self._batches()
        return running if self.on_pass is None else self.on_pass(running)

    def _agree(self, have: bool) -> bool:
        """Whether every rank has a batch (unsized streams; one all-reduce)."""
        if not self.even or self.world_size == 1:
            return have
        return min(int(t[0]) for t in self.channel.all_gather_int64([int(have)])) == 1

    def _batches(self) -> Generator[Any, None, None]:
        it = iter(self._loader)
        limit = self._limit()
        while True:
            if limit is not None and self._taken >= limit:
                break
            if self._consumption.following and limit is None:
                # an unsized epoch: trainers fetch ahead only where they cannot count
                self._consumption.before_fetch(self._fetched_state)
            t0 = time.perf_counter()
            try:
                item = next(it)
                have = True
            except StopIteration:
                item, have = None, False
            if self._agree_each_step:
                have = self._agree(have)
            if not have:
                break
            wait = time.perf_counter() - t0
            batch = trainer_batch(item, self.pairs, self.device)
            self._consumption.fetched += 1
            self._taken += 1
            self._positioned = False
            self._metrics.record(batch, batch.get(INFO_KEY) if isinstance(batch, dict) else None, wait)
            if limit is not None and self._taken >= limit:
                # trainers stop asking after len() batches: the epoch is over now, not at a
                # next() that never comes
                self._finished = True
            yield batch
        self._finished = True

    # -- consumed, not fetched -------------------------------------------------------------
    def follow_consumption(self, depth: int = 8) -> None:
        """Save what the trainer consumed, not what it fetched: for a trainer that fetches
        up to ``depth`` batches ahead of the one it trains where it does not know the
        epoch's length (Lightning's prefetching fetcher pulls one ahead of an unsized
        loader, to learn that a batch is the last), which then reports each batch it
        trains with :meth:`mark_consumed`. In an epoch of unknown length the loader keeps
        its state as of each handed-out batch (the last ``depth + 1``: one source
        ``state_dict()`` per batch), and :meth:`state_dict` gives the one after the last
        batch consumed, so the batches fetched but not trained come again after a
        resume. (A trainer that fetches ahead of a sized loader would need the same: none
        of the integrated ones does, and that saves the per-batch state.)"""
        self._consumption.follow(depth)

    def mark_consumed(self) -> None:
        """The trainer trained the next handed-out batch (see :meth:`follow_consumption`)."""
        self._consumption.mark()

    def _fetched_state(self) -> dict[str, Any]:
        """This rank's resume point after every batch handed out so far."""
        point = self._pass.point
        source = point.source if point is not None and point.source is not None else self._loader.state_dict()
        values = {"rank": self.rank, "world_size": self.world_size, "epoch": self.epoch, "steps": self._taken,
                  "finished": self._finished, "source": source}
        if self._epoch_steps is not None:
            values["epoch_steps"] = self._epoch_steps
        return TRAINER_STATE.write(values)

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's resume point: the epoch, steps taken and the source's state — as of
        the last batch the trainer consumed when it reports them (:meth:`follow_consumption`),
        else as of the last batch handed out."""
        return self._consumption.state(self._fetched_state)

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue at the next ``iter()`` from :meth:`state_dict` (this rank's), or from
        every rank's: :meth:`gathered_state_dict` or the list of each rank's
        :meth:`state_dict`.

        Every rank's states of a job of **another world size** resume here too (call it on
        every rank: it is collective then). They must form one complete job — each rank of
        it once, else :class:`~youmu.errors.StateError` names the missing or repeated
        rank. Their sources' states are merged with :func:`youmu.merge_states` and loaded
        into the source (a stream gets a fresh ``StatefulDataLoader`` with the same
        arguments, whose workers copy it; a loader gets ``load_state_dict(merged)``), so
        this job delivers every sample of the epoch that the old one did not deliver,
        exactly once. The epoch carries over, and so do the steps taken in it: the
        resumed epoch's ``len()`` is the steps taken before the resize plus the batches
        left, the smallest count over this job's ranks (one all-gather, as the
        constructor does for a full epoch), so every rank takes the same number of steps.
        With ``steps_per_epoch`` given, or an unsized stream, the epoch ends at that cap or
        when the ranks agree that one is out, as usual. The epochs after it are full
        epochs of this job.

        Example (the states of two ranks that took one step of 2 rows each, simulated,
        resumed by a job of one rank):

        >>> from youmu.torch import MapStream
        >>> rows = [{"id": i, "input_ids": [i]} for i in range(12)]
        >>> def rank_state(r):
        ...     stream = MapStream(rows, rank=r, world_size=2)
        ...     it = iter(stream)
        ...     _ = [next(it) for _ in range(2)]
        ...     return {"format": TRAINER_LOADER_FORMAT, "rank": r, "world_size": 2, "epoch": 0, "steps": 1,
        ...             "finished": False, "source": stream.state_dict()}
        >>> loader = TrainerLoader(MapStream(rows), batch_size=4)
        >>> loader.load_state_dict([rank_state(0), rank_state(1)])
        >>> len(loader), sorted(i for b in loader for i in b["id"].tolist())
        (3, [4, 5, 6, 7, 8, 9, 10, 11])
        """
        ranks: Any = None
        if isinstance(state, Mapping) and state.get("format") == GATHERED_FORMAT:
            ranks = GATHERED_STATE.read(state)[1]["ranks"]
        elif isinstance(state, Sequence) and not isinstance(state, (str, bytes)):
            ranks = list(state)
            if not ranks:
                raise StateError("TrainerLoader.load_state_dict got an empty list of rank states")
        if ranks is not None:
            if (len(ranks) != self.world_size or any(saved_world(r) != self.world_size for r in ranks)
                    or any(self._other_workers(r) for r in ranks)):
                self._load_resized(ranks)
                return
            state = ranks[self.rank]
        elif isinstance(state, Mapping) and state.get("format") == TRAINER_LOADER_FORMAT and saved_world(state) not in (
                self.world_size, None):
            raise StateError(
                f"the TrainerLoader state is rank {state.get('rank')!r}'s of a job of world_size="
                f"{state.get('world_size')!r}; this job has world_size={self.world_size}: resuming on another number "
                "of ranks needs every rank's state (gathered_state_dict(), or the list of every rank's state_dict())"
            )
        st = self._checked(state)
        saved = self._other_workers(st)
        if saved is not None:
            if self.world_size > 1:  # one rank's positions: re-splitting them needs every rank's state
                raise StateError(
                    f"the TrainerLoader state was saved with num_workers={saved}; this loader has num_workers="
                    f"{self.num_workers}: resuming on another number of DataLoader workers needs every rank's state "
                    "(gathered_state_dict(), or the list of every rank's state_dict())"
                )
            self._load_resized([st])  # the whole job's positions: re-split over this loader's workers
            return
        self._stop_pass()
        self._pass.load(_ResumePoint(st["source"]), epoch=st["epoch"])
        self._taken = st["steps"]
        self._finished = st["finished"]
        self._epoch_steps = st.get("epoch_steps")
        self._positioned = False
        self._consumption.restart()

    def _checked(self, state: Any, expect_shard: bool = True) -> dict[str, Any]:
        """A TrainerLoader state checked field by field and bounded by this loader's epoch
        (see :func:`~youmu.integrations.trainer.states.check_rank_state`)."""
        full: int | None = None  # a full epoch of this loader, or of the workers the state batched with
        if expect_shard:
            saved = self._other_workers(state)
            full = self._steps if saved is None or self._user_steps else stream_batches_per_epoch(
                self.source, self.batch_size, saved)  # type: ignore[arg-type]
        return check_rank_state(state, rank=self.rank if expect_shard else None,
                                world_size=self.world_size if expect_shard else None, full_epoch=full)

    def _other_workers(self, state: Any) -> int | None:
        """The DataLoader workers a stream's (or a DynamicBatchLoader's) state was saved with, if not this one's."""
        return other_workers(state, getattr(self.source, "num_workers", 0) if self.pairs else self.num_workers,
                             self.pairs)

    def _load_resized(self, ranks: list[Any]) -> None:
        """Every rank's state of a job of another world size (see :meth:`load_state_dict`)."""
        from youmu.merge import merge_states

        self._stop_pass()  # before the source is loaded: the old pass lets go of it first
        states = [self._checked(s, expect_shard=False) for s in job_states(ranks)]
        epochs = {s["epoch"] for s in states}
        if len(epochs) > 1:
            raise StateError(f"the ranks' TrainerLoader states are of different epochs {sorted(epochs)}: they were not "
                             "saved by one job at one point")
        taken = max(s["steps"] for s in states)
        finished = all(s["finished"] for s in states)
        merged = merge_states([s["source"] for s in states])
        if self.pairs:
            self._loader.load_state_dict(merged)
        else:
            from torchdata.stateful_dataloader import StatefulDataLoader

            self.source.load_state_dict(merged)
            self._loader = StatefulDataLoader(self.source, **self._loader_args)
        self._pass.load(_ResumePoint(None), epoch=epochs.pop())
        self._taken, self._finished = taken, finished
        self._positioned, self._epoch_steps = True, None
        self._consumption.restart()
        if not (finished or self.pairs or self._user_steps):
            left = stream_batches_per_epoch(self.source, self.batch_size, self.num_workers)  # type: ignore[arg-type]
            if left is not None:  # a sized stream: what is left of the epoch on every rank
                self._epoch_steps = taken + min(int(t[0]) for t in self.channel.all_gather_int64([left]))

    def gathered_state_dict(self) -> dict[str, Any]:
        """Every rank's :meth:`state_dict` in one dict (collective: call it on every rank,
        as trainers do when they save a checkpoint); :meth:`load_state_dict` picks this
        rank's part, or merges them all on another world size."""
        return GATHERED_STATE.write({"ranks": gather_objects(self.channel, self.state_dict())})

    # -- metrics ----------------------------------------------------------------------------
    def metrics(self, reset: bool = False) -> dict[str, float]:
        """This rank's figures since the last reset: ``youmu/tokens_per_s``,
        ``youmu/samples_per_s``, ``youmu/padding_ratio``, ``youmu/data_wait_p50_ms`` and
        ``..._p99_ms``, ``youmu/epoch``, and ``youmu/mixture/<source>`` shares."""
        return self._metrics.figures(self.epoch, reset)

    def close(self, timeout: float | None = None) -> None:
        """Stop the pass in progress (one the trainer abandoned at ``max_steps``) and a
        loader source's (``close(timeout)``, then a ``DynamicBatchLoader``'s aligner is
        waited for); a stream's DataLoader workers go with the pass. Idempotent."""
        self._stop_pass()
        if self.pairs:
            self.source.close(timeout)
            if hasattr(self.source, "wait_finished"):
                self.source.wait_finished(timeout)

    def _stop_pass(self) -> None:
        gen, self._running = self._running, None
        if gen is not None:
            gen.close()  # a suspended pass stops at its yield: the epoch is not marked finished

    def __repr__(self) -> str:
        return f"TrainerLoader({type(self.source).__name__}, rank={self.rank}, world_size={self.world_size})"
