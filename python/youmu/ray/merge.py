"""Resume a :class:`~youmu.ray.RayBalancedLoader` deployment on another number of
ranks: :func:`youmu.merge_states` over the states every client saved at one step
boundary gives ONE state that every client of a new deployment — any world size —
loads to deliver the rest of the epoch exactly once, from the same step.

The planner's state is already global (every client holds the same one), so the
merge checks that the states are one deployment's at one step — every rank's, the
same settings, step and planner state, saved after a step's last micro-batch — and
keeps that state with the deployment's world size; the client that loads it lays it
out for its own world size (:meth:`PlannerState.resized
<youmu.ray.state.PlannerState.resized>`: the old positions become one more job of the
epoch's chain, carried samples keep their references and are dealt round-robin; the
rules are :mod:`youmu.ray.state`'s).

As for a :class:`~youmu.planning.BalancedLoader` (:mod:`youmu.planning.state.merge`), the
world size, ``num_microbatches``, ``global_batch_size`` / ``token_budget`` and the
mixing schedule may change at the resume and apply from the resume step (a new
mixture draws from every source where its streams stood: no source row is repeated
before that source's epoch ends); every other plan setting
(:meth:`PlanSettings.portable <youmu.planning.PlanSettings.portable>`), the sources'
stream settings and the measuring functions must match, else a
:class:`~youmu.errors.StateError` names the field.

Example (the states of a deployment's two clients after one step):
    >>> from youmu.ray import RayLoaders, Source
    >>> from youmu.mixture.mapstream import MapStream
    >>> rows = [{"input_ids": [0] * (k % 5 + 1)} for k in range(24)]
    >>> src = Source(stream=lambda r, w: MapStream(rows, rank=r, world_size=w))
    >>> two = RayLoaders(src, world_size=2, num_microbatches=1, global_batch_size=4, local=True)
    >>> clients = [two.client(r, prefetch=0) for r in range(2)]
    >>> _ = [next(c.iter_steps()) for c in clients]
    >>> from youmu import merge_states
    >>> merged = merge_states([c.state_dict() for c in clients])
    >>> merged["step"], merged["world_size"]
    (1, 2)
    >>> three = RayLoaders(src, world_size=3, num_microbatches=1, global_batch_size=6, local=True)
    >>> again = [three.client(r, prefetch=0) for r in range(3)]
    >>> for c in again:
    ...     c.load_state_dict(merged)
    >>> [(info.step, info.global_num_samples) for _, info in again[0]]
    [(1, 6), (2, 6), (3, 6), (4, 2)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from youmu.errors import StateError
from youmu.ray.state import CLIENT_STATE, PlannerState
from youmu.state.contract import state_int
from youmu.state.jobs import OWNER, Merge
from youmu.state.step_states import load_step_merged, step_job

__all__ = ["merge_ray_states", "parse_merged"]

_KIND = "RayBalancedLoader"


def merge_ray_states(states: Sequence[Mapping[str, Any]], merge: Merge | None = None) -> dict[str, Any]:
    """One state for a deployment of any world size from the states every client of a
    deployment saved at one step boundary (see the module doc; ``merge``, the stream
    merge, is not needed: the planner's state nests no stream state). Raises
    :class:`~youmu.errors.StateError` for a state of another kind, a missing or
    repeated rank, states of different deployments, settings or steps, or states
    saved inside a step."""
    job = step_job(states, CLIENT_STATE, kind=_KIND, needs=("sources", "settings", "data"),
                   holds="its sources' positions and held samples")
    first, world, step = job.first, job.world, job.step
    planner = job.job.same("planner")
    names = first["sources"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise StateError(f"{OWNER}: RayBalancedLoader state field 'sources' must be a list of source names")
    ps = PlannerState.from_dict(planner, world_size=world, num_sources=len(names))
    if ps.step != step:
        raise StateError(f"{OWNER}: RayBalancedLoader state field 'planner' is as of step {ps.step}, not the "
                         f"resume step {step} (a state loaded and not yet iterated): iterate a step first, or merge "
                         "the states that were loaded")
    return job.header(ps.epoch, world_size=world, sources=names, settings=first["settings"],
                      data=first["data"], planner=ps.to_dict())


def parse_merged(state: Any, *, portable: Mapping[str, Any], data: Any, names: Sequence[str],
                 world_size: int) -> tuple[PlannerState, int, int]:
    """The planner state, step and micro-batch a client of a deployment resumes from
    (its ``portable`` settings, ``data`` fingerprint, source ``names`` and
    ``world_size``), laid out for its world size; a field that does not fit is a
    :class:`~youmu.errors.StateError` naming it."""
    st, step = load_step_merged(state, CLIENT_STATE, kind=_KIND, what="deployment", settings=portable,
                                required=("epoch", "world_size", "sources", "data", "planner"),
                                hint="merge the RayBalancedLoader clients' states")
    if st["data"] != data:
        raise StateError(f"merged RayBalancedLoader state field 'data' is {st['data']!r}, this deployment's is "
                         f"{data!r}: its sources (files, stream settings) or measuring functions differ")
    saved = st["sources"]
    if not isinstance(saved, list) or sorted(map(str, saved)) != sorted(names):
        raise StateError(f"merged RayBalancedLoader state field 'sources' is {saved!r:.80}, this deployment reads "
                         f"{list(names)}")
    world = state_int(st, "world_size", owner=_KIND, minimum=1)
    planner = PlannerState.from_dict(st["planner"], world_size=world, num_sources=len(saved))
    if planner.step != step or planner.epoch != state_int(st, "epoch", owner=_KIND):
        raise StateError(f"merged RayBalancedLoader state field 'planner' is as of epoch {planner.epoch} step "
                         f"{planner.step}, not the state's epoch {st['epoch']!r} step {step}")
    return planner.renumbered(saved, names).resized(world_size), step, 0
