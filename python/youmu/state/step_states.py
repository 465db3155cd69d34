"""The states of the step-planning loaders (:class:`~youmu.planning.BalancedLoader` and a
Ray deployment's clients, :class:`~youmu.ray.RayBalancedLoader`): what their merges
and their loads of a merged state share, written once.

Both plan a step for every rank together, so a job's states are merged only at a step
boundary, every rank's, with the same plan settings; the merged state starts the new
job at that step, where only :data:`RESIZE_MAY_CHANGE` may differ. The two merges
differ in what they keep (a rank's sources' states and held samples, or the one
planner state every client holds), not in how they check the states:

* :func:`step_job` — the merge's prologue: one kind of state, each with the fields a
  merge needs, every rank once, alike in every field its format declares shared
  (:data:`~youmu.state.formats.SAME`; the settings key by key, so the message names
  the setting), saved after a step's last micro-batch;
* :meth:`StepJob.header` — the merged state's header;
* :func:`load_step_merged` — the load's header: a merged state of this loader's
  format, its settings those of the loader that loads it, and its step.

Example:
    >>> from youmu.state.formats import OWN, RANK, StateField, StateFormat, an_int
    >>> fmt = StateFormat("Example", "youmu.Example/1", (
    ...     StateField("world_size", an_int(1)), StateField("rank", an_int(), scope=RANK, merge=OWN),
    ...     *(StateField(k, an_int()) for k in ("epoch", "num_microbatches", "step", "microbatch")),
    ...     StateField("settings", lambda st, k, owner: st[k]), StateField("config", an_int())))
    >>> states = [{"format": fmt.tag, "world_size": 2, "rank": r, "epoch": 0, "num_microbatches": 1, "step": 3,
    ...            "microbatch": 0, "settings": {"seed": 0}, "config": 7} for r in (1, 0)]
    >>> job = step_job(states, fmt, kind="Example", holds="its samples")
    >>> job.world, job.step, [s["rank"] for s in job.ranks]
    (2, 3, [0, 1])
    >>> merged = job.header(settings=job.first["settings"])
    >>> load_step_merged(merged, fmt, kind="Example", what="loader", settings={"seed": 0})[1]
    3
    >>> step_job([states[0], {**states[1], "settings": {"seed": 1}}], fmt, kind="Example", holds="its samples")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: merge_states: Example states of rank 1 and rank 0 differ in 'seed' (0 vs 1): ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu.errors import StateError
from youmu.state.contract import state_int
from youmu.state.formats import SAME, SHARED, SUM, StateFormat
from youmu.state.jobs import MERGED_FORMAT, OWNER, JobStates, load_merged, one_kind, same_settings

__all__ = ["RESIZE_MAY_CHANGE", "StepJob", "step_job", "load_step_merged"]

#: What a resume on another topology may change of a step-planning loader's settings
#: (``PlanSettings.portable`` keeps the rest), as a merged state's refusal says it.
RESIZE_MAY_CHANGE = "the world size, num_microbatches, global_batch_size / token_budget and the schedule"



@dataclass(frozen=True)
class StepJob:
    """The states of one job's ranks at one step boundary, checked (:func:`step_job`):
    ``ranks`` in rank order, the job's ``world`` size and ``step``, and their declared
    ``format``."""

    format: StateFormat
    job: JobStates[Mapping[str, Any]]
    ranks: list[Mapping[str, Any]]
    world: int
    step: int

    @property
    def first(self) -> Mapping[str, Any]:
        """Rank 0's state (every shared field is the same in all)."""
        return self.ranks[0]

    def header(self, epoch: int | None = None, **fields: Any) -> dict[str, Any]:
        """The merged state's header — its tag, the format it is of, the ``epoch`` (by
        default the ranks') and the step — then the loader's own ``fields``, in the
        order given (a merged state's bytes follow it), then the fields the format
        declares :data:`~youmu.state.formats.SUM`, each the ranks' values added up (so
        a loader's merge never lists them: :func:`load_step_merged` checks them and the
        loader reads them where a rank state holds them)."""
        return {"format": MERGED_FORMAT, "stream": self.format.tag,
                "epoch": self.first.get("epoch", 0) if epoch is None else epoch, "step": self.step, **fields,
                **self.format.summed(self.ranks)}


def step_job(states: Any, fmt: StateFormat, *, kind: str, holds: str, needs: Sequence[str] = ("settings",),
             check: Callable[[int, Mapping[str, Any]], None] | None = None) -> StepJob:
    """The merge's prologue over the states every rank of a ``kind`` loader saved:
    all of format ``fmt``, each first passing ``check(i, state)`` (the loader's own
    refusals) and holding the ``needs`` fields (else it was saved before such states
    could be merged), alike in every field ``fmt`` declares shared and kept by a merge
    (:data:`~youmu.state.formats.SAME`, in declared order: ``settings`` key by key, and
    ``config`` last — it fingerprints the batch size, token budget and schedule),
    every rank of the job exactly once (``holds``: what only a rank's state records),
    and saved after a step's last micro-batch. Raises :class:`~youmu.errors.StateError` naming the state
    and the field."""
    states = one_kind(states, fmt.tag, kind=kind)
    summed = [f for f in fmt.fields if f.merge == SUM]
    for i, st in enumerate(states):
        if check is not None:
            check(i, st)
        for f in summed:
            if f.name in st:
                f.check(st, f.name, f"{OWNER}: {kind} states[{i}]")
        for key in needs:
            if st.get(key) is None:
                raise StateError(f"{OWNER}: states[{i}] has no {key!r} field (saved before {kind} states could "
                                 "be merged): resume it on the same topology")
    job = JobStates(states, kind=kind)
    # the fingerprint of the settings last: a setting that differs names itself first
    for name in sorted((f.name for f in fmt.fields if f.merge == SAME and f.scope == SHARED),
                       key=lambda name: name == "config"):
        if name == "settings":
            job.same_settings(lambda st: st["settings"])
        else:
            job.same(name)
    first = states[0]
    world = state_int(first, "world_size", owner=kind, minimum=1)
    ranks = job.in_rank_order(world, holds=holds)
    step = state_int(first, "step", owner=kind)
    job.at_step_boundary(step, state_int(first, "microbatch", owner=kind))
    return StepJob(fmt, job, ranks, world, step)


def load_step_merged(state: Any, fmt: StateFormat, *, kind: str, what: str, settings: Mapping[str, Any],
                     required: Sequence[str] = (), hint: str = "") -> tuple[dict[str, Any], int]:
    """The header of a ``kind`` loader's load of a merged state: a merged state of
    ``fmt`` states (``hint``: what to do with another one) with its ``step``,
    ``settings`` and the ``required`` fields, saved with the ``settings`` of this
    loader (``what`` names it in messages) but what :data:`RESIZE_MAY_CHANGE`, and
    the :data:`~youmu.state.formats.SUM` fields it holds passing their declared
    checks; the state and its step."""
    st = load_merged(state, fmt.tag, owner=kind, required=("step", "settings", *required), hint=hint)
    same_settings(st["settings"], settings, owner=f"merged {kind} state", what=what, may_change=RESIZE_MAY_CHANGE)
    for f in fmt.fields:
        if f.merge == SUM and f.name in st:
            f.check(st, f.name, f"merged {kind}")
    return st, state_int(st, "step", owner=kind)
