"""The per-rank client: what a training process iterates instead of a
:class:`~youmu.planning.BalancedLoader` — the same ``(batch, MicroBatchInfo)``
sequence, fed by the step planner and the source loaders (MegaScale-Data, §3: the
"trainer-side client" of a pull model, each rank receiving only its own
micro-batches).

Each step, on a background thread (:class:`youmu.distributed.Producer`, ``prefetch`` steps
ahead of the trainer):

1. ask the planner for this rank's plans of the next steps (several per call); a
   planner that restarted answers :data:`~youmu.ray.planner_actor.NEED_STATE` and gets the
   latest state this client holds;
2. fetch the samples of this rank's micro-batches from the source loaders — one call
   per loader actor per step, by position, so a repeated call (after a restart, or to
   a standby) returns the same samples; on one node they come out of Ray's object
   store without a copy (numpy and Arrow outputs);
3. collate each micro-batch (``collate_fn``) and hand over ``(batch, info)`` in slot
   order.

Every call has a deadline: a loader that does not come back within ``timeout`` (the
planner within twice that: it may itself be waiting on a loader) raises
:class:`~youmu.errors.LoaderUnavailableError` naming the actor, on every rank. The
client calls Ray from the training process (its thread), never from DataLoader worker
processes (where ``ray.get`` after a fork hangs): it refuses to run in one.

The client follows youmu's stream contract (:mod:`youmu.state.contract`): ``state_dict()``
is the step and micro-batch delivered plus the planner state as of that step (a few
integers; samples are re-read by position), ``load_state_dict`` checks it, and a new
deployment — on a new Ray cluster — resumes with exactly the uninterrupted tail.

Example (in process: ``RayLoaders(..., local=True)`` runs the actors' code in this
process; with Ray, ``RayLoaders(...)`` after ``ray.init``):
    >>> from youmu.ray import RayLoaders, Source
    >>> from youmu.mixture.mapstream import MapStream
    >>> rows = [{"input_ids": [0] * n} for n in (5, 1, 8, 3, 2, 7, 4, 6)]
    >>> loaders = RayLoaders({"web": Source(stream=lambda r, w: MapStream(rows, rank=r, world_size=w))},
    ...                      world_size=1, num_microbatches=2, global_batch_size=4, schedule={"web": 1},
    ...                      local=True)
    >>> client = loaders.client(0, prefetch=0)
    >>> [(info.step, info.microbatch, [len(s["input_ids"]) for s in batch]) for batch, info in client]
    [(0, 0, [5, 1, 3]), (0, 1, [8]), (1, 0, [4, 6]), (1, 1, [2, 7])]
    >>> client.state_dict()["step"]
    2
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu._internal.args import int_arg
from youmu.errors import ArgumentTypeError, LoaderError, ProtocolError, StateError
from youmu.loaders.passes import PassCursor, StepLoader
from youmu.planning.steps.microbatch import MicroBatchInfo
from youmu.ray.calls import Actor, Call
from youmu.ray.merge import parse_merged
from youmu.ray.planner_actor import MAX_STEPS_PER_CALL, NEED_STATE, RankStep
from youmu.ray.state import CLIENT_STATE, Chain, PlannerState, Ref
from youmu.state.jobs import is_merged

__all__ = ["RayBalancedLoader", "Deployment"]

_OWNER = "RayBalancedLoader"


@dataclass
class Deployment:
    """What a client needs to reach a deployment (picklable: rank processes get it
    from :meth:`youmu.ray.RayLoaders.connect`)."""

    name: str
    names: tuple[str, ...]
    world_size: int
    num_microbatches: int
    planner: Actor | None
    loaders: list[Actor]
    group_of: list[int]
    config: int
    timeout: float
    collate_fn: Callable[[list[Any]], Any] | None = None
    #: the plan settings a resume on another topology keeps (``PlanSettings.portable``)
    portable: dict[str, Any] | None = None
    #: the fingerprint of the sources' stream settings and the measuring functions
    data: int | None = None


@dataclass
class _StepOut:
    step: int
    items: list[tuple[Any, MicroBatchInfo]]
    state: dict[str, Any]
    after: dict[str, Any] | None = None


class RayBalancedLoader(StepLoader[_StepOut]):
    """This rank's balanced micro-batches from a deployment (see the module doc);
    get one with :meth:`youmu.ray.RayLoaders.client`.

    Args:
        deployment: the deployment's :class:`Deployment`.
        rank: this training rank.
        prefetch: steps prepared ahead by a background thread (0: in the caller).
        steps_per_call: plans asked of the planner per call.
    """

    thread_name = "youmu-ray-client"

    def __init__(self, deployment: Deployment, rank: int, *, prefetch: int = 2, steps_per_call: int = 2) -> None:
        if not isinstance(deployment, Deployment):
            raise ArgumentTypeError(f"deployment must be a youmu.ray Deployment (RayLoaders(...).deployment or "
                                    f"RayLoaders.connect()), got {type(deployment).__name__}")
        if deployment.planner is None:
            raise LoaderError("this Deployment has no planner handle: get it from RayLoaders.connect()")
        self.deployment = deployment
        self._planner: Actor = deployment.planner
        self.rank = int_arg("rank", rank, minimum=0, maximum=deployment.world_size - 1)
        self.prefetch = int_arg("prefetch", prefetch, minimum=0)
        self.steps_per_call = int_arg("steps_per_call", steps_per_call, minimum=1, maximum=MAX_STEPS_PER_CALL)
        self.world_size = deployment.world_size
        self.num_microbatches = deployment.num_microbatches
        self.collate_fn = deployment.collate_fn
        # epochs, a loaded resume point (planner state, step, micro-batch) and where the trainer is
        self._pass = PassCursor()
        # what state_dict() describes besides the cursor's (step, micro-batch): the planner
        # state as of a step at or before it (None: the start of the cursor's epoch)
        self._delivered_state: dict[str, Any] | None = None

    # -- iteration (youmu.loaders.passes.StepLoader) -----------------------------------------------------
    def _begin_pass(self) -> Iterator[_StepOut]:
        _refuse_dataloader_worker()
        self.close()
        loaded = self._pass.begin()  # None: the epoch's start
        epoch = self._pass.epoch  # this pass's: set_epoch during it takes effect at the next one
        if loaded is None:
            loaded = (PlannerState.initial(epoch, self.world_size, len(self.deployment.names)), 0, 0)
        start, step, mb = loaded
        self._delivered_state = start.to_dict()
        return self._produce(start, (step, mb), epoch)

    def _delivered(self, out: _StepOut, at: tuple[int, int]) -> None:
        super()._delivered(out, at)
        # once a step is delivered, the state as of the next one: a merge needs it
        self._delivered_state = out.after if at[1] == 0 and out.after is not None else out.state

    def _produce(self, start: PlannerState, resume: tuple[int, int], epoch: int) -> Iterator[_StepOut]:
        d = self.deployment
        latest = start.to_dict()
        step = start.step
        target_step, target_mb = resume
        while True:
            reply = self._ask(epoch, step, latest)
            fetches: list[tuple[RankStep, _Fetch | None]] = []
            for rs in reply:
                if rs.end:
                    fetches.append((rs, None))
                    break
                assert rs.state is not None
                latest = rs.state
                if rs.step < target_step:
                    continue  # replayed up to the resume point: metadata only
                first = target_mb if rs.step == target_step else 0
                fetches.append((rs, _Fetch(d, epoch, rs.microbatches[first:], rs.chain)))
            for rs, fetch in fetches:
                if fetch is None:
                    return
                assert rs.state is not None
                yield _StepOut(rs.step, fetch.assemble(self.collate_fn), rs.state, rs.after)
            step = reply[-1].step + 1

    def _ask(self, epoch: int, step: int, latest: dict[str, Any]) -> list[RankStep]:
        d = self.deployment
        timeout = 2 * d.timeout  # the planner may be waiting on a loader for `timeout`
        reply = self._planner.call("plans", self.rank, epoch, step, self.steps_per_call, None, timeout=timeout)
        if reply == NEED_STATE:
            # a new or restarted planner: it resumes from our state (the step alone)
            reply = self._planner.call("plans", self.rank, epoch, step, self.steps_per_call, latest,
                                   timeout=timeout)
        if not isinstance(reply, list) or not reply:
            raise ProtocolError(f"planner {self._planner.name!r} answered {reply!r:.80} for step {step}")
        return reply

    # -- the stream contract (youmu.state.contract) ---------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` from the next pass on (every source stream reshuffles for it;
        a pass in progress keeps its epoch). A loaded resume point of another epoch is
        cleared, one of this epoch kept (youmu.state.contract's loader contract)."""
        if self._pass.set_epoch(epoch):  # no pass since: state_dict() is the epoch's start
            self._delivered_state = None

    def config_fingerprint(self) -> int:
        """The deployment's fingerprint: the plan's settings (as
        ``BalancedLoader.config_fingerprint``), every source's stream settings and the
        measuring functions."""
        return self.deployment.config

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: ``step`` and ``microbatch`` (the next to deliver, as in
        ``BalancedLoader``) and ``planner``, the planner state as of the start of a step
        at or before it (a resume re-plans from there — metadata only — and skips what
        was delivered). Keys: ``format`` (``"youmu.ray.RayBalancedLoader/1"``),
        ``world_size``, ``rank``, ``num_microbatches``, ``config``, ``epoch``, ``step``,
        ``microbatch``, ``planner``, and for a resume on another topology
        (:func:`youmu.merge_states`, :mod:`youmu.ray.merge`) ``sources`` (the planner's
        source order), ``settings`` (the plan settings such a resume keeps) and ``data``
        (the sources' and measuring functions' fingerprint). Integers, strings and lists
        only (JSON works)."""
        cursor = self._pass
        step, mb = cursor.delivered
        d = self.deployment
        planner = self._delivered_state
        if planner is None:
            planner = PlannerState.initial(cursor.epoch, self.world_size, len(d.names)).to_dict()
        return CLIENT_STATE.write({"world_size": self.world_size, "rank": self.rank,
                                   "num_microbatches": self.num_microbatches, "config": self.config_fingerprint(),
                                   "epoch": cursor.state_epoch, "step": step, "microbatch": mb, "planner": planner,
                                   "sources": list(d.names), "settings": d.portable, "data": d.data})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state`` on the next pass: a rank's own state (on this deployment or
        a new one with the same settings), or the states of every rank of a deployment
        merged by :func:`youmu.merge_states` (any world size, micro-batches, batch size,
        token budget or mixing schedule here, from the merged step on). Raises
        :class:`~youmu.errors.StateError` naming the field that does not fit."""
        if is_merged(state):
            d = self.deployment
            self._install(*parse_merged(state, portable=d.portable or {}, data=d.data, names=d.names,
                                        world_size=d.world_size))
            return
        # every declared field checked: a forged rank was loaded silently when the client read only its position
        st, values = CLIENT_STATE.read(state, owner=_OWNER, expect={"world_size": self.world_size,
                                                                    "num_microbatches": self.num_microbatches})
        if st.get("config") != self.config_fingerprint():
            raise StateError(f"state was saved with config={st.get('config')!r}, this deployment has "
                             f"{self.config_fingerprint()!r} (plan settings, sources or measuring functions differ)")
        epoch, step, mb = values["epoch"], values["step"], values["microbatch"]
        if mb >= self.num_microbatches:
            raise StateError(f"{_OWNER} state field 'microbatch' must be < num_microbatches={self.num_microbatches}, "
                             f"got {mb}")
        planner = PlannerState.from_dict(st["planner"], world_size=self.world_size,
                                         num_sources=len(self.deployment.names))
        if planner.epoch != epoch or planner.step > step:
            raise StateError(f"{_OWNER} state field 'planner' is for epoch {planner.epoch} step {planner.step}, "
                             f"which cannot lead to epoch {epoch} step {step}")
        self._install(planner, step, mb)

    def _install(self, planner: PlannerState, step: int, mb: int) -> None:
        self.close()
        self._pass.load((planner, step, mb), epoch=planner.epoch, step=step, microbatch=mb)
        self._delivered_state = planner.to_dict()


class _Fetch:
    """The samples of one step's micro-batches, requested from the loaders at once (one
    call per loader actor)."""

    def __init__(self, d: Deployment, epoch: int,
                 microbatches: Sequence[tuple[tuple[Ref, ...] | None, MicroBatchInfo]], chain: Chain | None) -> None:
        self.microbatches = microbatches
        wanted: dict[int, dict[tuple[int, int], list[int]]] = {}
        for refs, _ in microbatches:
            for src, origin, pos in refs or ():
                wanted.setdefault(d.group_of[src], {}).setdefault((src, origin), []).append(pos)
        self.calls: list[tuple[Call, list[tuple[int, int, list[int]]]]] = []
        for g, by_stream in wanted.items():
            reqs = [(src, origin, sorted(set(ps))) for (src, origin), ps in by_stream.items()]
            call = d.loaders[g].submit("payloads", epoch, [(d.names[s], o, ps) for s, o, ps in reqs], chain,
                                       timeout=d.timeout)
            self.calls.append((call, reqs))

    def assemble(self, collate_fn: Callable[[list[Any]], Any] | None) -> list[tuple[Any, MicroBatchInfo]]:
        got: dict[Ref, Any] = {}
        for call, reqs in self.calls:
            for (src, origin, ps), samples in zip(reqs, call.result()):
                got.update({(src, origin, p): x for p, x in zip(ps, samples)})
        out: list[tuple[Any, MicroBatchInfo]] = []
        for refs, info in self.microbatches:
            if refs is None:
                out.append((None, info))  # a padding slot with no earlier batch to repeat
                continue
            samples = [got[tuple(r)] for r in refs]  # type: ignore[index]
            out.append((collate_fn(samples) if collate_fn is not None else samples, info))
        return out


def _refuse_dataloader_worker() -> None:
    data = sys.modules.get("torch.utils.data")
    if data is not None and data.get_worker_info() is not None:
        raise LoaderError("a RayBalancedLoader cannot run in a DataLoader worker process (ray.get hangs after a "
                          "fork): iterate it in the training process; it prefetches on its own thread")
