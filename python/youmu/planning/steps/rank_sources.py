"""This rank's side of a :class:`~youmu.planning.balanced_loader.BalancedLoader` step: its
source streams, the samples it holds, how they are measured, and how many it reads
for a step.

* :class:`SourceStream` — one source (an iterable of samples), iterated lazily;
  ``DynamicBatchLoader(collate_fn=None)`` steps are flattened into their samples (a
  padding step, which repeats data, is skipped), the rest of a step stays *pending*
  for the next read.
* :class:`Held` — a measured sample this rank holds: id, source, document lengths,
  loss tokens and the sample itself.
* :class:`Measure` — documents and loss tokens of a sample (the user's functions or
  :func:`~youmu.planning.steps.microbatch.default_docs`) and its id (``id_fn`` or the arrival id
  ``k·W + rank``).
* :class:`RankReader` — this rank's share of a step: ``global_batch_size`` samples
  or ``token_budget`` tokens split over the ranks by :func:`youmu.order.sharding.share`
  (the remainder rotating with the step), a mixing schedule's exact per-source
  counts, or ``num_microbatches`` formed micro-batches (``reorder_only``);
* :func:`rank_meta`, :func:`step_meta`, :func:`carry_after` — what a rank
  contributes to a step's plan, the step's candidates in rank order, and what a rank
  holds over to the next step: the same three pieces whether each rank plans for
  itself after an all-gather (:class:`~youmu.planning.balanced_loader.BalancedLoader`) or one
  process plans for every rank (:mod:`youmu.ray`).

Example:
    >>> measure = Measure(rank=0, world_size=1)
    >>> reader = RankReader([SourceStream("default", 0, [{"input_ids": [0] * n} for n in (3, 5, 2)], True)],
    ...                     measure, num_microbatches=1, global_batch_size=2)
    >>> held, leftover, short = reader.take(0, [])
    >>> [(h.id, h.docs) for h in held], short
    ([(0, [3]), (1, [5])], False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu._internal.args import callable_arg, index_of
from youmu.errors import ArgumentTypeError, CapacityError, InvalidArgumentError
from youmu.order.sharding import share
from youmu.planning.engine.meta import SampleMeta
from youmu.planning.engine.planner import Planner, StepPlan
from youmu.planning.engine.schedule import MixingSchedule, MixtureSchedule, as_schedule
from youmu.planning.steps.microbatch import default_docs

__all__ = ["check_sample_fns", "SourceStream", "Held", "Measure", "RankReader", "formed_microbatch", "resolve_sources",
           "rank_meta",
           "step_meta", "plan_step", "carry_after"]


def check_sample_fns(**fns: Any) -> None:
    """Check a loader's per-sample functions (``length_fn``, ``docs_fn``,
    ``token_count_fn``, ``id_fn``, ``collate_fn``, ``images_fn``: each callable or
    ``None``; ``length_fn`` and ``docs_fn`` not both) — for ``BalancedLoader`` and the Ray
    deployment alike.

    >>> check_sample_fns(length_fn=len, docs_fn=len)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: pass length_fn= or docs_fn=, not both
    """
    if fns.get("length_fn") is not None and fns.get("docs_fn") is not None:
        raise InvalidArgumentError("pass length_fn= or docs_fn=, not both")
    for name, fn in fns.items():
        callable_arg(name, fn, optional=True)


def resolve_sources(
    source: Any,
    *,
    schedule: Any,
    global_batch_size: int | None,
    token_budget: int | None,
    reorder_only: bool,
) -> tuple[list[str], dict[str, Any], MixingSchedule | MixtureSchedule | None]:
    """Check a loader's ``source`` against how much it reads per step; return the
    source names (in schedule order), ``{name: stream}`` and the mixing schedule.

    One stream is named ``"default"``; a ``{name: stream}`` mapping needs a schedule
    over exactly its names and a ``global_batch_size``; ``reorder_only`` takes one
    stream of formed micro-batches and no size; otherwise exactly one of
    ``global_batch_size`` and ``token_budget``.

    >>> resolve_sources({"web": [], "code": []}, schedule={"web": 3, "code": 1}, global_batch_size=8,
    ...                 token_budget=None, reorder_only=False)[0]
    ['web', 'code']
    """
    multi = isinstance(source, Mapping)
    for name, src in (source.items() if multi else [("source", source)]):
        if isinstance(src, (str, bytes)) or not isinstance(src, Iterable):
            what = "source" if not multi else f"source[{name!r}]"
            raise ArgumentTypeError(f"{what} must be an iterable of samples (a list shard, a dataset, a "
                                    f"DataLoader), got {type(src).__name__}")
    if reorder_only:
        if global_batch_size is not None or token_budget is not None:
            raise InvalidArgumentError("reorder_only takes num_microbatches formed micro-batches per rank per "
                                       "step; do not pass global_batch_size or token_budget")
        if multi:
            raise InvalidArgumentError("reorder_only needs one stream of formed micro-batches, not a mapping "
                                       "of sources")
    elif (global_batch_size is None) == (token_budget is None):
        raise InvalidArgumentError("pass exactly one of global_batch_size= (samples per step) or token_budget= "
                                   "(tokens)")
    if not multi:
        if schedule is not None:
            raise InvalidArgumentError("schedule= applies to a {name: stream} source")
        return ["default"], {"default": source}, None
    if schedule is None:
        raise InvalidArgumentError("a {name: stream} source needs schedule= (per-source weights per step)")
    if global_batch_size is None:
        raise InvalidArgumentError("a {name: stream} source mixes a fixed number of samples: pass "
                                   "global_batch_size=")
    if not source:
        raise InvalidArgumentError("the source mapping is empty")
    sched = as_schedule(schedule, global_batch_size, names=list(source))
    missing = set(sched.names) - set(source)
    if missing:
        raise InvalidArgumentError(f"the schedule names sources without a stream: {sorted(missing)}")
    unused = set(map(str, source)) - set(sched.names)
    if unused:
        # a stream the schedule never draws from would silently never be read
        raise InvalidArgumentError(f"source streams {sorted(unused)} are not in the schedule "
                                   f"(sources: {sched.names})")
    return list(sched.names), dict(source), sched


def formed_microbatch(item: Any) -> list[Any]:
    """A formed micro-batch: a list of samples, or ``(list, StepInfo)`` as
    :class:`~youmu.batching.dynamic_loader.DynamicBatchLoader` yields with ``collate_fn=None``.

    >>> formed_microbatch(([1, 2], None))     # not a (list, StepInfo) pair: the tuple is the batch
    [[1, 2], None]
    """
    if isinstance(item, tuple) and len(item) == 2 and hasattr(item[1], "loss_scale"):
        item = item[0]
    if not isinstance(item, (list, tuple)):
        raise ArgumentTypeError(
            "with reorder_only=True every item of the source is a formed micro-batch (a list of samples, or the "
            f"(list, info) pairs of DynamicBatchLoader(collate_fn=None)); got {type(item).__name__}"
        )
    return list(item)


def _is_step_pair(item: Any) -> bool:
    """A ``DynamicBatchLoader(collate_fn=None)`` step: ``(list of samples, StepInfo)``."""
    return isinstance(item, tuple) and len(item) == 2 and hasattr(item[1], "loss_scale") and isinstance(item[0], list)


class SourceStream:
    """One source stream of this rank (flattening DynamicBatchLoader steps).

    >>> s = SourceStream("web", 0, ["a", "b"], flatten_steps=True)
    >>> s.next(), s.next(), s.next(), s.done
    ((True, 'a'), (True, 'b'), (False, None), True)
    """

    def __init__(self, name: str, number: int, iterable: Iterable[Any], flatten_steps: bool) -> None:
        self.name, self.number = name, number
        self.iterable = iterable
        # iter() on first use: a resumed stream that had already ended must not start
        # its source over (a DynamicBatchLoader would open a new epoch with its peers)
        self._it: Iterator[Any] | None = None
        self._flatten = flatten_steps
        self._pending: list[Any] = []
        self.done = False
        # the source's state when it ended: a merge of the ranks' states
        # (youmu.merge_states) needs where every rank's shard stopped
        self._end_state: Any = None

    def restore(self, pending: list[Any], done: bool, end_state: Any = None) -> None:
        self._pending = list(pending)
        self.done = bool(done)
        self._end_state = end_state if done else None

    def snapshot(self) -> dict[str, Any]:
        """The source's own state and what this stream holds beyond it (called between
        items, in the thread that iterates the source); an ended source's state as it
        ended is ``end_state``, when it has one."""
        snap = {"name": self.name, "done": self.done, "pending": list(self._pending),
                "source_state": None if self.done else self.iterable.state_dict()}  # type: ignore[attr-defined]
        if self.done and self._end_state is not None:
            snap["end_state"] = self._end_state
        return snap

    def _ended(self) -> None:
        self.done = True
        if hasattr(self.iterable, "state_dict"):
            try:
                self._end_state = self.iterable.state_dict()
            except Exception:  # noqa: BLE001 - only a merge needs it, and says so when it is missing
                self._end_state = None

    def next(self) -> tuple[bool, Any]:
        """``(True, sample)``, or ``(False, None)`` once the source has ended."""
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
                self._ended()
                return False, None
            if self._flatten and _is_step_pair(item):
                if getattr(item[1], "is_padding", False):
                    continue  # a filler step repeats data: never count it twice
                self._pending.extend(item[0])
                continue
            return True, item


@dataclass
class Held:
    """A sample this rank holds: its id, source, documents, loss tokens, payload, and
    (vision-language samples, with ``images_fn``) its images' encoder patches."""

    id: int
    source: int
    docs: list[int]
    tokens: int
    payload: Any
    images: list[int] | None = field(default=None, repr=False)

    def as_tuple(self) -> tuple[Any, ...]:
        """The form a saved state carries (``carry`` entries)."""
        base = (self.id, self.source, list(self.docs), self.tokens, self.payload)
        return base if self.images is None else (*base, list(self.images))


def measure_images(fn: Callable[[Any], Any], sample: Any) -> list[int]:
    """A sample's images' encoder patches from ``images_fn``: a count (one image, or
    all of them together) or a list of counts (one per image).

    >>> measure_images(lambda s: s["encoder_patches"], {"encoder_patches": 1564}), measure_images(len, [])
    ([1564], [0])
    """
    value = fn(sample)
    if isinstance(value, (list, tuple, np.ndarray)):
        out = [index_of(x, "each image's patches from images_fn") for x in value]
    else:
        out = [index_of(value, "images_fn's result")]
    if any(x < 0 for x in out):
        raise InvalidArgumentError(f"images_fn returned a negative patch count ({out})")
    return out


class Measure:
    """Documents, loss tokens and ids of this rank's samples.

    Ids: ``id_fn(sample)``, else the arrival id ``k·W + rank`` of the ``k``-th sample
    this rank measured (:attr:`next_index` is ``k``; a resume restores it). With
    ``reorder_only`` a "sample" is a formed micro-batch: its documents are all its
    samples' documents, and its id is always the arrival id.

    >>> m = Measure(rank=1, world_size=2)
    >>> h = m.measure({"input_ids": [0] * 7}, source=0)
    >>> h.id, h.docs, h.tokens
    (1, [7], 7)
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        reorder_only: bool = False,
        capacity: int | None = None,
        length_fn: Callable[[Any], int] | None = None,
        docs_fn: Callable[[Any], Iterable[int]] | None = None,
        token_count_fn: Callable[[Any], int] | None = None,
        id_fn: Callable[[Any], int] | None = None,
        images_fn: Callable[[Any], Any] | None = None,
    ) -> None:
        self.rank, self.world_size = rank, world_size
        self.images_fn = images_fn
        self.reorder_only = reorder_only
        self.capacity = capacity
        self.length_fn, self.docs_fn = length_fn, docs_fn
        self.token_count_fn = token_count_fn
        self.id_fn = id_fn
        #: arrival index of the next measured sample (default ids: index·W + rank)
        self.next_index = 0

    def measure(self, sample: Any, source: int) -> Held:
        """Measure ``sample`` of stream ``source`` and hold it (:meth:`measured`, then
        :meth:`hold`; ``id_fn`` last)."""
        docs, tokens = self.measured(sample)
        held = self.hold(docs, tokens, source, sample)
        if self.images_fn is not None:
            held.images = measure_images(self.images_fn, sample)
        if self.id_fn is not None and not self.reorder_only:
            held.id = index_of(self.id_fn(sample), "id_fn's result")
        return held

    def measured(self, sample: Any) -> tuple[list[int], int]:
        """Documents and loss tokens of ``sample`` (the part that needs the sample
        itself: a disaggregated loader measures where the data is, see
        :mod:`youmu.ray`).

        >>> Measure(rank=0, world_size=1).measured({"input_ids": [0] * 7})
        ([7], 7)
        """
        if not self.reorder_only:
            return self._measure_one(sample)
        docs: list[int] = []
        tokens = 0
        for s in sample:
            d, t = self._measure_one(s)
            docs.extend(d)
            tokens += t
        return docs, tokens

    def hold(self, docs: list[int], tokens: int, source: int, payload: Any, uid: int | None = None) -> Held:
        """A measured sample as this rank holds it: checked against ``capacity``, given
        the next arrival id (or ``uid``, an ``id_fn`` result computed elsewhere).

        >>> m = Measure(rank=1, world_size=2, capacity=8)
        >>> m.hold([5], 5, source=0, payload="x"), m.hold([3], 3, source=1, payload="y", uid=42).id
        (Held(id=1, source=0, docs=[5], tokens=5, payload='x'), 42)
        """
        if not self.reorder_only and self.capacity is not None and sum(docs) > self.capacity:
            # it would be deferred forever: no micro-batch can ever hold it
            raise CapacityError(f"a sample of {sum(docs)} tokens exceeds capacity={self.capacity}; "
                                "truncate or split it before the loader")
        k = self.next_index
        self.next_index += 1
        sid = k * self.world_size + self.rank if uid is None else uid
        return Held(sid, source, docs, tokens, payload)

    def _measure_one(self, sample: Any) -> tuple[list[int], int]:
        if self.length_fn is not None:
            docs = [index_of(self.length_fn(sample), "length_fn's result")]
        elif self.docs_fn is not None:
            docs = [index_of(x, "each document length from docs_fn") for x in self.docs_fn(sample)]
        else:
            docs = default_docs(sample)
        if any(d < 0 for d in docs):
            what = "length_fn" if self.length_fn is not None else "docs_fn" if self.docs_fn is not None else "a sample"
            raise InvalidArgumentError(f"negative document length in {docs} (from {what})")
        if self.token_count_fn is not None:
            tokens = index_of(self.token_count_fn(sample), "token_count_fn's result")
        else:
            tokens = int(sum(docs))
        if tokens < 0:
            raise InvalidArgumentError(f"token_count_fn returned a negative count ({tokens})")
        return docs, tokens


class RankReader:
    """Reads this rank's share of every step from its streams (see the module doc).

    Exactly one of ``global_batch_size`` and ``token_budget`` is set, or neither with
    ``reorder_only`` (the measure's); ``schedule`` (with ``global_batch_size``) gives
    each stream its count per step.
    """

    def __init__(
        self,
        streams: list[SourceStream],
        measure: Measure,
        *,
        num_microbatches: int,
        global_batch_size: int | None = None,
        token_budget: int | None = None,
        schedule: MixingSchedule | MixtureSchedule | None = None,
    ) -> None:
        self.streams = streams
        self.measure = measure
        self.num_microbatches = num_microbatches
        self.global_batch_size = global_batch_size
        self.token_budget = token_budget
        self.schedule = schedule

    def _share(self, total: int, step: int, salt: int = 0) -> int:
        # remainders rotate with the step (and the source) so no rank always takes the extra one
        return share(total, self.measure.rank, self.measure.world_size, offset=step + salt)

    def take(self, step: int, carry: list[Held]) -> tuple[list[Held], list[Held], bool]:
        """This rank's candidates for ``step`` (``carry`` first), the measured samples
        held over for the next step (a token budget's overshoot), and whether a stream
        ran short."""
        held = list(carry)
        short = False
        measure = self.measure
        if measure.reorder_only:
            s = self.streams[0]
            while len(held) < self.num_microbatches:
                ok, item = s.next()
                if not ok:
                    short = True
                    break
                held.append(measure.measure(formed_microbatch(item), 0))
            return held, [], short
        if self.token_budget is not None:
            budget = self._share(self.token_budget, step)
            s = self.streams[0]
            used = sum(sum(h.docs) for h in held)
            while used < budget:
                ok, item = s.next()
                if not ok:
                    short = True
                    break
                h = measure.measure(item, 0)
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
            s = self.streams[c]
            for _ in range(max(n, 0)):
                ok, item = s.next()
                if not ok:
                    short = True
                    break
                held.append(measure.measure(item, c))
        return held, [], short


def rank_meta(held: list[Held], rank: int) -> SampleMeta:
    """The candidates ``rank`` contributes to a step's plan (it all-gathers
    ``rank_meta(...).encode()``).

    >>> rank_meta([Held(3, 0, [30, 70], 100, None)], rank=1).origin.tolist()
    [1]
    """
    images = None
    if any(h.images is not None for h in held):
        images = [h.images or [] for h in held]
    return SampleMeta.build(ids=[h.id for h in held], docs=[h.docs for h in held], sources=[h.source for h in held],
                            tokens=[h.tokens for h in held], origin=rank, images=images)


def step_meta(vectors: Iterable[np.ndarray]) -> SampleMeta:
    """A step's candidates: every rank's encoded :func:`rank_meta`, in rank order,
    decoded with ``origin`` set to the rank (what the planner plans over); ids must be
    unique across ranks.

    >>> a, b = rank_meta([Held(0, 0, [5], 5, None)], 0), rank_meta([Held(1, 0, [7], 7, None)], 1)
    >>> m = step_meta([a.encode(), b.encode()]); m.ids.tolist(), m.origin.tolist()
    ([0, 1], [0, 1])
    """
    meta = SampleMeta.concat(SampleMeta.decode(v, origin=k) for k, v in enumerate(vectors))
    if len(set(meta.ids.tolist())) != len(meta):
        raise InvalidArgumentError("sample ids are not unique across ranks (check id_fn)")
    return meta


def plan_step(planner: Planner, step: int, reports: Iterable[tuple[bool, np.ndarray]], *,
              drop_last: bool) -> StepPlan | None:
    """The plan of ``step`` from every rank's report — whether it ran short of samples,
    and its encoded :func:`rank_meta` — in rank order; ``None`` when the epoch ends there
    (a rank ran short under ``drop_last``, or no rank has a sample). Pure: each rank of
    a :class:`~youmu.planning.BalancedLoader` computes it from the gathered reports, the
    Ray planner once for all ranks, and both get the same plan.

    >>> a = rank_meta([Held(0, 0, [5], 5, None)], 0).encode()
    >>> p = plan_step(Planner().distribute(1), 0, [(False, a)], drop_last=False)
    >>> p.meta.ids.tolist(), plan_step(Planner().distribute(1), 0, [(True, a)], drop_last=True)
    ([0], None)
    """
    reports = list(reports)
    if drop_last and any(short for short, _ in reports):
        return None
    meta = step_meta(vector for _, vector in reports)
    return None if len(meta) == 0 else planner.plan(step, meta)


def carry_after(plan: StepPlan, held: list[Held], leftover: list[Held]) -> list[Held]:
    """What a rank holds over to the next step: its candidates the plan deferred (they
    fit in no micro-batch), then the samples :meth:`RankReader.take` read beyond its
    share (a token budget's overshoot)."""
    deferred = set(plan.meta.ids[plan.deferred].tolist())
    return [h for h in held if h.id in deferred] + leftover
