"""Resume a :class:`~youmu.planning.BalancedLoader` on another topology: the states every
rank saved, merged by :func:`youmu.merge_states` into ONE state that every rank of a
new job — any world size, any number of DataLoader workers under its sources — loads
to deliver the rest of the epoch exactly once, from the same step.

What a rank's ``"state"``-mode state holds at a step boundary, and what becomes of it:

* each source's own state (a youmu stream, or a ``StatefulDataLoader`` over one) —
  merged per source with the stream merge (:mod:`youmu.merge`, :mod:`youmu.order.resume`);
  a source that had ended on a rank contributes its state as it ended
  (``end_state``), and a source ended on every rank stays ended;
* the samples the rank held beyond its sources — deferred by the plan (capacity), a
  token budget's overshoot (``carry``), or left over from a flattened
  ``DynamicBatchLoader`` step (``pending``) — all kept in the merged state and dealt
  round-robin over the new ranks (``entries[rank::world_size]``): none lost, none
  twice;
* the step: the new job starts at it. The global batch of a step does not depend on
  the world size — ``global_batch_size`` samples (each source's exact count of a
  mixing schedule) or ``token_budget`` tokens over all ranks, split by
  :func:`youmu.order.sharding.share` — so a new world size re-splits the same steps. Where
  that does not hold: with ``reorder_only`` a step is ``world_size ×
  num_microbatches`` formed micro-batches; a token budget is filled per rank, so a
  step's tokens match to within a sample per rank; ``group_size`` must divide the
  new world size. Which samples make a step depends on the shards, so the plans
  after a resize are not those of the old topology (every sample still comes once);
* arrival ids: the new ranks number their samples past every id the old job gave
  (``id_bound``), so a carried sample never shares its id with a new one.

At the resume the world size, ``num_microbatches``, ``global_batch_size`` /
``token_budget`` and the mixing schedule may change (they apply from the resume step:
a new mixture draws from every source where its stream stood, so no source row is
repeated before that source's epoch ends); every other setting must match
(:meth:`PlanSettings.portable <youmu.planning.PlanSettings.portable>`), else a
:class:`~youmu.errors.StateError` names the field. Save at a step boundary (after a
step's last micro-batch): a step half delivered was planned for the old ranks.

Example (one rank here; a job of ``W`` ranks merges its ``W`` states):
    >>> from youmu.planning import BalancedLoader
    >>> from youmu.torch import MapStream
    >>> data = [{"input_ids": [0] * (k % 5 + 1)} for k in range(10)]
    >>> loader = BalancedLoader(MapStream(data), num_microbatches=1, global_batch_size=2, prefetch=0)
    >>> from itertools import islice
    >>> first = [len(batch) for batch, info in islice(loader, 2)]           # two steps
    >>> from youmu import merge_states
    >>> merged = merge_states([loader.state_dict()])
    >>> merged["format"], merged["step"], merged["streams"][0]["source_state"]["stream"]
    ('youmu.MergedState/1', 2, 'youmu.MapStream/1')
    >>> again = BalancedLoader(MapStream(data), num_microbatches=1, global_batch_size=3, prefetch=0)
    >>> again.load_state_dict(merged)                                         # a new batch size from step 2
    >>> [(info.step, len(batch)) for batch, info in again]
    [(2, 3), (3, 3)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from youmu.errors import StateError
from youmu.planning.state.checkpoint import BALANCED_LOADER_STATE, Resume, restored_state
from youmu.planning.steps.carry import parse_carry
from youmu.state.contract import state_int
from youmu.state.jobs import OWNER, Merge
from youmu.state.step_states import load_step_merged, step_job

__all__ = ["merge_balanced_states", "parse_merged"]

_LOADER = "BalancedLoader"


def merge_balanced_states(states: Sequence[Mapping[str, Any]], merge: Merge) -> dict[str, Any]:
    """One state for a BalancedLoader of any world size from the states every rank of
    a job saved at one step boundary (see the module doc; ``merge``: the stream merge
    for the sources' states, :func:`youmu.merge_states`). Raises
    :class:`~youmu.errors.StateError` for states of different jobs, settings, epochs or
    steps, a missing or repeated rank, a state of another kind, a replay-mode state
    (its sources could not save their states) or one saved inside a step."""
    job = step_job(states, BALANCED_LOADER_STATE, kind=_LOADER, check=_state_mode,
                   holds="its sources' positions and held samples")
    first, ranks, world = job.first, job.ranks, job.world
    raw = first.get("streams")
    names = [s.get("name") for s in raw] if isinstance(raw, list) and all(isinstance(s, Mapping) for s in raw) \
        else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise StateError(f"{OWNER}: BalancedLoader state field 'streams' must be a list of per-source dicts")
    parsed = [restored_state(st, names) for st in ranks]
    streams = []
    for c, name in enumerate(names):
        done = [p["streams"][c]["done"] for p in parsed]
        if all(done):
            streams.append({"name": name, "done": True, "source_state": None})
            continue
        per_rank = []
        for r, p in enumerate(parsed):
            st = p["streams"][c]
            got = st.get("end_state") if st["done"] else st["source_state"]
            if got is None:
                raise StateError(f"{OWNER}: source {name!r} had ended on rank {r} without its state as it ended "
                                 "('end_state'): where that rank's shard stopped is unknown")
            per_rank.append(got)
        try:
            merged = merge(per_rank)
        except StateError as e:
            raise StateError(f"{OWNER}: source {name!r}: {e}") from None
        streams.append({"name": name, "done": False, "source_state": merged})
    carry = [[h.id, names[h.source], list(h.docs), h.tokens, h.payload, *([list(h.images)] if h.images else [])]
             for p in parsed for h in p["carry"]]
    pending = {name: [x for p in parsed for x in p["streams"][c]["pending"]] for c, name in enumerate(names)}
    id_bound = max(int(p["next_index"]) for p in parsed) * world
    return job.header(settings=first["settings"], sources=names, streams=streams, carry=carry, pending=pending,
                      id_bound=id_bound, resized_from=world)


def _state_mode(i: int, st: Mapping[str, Any]) -> None:
    if st.get("mode") != "state":
        raise StateError(f"{OWNER}: states[{i}] field 'mode' is {st.get('mode')!r}: only 'state'-mode states "
                         "(every source stateful) can resume on another topology")


def parse_merged(state: Any, *, settings: Mapping[str, Any], names: Sequence[str], rank: int, world_size: int,
                 can_restore: bool) -> Resume:
    """This rank's :class:`~youmu.planning.state.checkpoint.Resume` from a merged state: the
    step, each source's merged state, and its deal of the held samples. A setting that
    differs from ``settings`` (:meth:`PlanSettings.portable`) is a
    :class:`~youmu.errors.StateError` naming it."""
    st, step = load_step_merged(state, BALANCED_LOADER_STATE, kind=_LOADER, what="BalancedLoader", settings=settings,
                                required=("sources", "streams", "carry", "pending", "id_bound"),
                                hint="load it into each rank's stream (the BalancedLoader's source), or merge the "
                                     "BalancedLoader states")
    if not can_restore:
        raise StateError("a merged BalancedLoader state restores the sources' states: every source must be stateful "
                         "and resume_mode 'state' or 'auto'")
    id_bound = state_int(st, "id_bound", owner=_LOADER)
    by_name: dict[str, Mapping[str, Any]] = {}
    raw = st["streams"]
    if not isinstance(raw, list) or not all(isinstance(s, Mapping) for s in raw):
        raise StateError("merged BalancedLoader state field 'streams' must be a list of per-source dicts")
    for s in raw:
        by_name[str(s.get("name"))] = s
    if sorted(by_name) != sorted(names):
        raise StateError(f"merged BalancedLoader state field 'streams' has sources {sorted(by_name)}, this "
                         f"BalancedLoader reads {sorted(names)}")
    pending = st["pending"]
    if not isinstance(pending, Mapping) or not all(isinstance(pending.get(n), list) for n in names):
        raise StateError("merged BalancedLoader state field 'pending' must map every source to a list of samples")
    streams = []
    for n in names:
        s = by_name[n]
        if not isinstance(s.get("done"), bool) or (not s["done"] and not isinstance(s.get("source_state"), Mapping)):
            raise StateError(f"merged BalancedLoader state field 'streams' entry {n!r} must have 'done' (a bool) "
                             "and, unless done, a 'source_state'")
        streams.append({"name": n, "done": s["done"], "pending": pending[n][rank::world_size],
                        "source_state": s.get("source_state")})
    entries = st["carry"]
    if not isinstance(entries, list):
        raise StateError(f"merged BalancedLoader state field 'carry' must be a list, got {type(entries).__name__}")
    index = {n: c for c, n in enumerate(names)}
    mine = []
    for k, e in enumerate(entries[rank::world_size]):
        if not isinstance(e, (list, tuple)) or len(e) < 2 or e[1] not in index:
            raise StateError(f"merged BalancedLoader state field 'carry'[{rank + k * world_size}] must be (id, source "
                             f"name, documents, tokens, sample[, image patches]) with a source in {list(names)}")
        mine.append([e[0], index[e[1]], *e[2:]])
    held = parse_carry(mine, owner=_LOADER, where="'carry'", num_sources=len(names))
    return Resume(step, 0, {"streams": streams, "carry": held, "next_index": math.ceil(id_bound / world_size)})
