"""The step planner: one actor that turns (seed, step) into every rank's micro-batches
— MegaScale-Data's central Planner (§3, §4: ``mix → distribute → cost → balance``),
computed by youmu.planning's own pieces so the plans are those of the in-process
:class:`~youmu.planning.BalancedLoader`.

**Why one actor, not a pure function on every rank.** Every rank *could* compute the
plan (youmu.planning does, after an all-gather), but over Ray each rank would first
have to fetch every source's metadata for every rank: ``W × S`` actor calls per step
per rank. One planner makes at most ``S`` calls per step (fewer: one per loader
actor, and only for the sources whose look-ahead runs low), serves each client a
small plan, and owns the state a mixing controller would keep.

**How a step is planned.** For each rank ``r`` the planner runs planning's
:class:`~youmu.planning.steps.rank_sources.RankReader` over *remote stream views*: rank ``r``'s
stream of each source is a sequence of :class:`~youmu.ray.source.Record`\\ s fetched
from that source's loader in chunks (a couple of steps ahead, all loaders at once),
and a :class:`RecordMeasure` holds each record as the rank's loader would hold the
sample (arrival ids ``k·W + r``, capacity checks). The ranks' candidates are
concatenated in rank order (:func:`~youmu.planning.steps.rank_sources.step_meta`, what the
all-gather gives), planned by :meth:`Planner.plan <youmu.planning.Planner.plan>`, and
each rank's micro-batches are put together by planning's
:class:`~youmu.planning.steps.microbatch.Assembler` with *references* ``(source, origin stream,
position)`` (the origin rank's stream; after a resize, :mod:`youmu.ray.state`) in
place of samples: every :class:`~youmu.planning.MicroBatchInfo` field (loss scale,
padding slots, fingerprint) is the in-process one.

**State.** After step ``s`` the planner's state (:class:`PlannerState`) is the step,
every (rank, source) stream position, every rank's arrival counter, the carried
records and each rank's last micro-batch (a padding slot repeats it) — a few
integers and references, no samples. Every plan it hands out carries the state as of
that step's start; clients keep the latest. A restarted planner (a new process, no
state) answers :data:`NEED_STATE` until a client sends one, and since planning is
deterministic every client then gets the plans it would have got. Mixing schedules
are pure functions of the step, so they hold no state of their own.

Example (in process, with a local loader; :class:`youmu.ray.RayLoaders` deploys both
as actors):
    >>> from youmu.mixture.mapstream import MapStream
    >>> from youmu.ray.calls import Actor
    >>> from youmu.ray.source import Source
    >>> from youmu.ray.source_actor import SourceLoader
    >>> rows = {n: [{"input_ids": [0] * (k % 7 + 1)} for k in range(40)] for n in ("web", "code")}
    >>> loader = SourceLoader({n: Source(stream=lambda r, w, n=n: MapStream(rows[n], rank=r, world_size=w))
    ...                        for n in rows}, world_size=2)
    >>> settings = PlanSettings.make(world_size=2, num_microbatches=2, global_batch_size=8,
    ...                              schedule={"web": 3, "code": 1}, names=["web", "code"])
    >>> planner = StepPlanner(settings, [Actor.local("demo.loader0", loader, kind="source loader")], [0, 0])
    >>> planner.plans(0, 0, 0, 1)                            # a fresh planner needs a state first
    'youmu.ray/need-state'
    >>> step = planner.plans(0, 0, 0, 1, PlannerState.initial(0, 2, 2).to_dict())[0]
    >>> [(info.microbatch, info.num_samples) for refs, info in step.microbatches]
    [(0, 1), (1, 3)]
    >>> step.microbatches[0][0]                              # (source, origin stream, position)
    ((0, 1, 2),)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from youmu._internal.args import int_arg, seconds_arg
from youmu.distributed import fingerprint
from youmu.errors import InvalidArgumentError, StateError
from youmu.planning.settings import PlanSettings
from youmu.planning.steps.microbatch import Assembler, MicroBatchInfo
from youmu.planning.steps.rank_sources import Held, RankReader, SourceStream, carry_after, plan_step, rank_meta
from youmu.ray.calls import Actor
from youmu.ray.state import Chain, PlannerState, Ref
from youmu.ray.views import LOOKAHEAD_STEPS, MIN_CHUNK, Fetcher, RecordMeasure, View
from youmu.state.contract import check_epoch

__all__ = ["NEED_STATE", "RankStep", "StepPlanner"]

#: a planner's answer when it cannot serve a step without a client's state
NEED_STATE = "youmu.ray/need-state"

# the largest number of steps one request may ask for, and how far past its position a
# planner computes forward rather than asking for a state
MAX_STEPS_PER_CALL = 64
_MAX_FORWARD = 256
# steps of plans kept behind the planner's position for ranks that lag
_RETAIN = 128


@dataclass(frozen=True)
class RankStep:
    """One step of one rank's plan: its micro-batches as ``(refs, info)`` (``refs``
    ``None`` for a padding slot with nothing to repeat), the planner state as of the
    step's start, or ``end`` (the stream ended before this step)."""

    step: int
    state: dict[str, Any] | None
    microbatches: tuple[tuple[tuple[Ref, ...] | None, MicroBatchInfo], ...] = ()
    end: bool = False
    #: the state as of the next step's start (what a client saves once this step is delivered)
    after: dict[str, Any] | None = None
    #: what the loaders need to read the references of a resized epoch
    chain: Chain | None = None


@dataclass
class _StepResult:
    step: int
    state: dict[str, Any] | None
    per_rank: list[tuple[tuple[tuple[Ref, ...] | None, MicroBatchInfo], ...]] = field(default_factory=list)
    end: bool = False
    after: dict[str, Any] | None = None
    chain: Chain | None = None

    def for_rank(self, rank: int) -> RankStep:
        return RankStep(self.step, self.state, () if self.end else self.per_rank[rank], self.end, self.after,
                        self.chain)


# ------------------------------------------------------------------------------------------
# the planner
# ------------------------------------------------------------------------------------------
class StepPlanner:
    """Plans every rank's steps (see the module doc). Runs as a Ray actor
    (``max_restarts=-1``) or, for tests, in process.

    Args:
        settings: the plan's settings (:meth:`PlanSettings.make`).
        loaders: the source loader actors.
        group_of: for each source (schedule order), the loader serving it.
        timeout: seconds a loader may take to answer (a restart included).
        config: the deployment's fingerprint (default: the plan settings').
        deployment: what :meth:`deployment` hands to clients that connect by name.
    """

    def __init__(self, settings: PlanSettings, loaders: Sequence[Actor], group_of: Sequence[int], *,
                 timeout: float = 60.0, config: int | None = None, deployment: Any = None) -> None:
        if settings.world_size is None:
            raise InvalidArgumentError("the planner's settings need a world size (settings.on(world_size))")
        self.settings = settings
        self.loaders = list(loaders)
        self.group_of = [int(g) for g in group_of]
        if len(self.group_of) != len(settings.names) or any(not 0 <= g < len(self.loaders) for g in self.group_of):
            raise InvalidArgumentError(f"group_of must give a loader in range({len(self.loaders)}) for each of the "
                                       f"{len(settings.names)} sources")
        self.timeout = seconds_arg("timeout", timeout)
        self._deployment = deployment
        self._planner = settings.planner()
        self._fingerprint = settings.fingerprint() if config is None else int(config)
        self.world_size: int = settings.world_size
        # the cursor: where planning stands (None: not seeded, or broken by a failure)
        self._cursor: PlannerState | None = None
        self._results: dict[tuple[int, int], _StepResult] = {}
        self._end: tuple[int, int] | None = None  # (epoch, step) at which the stream ended
        self._low: dict[int, int] = {}
        self.seeded = 0  # how many times a client's state (re)started planning
        self.busy_s = 0.0
        self._lock = threading.Lock()  # in process, clients call from their own threads

    # -- what clients ask --------------------------------------------------------------------
    def fingerprint(self) -> int:
        """The deployment's fingerprint (clients and resumed states must match it)."""
        return self._fingerprint

    def deployment(self) -> Any:
        """What clients need to connect (:meth:`youmu.ray.RayLoaders.connect`)."""
        return self._deployment

    def ping(self) -> dict[str, Any]:
        import os

        from youmu.ray.source_actor import node_id

        return {"pid": os.getpid(), "node": node_id(), "seeded": self.seeded,
                "cursor": None if self._cursor is None else (self._cursor.epoch, self._cursor.step),
                "busy_s": self.busy_s}

    def plans(self, rank: int, epoch: int, step: int, count: int, state: Mapping[str, Any] | None = None
              ) -> list[RankStep] | str:
        """Rank ``rank``'s plans of steps ``step, …, step + count - 1`` of ``epoch`` (fewer
        when the stream ends: the last one then has ``end``), or :data:`NEED_STATE`
        when this planner cannot reach ``step`` without ``state`` — a
        :meth:`PlannerState.to_dict` as of a step ``<= step`` of the same epoch."""
        with self._lock:
            t0 = time.perf_counter()
            try:
                return self._plans(rank, epoch, step, count, state)
            finally:
                self.busy_s += time.perf_counter() - t0

    def _plans(self, rank: int, epoch: int, step: int, count: int, state: Mapping[str, Any] | None
               ) -> list[RankStep] | str:
        int_arg("rank", rank, minimum=0, maximum=self.world_size - 1)
        # an actor method is a process boundary: its caller's checks do not travel with the call
        check_epoch(epoch)
        int_arg("step", step, minimum=0)
        int_arg("count", count, minimum=1, maximum=MAX_STEPS_PER_CALL)
        self._low[rank] = step
        if not self._reachable(epoch, step, count):
            if state is None:
                return NEED_STATE
            st = PlannerState.from_dict(state, world_size=self.world_size, num_sources=len(self.settings.names))
            if st.epoch != epoch or st.step > step:
                raise StateError(f"a state of epoch {st.epoch} step {st.step} cannot start epoch {epoch} step {step}")
            self._seed(st)
        out: list[RankStep] = []
        for s in range(step, step + count):
            res = self._result(epoch, s)
            out.append(res.for_rank(rank))
            if res.end:
                break
        self._forget()
        return out

    # -- planning ---------------------------------------------------------------------------
    def _reachable(self, epoch: int, step: int, count: int) -> bool:
        if self._end is not None and self._end[0] == epoch and step >= self._end[1]:
            return True
        for s in range(step, step + count):
            if (epoch, s) in self._results:
                continue
            if self._end is not None and self._end[0] == epoch and s >= self._end[1]:
                return True
            c = self._cursor
            return c is not None and c.epoch == epoch and c.step <= s <= c.step + _MAX_FORWARD
        return True

    def _result(self, epoch: int, step: int) -> _StepResult:
        got = self._results.get((epoch, step))
        if got is not None:
            return got
        if self._end is not None and self._end[0] == epoch and step >= self._end[1]:
            return _StepResult(step, None, end=True)
        assert self._cursor is not None and self._cursor.epoch == epoch and self._cursor.step <= step
        while True:
            res = self._step()
            if res.step == step or res.end:
                return res if res.step == step else _StepResult(step, None, end=True)

    def _seed(self, st: PlannerState) -> None:
        """Start planning at ``st`` (a new process, a failure, or a client far away)."""
        cfg = self.settings
        self.seeded += 1
        self._results.clear()
        self._end = None
        self._chain = st.chain(cfg.names)
        self._fetcher = Fetcher(self.loaders, self.group_of, st.epoch, self.timeout, self._chain)
        self._views: list[list[View]] = []
        self._readers: list[RankReader] = []
        self._assemblers: list[Assembler] = []
        for r in range(self.world_size):
            views = [View(self._fetcher, n, c, st.origin(r), st.positions[r][c]) for c, n in enumerate(cfg.names)]
            streams = [SourceStream(n, c, v, flatten_steps=True) for c, (n, v) in enumerate(zip(cfg.names, views))]
            for s, done in zip(streams, st.done[r]):
                s.restore([], done)
            measure = RecordMeasure(rank=r, world_size=self.world_size, capacity=cfg.capacity, origin=st.origin(r))
            measure.next_index = st.next_index[r]
            self._views.append(views)
            self._readers.append(RankReader(streams, measure, num_microbatches=cfg.num_microbatches,
                                            global_batch_size=cfg.global_batch_size, token_budget=cfg.token_budget,
                                            schedule=cfg.schedule))
            asm = Assembler(rank=r, world_size=self.world_size, names=cfg.names)
            last = st.last[r]
            asm.last_batch = None if last is None else list(last)
            self._assemblers.append(asm)
        # a carried record's payload: (origin stream, position), as RecordMeasure holds one
        self._carry = [[Held(i, s, list(d), t, (o, p)) for i, s, d, t, p, o in st.carry[r]]
                       for r in range(self.world_size)]
        self._used = [[0] * len(cfg.names) for _ in range(self.world_size)]
        self._cursor = st

    def _snapshot(self, step: int) -> PlannerState:
        assert self._cursor is not None
        return PlannerState(
            self._cursor.epoch, step,
            tuple(tuple(v.position for v in views) for views in self._views),
            tuple(tuple(s.done for s in reader.streams) for reader in self._readers),
            tuple(reader.measure.next_index for reader in self._readers),
            tuple(tuple((h.id, h.source, tuple(h.docs), h.tokens, int(h.payload[1]), int(h.payload[0]))
                        for h in carry) for carry in self._carry),
            tuple(None if a.last_batch is None else tuple(tuple(x) for x in a.last_batch) for a in self._assemblers),
            self._cursor.resumed,
        )

    def _read_ahead(self, step: int) -> None:
        """Ask the loaders for the records this step will need (all at once)."""
        cfg = self.settings
        if cfg.schedule is not None:
            assert cfg.global_batch_size is not None  # a schedule mixes a sample count
            counts = cfg.schedule.count_vector(step, cfg.global_batch_size).tolist()
        elif cfg.global_batch_size is not None:
            counts = [cfg.global_batch_size]
        else:
            counts = None  # a token budget: as many as the last step used
        wants = []
        for r, views in enumerate(self._views):
            for c, v in enumerate(views):
                need = (max(self._used[r][c], 1) if counts is None
                        else math.ceil(int(counts[c]) / self.world_size))
                if need and v.buffered < need and v.pending is None and not v.ended:
                    wants.append((v, max(MIN_CHUNK, LOOKAHEAD_STEPS * need)))
        self._fetcher.fetch(wants)

    def _step(self) -> _StepResult:
        """Plan the step at the cursor, exactly as every rank's ``BalancedLoader`` would."""
        assert self._cursor is not None
        start = self._cursor
        s = start.step
        try:
            res = self._plan_step(s, start)
        except BaseException:
            self._cursor = None  # part-way through a step: plan again from a client's state
            raise
        self._results[(start.epoch, s)] = res
        if res.end:
            self._end = (start.epoch, s)
            self._cursor = None
        else:
            self._cursor = self._snapshot(s + 1)
            res.after = self._cursor.to_dict()
        return res

    def _plan_step(self, s: int, start: PlannerState) -> _StepResult:
        cfg = self.settings
        self._read_ahead(s)
        before = [[v.position for v in views] for views in self._views]
        helds, leftovers, shorts = [], [], []
        for r, reader in enumerate(self._readers):
            held, leftover, short = reader.take(s, self._carry[r])
            helds.append(held)
            leftovers.append(leftover)
            shorts.append(short)
        self._used = [[v.position - b for v, b in zip(views, bs)] for views, bs in zip(self._views, before)]
        reports = ((short, rank_meta(held, r).encode()) for r, (held, short) in enumerate(zip(helds, shorts)))
        plan = plan_step(self._planner, s, reports, drop_last=cfg.drop_last)
        if plan is None:
            return _StepResult(s, start.to_dict(), end=True, chain=self._chain)
        self._carry = [carry_after(plan, helds[r], leftovers[r]) for r in range(self.world_size)]
        refs = {h.id: (h.source, *h.payload) for held in helds for h in held}
        per_rank = []
        for asm in self._assemblers:
            items = asm.assemble(plan, refs)
            per_rank.append(tuple((None if b is None else tuple(b), info) for b, info in items))
        return _StepResult(s, start.to_dict(), per_rank, chain=self._chain)

    def _forget(self) -> None:
        """Drop plans no rank can still ask for (and, past a bound, plans of ranks that
        lag: they re-send their state)."""
        if not self._results:
            return
        newest = max(s for _, s in self._results)
        floor = newest - _RETAIN
        if len(self._low) == self.world_size:
            floor = max(floor, min(self._low.values()))
        for key in [k for k in self._results if k[1] < floor]:
            del self._results[key]


def fingerprint_of(settings: PlanSettings, sources: Mapping[str, Any], measure: Any) -> int:
    """The fingerprint of a whole deployment: the plan's settings, every source's
    stream settings and the measuring functions."""
    return fingerprint({"plan": settings.fingerprint(), "sources": sources, "measure": measure})

