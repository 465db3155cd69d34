"""``BalancedLoader``: per-step global batches, balanced over ranks and micro-batches.

Every step, on every rank:

1. take this rank's share of the step's **global batch** from its own stream —
   ``global_batch_size`` samples or ``token_budget`` tokens over all ranks (or, with a
   ``{name: stream}`` source, each source's exact count from the mixing schedule;
   or, with ``reorder_only``, ``num_microbatches`` formed micro-batches);
2. measure each sample (document lengths, loss tokens) and **all-gather the
   metadata** on the loader's Gloo channel
   (:class:`~youmu.dist.GlooChannel`);
3. compute the **plan** — a pure function of the gathered metadata and the step, so
   every rank computes the same one (:class:`~youmu.planning.planner.Planner`);
4. **exchange the samples** that the plan moves to another rank (pickled, one
   all-gather) and keep those that fit in no micro-batch for the next step;
5. yield this rank's ``num_microbatches`` micro-batches, in slot order, each with a
   :class:`MicroBatchInfo` whose ``loss_scale`` makes the gradients exact: multiply
   the micro-batch's mean per-token loss by it, sum over micro-batches (gradient
   accumulation), and DDP's average over ranks is the per-token mean over the whole
   global batch, ``Σ loss / T``, however the plan split the tokens.

A background thread runs steps 1–4 ``prefetch`` steps ahead of the trainer. Every
rank runs the same number of steps and gets the same number of micro-batches per
step; a slot left empty (tiny final steps) repeats a batch with ``loss_scale = 0``
and ``is_padding = True``, so DDP's collectives stay matched.

Scope: one loader per data-parallel rank (the channel spans the DP group; TP/PP peers
of a rank consume the same micro-batches, e.g. by broadcast). Samples travel between
ranks pickled over Gloo (an all-gather: each rank receives every moved sample's bytes
and unpickles only its own).

Resuming mid-epoch: ``state_dict()`` records the next step and micro-batch; a new
loader with the same arguments and ``load_state_dict(state)`` continues with exactly
the micro-batches the uninterrupted run would have yielded next (same plans, same
samples). Two ways, chosen by ``resume_mode``:

* ``"state"`` — every source is *stateful* (``state_dict``/``load_state_dict``, as
  :class:`~youmu.torch.YoumuDataset`, :class:`~youmu.torch.MapStream`,
  :class:`~youmu.batching.loader.DynamicBatchLoader` or torchdata's
  ``StatefulDataLoader`` are): the state holds each source's own state at the step
  boundary plus the few samples this rank already held then (carried over for
  capacity or budget, or left over from a flattened ``DynamicBatchLoader`` step), so a
  resume reads nothing twice. The state is per rank (save and load it on every rank).
* ``"replay"`` — any re-iterable source: the state is a few integers; the new loader,
  given *fresh* streams, replays the plans of the earlier steps (reading those samples
  again and gathering their metadata, moving and collating none). Cost: reading the
  consumed data once more.

``"auto"`` (default) picks ``"state"`` when every source is stateful, and saves replay
states from the first step a source cannot save a mid-epoch state (e.g. a
``DynamicBatchLoader`` over a stateless iterable). At the first step the ranks check
that they resume from the same point with the same settings (a clear error rather
than mismatched collectives) and restore only if every rank can; otherwise all
replay. ``collate_fn`` must not modify samples in place: a state may still hold them.

Example (one process; with several, give each rank a channel)::

    loader = BalancedLoader(my_rank_stream, num_microbatches=4, token_budget=4 * 8192 * world,
                            capacity=8192, cost="llama-12b", collate_fn=pack_microbatch)
    for batch, info in loader:
        loss = model(**batch).loss * info.loss_scale
        loss.backward()
        if info.is_last:
            opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import pickle
import queue
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from youmu._args import bool_arg, choice_arg, float_arg, index_of, int_arg, opt_int_arg
from youmu.planning.planner import Planner, SampleMeta, StepPlan
from youmu.planning.schedule import MixingSchedule, MixtureSchedule, as_schedule

__all__ = ["BalancedLoader", "MicroBatchInfo", "default_docs", "STATE_FORMAT", "RESUME_MODES"]

#: tag of :meth:`BalancedLoader.state_dict` (bumped when the layout changes)
STATE_FORMAT = "youmu.planning.BalancedLoader/2"
RESUME_MODES = ("auto", "state", "replay")

log = logging.getLogger("youmu.planning")

# status flags in the per-step header row
_OK, _EXHAUSTED, _FAILED, _CLOSED = 0, 1, 2, 3
_HEADER = 4  # [meta vector length, status, payload bytes, reserved]


@dataclass(frozen=True)
class MicroBatchInfo:
    """What the trainer gets with each micro-batch.

    Attributes:
        step: global step (the same on every rank).
        microbatch, num_microbatches: slot ``j`` of ``m``; ``is_last`` when ``j = m-1``
            (step the optimizer after it).
        rank, world_size: this rank (bucket) and the number of ranks ``W``.
        num_samples: samples in this micro-batch.
        num_tokens: its loss tokens ``t`` (``token_count_fn``).
        real_tokens: its total length (sum of document lengths).
        global_num_samples, global_num_tokens: the step's totals ``N`` and ``T``
            over all ranks and micro-batches.
        loss_scale: ``W · t / T``: multiply the micro-batch's *mean* per-token loss by
            it (or use :func:`youmu.batching.loss.scaled_token_loss` on the summed
            loss, which reads ``world_size`` and ``global_num_tokens``).
        cost: modelled cost of this micro-batch; slot_max_cost: the largest over
            ranks of slot ``j`` (what the slot waits for).
        step_time: modelled ``Σ_j max_r cost(r, j)`` of the step.
        imbalance: max/mean of the ranks' step costs (1.0 = perfect).
        sample_ids: ids of the samples (``id_fn`` or arrival ids ``k·W + origin``).
        is_padding: an empty slot repeating another batch with ``loss_scale = 0``.
        deferred: samples of this step carried to the next (capacity).
        method: balancing method used; fingerprint: hash of the step's plan.
        source_counts: samples per source in the step (mixing).

    >>> loader = BalancedLoader([{"input_ids": [0] * n} for n in (30, 70, 50, 50)], num_microbatches=2,
    ...                         global_batch_size=4, prefetch=0)
    >>> [(i.microbatch, i.num_tokens, i.global_num_tokens, i.loss_scale, i.is_last) for _, i in loader]
    [(0, 100, 200, 0.5, False), (1, 100, 200, 0.5, True)]
    """

    step: int
    microbatch: int
    num_microbatches: int
    rank: int
    world_size: int
    num_samples: int
    num_tokens: int
    real_tokens: int
    global_num_samples: int
    global_num_tokens: int
    loss_scale: float
    cost: float
    slot_max_cost: float
    step_time: float
    imbalance: float
    sample_ids: tuple[int, ...] = ()
    is_padding: bool = False
    deferred: int = 0
    method: str = ""
    fingerprint: str = ""
    source_counts: dict[str, int] = field(default_factory=dict)

    @property
    def is_last(self) -> bool:
        return self.microbatch == self.num_microbatches - 1


def default_docs(sample: Any) -> list[int]:
    """Document lengths of a sample: ``cu_seqlens`` of a packed sample
    (:func:`youmu.torch.pack`), else the length of ``input_ids``, else ``len(sample)``.

    >>> default_docs({"input_ids": [1, 2, 3]}), default_docs({"cu_seqlens": [0, 3, 7]})
    ([3], [3, 4])
    """
    if isinstance(sample, Mapping):
        if "cu_seqlens" in sample:
            cu = np.asarray(sample["cu_seqlens"]).reshape(-1)
            return np.diff(cu).astype(np.int64).tolist()
        if "input_ids" in sample:
            ids = sample["input_ids"]
            shape = getattr(ids, "shape", None)
            return [int(shape[-1])] if shape is not None and len(shape) else [len(ids)]
    try:
        return [len(sample)]
    except TypeError:
        raise TypeError(
            f"cannot measure a {type(sample).__name__}: pass length_fn= (tokens) or docs_fn= (document lengths)"
        ) from None


def _unit(item: Any) -> list[Any]:
    """A formed micro-batch: a list of samples, or ``(list, StepInfo)`` as
    :class:`~youmu.batching.loader.DynamicBatchLoader` yields with ``collate_fn=None``."""
    if isinstance(item, tuple) and len(item) == 2 and hasattr(item[1], "loss_scale"):
        item = item[0]
    if not isinstance(item, (list, tuple)):
        raise TypeError(
            "with reorder_only=True every item of the source is a formed micro-batch (a list of samples, or the "
            f"(list, info) pairs of DynamicBatchLoader(collate_fn=None)); got {type(item).__name__}"
        )
    return list(item)


def _is_dbl_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and hasattr(item[1], "loss_scale") and isinstance(item[0], list)


class _Stream:
    """One source stream of this rank (flattening DynamicBatchLoader steps)."""

    def __init__(self, name: str, number: int, iterable: Iterable[Any], flatten_steps: bool) -> None:
        self.name, self.number = name, number
        self.iterable = iterable
        # iter() on first use: a resumed stream that had already ended must not start
        # its source over (a DynamicBatchLoader would open a new epoch with its peers)
        self._it: Iterator[Any] | None = None
        self._flatten = flatten_steps
        self._pending: list[Any] = []
        self.done = False

    def restore(self, pending: list[Any], done: bool) -> None:
        self._pending = list(pending)
        self.done = bool(done)

    def snapshot(self) -> dict[str, Any]:
        """The source's own state and what this stream holds beyond it (called between
        items, in the thread that iterates the source)."""
        return {"name": self.name, "done": self.done, "pending": list(self._pending),
                "source_state": None if self.done else self.iterable.state_dict()}  # type: ignore[attr-defined]

    def next(self) -> tuple[bool, Any]:
        while True:
            if self._pending:
                return True, self._pending.pop(0)
            if self.done:
                return False, None
            if self._it is None:
                self._it = iter(self.iterable)
            try:
                item = next(self._it)
            except StopIteration:
                self.done = True
                return False, None
            if self._flatten and _is_dbl_pair(item):
                if getattr(item[1], "is_padding", False):
                    continue  # a filler step repeats data: never count it twice
                self._pending.extend(item[0])
                continue
            return True, item


@dataclass
class _Held:
    """A sample this rank holds: its id, source, documents, loss tokens, payload."""

    id: int
    source: int
    docs: list[int]
    tokens: int
    payload: Any


@dataclass
class _StepOut:
    step: int
    items: list[tuple[Any, MicroBatchInfo]]


class _End:
    pass


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class BalancedLoader:
    """Balanced global batches over ``W`` ranks × ``num_microbatches`` micro-batches.

    Args:
        source: this rank's stream of samples (an iterable: a list shard, a
            ``YoumuDataset``, a ``DataLoader(batch_size=None)`` with workers, a
            ``DynamicBatchLoader(collate_fn=None)`` whose batches are flattened); or
            ``{name: stream}`` with ``schedule=`` (multi-source mixing). With
            ``reorder_only=True``, a stream of formed micro-batches.
        num_microbatches: micro-batches per rank per step (gradient accumulation / PP).
        global_batch_size: samples per step over all ranks.
        token_budget: tokens per step over all ranks (instead of a sample count).
        capacity: tokens per micro-batch (activation memory); samples that fit in no
            micro-batch go to the next step.
        cost: cost model: :class:`~youmu.planning.cost.CostModel`, ``ModelConfig``,
            preset name, callable ``seqs -> costs``, or ``None`` (default config).
        method: ``"greedy"`` or ``"kk"`` (``"interleave"`` with ``reorder_only``).
        reorder_only: keep the source's micro-batches as they are and only choose
            their (rank, slot): the global batch equals the unbalanced one exactly.
        placement: ``"interleave"`` (ranks synchronise per micro-batch) or
            ``"greedy"``/``"kk"`` (equal rank totals); see
            :func:`~youmu.planning.balance.balance`.
        schedule: mixing schedule for a ``{name: stream}`` source (weights, stages,
            ``fn(step)``, a ``MixingSchedule`` or a ``MixtureDataset``).
        length_fn: sample → tokens (one document); docs_fn: sample → document
            lengths (packed samples); default :func:`default_docs`.
        token_count_fn: sample → loss tokens (default: its total length).
        id_fn: sample → unique int id (default: arrival id ``k·W + rank``).
        collate_fn: list of samples → batch (default: the list itself).
        channel: a :class:`~youmu.dist.GlooChannel`; default: a new Gloo
            group over the initialised default group (collective), or single-process.
        group_size: hierarchical balancing over groups of ranks.
        seed: planner seed.
        drop_last: end at the first step some rank cannot fill (instead of running
            the tail with fewer samples).
        prefetch: steps prepared ahead by a background thread (0: in the caller).
        timeout: seconds a collective may wait (when the channel is created here).
        resume_mode: how :meth:`load_state_dict` resumes: ``"state"`` (sources'
            own states, nothing read twice; every source must be stateful),
            ``"replay"`` (re-read fresh streams up to the resume point) or ``"auto"``
            (``"state"`` when every source is stateful). See the module docstring.

    Example (one process; ``channel=`` or an initialised process group for several)::

        >>> from youmu.planning import BalancedLoader
        >>> data = [{"input_ids": list(range(n))} for n in (900, 50, 60, 700, 40, 800, 30, 20)]
        >>> loader = BalancedLoader(data, num_microbatches=2, global_batch_size=4, cost="llama-12b",
        ...                         prefetch=0)
        >>> [(info.step, info.microbatch, [len(s["input_ids"]) for s in batch]) for batch, info in loader]
        [(0, 0, [900]), (0, 1, [50, 60, 700]), (1, 0, [800]), (1, 1, [40, 30, 20])]
        >>> loader.state_dict()["step"]            # resume point: the next step
        2
    """

    def __init__(
        self,
        source: Iterable[Any] | Mapping[str, Iterable[Any]],
        *,
        num_microbatches: int,
        global_batch_size: int | None = None,
        token_budget: int | None = None,
        capacity: int | None = None,
        cost: Any = None,
        method: str = "greedy",
        reorder_only: bool = False,
        placement: str | None = None,
        schedule: Any = None,
        length_fn: Callable[[Any], int] | None = None,
        docs_fn: Callable[[Any], Iterable[int]] | None = None,
        token_count_fn: Callable[[Any], int] | None = None,
        id_fn: Callable[[Any], int] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        channel: Any = None,
        group_size: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        prefetch: int = 1,
        timeout: float = 300.0,
        resume_mode: str = "auto",
    ) -> None:
        int_arg("num_microbatches", num_microbatches, minimum=1)
        reorder_only = bool_arg("reorder_only", reorder_only)
        drop_last = bool_arg("drop_last", drop_last)
        int_arg("prefetch", prefetch, minimum=0)
        float_arg("timeout", timeout, positive=True)
        int_arg("seed", seed, minimum=0)
        choice_arg("resume_mode", resume_mode, RESUME_MODES)
        multi = isinstance(source, Mapping)
        for name, src in (source.items() if multi else [("source", source)]):
            if isinstance(src, (str, bytes)) or not isinstance(src, Iterable):
                what = "source" if not multi else f"source[{name!r}]"
                raise TypeError(f"{what} must be an iterable of samples (a list shard, a dataset, a DataLoader), "
                                f"got {type(src).__name__}")
        if reorder_only:
            if global_batch_size is not None or token_budget is not None:
                raise ValueError("reorder_only takes num_microbatches formed micro-batches per rank per step; "
                                 "do not pass global_batch_size or token_budget")
            if multi:
                raise ValueError("reorder_only needs one stream of formed micro-batches, not a mapping of sources")
        elif (global_batch_size is None) == (token_budget is None):
            raise ValueError("pass exactly one of global_batch_size= (samples per step) or token_budget= (tokens)")
        if multi:
            if schedule is None:
                raise ValueError("a {name: stream} source needs schedule= (per-source weights per step)")
            if global_batch_size is None:
                raise ValueError("a {name: stream} source mixes a fixed number of samples: pass global_batch_size=")
            if not source:
                raise ValueError("the source mapping is empty")
        elif schedule is not None:
            raise ValueError("schedule= applies to a {name: stream} source")
        for name, v in (("global_batch_size", global_batch_size), ("token_budget", token_budget),
                        ("capacity", capacity), ("group_size", group_size)):
            opt_int_arg(name, v, minimum=1)
        if length_fn is not None and docs_fn is not None:
            raise ValueError("pass length_fn= or docs_fn=, not both")
        for name, fn in (("length_fn", length_fn), ("docs_fn", docs_fn), ("token_count_fn", token_count_fn),
                         ("id_fn", id_fn), ("collate_fn", collate_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable")

        self.channel = self._make_channel(channel, timeout)
        self.rank = self.channel.rank
        self.world_size = self.channel.world_size
        self.num_microbatches = num_microbatches
        self.global_batch_size = global_batch_size
        self.token_budget = token_budget
        self.capacity = capacity
        self.reorder_only = reorder_only
        self.length_fn, self.docs_fn = length_fn, docs_fn
        self.token_count_fn = token_count_fn
        self.id_fn = id_fn
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.prefetch = prefetch
        if multi:
            self.schedule: MixingSchedule | MixtureSchedule | None = as_schedule(schedule, global_batch_size,
                                                                                 names=list(source))
            missing = set(self.schedule.names) - set(source)
            if missing:
                raise ValueError(f"the schedule names sources without a stream: {sorted(missing)}")
            unused = set(map(str, source)) - set(self.schedule.names)
            if unused:
                # a stream the schedule never draws from would silently never be read
                raise ValueError(f"source streams {sorted(unused)} are not in the schedule "
                                 f"(sources: {self.schedule.names})")
            self._names = list(self.schedule.names)
            self._sources = dict(source)
        else:
            self.schedule = None
            self._names = ["default"]
            self._sources = {"default": source}
        self.planner = (Planner(seed=seed)
                        .distribute(self.world_size, num_microbatches, capacity=capacity, group_size=group_size)
                        .cost(cost)
                        .balance(method, reorder_only=reorder_only, on_overflow="defer", placement=placement))
        stateless = [n for n, src in self._sources.items()
                     if not (hasattr(src, "state_dict") and hasattr(src, "load_state_dict"))]
        if resume_mode == "state" and stateless:
            raise ValueError(f"resume_mode='state' needs sources with state_dict()/load_state_dict(); "
                             f"{stateless} have none (use resume_mode='replay' with fresh streams)")
        self.resume_mode = resume_mode
        # record the sources' states at every step start (resume_mode "state"/"auto");
        # "auto" stops at the first source that cannot save a mid-epoch state (e.g. a
        # DynamicBatchLoader over a stateless iterable) and saves replay states instead
        self._stateful = not stateless
        self._snapshotting = resume_mode != "replay" and self._stateful
        self._snapshot_error: BaseException | None = None
        self.step = 0
        self._iterating = False
        # resume target: (step, micro-batches of it already delivered)
        self._resume: tuple[int, int] | None = None
        # resume_mode "state": what load_state_dict restored (streams, carry, next index)
        self._restored: dict[str, Any] | None = None
        self._loaded_state: dict[str, Any] | None = None
        self._delivered = (0, 0)
        # resume_mode "state": per step, this rank's position at the step's start
        # (written by the producer, read by state_dict in the trainer's thread)
        self._snapshots: dict[int, dict[str, Any]] = {}
        self._snap_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[Any] | None = None
        self._stop = threading.Event()
        self._last_batch: Any = None
        # arrival index of the next measured sample (default ids: index·W + rank)
        self._next_index = 0

    # -- set-up ---------------------------------------------------------------------------
    @staticmethod
    def _make_channel(channel: Any, timeout: float) -> Any:
        from youmu.dist import GlooChannel

        if isinstance(channel, GlooChannel):
            return channel
        if channel is not None:
            import torch.distributed as dist

            if not isinstance(channel, dist.ProcessGroup):
                raise TypeError(f"channel must be a youmu GlooChannel or a torch.distributed ProcessGroup, "
                                f"got {type(channel).__name__}")
            return GlooChannel.from_process_group(channel, timeout=timeout)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return GlooChannel.from_default_group(timeout=timeout)
        return GlooChannel.local()

    # -- measuring -------------------------------------------------------------------------
    def _measure(self, sample: Any, source: int) -> _Held:
        if self.reorder_only:
            docs: list[int] = []
            tokens = 0
            for s in sample:
                d, t = self._measure_one(s)
                docs.extend(d)
                tokens += t
        else:
            docs, tokens = self._measure_one(sample)
            if self.capacity is not None and sum(docs) > self.capacity:
                # it would be deferred forever: no micro-batch can ever hold it
                raise ValueError(f"a sample of {sum(docs)} tokens exceeds capacity={self.capacity}; "
                                 "truncate or split it before the loader")
        k = self._next_index
        self._next_index += 1
        if self.id_fn is not None and not self.reorder_only:
            sid = index_of(self.id_fn(sample), "id_fn's result")
        else:
            sid = k * self.world_size + self.rank
        return _Held(sid, source, docs, tokens, sample)

    def _measure_one(self, sample: Any) -> tuple[list[int], int]:
        if self.length_fn is not None:
            docs = [index_of(self.length_fn(sample), "length_fn's result")]
        elif self.docs_fn is not None:
            docs = [index_of(x, "each document length from docs_fn") for x in self.docs_fn(sample)]
        else:
            docs = default_docs(sample)
        if any(d < 0 for d in docs):
            raise ValueError(f"negative document length in {docs}")
        if self.token_count_fn is not None:
            tokens = index_of(self.token_count_fn(sample), "token_count_fn's result")
        else:
            tokens = int(sum(docs))
        if tokens < 0:
            raise ValueError("token_count_fn returned a negative count")
        return docs, tokens

    # -- the global batch: this rank's share ------------------------------------------------
    def _share(self, total: int, step: int, salt: int = 0) -> int:
        # remainders rotate with the step so no rank is always the one taking extra
        w, r = self.world_size, self.rank
        return total // w + (1 if (r - step - salt) % w < total % w else 0)

    def _take(self, step: int, streams: list[_Stream], carry: list[_Held]) -> tuple[list[_Held], list[_Held], bool]:
        """This rank's candidates for ``step``, the measured samples held over for the
        next step (a token budget's overshoot), and whether a stream ran short."""
        held = list(carry)
        short = False
        if self.reorder_only:
            s = streams[0]
            while len(held) < self.num_microbatches:
                ok, item = s.next()
                if not ok:
                    short = True
                    break
                held.append(self._measure(_unit(item), 0))
            return held, [], short
        if self.token_budget is not None:
            budget = self._share(self.token_budget, step)
            s = streams[0]
            used = sum(sum(h.docs) for h in held)
            while used < budget:
                ok, item = s.next()
                if not ok:
                    short = True
                    break
                h = self._measure(item, 0)
                n = sum(h.docs)
                if used + n > budget and held:
                    return held, [h], short  # it opens the next step's share
                held.append(h)
                used += n
            return held, [], short
        assert self.global_batch_size is not None
        if self.schedule is None:
            want = {0: self._share(self.global_batch_size, step)}
        else:
            counts = self.schedule.count_vector(step, self.global_batch_size)
            want = {c: self._share(int(n), step, salt=c) for c, n in enumerate(counts.tolist())}
        for h in held:  # carried samples count against their source's share
            want[h.source] = want.get(h.source, 0) - 1
        for c, n in want.items():
            s = streams[c]
            for _ in range(max(n, 0)):
                ok, item = s.next()
                if not ok:
                    short = True
                    break
                held.append(self._measure(item, c))
        return held, [], short

    # -- one step -------------------------------------------------------------------------
    def _gather_header(self, meta_len: int, status: int, payload: int = 0) -> list[list[int]]:
        return self.channel.all_gather_rows([meta_len, status, payload, 0])

    def _exchange(self, plan: StepPlan, held: list[_Held]) -> dict[int, Any]:
        """Payloads this rank needs from others, by sample id."""
        meta = plan.meta
        mine = meta.origin == self.rank
        moving = (plan.buckets >= 0) & (plan.buckets != meta.origin)
        if not moving.any():
            return {}
        by_id = {h.id: h for h in held}
        # per destination, one pickle: receivers unpickle only their segment
        segments: list[tuple[int, bytes]] = []
        for dest in range(self.world_size):
            rows = np.nonzero(mine & moving & (plan.buckets == dest))[0]
            if rows.size:
                blob = pickle.dumps([(int(i), by_id[int(i)].payload) for i in meta.ids[rows]], protocol=5)
                segments.append((dest, blob))
        body = b"".join(b for _, b in segments)
        head = [len(segments)] + [x for d, b in segments for x in (d, len(b))]
        nbytes = len(body)
        words = (nbytes + 7) // 8
        sizes = self.channel.all_gather_rows([len(head), words])
        hmax = max(r[0] for r in sizes)
        wmax = max(r[1] for r in sizes)
        vec = np.zeros(hmax + wmax, dtype=np.int64)
        vec[: len(head)] = head
        raw = np.frombuffer(body + b"\0" * (words * 8 - nbytes), dtype=np.int64)
        vec[hmax: hmax + words] = raw
        rows = self.channel.all_gather_int64(vec)
        got: dict[int, Any] = {}
        for k, row in enumerate(rows):
            if k == self.rank:
                continue
            arr = row.numpy()
            hdr = arr[:hmax]
            buf = arr[hmax:].tobytes()
            pos = 0
            for s in range(int(hdr[0])):
                dest, length = int(hdr[1 + 2 * s]), int(hdr[2 + 2 * s])
                if dest == self.rank:
                    got.update(pickle.loads(buf[pos: pos + length]))
                pos += length
        return got

    def _snapshot(self, step: int, streams: list[_Stream], carry: list[_Held]) -> None:
        """Record where ``step`` starts on this rank (``resume_mode="state"``): the
        sources' own states, the samples held beyond them, and the next arrival index.
        Called by the producer between steps, so no source is mid-item."""
        if not self._snapshotting or (self._resume is not None and step < self._resume[0]):
            return  # (nobody can resume inside a replay: record nothing there)
        try:
            snap = {
                "streams": [s.snapshot() for s in streams],
                "carry": [(h.id, h.source, list(h.docs), h.tokens, h.payload) for h in carry],
                "next_index": self._next_index,
            }
        except Exception as e:  # noqa: BLE001 - reported by state_dict(), not fatal to training
            self._snapshotting = False
            self._snapshot_error = e
            log.info("BalancedLoader: a source cannot save a mid-epoch state (%s: %s); "
                     "resume_mode=%r", type(e).__name__, e, self.resume_mode)
            with self._snap_lock:
                self._snapshots.clear()
            return
        with self._snap_lock:
            self._snapshots[step] = snap

    def _agree_on_start(self, step: int, can_restore: bool) -> bool:
        """Check that every rank starts from the same step and micro-batch with the
        same settings, and agree on how: restore the sources' states only if every
        rank can (one rank replaying while another restores would pair their
        collectives wrongly — a replaying rank gathers metadata while a restored one
        exchanges samples — and hang or mix data); otherwise all replay."""
        mb = self._resume[1] if self._resume is not None else 0
        rows = self.channel.all_gather_rows([step, mb, int(can_restore), self.config_fingerprint()])
        if any(r[0] != rows[0][0] or r[1] != rows[0][1] or r[3] != rows[0][3] for r in rows):
            desc = ", ".join(f"rank {k}: step {r[0]} micro-batch {r[1]} config {r[3]:x}" for k, r in enumerate(rows))
            raise ValueError("the ranks' BalancedLoaders do not start from the same point with the same settings "
                             f"(load the same state_dict position on every rank): {desc}")
        restore = all(r[2] for r in rows)
        if not restore and self.resume_mode == "state" and self._loaded_state is not None:
            lacking = [k for k, r in enumerate(rows) if not r[2]]
            raise ValueError(f"resume_mode='state' but rank(s) {lacking} have no source states to restore "
                             "(their states were saved in replay mode); resume with resume_mode='auto' or 'replay'")
        return restore

    def _produce(self) -> Iterator[_StepOut]:
        streams = [_Stream(n, c, self._sources[n], flatten_steps=not self.reorder_only)
                   for c, n in enumerate(self._names)]
        carry: list[_Held] = []
        step = 0  # replay: a resumed loader replays the plans before its resume point
        restored, self._restored = self._restored, None
        target = self._resume[0] if self._resume is not None else 0
        if self._agree_on_start(target, restored is not None) and restored is not None:
            # every rank restores: the sources continue where step `target` began;
            # put back what this rank held beyond them then
            try:
                for s, st in zip(streams, restored["streams"]):
                    if not st["done"]:
                        self._sources[s.name].load_state_dict(st["source_state"])
                    s.restore(st["pending"], st["done"])
            except BaseException:
                self._gather_header(0, _FAILED)  # the peers stop instead of waiting
                raise
            carry = [_Held(int(i), int(src), [int(d) for d in docs], int(tok), payload)
                     for i, src, docs, tok, payload in restored["carry"]]
            self._next_index = int(restored["next_index"])
            step = target
        elif restored is not None:
            log.info("BalancedLoader rank %d: a peer cannot restore its sources' states; replaying to step %d",
                     self.rank, target)
        self._snapshot(step, streams, carry)
        while True:
            if self._stop.is_set():
                self._gather_header(0, _CLOSED)
                return
            try:
                held, leftover, short = self._take(step, streams, carry)
                local = SampleMeta.build(
                    ids=[h.id for h in held], docs=[h.docs for h in held], sources=[h.source for h in held],
                    tokens=[h.tokens for h in held], origin=self.rank,
                )
                vec = local.encode()
            except BaseException:
                self._gather_header(0, _FAILED)
                raise
            status = _EXHAUSTED if short else _OK
            header = self._gather_header(vec.size, status)
            self._check_peers(header)
            if self.drop_last and any(r[1] == _EXHAUSTED for r in header):
                return
            width = max(r[0] for r in header)
            padded = np.zeros(width, dtype=np.int64)
            padded[: vec.size] = vec
            rows = self.channel.all_gather_int64(padded)
            meta = SampleMeta.concat(
                SampleMeta.decode(r.numpy()[: header[k][0]], origin=k) for k, r in enumerate(rows)
            )
            if len(meta) == 0:
                return  # every rank is out of data: the same decision everywhere
            if len(set(meta.ids.tolist())) != len(meta):
                raise ValueError("sample ids are not unique across ranks (check id_fn)")
            plan = self.planner.plan(step, meta)
            deferred = set(plan.meta.ids[plan.deferred].tolist())
            carry = [h for h in held if h.id in deferred] + leftover
            self._snapshot(step + 1, streams, carry)
            if self._resume is not None and step < self._resume[0]:
                # replaying up to the resume point: the plan is a pure function of the
                # gathered metadata, so every rank rebuilds the same carry; the samples
                # themselves need neither moving nor collating
                step += 1
                continue
            received = self._exchange(plan, held)
            by_id = {h.id: h for h in held}
            items = self._assemble(plan, by_id, received)
            if self._resume is not None and step == self._resume[0]:
                items = items[self._resume[1]:]
                self._resume = None
            out = _StepOut(step, items)
            try:
                yield out
            except GeneratorExit:
                # synchronous mode: the trainer left its loop; tell the peers now
                try:
                    self._gather_header(0, _CLOSED)
                except Exception:  # noqa: BLE001 - peers may be gone already
                    pass
                raise
            step += 1

    def _check_peers(self, header: list[list[int]]) -> None:
        from youmu.batching.errors import PeerClosedError, RankFailedError

        failed = tuple(k for k, r in enumerate(header) if r[1] == _FAILED)
        if failed:
            raise RankFailedError(f"rank(s) {list(failed)} failed while reading their data", failed)
        closed = tuple(k for k, r in enumerate(header) if r[1] == _CLOSED)
        if closed:
            raise PeerClosedError(f"rank(s) {list(closed)} closed their BalancedLoader while this rank iterates",
                                  closed)

    def _assemble(self, plan: StepPlan, by_id: dict[int, _Held], received: dict[int, Any]) -> list[tuple[Any, MicroBatchInfo]]:
        meta, r = plan.meta, self.rank
        tokens = plan.tokens
        total_tokens = plan.global_tokens
        grid = plan.stats.bin_costs
        sizes = np.zeros((plan.num_buckets, plan.num_bins), dtype=np.int64)
        ok = plan.buckets >= 0
        np.add.at(sizes, (plan.buckets[ok], plan.bins[ok]), meta.sizes[ok])
        n_selected = int(ok.sum())
        src_counts = {self._names[s]: c for s, c in plan.source_counts.items() if s < len(self._names)}
        out: list[tuple[Any, MicroBatchInfo]] = []
        pending_pad: list[int] = []
        for j, rows in enumerate(plan.microbatches(r)):
            samples: list[Any] = []
            for i in meta.ids[rows].tolist():
                payload = by_id[i].payload if i in by_id else received[i]
                if self.reorder_only:
                    samples.extend(payload)
                else:
                    samples.append(payload)
            info = MicroBatchInfo(
                step=plan.step, microbatch=j, num_microbatches=plan.num_bins, rank=r, world_size=self.world_size,
                num_samples=len(samples), num_tokens=int(tokens[r, j]), real_tokens=int(sizes[r, j]),
                global_num_samples=n_selected, global_num_tokens=total_tokens,
                loss_scale=(self.world_size * float(tokens[r, j]) / total_tokens) if total_tokens else 0.0,
                cost=float(grid[r, j]), slot_max_cost=float(grid[:, j].max()), step_time=plan.stats.step_time,
                imbalance=plan.stats.bucket_max_over_mean, sample_ids=self._sample_ids(samples, meta.ids[rows]),
                deferred=int(plan.deferred.size), method=plan.method, fingerprint=plan.fingerprint,
                source_counts=src_counts,
            )
            if rows.size == 0:
                pending_pad.append(len(out))
                out.append((None, info))
                continue
            batch = self.collate_fn(samples) if self.collate_fn is not None else samples
            self._last_batch = batch
            out.append((batch, info))
        for k in pending_pad:
            # an empty slot: repeat a real batch with zero weight so every rank runs
            # the same number of forward/backward passes
            _, info = out[k]
            filler = next((b for b, i in out if i.num_samples), self._last_batch)
            out[k] = (filler, _replace(info, is_padding=True, loss_scale=0.0))
        return out

    def _sample_ids(self, samples: list[Any], row_ids: np.ndarray) -> tuple[int, ...]:
        if self.reorder_only and self.id_fn is not None:
            return tuple(int(self.id_fn(x)) for x in samples)
        return tuple(row_ids.tolist())

    # -- iteration --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[Any, MicroBatchInfo]]:
        if self._iterating:
            raise RuntimeError("a BalancedLoader is iterated once (its streams are consumed); make a new one")
        self._iterating = True
        for out in self._steps():
            self.step = out.step + 1
            self._forget_before(out.step)
            first = self.num_microbatches - len(out.items)  # > 0 in a resumed step
            for j, item in enumerate(out.items, start=first + 1):
                self._delivered = (out.step, j) if j < self.num_microbatches else (out.step + 1, 0)
                yield item

    def iter_steps(self) -> Iterator[list[tuple[Any, MicroBatchInfo]]]:
        """Iterate whole steps: a list of ``num_microbatches`` ``(batch, info)`` pairs."""
        if self._iterating:
            raise RuntimeError("a BalancedLoader is iterated once (its streams are consumed); make a new one")
        self._iterating = True
        for out in self._steps():
            self.step = out.step + 1
            self._forget_before(out.step + 1)
            self._delivered = (out.step + 1, 0)
            yield out.items

    def _forget_before(self, step: int) -> None:
        """Drop the snapshots of steps the trainer can no longer resume at."""
        with self._snap_lock:
            for k in [k for k in self._snapshots if k < step]:
                del self._snapshots[k]

    def _steps(self) -> Iterator[_StepOut]:
        if self.prefetch == 0:
            yield from self._produce()
            return
        q: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch)
        self._queue = q

        def run() -> None:
            try:
                for out in self._produce():
                    while not self._stop.is_set():
                        try:
                            q.put(out, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if self._stop.is_set():
                        # tell the peers at the next exchange, so they stop instead of waiting
                        self._gather_header(0, _CLOSED)
                        return
                q.put(_End())
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                q.put(_Failure(e))

        self._thread = threading.Thread(target=run, name=f"youmu-balanced-r{self.rank}", daemon=True)
        self._thread.start()
        try:
            while True:
                item = q.get()
                if isinstance(item, _End):
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            # the trainer left the loop (or it ended): stop the producer, which tells
            # the peers at its next exchange instead of leaving them to time out
            self._stop.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the background thread (it tells the peers at its next exchange)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "BalancedLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the trainer is: the next step and how many of its micro-batches it
        has taken (call it between micro-batches, on every rank, like a model
        checkpoint).

        A new loader with the same arguments on the same ranks continues, after
        :meth:`load_state_dict`, with exactly the micro-batches the uninterrupted run
        would have yielded next. Keys: ``format``, ``mode`` (``"state"`` or
        ``"replay"``), ``world_size``, ``rank``, ``num_microbatches``, ``config`` (see
        :meth:`config_fingerprint`), ``step``, ``microbatch``; in ``"state"`` mode also
        ``streams`` (each source's ``state_dict()``, its pending samples, whether it
        ended), ``carry`` (samples held over: id, source, documents, tokens, payload)
        and ``next_index``. Payloads are the samples themselves: save the state with
        ``torch.save``/pickle, not JSON.
        """
        if self._loaded_state is not None and not self._iterating:
            return dict(self._loaded_state)  # loaded, not yet resumed: the same point
        step, mb = self._delivered
        state: dict[str, Any] = {
            "format": STATE_FORMAT, "mode": "replay", "world_size": self.world_size, "rank": self.rank,
            "num_microbatches": self.num_microbatches, "config": self.config_fingerprint(),
            "step": step, "microbatch": mb,
        }
        snap: dict[str, Any] | None = None
        if self._snapshotting:
            with self._snap_lock:
                snap = self._snapshots.get(step)
            if snap is None and not self._iterating:
                try:  # not started: the sources' states now are step 0's start
                    snap = {"streams": [_Stream(n, c, self._sources[n], False).snapshot()
                                        for c, n in enumerate(self._names)], "carry": [], "next_index": 0}
                except Exception as e:  # noqa: BLE001 - as in _snapshot: replay instead (or say why not)
                    self._snapshot_error = e
        if snap is None and self.resume_mode == "state":
            why = (f"{type(self._snapshot_error).__name__}: {self._snapshot_error}" if self._snapshot_error
                   else f"no resume point recorded for step {step}")
            raise RuntimeError(f"resume_mode='state': cannot save the sources' states ({why}); "
                               "use resume_mode='replay' or 'auto'")
        if snap is not None:
            state["mode"] = "state"
            state.update(snap)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (before iterating; every rank loads its own
        state, all at the same step and micro-batch).

        A ``"state"``-mode state restores each source's state when iteration starts
        (the sources must be the same datasets, not yet iterated), provided every
        rank has one; otherwise — and for ``"replay"``-mode states — the loader needs
        fresh sources and re-reads the steps before the resume point: every rank
        reads the same samples again and gathers their metadata, but none is moved
        or collated. Raises ``ValueError`` when the state does not match this loader
        (format, world size, rank, micro-batches per step, settings, resume mode);
        ranks that start from different positions fail at their first step."""
        if self._iterating:
            raise RuntimeError("load_state_dict must be called before iterating")
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"not a BalancedLoader state (expected format {STATE_FORMAT!r}, got {got!r})")
        mode = state.get("mode")
        if mode not in ("state", "replay"):
            raise ValueError(f"state has mode={mode!r}, expected 'state' or 'replay'")
        # a state-mode state also replays (it holds the position too), not the reverse
        restore = mode == "state" and self.resume_mode != "replay" and self._stateful
        if self.resume_mode == "state" and not restore:
            raise ValueError("resume_mode='state' but the state was saved in replay mode (its sources "
                             "could not save their states); load it with resume_mode='replay' or 'auto'")
        checks = [("world_size", self.world_size), ("num_microbatches", self.num_microbatches),
                  ("config", self.config_fingerprint())]
        if restore:
            checks.append(("rank", self.rank))  # the sources' states are this rank's own
        for key, mine in checks:
            if state.get(key) != mine:
                hint = (" (batch size, token budget, capacity, cost, method, placement, schedule, seed, "
                        "drop_last or sources differ)" if key == "config" else "")
                raise ValueError(f"state was saved with {key}={state.get(key)!r}, this loader has {mine!r}{hint}")
        step, mb = state.get("step"), state.get("microbatch")
        if (not isinstance(step, int) or not isinstance(mb, int) or step < 0
                or not 0 <= mb < self.num_microbatches):
            raise ValueError(f"invalid resume position step={step!r}, microbatch={mb!r}")
        self._restored = None
        if restore:
            streams = state.get("streams")
            if not isinstance(streams, list) or [st.get("name") for st in streams] != self._names:
                raise ValueError(f"state streams {[st.get('name') for st in streams or []]} "
                                 f"do not match this loader's sources {self._names}")
            # the sources load their states when iteration starts, once every rank has
            # agreed to restore (if one cannot, all replay over the untouched sources)
            self._restored = {"streams": streams, "carry": state["carry"], "next_index": state["next_index"]}
        self._resume = (step, mb) if (step, mb) != (0, 0) or restore else None
        self._delivered = (step, mb)
        self._loaded_state = dict(state)
        self.step = step

    def config_fingerprint(self) -> int:
        """63-bit hash of the settings that decide the plans (batch size or token
        budget, capacity, micro-batches, schedule, cost model, balancing method and
        placement, seed, ``drop_last``, sources, world size). A state saved under
        other settings would silently change every later plan, so
        :meth:`load_state_dict` refuses it, and the ranks compare it when they start.
        """
        planner = {f.name: _describe(getattr(self.planner, f.name)) for f in dataclasses.fields(self.planner)}
        cfg = {
            "planner": planner,
            "global_batch_size": self.global_batch_size,
            "token_budget": self.token_budget,
            "schedule": _describe_schedule(self.schedule),
            "sources": self._names,
            "reorder_only": self.reorder_only,
            "drop_last": self.drop_last,
            "world_size": self.world_size,
        }
        digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _describe(value: Any) -> str:
    """A run-independent description of a setting: functions by qualified name (their
    repr holds a memory address that differs per process), everything else by repr."""
    if isinstance(value, functools.partial):
        return f"partial({_describe(value.func)}, {value.args!r}, {sorted(value.keywords.items())!r})"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__name__)}"
    text = repr(value)
    if " at 0x" in text:  # default object repr: describe by type only
        return f"{type(value).__module__}.{type(value).__qualname__}"
    return text


def _describe_schedule(schedule: Any) -> Any:
    """Mixing schedules by content (their repr names only the sources)."""
    if schedule is None:
        return None
    if isinstance(schedule, MixingSchedule):
        if schedule._fn is not None:
            return ["fn", _describe(schedule._fn), schedule.names]
        return ["stages", schedule.names, [[start, w.tolist()] for start, w in schedule._stages]]
    mix = schedule.mixture
    return ["mixture", schedule.names, schedule.batch_size, len(mix),
            [[st.start, list(map(int, st.children)), list(map(float, st.weights))] for st in mix.stages]]


def _replace(info: MicroBatchInfo, **kw: Any) -> MicroBatchInfo:
    from dataclasses import replace

    return replace(info, **kw)
