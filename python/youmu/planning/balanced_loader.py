"""``BalancedLoader``: per-step global batches, balanced over ranks and micro-batches.

Every step, on every rank:

1. take this rank's share of the step's **global batch** from its own stream —
   ``global_batch_size`` samples or ``token_budget`` tokens over all ranks (or, with a
   ``{name: stream}`` source, each source's exact count from the mixing schedule;
   or, with ``reorder_only``, ``num_microbatches`` formed micro-batches)
   (:mod:`youmu.planning.steps.rank_sources`);
2. measure each sample (document lengths, loss tokens) and **all-gather the
   metadata** with the step's status on the loader's Gloo channel
   (:class:`~youmu.distributed.GlooChannel`, :mod:`youmu.planning.steps.exchange`);
3. compute the **plan** — a pure function of the gathered metadata and the step, so
   every rank computes the same one (:class:`~youmu.planning.engine.planner.Planner`);
4. **exchange the samples** that the plan moves to another rank (pickled, one
   all-gather) and keep those that fit in no micro-batch for the next step;
5. yield this rank's ``num_microbatches`` micro-batches, in slot order, each with a
   :class:`~youmu.planning.steps.microbatch.MicroBatchInfo` whose ``loss_scale`` makes the
   gradients exact: multiply the micro-batch's mean per-token loss by it, sum over
   micro-batches (gradient accumulation), and DDP's average over ranks is the
   per-token mean over the whole global batch, ``Σ loss / T``, however the plan split
   the tokens.

A background thread (:class:`youmu.distributed.Producer`) runs steps 1–4 ``prefetch`` steps
ahead of the trainer. Every rank runs the same number of steps and gets the same
number of micro-batches per step; a slot left empty (tiny final steps) repeats a
batch with ``loss_scale = 0`` and ``is_padding = True``, so DDP's collectives stay
matched. A rank whose trainer stops iterating tells its peers at its next exchange
(they raise :class:`~youmu.errors.PeerClosedError` instead of waiting for a timeout).

Scope: one loader per data-parallel rank (the channel spans the DP group; TP/PP peers
of a rank consume the same micro-batches, e.g. by broadcast). Samples travel between
ranks pickled over Gloo (an all-gather: each rank receives every moved sample's bytes
and unpickles only its own).

Resuming mid-epoch: ``state_dict()`` records the next step and micro-batch; a new
loader with the same arguments and ``load_state_dict(state)`` continues with exactly
the micro-batches the uninterrupted run would have yielded next (same plans, same
samples). Two ways, chosen by ``resume_mode`` (:mod:`youmu.planning.state.checkpoint`):

* ``"state"`` — every source is *stateful* (``state_dict``/``load_state_dict``, as
  :class:`~youmu.torch.YoumuDataset`, :class:`~youmu.torch.MapStream`,
  :class:`~youmu.batching.dynamic_loader.DynamicBatchLoader` or torchdata's
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

Passes and epochs follow youmu's loader contract (:class:`youmu.state.contract.Loader`, the
one :class:`~youmu.batching.DynamicBatchLoader` and ``RayBalancedLoader`` keep):
every ``iter()`` starts an independent pass from the resume point (a loaded state,
else the epoch's start), on every rank together; a one-shot iterator source cannot
be read twice (:class:`~youmu.errors.LoaderError`). :meth:`~BalancedLoader.set_epoch`
may come at any time: it is forwarded to the sources that have one now, or — during a
pass, which keeps its epoch — when the next pass starts.

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

import inspect
import logging
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu._internal.args import choice_arg, int_arg, seconds_arg
from youmu.distributed import channel_for
from youmu.distributed.status import CLOSED, FAILED
from youmu.errors import InvalidArgumentError
from youmu.loaders.passes import PassCursor
from youmu.planning.engine.schedule import MixingSchedule, MixtureSchedule
from youmu.planning.settings import PlanSettings
from youmu.planning.state.checkpoint import (
    RESUME_MODES,
    agree_on_start,
    restore_sources,
)
from youmu.planning.state.loader_state import Loaded, LoaderState
from youmu.planning.steps.exchange import EXHAUSTED, OK, StepExchange
from youmu.planning.steps.microbatch import Assembler, MicroBatchInfo, check_split_images
from youmu.planning.steps.rank_sources import (
    Held,
    Measure,
    RankReader,
    SourceStream,
    carry_after,
    check_sample_fns,
    plan_step,
    rank_meta,
)
from youmu.state.contract import again_or_raise

__all__ = ["BalancedLoader"]

log = logging.getLogger("youmu.planning")


@dataclass
class _StepOut:
    step: int
    items: list[tuple[Any, MicroBatchInfo]]


class BalancedLoader(LoaderState):
    """Balanced global batches over ``W`` ranks × ``num_microbatches`` micro-batches.

    Args:
        source: this rank's stream of samples (an iterable: a list shard, a
            ``YoumuDataset``, a ``DataLoader(batch_size=None)`` with workers, a
            ``DynamicBatchLoader(collate_fn=None)`` whose batches are flattened); or
            ``{name: stream}`` with ``schedule=`` (multi-source mixing). With
            ``reorder_only=True``, a stream of formed micro-batches.
        num_microbatches: micro-batches per rank per step (gradient accumulation / PP);
            at most :data:`MAX_MICROBATCHES`, and ``W × num_microbatches`` at most
            :data:`~youmu.planning.engine.metrics.MAX_SLOTS`.
        global_batch_size: samples per step over all ranks.
        token_budget: tokens per step over all ranks (instead of a sample count).
        capacity: tokens per micro-batch (activation memory); samples that fit in no
            micro-batch go to the next step.
        cost: cost model: :class:`~youmu.planning.engine.cost.CostModel`, ``ModelConfig``,
            preset name, callable ``seqs -> costs``, or ``None`` (default config).
        method: ``"greedy"`` or ``"kk"`` (``"interleave"`` with ``reorder_only``).
        reorder_only: keep the source's micro-batches as they are and only choose
            their (rank, slot): the global batch equals the unbalanced one exactly.
        placement: ``"interleave"`` (ranks synchronise per micro-batch) or
            ``"greedy"``/``"kk"`` (equal rank totals); see
            :func:`~youmu.planning.engine.balance.balance`.
        schedule: mixing schedule for a ``{name: stream}`` source (weights, stages,
            ``fn(step)``, a ``MixingSchedule`` or a ``MixtureDataset``).
        length_fn: sample → tokens (one document); docs_fn: sample → document
            lengths (packed samples); default :func:`default_docs`.
        token_count_fn: sample → loss tokens (default: its total length).
        id_fn: sample → unique int id (default: arrival id ``k·W + rank``).
        collate_fn: list of samples → batch (default: the list itself).
        channel: a :class:`~youmu.distributed.GlooChannel` or a Gloo process group; default:
            a new Gloo group over the initialised default group (collective), or
            single-process (:func:`youmu.distributed.channel_for`).
        group_size: hierarchical balancing over groups of ranks.
        seed: planner seed.
        drop_last: end at the first step some rank cannot fill (instead of running
            the tail with fewer samples).
        prefetch: steps prepared ahead by a background thread (0: in the caller).
        timeout: seconds a collective may wait (when the channel is created here).
        encoder_cost: vision-language models: the image encoder's cost model over
            each sample's image patches (a ``CostModel``, ``ModelConfig``, preset
            such as ``"vit-1b"``, or ``fn(image_patch_lists) -> costs``); ``cost``
            is then the backbone's (over ``length_fn``: merged image tokens plus
            text), and both modules are balanced together, each image encoded on its
            sample's rank (:func:`~youmu.planning.engine.hybrid.balance_colocated`).
            MegaScale-Data's hybrid balance, which moves image features between
            ranks, is :func:`~youmu.planning.engine.hybrid.balance_hybrid`. Needs
            ``images_fn``.
        images_fn: sample → its images' encoder patches (a count, or a list with
            one count per image), e.g. ``lambda s: s["encoder_patches"]``.
        encoder_balance: with ``encoder_cost``: ``"colocated"`` (default; each
            image encoded on its sample's rank) or ``"hybrid"`` (MegaScale-Data's
            hybrid balance: each slot's images balanced over every rank; batches are
            :class:`~youmu.planning.steps.microbatch.HybridBatch` es carrying the images
            this rank encodes and the all-to-all routes of their features, see
            :mod:`youmu.planning.steps.microbatch`).
        split_images_fn: with ``encoder_balance="hybrid"``: sample → ``(backbone
            part, [image payload, ...])``, one payload per image ``images_fn``
            counts; the loader moves each part to the rank that needs it.
        resume_mode: how :meth:`load_state_dict` resumes: ``"state"`` (sources'
            own states, nothing read twice; every source must be stateful),
            ``"replay"`` (re-read fresh streams up to the resume point) or ``"auto"``
            (``"state"`` when every source is stateful). See the module docstring.
        settings: the plan's settings as one :class:`~youmu.planning.PlanSettings`
            (the object :class:`youmu.ray.RayLoaders` takes too), instead of
            ``num_microbatches`` … ``encoder_cost`` as keywords (not both).

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

    thread_name = "youmu-balanced"

    def __init__(
        self,
        source: Iterable[Any] | Mapping[str, Iterable[Any]],
        *,
        num_microbatches: int | None = None,
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
        encoder_cost: Any = None,
        images_fn: Callable[[Any], Any] | None = None,
        settings: PlanSettings | None = None,
        encoder_balance: str = "colocated",
        split_images_fn: Callable[[Any], Any] | None = None,
    ) -> None:
        int_arg("prefetch", prefetch, minimum=0)
        timeout = seconds_arg("timeout", timeout)
        choice_arg("resume_mode", resume_mode, RESUME_MODES)
        check_sample_fns(length_fn=length_fn, docs_fn=docs_fn, token_count_fn=token_count_fn, id_fn=id_fn,
                         collate_fn=collate_fn, images_fn=images_fn)
        if (encoder_cost is None) != (images_fn is None):
            raise InvalidArgumentError("pass encoder_cost= (the image encoder's cost model) and images_fn= "
                                       "(a sample's image patches) together")
        # the plan keywords of this signature, as PlanSettings declares them (and checks them)
        given = PlanSettings.settings_or_keywords(settings, **PlanSettings.pick(locals()))
        # checked before the channel is made: a bad setting fails on every rank alike
        plan, sources = PlanSettings.resolve(source, world_size=None, **given)
        check_split_images(plan.encoder_balance, split_images_fn)

        self.channel = channel_for(channel, timeout=timeout, name="channel")
        self.rank = self.channel.rank
        self.world_size = self.channel.world_size
        if settings is not None and settings.world_size not in (None, self.world_size):
            raise InvalidArgumentError(f"settings are for world_size={settings.world_size}, the channel has "
                                       f"{self.world_size} ranks")
        #: the plan's settings (:class:`~youmu.planning.PlanSettings`)
        self.settings = plan = plan.on(self.world_size)
        self.num_microbatches = plan.num_microbatches
        self.global_batch_size = plan.global_batch_size
        self.token_budget = plan.token_budget
        self.capacity = plan.capacity
        self.reorder_only = reorder_only = plan.reorder_only
        self.length_fn, self.docs_fn = length_fn, docs_fn
        self.token_count_fn = token_count_fn
        self.id_fn = id_fn
        self.images_fn = images_fn
        self.collate_fn = collate_fn
        self.drop_last = plan.drop_last
        self.prefetch = prefetch
        self.schedule: MixingSchedule | MixtureSchedule | None = plan.schedule
        self._names: list[str] = list(plan.names)
        self._sources: dict[str, Any] = sources
        self.planner = plan.planner()
        self._fingerprint = plan.fingerprint()
        self._portable = plan.portable()
        stateless = [n for n, src in self._sources.items()
                     if not (hasattr(src, "state_dict") and hasattr(src, "load_state_dict"))]
        if resume_mode == "state" and stateless:
            raise InvalidArgumentError(f"resume_mode='state' needs sources with state_dict()/load_state_dict(); "
                                       f"{stateless} have none (use resume_mode='replay' with fresh streams)")
        self.resume_mode = resume_mode
        # record the sources' states at every step start (resume_mode "state"/"auto");
        # "auto" stops at the first source that cannot save a mid-epoch state (e.g. a
        # DynamicBatchLoader over a stateless iterable) and saves replay states instead
        self._stateful = not stateless
        self._snapshots = self._fresh_snapshots()
        # epochs, the loaded resume point (a Loaded) and where the trainer is
        self._pass = PassCursor()
        self._epoch_due = False  # set_epoch during a pass: forward it when the next one starts
        self._exchange: StepExchange | None = None
        self._stop = threading.Event()
        self._assembler = Assembler(rank=self.rank, world_size=self.world_size, names=self._names,
                                    reorder_only=reorder_only, id_fn=id_fn, collate_fn=collate_fn,
                                    split_images_fn=split_images_fn)

    # -- one step ---------------------------------------------------------------------------
    def _produce(self, loaded: Loaded | None) -> Generator[_StepOut, None, None]:
        """The steps of this rank from ``loaded`` (``None``: the epoch's start), computed
        in order (on the producer thread, or in the trainer's with ``prefetch=0``)."""
        ex = self._exchange = StepExchange(self.channel)
        stop = self._stop  # this pass's: a later pass has its own
        streams = [SourceStream(n, c, self._sources[n], flatten_steps=not self.reorder_only)
                   for c, n in enumerate(self._names)]
        measure = Measure(rank=self.rank, world_size=self.world_size, reorder_only=self.reorder_only,
                          capacity=self.capacity, length_fn=self.length_fn, docs_fn=self.docs_fn,
                          token_count_fn=self.token_count_fn, id_fn=self.id_fn, images_fn=self.images_fn)
        reader = RankReader(streams, measure, num_microbatches=self.num_microbatches,
                            global_batch_size=self.global_batch_size, token_budget=self.token_budget,
                            schedule=self.schedule)
        carry: list[Held] = []
        step = 0  # replay: a resumed loader replays the plans before its resume point
        # the resume target: (step, micro-batches of it already delivered), and what a
        # "state"-mode state restores (streams, carry, next index)
        resume = loaded.resume if loaded is not None else None
        restored = loaded.restored if loaded is not None else None
        target, mb = resume if resume is not None else (0, 0)
        strict = loaded is not None and (self.resume_mode == "state" or loaded.merged)
        if agree_on_start(self.channel, target, mb, restored is not None, self.config_fingerprint(),
                          strict=strict) and restored is not None:
            # every rank restores: the sources continue where step `target` began;
            # put back what this rank held beyond them then
            try:
                carry = restore_sources(reader, self._sources, restored)
            except BaseException:
                ex.announce(FAILED)  # the peers stop instead of waiting
                raise
            step = target
        elif restored is not None:
            log.info("BalancedLoader rank %d: a peer cannot restore its sources' states; replaying to step %d",
                     self.rank, target)
        self._record(step, resume, reader, carry)
        while True:
            if stop.is_set():
                ex.announce(CLOSED)
                return
            try:
                held, leftover, short = reader.take(step, carry)
                vec = rank_meta(held, self.rank).encode()
            except BaseException:
                ex.announce(FAILED)
                raise
            gathered = ex.gather(EXHAUSTED if short else OK, vec)
            plan = plan_step(self.planner, step, ((status == EXHAUSTED, v) for status, v in gathered),
                             drop_last=self.drop_last)
            if plan is None:
                return  # the same decision on every rank
            carry = carry_after(plan, held, leftover)
            self._record(step + 1, resume, reader, carry)
            if resume is not None and step < resume[0]:
                # replaying up to the resume point: the plan is a pure function of the
                # gathered metadata, so every rank rebuilds the same carry; the samples
                # themselves need neither moving nor collating
                step += 1
                continue
            items = self._assembler.deliver(plan, {h.id: h.payload for h in held}, ex)
            if resume is not None and step == resume[0]:
                items = items[resume[1]:]
                resume = None
            try:
                yield _StepOut(step, items)
            except GeneratorExit:
                # the trainer left its loop (synchronous mode) or the producer dropped
                # this generator: tell the peers now (once; they may be gone already)
                try:
                    ex.announce(CLOSED)
                except Exception:  # noqa: BLE001
                    pass
                raise
            step += 1

    def _record(self, step: int, resume: tuple[int, int] | None, reader: RankReader, carry: list[Held]) -> None:
        """Snapshot where ``step`` starts (nobody can resume inside a replay up to
        ``resume``: nothing is recorded there)."""
        if resume is not None and step < resume[0]:
            return
        self._snapshots.record(step, reader, carry)

    # -- iteration (youmu.loaders.passes.StepLoader) -----------------------------------------------
    def _begin_pass(self) -> Iterator[_StepOut]:
        """Begin a pass (youmu.state.contract's loader contract): an earlier one is closed
        first; a pass after the first starts at the epoch's start unless a state was
        loaded since, and needs sources that can be iterated again."""
        self.close()
        cursor = self._pass
        if cursor.passes:
            again_or_raise(type(self).__name__, self._sources)
        if cursor.pass_epoch is not None:  # no state loaded since the last pass: the epoch's start
            self._snapshots = self._fresh_snapshots()
        loaded = cursor.begin()
        if self._epoch_due:
            self._forward_epoch(cursor.epoch)
        self._epoch_due = False
        self._stop = threading.Event()
        return self._produce(loaded)

    def _delivered(self, out: _StepOut, at: tuple[int, int]) -> None:
        super()._delivered(out, at)
        self._snapshots.forget_before(at[0])

    def iter_steps(self) -> Iterator[Sequence[tuple[Any, MicroBatchInfo]]]:
        """Iterate whole steps: a list of ``num_microbatches`` ``(batch, info)`` pairs.

        >>> loader = BalancedLoader([{"input_ids": [0] * n} for n in (3, 1, 2)], num_microbatches=2,
        ...                         global_batch_size=3, prefetch=0)
        >>> [[info.num_tokens for _, info in step] for step in loader.iter_steps()]
        [[3, 3]]
        """
        return super().iter_steps()

    def _stopping(self, steps: Iterator[_StepOut]) -> Callable[[], None]:
        stop = self._stop

        def tell_peers() -> None:
            # on the producer thread, when the trainer left its loop (or close()) before
            # the steps ran out: tell the peers at the next exchange instead of leaving
            # them to time out
            if inspect.getgeneratorstate(steps) == inspect.GEN_CREATED:  # type: ignore[arg-type]
                stop.set()
                next(steps, None)  # meet the peers at the start, then say CLOSED at the first step
            elif self._exchange is not None:
                self._exchange.announce(CLOSED)

        return tell_peers

    def close(self, timeout: float | None = None) -> None:
        """Stop the pass in progress, if any (its background thread tells the peers at
        its next exchange; with ``prefetch=0`` the pass itself does); idempotent. The
        loader stays usable: the next ``iter()`` starts a new pass (youmu.state.contract's
        loader contract)."""
        self._stop.set()
        super().close(timeout)
