"""``DynamicBatchLoader``: online dynamic batching with DGAP cross-rank alignment.

Per rank, three kinds of execution context cooperate:

* **workers** (``num_workers`` DataLoader processes, or the fetcher thread itself with
  ``num_workers=0``) run the dataset's preprocessing and measure each sample
  (``length_fn``, ``token_count_fn``);
* the **fetcher thread** draws samples in order, one output *credit* each, so at
  most ``max_outstanding`` samples are fetched but not yet consumed by the trainer;
* the **aligner thread** fills the grouping buffer, runs one Gloo all_gather per
  round on the loader's own :class:`~youmu.dist.GlooChannel`, aligns,
  collates, and answers each emitted sample's output slot: one slot carries the
  batch, the others carry :data:`~youmu.batching.info.IDLE`;
* the **trainer's thread** iterates ``(batch, info)``; skipping an IDLE slot or
  taking a batch hands credits back.

Grouping and alignment overlap training. A round fires only when the buffer is full
(or the data is exhausted), so the batches are a pure function of the seed, the
epoch and the data, never of timing; a rank still waiting for data tells the others
so every ``heartbeat`` seconds (a skip round), which keeps each collective's timeout
short without penalising slow preprocessing.

Example::

    loader = DynamicBatchLoader(dataset, token_budget=16384, length_fn=lambda s: len(s["input_ids"]),
                                collate_fn=pad_collate, num_workers=4)
    with join_uneven([ddp_model]):          # join mode: ranks finish at different steps
        for batch, info in loader:
            loss = model(**batch).loss * info.loss_scale
            loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any, Callable

from torch.utils.data import IterableDataset

from youmu.dist.channel import DEFAULT_TIMEOUT, GlooChannel
from youmu.batching.epoch import _EpochHandle, _EpochIterator
from youmu.batching.info import StepInfo
from youmu.batching.loss import LOSS_SCALING_MODES
from youmu.batching.metrics import BatchingMetrics, MetricsSnapshot

__all__ = ["DynamicBatchLoader", "STATE_FORMAT"]

STATE_FORMAT = "youmu.batching/1"
_UNEVEN = ("stop", "pad")


# ----------------------------------------------------------------------------------------
# public loader
# ----------------------------------------------------------------------------------------
class DynamicBatchLoader:
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
            <= token_budget`` padded tokens (Eq. 1).
        length_fn: realised length of a sample after preprocessing (e.g.
            ``lambda s: len(s["input_ids"])``). Runs in the workers.
        collate_fn: turns a list of samples into a batch (runs in the aligner thread);
            ``None`` yields the list itself.
        buffer_size: samples grouped per round (1024 in the paper).
        num_workers: DataLoader worker processes for preprocessing (0: the fetcher
            thread reads the dataset itself).
        prefetch_factor: DataLoader prefetch per worker.
        join: join mode (default): ranks keep exchanging until every rank has drained
            its data, so every sample is emitted exactly once; ranks finish at
            different steps (use :func:`~youmu.batching.integrations.join_uneven` or
            ``uneven="pad"``). Non-join: the first rank to run out ends the logical
            iteration for all, and the loader chains iterations (reshuffled for
            map-style datasets; a fresh ``iter(dataset)`` for iterable ones) until
            ``quota`` samples were emitted.
        loss_scaling: ``"exact"``, ``"approx"``, ``"sample"`` or ``"none"`` (see
            :mod:`youmu.batching.loss`); sets ``info.loss_scale``.
        token_count_fn: loss tokens of a sample (``t_r`` of Eq. 2); default
            ``length_fn``. For causal LMs with masked prompts use
            :class:`~youmu.batching.loss.label_token_count`.
        group: a :class:`GlooChannel` or a Gloo process group to exchange on. By
            default a new Gloo group over the initialised default group (created here,
            collectively: construct the loader at the same point on every rank), or
            single-process when torch.distributed is not initialised.
        timeout: seconds any collective may wait before every rank raises (also the
            longest the interpreter-exit hook waits for peers in join mode's tail).
        data_timeout: the longest the data source may produce nothing before every
            rank raises :class:`~youmu.batching.errors.DataStallError` (default
            ``timeout``). A stalled rank keeps exchanging heartbeat rounds meanwhile,
            so this may be shorter or longer than ``timeout``.
        shuffle, seed: shuffle map-style datasets like ``DistributedSampler``.
        quota: non-join mode's global sample quota ``N`` (default ``len(dataset)``).
        max_outstanding: credits per rank (samples fetched and not yet consumed);
            default ``2 * buffer_size`` so the next round fills while the trainer
            consumes the previous one. Must be at least ``buffer_size``.
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
        pad_sampler: map-style datasets only. ``False`` (default): the shuffled
            indices strided over ranks without padding, so every sample is emitted
            exactly once per epoch; ranks then hold ``floor(N/W)`` or ``ceil(N/W)``
            samples, which join mode absorbs (ranks finish at different steps) and
            non-join mode's quota covers. ``True`` (the paper's
            ``DistributedSampler(drop_last=False)``): every rank draws ``ceil(N/W)``
            indices, the tail padded with repeats, so ``P = W·ceil(N/W) − N`` samples
            are emitted twice per epoch.

    Iterating yields ``(batch, info)`` with :class:`~youmu.batching.info.StepInfo`.
    ``loader.metrics`` holds the current iteration's :class:`BatchingMetrics`; its
    summary is logged (``logging.getLogger("youmu.batching")``, INFO) when the
    iteration ends on this rank.

    Shutdown: a loop that breaks out early should call :meth:`close` (or let the
    loader go: dropping the last reference closes it, and so does interpreter exit).
    In join mode a rank whose data ended keeps serving its peers' last rounds; call
    :meth:`wait_finished` before ``destroy_process_group()``. At exit the loader waits
    for that at most ``timeout`` seconds, then closes (the peers raise
    :class:`~youmu.batching.errors.PeerClosedError`).

    Example:
        >>> data = [{"id": i, "input_ids": list(range(n))} for i, n in enumerate((5, 9, 3, 7, 2, 8))]
        >>> loader = DynamicBatchLoader(data, token_budget=16, length_fn=lambda s: len(s["input_ids"]),
        ...                             buffer_size=4, num_workers=0)
        >>> steps = [[s["id"] for s in batch] for batch, info in loader]
        >>> sorted(i for ids in steps for i in ids)
        [0, 1, 2, 3, 4, 5]
        >>> all(len(ids) * max(len(data[i]["input_ids"]) for i in ids) <= 16 for ids in steps if len(ids) > 1)
        True
    """

    def __init__(
        self,
        dataset: Any,
        token_budget: int,
        length_fn: Callable[[Any], int],
        collate_fn: Callable[[list[Any]], Any] | None = None,
        *,
        buffer_size: int = 1024,
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
    ) -> None:
        if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
            raise ValueError(f"token_budget must be a positive int, got {token_budget!r}")
        if not callable(length_fn):
            raise TypeError("length_fn must be callable (sample -> realised length)")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError("collate_fn must be callable or None")
        if token_count_fn is not None and not callable(token_count_fn):
            raise TypeError("token_count_fn must be callable or None")
        if not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if prefetch_factor is not None and num_workers == 0:
            raise ValueError("prefetch_factor needs num_workers > 0")
        if loss_scaling not in LOSS_SCALING_MODES:
            raise ValueError(f"loss_scaling must be one of {LOSS_SCALING_MODES}, got {loss_scaling!r}")
        if uneven not in _UNEVEN:
            raise ValueError(f"uneven must be one of {_UNEVEN}, got {uneven!r}")
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if data_timeout is not None and not data_timeout > 0:
            raise ValueError(f"data_timeout must be positive, got {data_timeout!r}")
        if not isinstance(pad_sampler, bool):
            raise TypeError(f"pad_sampler must be a bool, got {pad_sampler!r}")
        if not 0 < heartbeat < timeout:
            raise ValueError(f"heartbeat must be in (0, timeout), got {heartbeat!r}")
        if max_outstanding is None:
            max_outstanding = 2 * buffer_size
        if max_outstanding < buffer_size:
            raise ValueError(
                f"max_outstanding ({max_outstanding}) must be >= buffer_size ({buffer_size}): "
                "a round needs a full buffer of credits"
            )
        if isinstance(dataset, IterableDataset) or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            if not hasattr(dataset, "__iter__"):
                raise TypeError("dataset must be map-style (len + __getitem__) or iterable")
            self._kind = "iterable"
        else:
            self._kind = "map"
        if not join and self._kind != "map" and quota is None:
            raise ValueError(
                "non-join mode chains passes until a global sample quota: pass quota=N with an iterable dataset "
                "(its len(), if any, is usually per rank)"
            )
        if quota is not None:
            if join:
                raise ValueError("quota applies to non-join mode only (join mode emits every sample exactly once)")
            if quota < 1:
                raise ValueError(f"quota must be >= 1, got {quota}")

        self.dataset = dataset
        self.token_budget = token_budget
        self.length_fn = length_fn
        self.collate_fn = collate_fn
        self.token_count_fn = token_count_fn or length_fn
        self.buffer_size = buffer_size
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.join = join
        self.loss_scaling = loss_scaling
        self.timeout = float(timeout)
        self.data_timeout = float(data_timeout) if data_timeout is not None else self.timeout
        self.shuffle = shuffle
        self.seed = int(seed)
        self.quota = quota
        self.max_outstanding = max_outstanding
        self.shuffle_steps = shuffle_steps
        self.uneven = uneven
        self.pad_batch = pad_batch
        self.callback = callback
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.heartbeat = float(heartbeat)
        self.pad_sampler = pad_sampler

        self.channel = self._make_channel(group)
        self.rank = self.channel.rank
        self.world_size = self.channel.world_size
        self.metrics = BatchingMetrics()
        self._epoch = 0
        self._resume: dict[str, Any] | None = None
        self._current: _EpochIterator | None = None

    # -- set-up ---------------------------------------------------------------------------
    def _make_channel(self, group: Any) -> GlooChannel:
        if isinstance(group, GlooChannel):
            return group
        if group is not None:
            return GlooChannel.from_process_group(group, timeout=self.timeout)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return GlooChannel.from_default_group(timeout=self.timeout)
        return GlooChannel.local()

    @property
    def kind(self) -> str:
        """``"map"`` or ``"iterable"``."""
        return self._kind

    @property
    def epoch(self) -> int:
        return self._epoch

    def config_fingerprint(self) -> int:
        """63-bit hash of the settings every rank must share (checked at each start)."""
        cfg = {
            "token_budget": self.token_budget,
            "buffer_size": self.buffer_size,
            "join": self.join,
            "loss_scaling": self.loss_scaling,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "quota": self.quota,
            "shuffle_steps": self.shuffle_steps,
            "uneven": self.uneven,
            "pad_sampler": self.pad_sampler,
            "kind": self._kind,
            "n": len(self.dataset) if self._kind == "map" else None,
            "world_size": self.world_size,
        }
        digest = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    # -- epochs and state -----------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch``. A loaded state for the same epoch is kept."""
        epoch = int(epoch)
        if self._resume is not None and int(self._resume["epoch"]) != epoch:
            self._resume = None
        self._epoch = epoch
        if self._kind == "iterable" and hasattr(self.dataset, "set_epoch") and self._resume is None:
            self.dataset.set_epoch(epoch)

    def __iter__(self) -> "_EpochHandle":
        if self._current is not None:
            self._current._retire()
        it = _EpochIterator(self, self._epoch, self._resume)
        self._resume = None
        self._current = it
        self.metrics = it.metrics
        it._start()
        return _EpochHandle(self, it)

    def state_dict(self) -> dict[str, Any]:
        """Resume point of this rank: a resumed epoch emits exactly the samples not
        yet delivered, in the same batches as an uninterrupted run.

        Call it on every rank at the same step (as for model checkpoints). Map-style
        datasets need only integers; iterable datasets also carry the buffered samples
        and the dataset's own ``state_dict()`` (``num_workers=0`` only).
        """
        if self._current is not None:
            return self._current.state_dict()
        if self._resume is not None:
            return dict(self._resume)
        return self._fresh_state(self._epoch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` on the next ``iter()`` (same world size)."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a {STATE_FORMAT} state (format={state.get('format')!r})")
        for key, mine in (("world_size", self.world_size), ("rank", self.rank), ("kind", self._kind)):
            if state.get(key) != mine:
                raise ValueError(f"state was saved with {key}={state.get(key)!r} but this loader has {mine!r}")
        if state.get("config") != self.config_fingerprint():
            raise ValueError("state was saved with different loader settings (token_budget, buffer_size, join, ...)")
        if self._current is not None:
            self._current._retire()
            self._current = None
        self._resume = dict(state)
        self._epoch = int(state["epoch"])
        if self._kind == "iterable" and state.get("source_state") is not None:
            if not hasattr(self.dataset, "load_state_dict"):
                raise ValueError("the state holds a dataset state but the dataset has no load_state_dict")

    def _fresh_state(self, epoch: int) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "kind": self._kind,
            "world_size": self.world_size,
            "rank": self.rank,
            "config": self.config_fingerprint(),
            "epoch": epoch,
            "iteration": 0,
            "round": 0,
            "step": 0,
            "emitted": 0,
            "done": False,
            "replay": [],
            "overflow": [],
            "position": 0,
            "source_state": None,
            "payloads": {},
        }

    def close(self) -> None:
        """Stop the current iteration (as when a training loop breaks out early)."""
        if self._current is not None:
            self._current.close()

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
                current._abandon()
        except Exception:  # noqa: BLE001 - best effort in a finaliser
            pass


