"""``DynamicBatchLoader``: online dynamic batching with DGAP cross-rank alignment.

Per rank, three kinds of execution context cooperate:

* **workers** (``num_workers`` DataLoader processes, or the fetcher thread itself with
  ``num_workers=0``) run the dataset's preprocessing and measure each sample
  (``length_fn``, ``token_count_fn``);
* the **fetcher thread** draws samples in order, one output *credit* each, so at
  most ``max_outstanding`` samples are fetched but not yet consumed by the trainer;
* the **aligner thread** fills the grouping buffer, runs one Gloo all_gather per
  round on the loader's own :class:`~youmu.batching.channel.GlooChannel`, aligns,
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

import atexit
import datetime
import hashlib
import json
import logging
import queue
import threading
import time
import weakref
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, IterableDataset

from youmu.batching.alignment import (
    CLOSED,
    FAILED,
    RankReport,
    decode_report,
    encode_report,
    message_bytes,
    plan_round,
    second_gather_bytes,
)
from youmu.batching.channel import DEFAULT_TIMEOUT, GlooChannel
from youmu.batching.errors import BatchingError, ChannelError, DataStallError, PeerClosedError, RankFailedError
from youmu.batching.info import IDLE, StepInfo
from youmu.batching.loss import LOSS_SCALING_MODES
from youmu.batching.metrics import BatchingMetrics, MetricsSnapshot
from youmu.batching.protocol import EmittedStep, Item, RankProtocol
from youmu.batching.sampling import rank_indices, sampler_quota

__all__ = ["DynamicBatchLoader", "STATE_FORMAT"]

log = logging.getLogger("youmu.batching")

STATE_FORMAT = "youmu.batching/1"
_MAGIC = 0x594F554D55  # "YOUMU": the first entry of the handshake row
_UNEVEN = ("stop", "pad")


# ----------------------------------------------------------------------------------------
# worker-side measurement (module level so that it pickles into spawned workers)
# ----------------------------------------------------------------------------------------
def _keep(x: Any) -> Any:
    return x


def _measure(fn: Callable[[Any], Any], sample: Any, what: str) -> int:
    value = fn(sample)
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must return an integer, got {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"{what} returned a negative count ({n})")
    return n


class _MeasuredMap:
    """``dataset[index]`` plus its length and loss tokens, keyed by sampler position."""

    def __init__(self, dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any]) -> None:
        self.dataset = dataset
        self.length_fn = length_fn
        self.token_fn = token_fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, int, Any, int, int]:
        pos, idx = key
        sample = self.dataset[idx]
        return pos, idx, sample, _measure(self.length_fn, sample, "length_fn"), _measure(self.token_fn, sample, "token_count_fn")


class _MeasuredIterable(IterableDataset):
    """An iterable dataset's samples plus their lengths and loss tokens (in workers)."""

    def __init__(self, dataset: Any, length_fn: Callable[[Any], Any], token_fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.dataset = dataset
        self.length_fn = length_fn
        self.token_fn = token_fn

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        for sample in self.dataset:
            yield sample, _measure(self.length_fn, sample, "length_fn"), _measure(self.token_fn, sample, "token_count_fn")


# ----------------------------------------------------------------------------------------
# plumbing between the threads
# ----------------------------------------------------------------------------------------
class _End:
    def __repr__(self) -> str:
        return "END"


_END = _End()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _PeerClosed:
    """Marks where a peer's early close ends this rank's iteration."""


_PEER_CLOSED = _PeerClosed()


class _Filler:
    """A step on which this rank contributes nothing (``uneven="pad"``)."""

    def __init__(self, info: StepInfo) -> None:
        self.info = info


class _Credits:
    """Output credits: one per sample fetched and not yet consumed by the trainer."""

    def __init__(self, total: int) -> None:
        self._cv = threading.Condition()
        self.total = total
        self.held = 0

    def acquire(self, timeout: float) -> bool:
        with self._cv:
            if self.held >= self.total and not self._cv.wait_for(lambda: self.held < self.total, timeout):
                return False
            self.held += 1
            return True

    def release(self, n: int = 1) -> None:
        if n <= 0:
            return
        with self._cv:
            self.held = max(self.held - n, 0)
            self._cv.notify_all()


class _Fetcher(threading.Thread):
    """Draws items from a source iterator into the fetch queue, one credit each."""

    def __init__(self, make_iter: Callable[[], Iterator[Item]], credits: _Credits, out: "queue.Queue[Any]", name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._make_iter = make_iter
        self._credits = credits
        self._out = out
        self.stop_event = threading.Event()
        self.source_wait_since: float | None = None  # set while blocked on the source

    def run(self) -> None:
        it: Iterator[Item] | None = None
        try:
            self.source_wait_since = time.monotonic()
            it = self._make_iter()
            self.source_wait_since = None
            while not self.stop_event.is_set():
                if not self._credits.acquire(timeout=0.1):
                    continue
                if self.stop_event.is_set():
                    self._credits.release()
                    return
                self.source_wait_since = time.monotonic()
                try:
                    item = next(it)
                except StopIteration:
                    self._credits.release()
                    self._out.put(_END)
                    return
                finally:
                    self.source_wait_since = None
                if self.stop_event.is_set():  # stopped while reading: nobody will take it
                    self._credits.release()
                    return
                self._out.put(item)
        except BaseException as e:  # noqa: BLE001 - forwarded to the aligner, then every rank
            self._out.put(_Failure(e))
        finally:
            self.source_wait_since = None
            it = None  # shuts DataLoader workers down

    def stalled_for(self) -> float:
        since = self.source_wait_since
        return 0.0 if since is None else time.monotonic() - since


class _RoundRecord:
    """What a resume needs about one emitting round (kept until the trainer passes it)."""

    __slots__ = ("iteration", "round", "steps", "overflow", "position", "source_state", "emitted_before", "round_after", "step_after")

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


# ----------------------------------------------------------------------------------------
# public loader
# ----------------------------------------------------------------------------------------
class DynamicBatchLoader:
    """Variable-size, length-grouped batches with the same number of steps on every rank.

    Args:
        dataset: a map-style dataset (``len`` and ``[i]``: lists, ``MixtureDataset``,
            ``RowDataset``, any ``torch.utils.data.Dataset``) or an iterable one
            (``YoumuDataset``, any ``IterableDataset``). Map-style datasets are sharded
            like ``DistributedSampler(drop_last=False)``; iterable datasets must
            shard themselves over ranks and workers (``YoumuDataset`` does).
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
        timeout: seconds any collective may wait, and the longest the data source may
            produce nothing, before every rank raises.
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

    Iterating yields ``(batch, info)`` with :class:`~youmu.batching.info.StepInfo`.
    ``loader.metrics`` holds the current iteration's :class:`BatchingMetrics`.

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
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
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
        self.timeout = float(timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout)
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

    def __iter__(self) -> "_EpochIterator":
        if self._current is not None:
            self._current._retire()
        it = _EpochIterator(self, self._epoch, self._resume)
        self._resume = None
        self._current = it
        self.metrics = it.metrics
        it._start()
        return it

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

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


# ----------------------------------------------------------------------------------------
# interpreter exit: let aligners that still serve their peers finish
# ----------------------------------------------------------------------------------------
_LIVE: "weakref.WeakSet[_EpochIterator]" = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    """At exit, a rank whose own data ended may still owe its peers the last rounds (join
    mode): wait for that, bounded by the timeout, so they do not see a reset connection.
    An iteration the program abandoned mid-way tells its peers it closed instead."""
    for it in list(_LIVE):
        try:
            if it._thread.is_alive():
                if not it._local_end and not it._end_sent:
                    it._closing.set()
                it._thread.join(it.L.timeout)
        except Exception:  # noqa: BLE001 - never fail interpreter shutdown
            pass


# ----------------------------------------------------------------------------------------
# one epoch's iteration: aligner thread + consumer side
# ----------------------------------------------------------------------------------------
class _EpochIterator:
    """Iterator over one epoch; owns the fetcher and aligner threads."""

    def __init__(self, loader: DynamicBatchLoader, epoch: int, resume: dict[str, Any] | None) -> None:
        self.L = loader
        self.epoch = epoch
        self._resume = resume
        self.metrics = BatchingMetrics()
        self._credits = _Credits(loader.max_outstanding)
        self._out: "queue.Queue[Any]" = queue.Queue()
        self._fetchq: "queue.Queue[Any]" = queue.Queue()
        self._fetcher: _Fetcher | None = None
        self._preloaded: deque[Item] = deque()
        self._failure: BaseException | None = None
        self._peer_closed: tuple[tuple[int, ...], int] | None = None
        self._closing = threading.Event()
        self._local_end = False  # the consumer received END
        self._end_sent = False
        self._records: deque[_RoundRecord] = deque()
        self._records_lock = threading.Lock()
        self._consumed: tuple[int, int, int] | None = None  # (iteration, round, step_in_round)
        self._steps_consumed = 0  # global step index + 1 of the last delivered step
        self._last_batch: Any = None
        self._have_batch = False
        self._start_state = resume if resume is not None else loader._fresh_state(epoch)
        self._final_state: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"youmu-aligner-r{loader.rank}", daemon=True)
        # aligner-side bookkeeping
        self._drained = 0  # items taken by the aligner in the current logical iteration
        self._n_pre = 0  # of which replay/overflow items (resume)
        self._position_base = 0
        self._source_state: Any = None
        self._emitted = 0  # global samples emitted (non-join quota)
        self.collectives = 0  # primary exchanges (for tests of the uniform-call invariant)
        self.second_gathers = 0
        self.rounds_log: list[tuple[str, int, bool, bool]] = []  # (action, target, changed, second gather)
        self.undelivered_at_stop: list[int] = []

    # -- thread lifecycle -----------------------------------------------------------------
    def _start(self) -> None:
        self.metrics.start()
        _LIVE.add(self)
        self._thread.start()

    def _retire(self, timeout: float | None = None) -> None:
        """Before a new iteration: stop this one if unfinished and wait for its thread."""
        if not self._local_end and self._failure is None:
            self.close()
        wait = timeout if timeout is not None else self.L.timeout + 10 * self.L.heartbeat
        self._thread.join(wait)
        if self._thread.is_alive():
            raise BatchingError(
                f"the previous iteration's aligner on rank {self.L.rank} did not finish within {wait:.0f}s "
                "(another rank is still iterating the previous epoch?)"
            )

    def close(self, timeout: float | None = None) -> None:
        """Stop early. Peers learn it at the next round (and raise if they still wanted
        batches this rank never consumed). After this rank's last batch (join mode) the
        aligner keeps serving its peers until they finish, so this does not block."""
        if self._local_end or not self._thread.is_alive():
            return
        self._closing.set()
        wait = timeout if timeout is not None else self.L.timeout + 10 * self.L.heartbeat
        self._thread.join(wait)

    def __del__(self) -> None:  # pragma: no cover - best effort when a loop breaks out
        try:
            if not self._local_end:
                self._closing.set()
        except Exception:  # noqa: BLE001
            pass

    def wait_finished(self, timeout: float | None = None) -> bool:
        """Block until the aligner has exchanged its last round; returns whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- consumer side --------------------------------------------------------------------
    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> tuple[Any, StepInfo]:
        t0 = time.perf_counter()
        idle = 0
        while True:
            if self._failure is not None:
                raise self._failure
            if self._local_end:
                raise StopIteration
            try:
                x = self._out.get(timeout=0.2)
            except queue.Empty:
                if self._peer_closed is not None and self._out.empty():
                    self._raise_peer_closed()
                if not self._thread.is_alive() and self._out.empty():
                    if self._failure is not None:
                        raise self._failure
                    raise BatchingError("the aligner thread ended without finishing the iteration")
                continue
            if x is IDLE:
                self._credits.release(1)
                idle += 1
                continue
            if idle:
                self.metrics.record_idle(idle)
                idle = 0
            if x is _END:
                self._local_end = True
                self._final_state = self._done_state()
                raise StopIteration
            if isinstance(x, _Failure):
                raise x.exc
            if x is _PEER_CLOSED:
                self._raise_peer_closed()
            if isinstance(x, _Filler):
                info = x.info
                if self._peer_closed is not None and info.step >= self._peer_closed[1]:
                    self._raise_peer_closed()
                batch = self._filler_batch()
            else:
                batch, info = x
                self._credits.release(1)
                if self._peer_closed is not None and info.step >= self._peer_closed[1]:
                    self._raise_peer_closed()
                self._last_batch = batch
                self._have_batch = True
            self._consumed = (info.iteration, info.round, info.step_in_round)
            self._steps_consumed = info.step + 1
            self._trim_records()
            now = time.perf_counter()
            self.metrics.record_step(info, now=now, waited=now - t0)
            if self.L.callback is not None:
                self.L.callback(info, self.metrics.snapshot(now))
            return batch, info

    def _filler_batch(self) -> Any:
        if self.L.pad_batch is not None:
            return self.L.pad_batch()
        if not self._have_batch:
            raise BatchingError(
                f"rank {self.L.rank} has no batch to repeat as a filler step (it received no data); "
                "pass pad_batch=... to DynamicBatchLoader"
            )
        return self._last_batch

    def _raise_peer_closed(self) -> None:
        assert self._peer_closed is not None
        ranks, steps = self._peer_closed
        raise PeerClosedError(
            f"rank(s) {list(ranks)} stopped iterating after {steps} steps, but rank {self.L.rank} asked for more "
            "(a training loop exited early on some ranks only?)",
            ranks,
        )

    # -- state ----------------------------------------------------------------------------
    def _trim_records(self) -> None:
        with self._records_lock:
            while len(self._records) > 1:
                r0 = self._records[0]
                if self._consumed is not None and (r0.iteration, r0.round) < self._consumed[:2]:
                    self._records.popleft()
                else:
                    break

    def _done_state(self) -> dict[str, Any]:
        st = self.L._fresh_state(self.epoch)
        st.update(done=True, step=self._steps_consumed, emitted=self._emitted)
        with self._records_lock:
            if self._records:
                rec = self._records[-1]
                st.update(iteration=rec.iteration, round=rec.round_after, step=max(rec.step_after, self._steps_consumed))
        return st

    def state_dict(self) -> dict[str, Any]:
        if self._final_state is not None:
            return dict(self._final_state)
        if self._consumed is None:
            return dict(self._start_state)
        if self.L.kind == "iterable" and (self.L.num_workers > 0 or not hasattr(self.L.dataset, "state_dict")):
            raise BatchingError(
                "a mid-epoch state of an iterable dataset needs num_workers=0 and a dataset with "
                "state_dict()/load_state_dict() (e.g. YoumuDataset); map-style datasets resume with any num_workers"
            )
        with self._records_lock:
            rec = next((r for r in self._records if (r.iteration, r.round) == self._consumed[:2]), None)
        if rec is None:  # pragma: no cover - records are appended before their steps are queued
            raise BatchingError("internal error: no record for the current round")
        j = self._consumed[2]
        done_steps = rec.steps[: j + 1]
        replay = rec.steps[j + 1 :]
        st = self.L._fresh_state(self.epoch)
        st.update(
            iteration=rec.iteration,
            round=rec.round_after,
            step=rec.step_after,
            emitted=rec.emitted_before + sum(info.global_num_samples for _, info in done_steps),
            replay=[{"keys": [it.key for it in items], "info": info.as_dict()} for items, info in replay],
            overflow=[it.key for it in rec.overflow],
            position=rec.position,
            source_state=rec.source_state,
        )
        if self.L.kind == "iterable":
            payload_items = [it for items, _ in replay for it in items] + list(rec.overflow)
            st["payloads"] = {it.key: (it.sample, it.length, it.tokens) for it in payload_items}
        return st

    # -- aligner thread -------------------------------------------------------------------
    def _run(self) -> None:
        channel = self.L.channel
        wait = self.L.timeout
        if not channel.lease(wait):
            self._fail(BatchingError(f"the loader's channel stayed busy for {wait:.0f}s (another iteration on it?)"))
            return
        try:
            self._run_leased()
        finally:
            channel.release_lease()

    def _run_leased(self) -> None:
        try:
            start = self._handshake()
            iteration = start["iteration"]
            resume = self._resume if not start["done"] else None
            if start["done"]:
                self._run_done(start)
            else:
                while True:
                    first_step = int(start["step"])
                    outcome = self._run_iteration(iteration, start, resume)
                    resume = None
                    if outcome != "stop":
                        break
                    if self._last_step == first_step:
                        # the same on every rank: chaining again could never reach the quota
                        raise BatchingError(
                            "non-join mode: a logical iteration ended before any step (a rank has no data?); "
                            "use join=True when ranks may hold no samples"
                        )
                    iteration += 1
                    start = dict(start, round=0, step=self._last_step, emitted=self._emitted)
            if self._peer_closed is not None:
                self._out.put(_PEER_CLOSED)
            elif self._failure is None and not self._end_sent:
                self._end_sent = True
                self._out.put(_END)
        except BaseException as e:  # noqa: BLE001 - every failure reaches the trainer
            self._fail(e)
        finally:
            self._stop_fetcher(release=True)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._out.put(_Failure(exc))

    def _exchange(self, row: list[int]) -> list[list[int]]:
        rows = self.L.channel.all_gather_rows(row)
        return rows

    def _handshake(self) -> dict[str, Any]:
        """Check that every rank runs the same settings and epoch; agree on counters."""
        s = self._start_state
        row = [
            _MAGIC,
            self.L.config_fingerprint(),
            self.epoch,
            int(s["iteration"]),
            int(s["round"]),
            int(s["step"]),
            int(s["emitted"]),
            int(bool(s["done"])),
        ]
        rows = self._exchange(row)
        if any(r[0] != _MAGIC for r in rows):
            raise BatchingError("a peer is not a youmu DynamicBatchLoader of this version (handshake mismatch)")
        if len({r[1] for r in rows}) != 1:
            raise BatchingError(
                "ranks use different DynamicBatchLoader settings (token_budget, buffer_size, join, loss_scaling, "
                "seed, dataset size, ...); they must match on every rank"
            )
        if len({r[2] for r in rows}) != 1:
            raise BatchingError(f"ranks iterate different epochs: {[r[2] for r in rows]} (call set_epoch on every rank)")
        live = [r for r in rows if not r[7]] or rows
        if len({r[3] for r in live}) != 1:
            raise BatchingError("ranks resumed from different logical iterations (states from different steps?)")
        return {
            "iteration": live[0][3],
            "round": max(r[4] for r in rows),
            "step": max(r[5] for r in rows),
            "emitted": max(r[6] for r in rows),
            "done": bool(s["done"]),
        }

    # -- sources --------------------------------------------------------------------------
    def _map_pairs(self, iteration: int, resume: dict[str, Any] | None) -> tuple[list[tuple[int, int]], int]:
        L = self.L
        indices = rank_indices(
            len(L.dataset), L.world_size, L.rank, seed=L.seed, epoch=self.epoch, iteration=iteration, shuffle=L.shuffle
        )
        if resume is None:
            return list(enumerate(indices)), 0
        pre = [k for step in resume["replay"] for k in step["keys"]] + list(resume["overflow"])
        start = int(resume["position"])
        if any(not 0 <= k < len(indices) for k in pre) or not 0 <= start <= len(indices):
            raise ValueError("the resume state does not fit this dataset (positions out of range)")
        return [(k, indices[k]) for k in pre] + [(k, indices[k]) for k in range(start, len(indices))], len(pre)

    def _make_source(self, iteration: int, resume: dict[str, Any] | None) -> Callable[[], Iterator[Item]]:
        L = self.L
        measured_kw = dict(length_fn=L.length_fn, token_fn=L.token_count_fn)
        if L.kind == "map":
            pairs, n_pre = self._map_pairs(iteration, resume)
            self._n_pre = n_pre
            self._position_base = int(resume["position"]) if resume is not None else 0
            measured = _MeasuredMap(L.dataset, **measured_kw)

            def make_map() -> Iterator[Item]:
                if L.num_workers == 0:
                    rows: Iterator[Any] = (measured[p] for p in pairs)
                else:
                    rows = iter(self._dataloader(measured, sampler=pairs))
                return (Item(pos, idx, sample, length, tokens) for pos, idx, sample, length, tokens in rows)

            return make_map

        # iterable
        self._n_pre = 0
        start_count = 0
        if resume is not None:
            payloads = resume.get("payloads") or {}
            keys = [k for step in resume["replay"] for k in step["keys"]] + list(resume["overflow"])
            for k in keys:
                sample, length, tokens = payloads[k]
                self._preloaded.append(Item(k, None, sample, length, tokens))
            self._n_pre = len(keys)
            start_count = int(resume["position"])
            if resume.get("source_state") is not None:
                L.dataset.load_state_dict(resume["source_state"])
        self._position_base = start_count
        self._source_state = resume.get("source_state") if resume is not None else None
        stateful = L.num_workers == 0 and hasattr(L.dataset, "state_dict")
        ds = L.dataset

        def make_iterable() -> Iterator[Item]:
            if L.num_workers == 0:

                def gen() -> Iterator[Item]:
                    k = start_count
                    for sample in ds:
                        state = ds.state_dict() if stateful else None
                        yield Item(
                            k, None, sample,
                            _measure(L.length_fn, sample, "length_fn"),
                            _measure(L.token_count_fn, sample, "token_count_fn"),
                            state,
                        )
                        k += 1

                return gen()
            rows = iter(self._dataloader(_MeasuredIterable(ds, **measured_kw)))
            return (Item(k, None, s, n, t) for k, (s, n, t) in enumerate(rows, start=start_count))

        return make_iterable

    def _dataloader(self, dataset: Any, sampler: Sequence[Any] | None = None) -> DataLoader:
        L = self.L
        kw: dict[str, Any] = dict(
            batch_size=None,
            collate_fn=_keep,
            num_workers=L.num_workers,
            worker_init_fn=L.worker_init_fn,
            multiprocessing_context=L.multiprocessing_context,
        )
        if L.prefetch_factor is not None:
            kw["prefetch_factor"] = L.prefetch_factor
        if sampler is not None:
            kw["sampler"] = sampler
        return DataLoader(dataset, **kw)

    def _start_fetcher(self, make_iter: Callable[[], Iterator[Item]]) -> None:
        self._fetchq = queue.Queue()
        self._fetcher = _Fetcher(make_iter, self._credits, self._fetchq, name=f"youmu-fetcher-r{self.L.rank}")
        self._fetcher.start()

    def _stop_fetcher(self, release: bool) -> None:
        """Stop the fetcher; with ``release``, hand back the credits of what it fetched."""
        f = self._fetcher
        if f is None:
            return
        f.stop_event.set()
        f.join(timeout=5.0)
        if release:
            n = 0
            while True:
                try:
                    x = self._fetchq.get_nowait()
                except queue.Empty:
                    break
                if isinstance(x, Item):
                    n += 1
            self._credits.release(n)
        self._fetcher = None

    def _take(self, timeout: float) -> Any:
        """Next fetched item (replay/overflow of a resume first), or None on timeout."""
        if self._preloaded:
            return self._preloaded.popleft()
        try:
            return self._fetchq.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def _note_drained(self, item: Item) -> None:
        """Track where a resume would restart the source (only items past the
        replay/overflow of a previous resume advance it)."""
        self._drained += 1
        if self._drained > self._n_pre:
            self._position_base = item.key + 1
            if item.state is not None:
                self._source_state = item.state

    # -- one logical iteration ------------------------------------------------------------
    def _run_done(self, start: dict[str, Any]) -> None:
        """A rank resumed after its data ran out (join mode): serve peers until all finish."""
        self._end_sent = True
        self._out.put(_END)
        proto = self._protocol(start["iteration"], start)
        proto.exhausted = True
        while self._round(proto) is None:
            pass

    def _protocol(self, iteration: int, start: dict[str, Any]) -> RankProtocol:
        L = self.L
        return RankProtocol(
            rank=L.rank, world_size=L.world_size, token_budget=L.token_budget, buffer_size=L.buffer_size,
            join=L.join, loss_scaling=L.loss_scaling, seed=L.seed, epoch=self.epoch, iteration=iteration,
            shuffle_steps=L.shuffle_steps, round_id=int(start["round"]), step=int(start["step"]),
        )

    def _run_iteration(self, iteration: int, start: dict[str, Any], resume: dict[str, Any] | None) -> str:
        L = self.L
        proto = self._protocol(iteration, start)
        self._emitted = int(start["emitted"])
        self._last_step = proto.step
        self._drained = 0
        self._preloaded.clear()
        self._start_fetcher(self._make_source(iteration, resume))
        if resume is not None:
            self._replay(proto, resume, iteration)
        while True:
            outcome = self._round(proto)
            if outcome is not None:
                return outcome

    def _replay(self, proto: RankProtocol, resume: dict[str, Any], iteration: int) -> None:
        """Emit the rest of the round a checkpoint interrupted, exactly as planned."""
        replay = resume["replay"]
        steps: list[EmittedStep] = []
        for entry in replay:
            items = tuple(self._take_item() for _ in entry["keys"])
            info = StepInfo(**{**entry["info"], "sample_indices": tuple(entry["info"]["sample_indices"])})
            steps.append(EmittedStep(items, info))
        for _ in resume["overflow"]:
            proto.add(self._take_item())
        if steps:
            rec = _RoundRecord(
                iteration=iteration, round=steps[0].info.round, steps=[(s.items, s.info) for s in steps],
                overflow=list(proto.buffer), position=self._position_base, source_state=self._source_state,
                emitted_before=self._emitted, round_after=proto.round_id, step_after=proto.step,
            )
            with self._records_lock:
                self._records.append(rec)
            for st in steps:
                self._emit_step(st)
                if not self.L.join:
                    self._emitted += st.info.global_num_samples

    def _take_item(self) -> Item:
        deadline = time.monotonic() + self.L.timeout
        while True:
            x = self._take(min(self.L.heartbeat, max(deadline - time.monotonic(), 0.0)))
            if isinstance(x, Item):
                self._note_drained(x)
                return x
            if isinstance(x, _Failure):
                raise x.exc
            if x is _END:
                raise BatchingError("the data source ended while restoring a checkpoint (dataset changed?)")
            if time.monotonic() > deadline:
                raise DataStallError(f"no sample within {self.L.timeout:.0f}s while restoring a checkpoint")

    def _fill(self, proto: RankProtocol) -> BaseException | None:
        """Drain fetched items into the buffer until ready or the heartbeat expires."""
        deadline = time.monotonic() + self.L.heartbeat
        while not proto.ready and not self._closing.is_set():
            x = self._take(deadline - time.monotonic())
            if x is None:
                f = self._fetcher
                if f is not None and f.stalled_for() > self.L.timeout:
                    return DataStallError(
                        f"rank {self.L.rank}: the data source produced nothing for {f.stalled_for():.0f}s "
                        f"(timeout {self.L.timeout:.0f}s)"
                    )
                if time.monotonic() >= deadline:
                    break
                continue
            if x is _END:
                proto.exhausted = True
            elif isinstance(x, _Failure):
                return x.exc
            else:
                self._note_drained(x)
                proto.add(x)
        self.metrics.record_outstanding(self._credits.held)
        return None

    def _round(self, proto: RankProtocol) -> str | None:
        """One exchange. Returns an outcome when the logical iteration ends, else None."""
        L = self.L
        local_error: BaseException | None = None
        if not proto.finished:
            local_error = self._fill(proto)
        self._maybe_local_end(proto)
        if local_error is not None:
            report = RankReport(0, FAILED)
        elif self._closing.is_set() and not self._local_end and not self._end_sent:
            report = RankReport(self._steps_consumed, CLOSED)
        else:
            tg = time.perf_counter()
            report = proto.report()
            self.metrics.record_grouping(time.perf_counter() - tg)
        row = encode_report(report, L.buffer_size)
        t0 = time.perf_counter()
        rows = self._exchange(row)
        t1 = time.perf_counter()
        self.collectives += 1
        plan = plan_round([decode_report(r, L.buffer_size) for r in rows], join=L.join)
        bytes_primary = message_bytes(L.world_size, L.buffer_size)

        if plan.action == "fail":
            self.metrics.record_round("fail", bytes_primary, t1 - t0)
            self.rounds_log.append(("fail", 0, False, False))
            if local_error is not None:
                raise local_error
            raise RankFailedError(f"rank(s) {list(plan.ranks)} failed (their own error is raised there)", plan.ranks)
        if plan.action == "close":
            self.metrics.record_round("close", bytes_primary, t1 - t0)
            self.rounds_log.append(("close", 0, False, False))
            if L.rank not in plan.ranks:
                steps = max(plan.reports[r].capacity for r in plan.ranks)
                self._peer_closed = (plan.ranks, steps)
            self._closing.set()
            return "close"
        if plan.action == "finish":
            self.metrics.record_round("finish", bytes_primary, t1 - t0)
            self.rounds_log.append(("finish", 0, False, False))
            return "finish"
        if plan.action == "stop":
            self.metrics.record_round("stop", bytes_primary, t1 - t0)
            self.rounds_log.append(("stop", 0, False, False))
            # Lemma 4: fetched but not delivered in this logical iteration (buffer + fetch queue)
            self.undelivered_at_stop.append(len(proto.buffer) + self._fetchq.qsize() + len(self._preloaded))
            self._credits.release(len(proto.buffer) + len(self._preloaded))
            proto.buffer = []
            self._preloaded.clear()
            self._stop_fetcher(release=True)
            self._last_step = proto.step
            return "stop"
        if plan.action == "skip":
            self.metrics.record_round("skip", bytes_primary, t1 - t0)
            self.rounds_log.append(("skip", 0, False, False))
            return None

        # emit
        kept = proto.align(plan)
        gathered = None
        second = proto.needs_token_gather(plan)
        t2 = time.perf_counter()
        if second:
            vec = RankProtocol.post_tokens(kept) if kept else [0] * plan.target
            gathered = self._exchange(vec)
            self.second_gathers += 1
        t3 = time.perf_counter()
        steps = proto.steps(plan, kept, gathered)
        bytes_total = bytes_primary + (second_gather_bytes(L.world_size, plan.target) if second else 0)
        own = plan.reports[L.rank].n_groups
        self.metrics.record_round(
            "emit", bytes_total, (t1 - t0) + (t3 - t2), align_s=(t2 - t1) + (time.perf_counter() - t3),
            second_gather=second, splits=max(plan.target - own, 0) if own > 0 else 0,
            recirculated=len(proto.buffer) if own > plan.target else 0,
        )
        self.rounds_log.append(("emit", plan.target, plan.changed, second))
        quota_hit = False
        if not L.join:
            quota = L.quota if L.quota is not None else len(L.dataset)
            for j, st in enumerate(steps):
                self._emitted += st.info.global_num_samples
                if self._emitted >= quota:
                    steps = steps[: j + 1]
                    quota_hit = True
                    break
        rec = _RoundRecord(
            iteration=proto.iteration, round=proto.round_id - 1, steps=[(s.items, s.info) for s in steps],
            overflow=list(proto.buffer), position=self._position_base, source_state=self._source_state,
            emitted_before=self._emitted - sum(s.info.global_num_samples for s in steps) if not L.join else 0,
            round_after=proto.round_id, step_after=proto.step,
        )
        with self._records_lock:
            self._records.append(rec)
        for st in steps:
            self._emit_step(st)
        self._last_step = proto.step
        if quota_hit:
            return "quota"
        self._maybe_local_end(proto)
        return None

    def _maybe_local_end(self, proto: RankProtocol) -> None:
        """Join mode, ``uneven="stop"``: end the local iteration as soon as this rank has
        nothing left; the aligner keeps serving its peers."""
        if self.L.join and self.L.uneven == "stop" and proto.finished and not self._end_sent:
            self._end_sent = True
            self._out.put(_END)

    def _emit_step(self, st: EmittedStep) -> None:
        L = self.L
        if not st.items:
            if L.join and L.uneven == "pad":
                self._out.put(_Filler(replace(st.info, is_padding=True)))
            return
        t0 = time.perf_counter()
        samples = [it.sample for it in st.items]
        batch = L.collate_fn(samples) if L.collate_fn is not None else samples
        self.metrics.record_collate(time.perf_counter() - t0)
        for _ in range(len(st.items) - 1):
            self._out.put(IDLE)
        self._out.put((batch, st.info))

