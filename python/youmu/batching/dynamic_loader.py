"""``DynamicBatchLoader``: online dynamic batching with DGAP cross-rank alignment.

Per rank, three kinds of execution context cooperate:

* **workers** (``num_workers`` DataLoader processes, or the fetcher thread itself with
  ``num_workers=0``) run the dataset's preprocessing and measure each sample
  (``length_fn``, ``token_count_fn``) — :mod:`youmu.batching.runtime.feed`;
* the **fetcher thread** draws samples in order, one output *credit* each, so at
  most ``max_outstanding`` samples are fetched but not yet consumed by the trainer
  (a :class:`~youmu.distributed.Producer`) — :mod:`youmu.batching.runtime.feed`;
* the **aligner thread** fills the grouping buffer, runs one Gloo all_gather per
  round on the loader's own :class:`~youmu.distributed.GlooChannel`, aligns,
  collates, and answers each emitted sample's output slot: one slot carries the
  batch, the others carry :data:`~youmu.batching.algo.step_info.IDLE` — :mod:`youmu.batching.runtime.aligner`;
* the **trainer's thread** iterates ``(batch, info)``; skipping an IDLE slot or
  taking a batch hands credits back — :mod:`youmu.batching.runtime.epoch`.

The settings live in one frozen :class:`~youmu.batching.config.LoaderConfig`, which
the epochs share with the loader; interpreter exit is :mod:`youmu.batching.runtime.shutdown`'s.

Grouping and alignment overlap training. A round fires only when the buffer is full
(or the data is exhausted), so the batches are a pure function of the seed, the
epoch and the data, never of timing; a rank still waiting for data tells the others
so every ``heartbeat`` seconds (a skip round), which keeps each collective's timeout
short without penalising slow preprocessing.

Example::

    loader = DynamicBatchLoader(dataset, token_budget=16384, length_fn=lambda s: len(s["input_ids"]),
                                collate_fn=lm_collate, num_workers=4)
    with join_uneven([ddp_model]):          # join mode: ranks finish at different steps
        for batch, info in loader:
            loss = model(**batch).loss * info.loss_scale
            loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from youmu.batching.algo.step_info import StepInfo
from youmu.batching.config import LoaderConfig
from youmu.batching.merge import check_loader_state
from youmu.batching.runtime.epoch import EpochHandle, EpochIterator
from youmu.batching.runtime.metrics import BatchingMetrics, MetricsSnapshot
from youmu.batching.state import fresh_state
from youmu.distributed.channel import DEFAULT_TIMEOUT, GlooChannel, channel_for
from youmu.loaders.passes import PassCursor, PassLoader

__all__ = ["DynamicBatchLoader"]

T = TypeVar("T")


class _Setting(Generic[T]):
    """A loader attribute backed by one :class:`LoaderConfig` field: reading it reads the
    config; assigning it rebuilds the config, validated like the constructor's argument
    (the next ``iter()`` uses it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type) -> _Setting[T]: ...

    @overload
    def __get__(self, obj: DynamicBatchLoader, objtype: type) -> T: ...

    def __get__(self, obj: DynamicBatchLoader | None, objtype: type | None = None) -> T | _Setting[T]:
        if obj is None:
            return self
        return getattr(obj._config, self.name)

    def __set__(self, obj: DynamicBatchLoader, value: T) -> None:
        obj._config = obj._config.replace(**{self.name: value})


class DynamicBatchLoader(PassLoader):
    """Variable-size, length-grouped batches with the same number of steps on every rank.

    Args:
        dataset: a map-style dataset (``len`` and ``[i]``: lists, ``MixtureDataset``,
            ``RowDataset``, any ``torch.utils.data.Dataset``) or an iterable one
            (``YoumuDataset``, any ``IterableDataset``). Map-style datasets are
            shuffled like ``DistributedSampler`` and strided over ranks without tail
            padding, so every sample is emitted exactly once (see ``pad_sampler``);
            iterable datasets must shard themselves over ranks and workers
            (``YoumuDataset`` does).
        token_budget: ``L_max``: a group of ``k >= 2`` samples never exceeds ``k * max_len
            <= token_budget`` padded tokens (ODB, Eq. 1).
        length_fn: realised length of a sample after preprocessing (e.g.
            ``lambda s: len(s["input_ids"])``). Runs in the workers.
        collate_fn: turns a list of samples into a batch (runs in the aligner thread);
            ``None`` yields the list itself.
        pool_size: samples grouped per round (1024 in ODB's experiments). Memory follows the
            samples actually buffered, not this number.
        num_workers: DataLoader worker processes for preprocessing (0: the fetcher
            thread reads the dataset itself).
        prefetch_factor: DataLoader prefetch per worker, in items. Workers hand samples
            over in chunks of up to :data:`~youmu.batching.runtime.handoff.CHUNK_CAP` (16; the
            first ones smaller), so up to ``prefetch_factor × num_workers × 16``
            samples wait in the DataLoader beyond ``max_outstanding``.
        join: join mode (default): ranks keep exchanging until every rank has drained
            its data, so every sample is emitted exactly once; ranks finish at
            different steps (use :func:`~youmu.batching.ddp_join.join_uneven` or
            ``uneven="pad"``). Non-join: the first rank to run out ends the logical
            iteration for all, and the loader chains iterations (reshuffled for
            map-style datasets; a fresh ``iter(dataset)`` for iterable ones) until
            ``quota`` samples were emitted.
        loss_scaling: ``"exact"``, ``"approx"``, ``"sample"`` or ``"none"`` (see
            :mod:`youmu.batching.algo.loss`); sets ``info.loss_scale``.
        token_count_fn: loss tokens of a sample (``t_r`` of ODB, Eq. 2); default
            ``length_fn``. For causal LMs with masked prompts use
            :class:`~youmu.batching.algo.loss.label_token_count`.
        group: a :class:`GlooChannel` or a Gloo process group to exchange on. By
            default a new Gloo group over the initialised default group (created here,
            collectively: construct the loader at the same point on every rank), or
            single-process when torch.distributed is not initialised.
        timeout: seconds any collective may wait before every rank raises (also the
            longest the interpreter-exit hook waits for peers in join mode's tail).
        data_timeout: the longest the data source may produce nothing before every
            rank raises :class:`~youmu.errors.DataStallError` (default
            ``timeout``). A stalled rank keeps exchanging heartbeat rounds meanwhile,
            so this may be shorter or longer than ``timeout``. With workers, a
            map-style dataset's samples arrive up to 16 at a time: allow for 16
            samples' preprocessing in one worker. Garbage collections that run on the
            loader's fetcher thread (finalising whatever the program dropped) are not
            counted (:mod:`youmu._internal.gctime`).
        shuffle, seed: shuffle map-style datasets like ``DistributedSampler``.
        quota: non-join mode's global sample quota ``N`` (default ``len(dataset)``).
        max_outstanding: credits per rank (samples fetched and not yet consumed);
            default ``2 * pool_size`` so the next round fills while the trainer
            consumes the previous one. Must be at least ``pool_size``.
        shuffle_steps: shuffle the order of a round's steps (identically on all ranks).
        uneven: join mode's tail: ``"stop"`` ends the local iteration when this rank's
            data is done (pair with DDP ``Join``); ``"pad"`` keeps yielding filler steps
            (``info.is_padding``, ``loss_scale=0``, the last batch repeated or
            ``pad_batch()``) until every rank is done, for engines without ``Join``.
        pad_batch: filler batch factory for ``uneven="pad"``.
        callback: ``callback(info, metrics_snapshot)`` after every delivered step.
        worker_init_fn, multiprocessing_context: passed to the DataLoader.
        heartbeat: seconds a rank waits for data before telling its peers it is not
            ready yet (a skip round).
        encoder_budget: a second budget per batch (multimodal samples): the most
            vision-encoder patches (or images) one batch of two or more samples may
            hold, counted in real units; ``token_budget`` then bounds the backbone's
            padded tokens (``length_fn``: merged image tokens plus text). A batch is
            closed when either budget would be exceeded (see
            :func:`~youmu.batching.algo.grouping.form_groups`). Needs ``encoder_fn``.
        encoder_fn: a sample's count for ``encoder_budget`` (e.g.
            ``lambda s: s["encoder_patches"]``, or its number of images). Runs in
            the workers.
        pad_sampler: map-style datasets only. ``False`` (default): the shuffled
            indices strided over ranks without padding, so every sample is emitted
            exactly once per epoch; ranks then hold ``floor(N/W)`` or ``ceil(N/W)``
            samples, which join mode absorbs (ranks finish at different steps) and
            non-join mode's quota covers. ``True`` (ODB's
            ``DistributedSampler(drop_last=False)``): every rank draws ``ceil(N/W)``
            indices, the tail padded with repeats, so ``P = W·ceil(N/W) − N`` samples
            are emitted twice per epoch.

    Iterating yields ``(batch, info)`` with :class:`~youmu.batching.algo.step_info.StepInfo`.
    ``loader.metrics`` holds the current iteration's :class:`BatchingMetrics`; its
    summary is logged (``logging.getLogger("youmu.batching")``, INFO) when the
    iteration ends on this rank.

    Shutdown: a loop that breaks out early should call :meth:`close` (or let the
    loader go: dropping the last reference closes it, and so does interpreter exit).
    In join mode a rank whose data ended keeps serving its peers' last rounds; call
    :meth:`wait_finished` before ``destroy_process_group()``. At exit the loader waits
    for that at most ``timeout`` seconds, then closes (the peers raise
    :class:`~youmu.errors.PeerClosedError`).

    Example:
        >>> data = [{"id": i, "input_ids": list(range(n))} for i, n in enumerate((5, 9, 3, 7, 2, 8))]
        >>> loader = DynamicBatchLoader(data, token_budget=16, length_fn=lambda s: len(s["input_ids"]),
        ...                             pool_size=4, num_workers=0)
        >>> steps = [[s["id"] for s in batch] for batch, info in loader]
        >>> sorted(i for ids in steps for i in ids)
        [0, 1, 2, 3, 4, 5]
        >>> all(len(ids) * max(len(data[i]["input_ids"]) for i in ids) <= 16 for ids in steps if len(ids) > 1)
        True
    """

    #: its aligner exchanges each round on the loader's channel from a background thread,
    #: so whatever else must talk to its ranks (a ``TrainerLoader``'s checkpoint gather,
    #: run on the trainer's main thread) needs a channel of its own
    collectives_in_background = True

    dataset = _Setting[Any]()
    token_budget = _Setting[int]()
    length_fn = _Setting[Callable[[Any], int]]()
    collate_fn = _Setting["Callable[[list[Any]], Any] | None"]()
    token_count_fn = _Setting[Callable[[Any], int]]()
    pool_size = _Setting[int]()
    num_workers = _Setting[int]()
    prefetch_factor = _Setting["int | None"]()
    join = _Setting[bool]()
    loss_scaling = _Setting[str]()
    timeout = _Setting[float]()
    data_timeout = _Setting[float]()
    shuffle = _Setting[bool]()
    seed = _Setting[int]()
    quota = _Setting["int | None"]()
    max_outstanding = _Setting[int]()
    shuffle_steps = _Setting[bool]()
    uneven = _Setting[str]()
    pad_batch = _Setting["Callable[[], Any] | None"]()
    callback = _Setting["Callable[[StepInfo, MetricsSnapshot], None] | None"]()
    worker_init_fn = _Setting["Callable[[int], None] | None"]()
    multiprocessing_context = _Setting[Any]()
    heartbeat = _Setting[float]()
    pad_sampler = _Setting[bool]()
    encoder_budget = _Setting["int | None"]()
    encoder_fn = _Setting["Callable[[Any], int] | None"]()

    #: what each pass yields: ``(batch, info)`` pairs (see youmu.state.contract.Loader)
    yields_pairs = True

    def __init__(
        self,
        dataset: Any,
        token_budget: int,
        length_fn: Callable[[Any], int],
        collate_fn: Callable[[list[Any]], Any] | None = None,
        *,
        pool_size: int = 1024,
        num_workers: int = 2,
        prefetch_factor: int | None = None,
        join: bool = True,
        loss_scaling: str = "exact",
        token_count_fn: Callable[[Any], int] | None = None,
        group: Any = None,
        timeout: float = DEFAULT_TIMEOUT,
        data_timeout: float | None = None,
        shuffle: bool = True,
        seed: int = 0,
        quota: int | None = None,
        max_outstanding: int | None = None,
        shuffle_steps: bool = True,
        uneven: str = "stop",
        pad_batch: Callable[[], Any] | None = None,
        callback: Callable[[StepInfo, MetricsSnapshot], None] | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        heartbeat: float = 1.0,
        pad_sampler: bool = False,
        encoder_budget: int | None = None,
        encoder_fn: Callable[[Any], int] | None = None,
    ) -> None:
        arguments = LoaderConfig.pick(locals())  # the keywords LoaderConfig declares
        settings = LoaderConfig.check(arguments)  # every argument, before the collective below
        channel = channel_for(group, timeout=settings["timeout"], name="group")
        self._config = LoaderConfig.from_settings(settings, channel)
        self.metrics = BatchingMetrics()
        # epochs and a loaded state (the point) for the next pass; the pass keeps where the trainer is
        self._pass = PassCursor()
        self._current: EpochIterator | None = None

    # -- what the config says -------------------------------------------------------------------
    @property
    def config(self) -> LoaderConfig:
        """The loader's settings (frozen; assign an attribute such as ``collate_fn`` to change one)."""
        return self._config

    @property
    def channel(self) -> GlooChannel:
        return self._config.channel

    @property
    def rank(self) -> int:
        return self._config.rank

    @property
    def world_size(self) -> int:
        return self._config.world_size

    @property
    def kind(self) -> str:
        """``"map"`` or ``"iterable"``."""
        return self._config.kind

    def config_fingerprint(self) -> int:
        """63-bit hash of the settings every rank must share (checked at each start)."""
        self._config = self._config.current()
        return self._config.fingerprint

    # -- the stream contract (youmu.state.contract) ------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` from the next pass on (youmu.state.contract's loader
        contract: a pass in progress keeps its epoch; a loaded state of the same epoch
        is kept, one of another epoch cleared)."""
        self._pass.set_epoch(epoch)
        ds = self._config.dataset
        if self._config.kind == "iterable" and hasattr(ds, "set_epoch") and self._pass.point is None:
            ds.set_epoch(self._pass.epoch)

    def __iter__(self) -> EpochHandle:
        if self._current is not None:
            self._current.retire()
        self._config = self._config.current()
        resume = self._pass.begin()
        it = EpochIterator(self._config, self._pass.epoch, resume)
        self._current = it
        self.metrics = it.metrics
        it.start()
        return EpochHandle(self, it)

    def state_dict(self) -> dict[str, Any]:
        """Resume point of this rank (format ``"youmu.batching/2"``; states of version 1
        load too): a resumed epoch emits exactly the samples not yet delivered, in the
        same batches as an uninterrupted run.

        Call it on every rank at the same step (as for model checkpoints). Map-style
        datasets need only integers; iterable datasets also carry the buffered samples
        and the dataset's own ``state_dict()`` — with DataLoader workers, each worker's
        copy's state as of the last sample taken from it, and the workers' rotation
        (``workers``), which a loader with the same ``num_workers`` resumes as is, and
        one with another through :func:`youmu.merge_states`. An iterable dataset
        without ``state_dict()`` has no mid-epoch state (a
        :class:`~youmu.errors.LoaderError` here; the trainer integrations refuse it
        when the trainer takes the loader, if the trainer saves checkpoints).
        """
        if self._current is not None:
            return self._current.state_dict()
        if self._pass.point is not None:
            return dict(self._pass.point)
        self._config = self._config.current()
        return fresh_state(self._config, self._pass.epoch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` on the next ``iter()``.

        The state must come from a ``DynamicBatchLoader`` with the same settings, world
        size and rank; anything else is a :class:`~youmu.errors.StateError` naming the
        field that does not fit.
        """
        self._config = self._config.current()
        st = check_loader_state(state, self._config)
        if self._current is not None:
            self._current.retire()
            self._current = None
        self._pass.load(st, epoch=int(st["epoch"]))

    # -- shutdown -------------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Stop the current iteration (as when a training loop breaks out early),
        waiting at most ``timeout`` seconds for the aligner thread (``None``: the
        collective ``timeout`` plus ten heartbeats); idempotent, and the next ``iter()``
        starts a new pass (youmu.state.contract's loader contract)."""
        if self._current is not None:
            self._current.close(timeout)

    def wait_finished(self, timeout: float | None = None) -> bool:
        """Wait until the current iteration's aligner has exchanged its last round.

        In join mode a rank's iteration ends when *its* data does, but its aligner keeps
        serving the other ranks until every rank is done. Call this before
        ``torch.distributed.destroy_process_group()`` (which also tears down the loader's
        Gloo group). At interpreter exit the loader waits on its own, up to ``timeout``.
        Returns whether the aligner finished.
        """
        return True if self._current is None else self._current.wait_finished(timeout)

    def __del__(self) -> None:
        # Unreachable loader (and no iterator of it left): stop an unfinished epoch so
        # its aligner does not exchange heartbeat rounds forever. Never block here: a
        # finaliser runs on whichever thread dropped the last reference.
        try:
            current = self.__dict__.get("_current")
            if current is not None:
                current.abandon()
        except Exception:  # noqa: BLE001 - best effort in a finaliser
            pass
