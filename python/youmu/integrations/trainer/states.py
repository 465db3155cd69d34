"""The states every rank of a job saved: :class:`~youmu.integrations.TrainerLoader`'s
state formats, gathering every rank's state into one, and checking that a set of
per-rank states is one complete job before :func:`youmu.merge_states` turns them into
one state for another number of ranks.

Example:
    >>> states = [{"format": TRAINER_LOADER_FORMAT, "rank": r, "world_size": 3, "epoch": 0, "steps": 2,
    ...            "finished": False, "source": {}} for r in (0, 2)]
    >>> try:
    ...     job_states(states)
    ... except StateError as e:
    ...     print(str(e).split(": every")[0])
    TrainerLoader: the job had world_size=3 but the states of rank(s) [1] are missing
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from youmu.errors import StateError
from youmu.state.contract import state_int
from youmu.state.formats import OWN, RANK, StateField, StateFormat, a_bool, an_int
from youmu.state.jobs import job_ranks

__all__ = ["TRAINER_LOADER_FORMAT", "GATHERED_FORMAT", "TRAINER_STATE", "GATHERED_STATE", "check_rank_state",
           "gather_objects", "job_states", "other_workers", "saved_world"]

TRAINER_LOADER_FORMAT = "youmu.TrainerLoader/1"
GATHERED_FORMAT = "youmu.TrainerLoader.ranks/1"
_OWNER = "TrainerLoader"


def _source(st: Mapping[str, Any], key: str, owner: str) -> Mapping[str, Any]:
    if not isinstance(st[key], Mapping):
        raise StateError(f"{owner} state field {key!r} must be the source's state dict, got {type(st[key]).__name__}")
    return st[key]


def _ranks(st: Mapping[str, Any], key: str, owner: str) -> list[Any]:
    if not isinstance(st[key], list) or not st[key]:
        raise StateError(f"the gathered {owner} state must hold a non-empty list of the ranks' states, "
                         f"got {type(st[key]).__name__}")
    return st[key]


#: A rank's ``TrainerLoader`` state, declared once (:mod:`youmu.state.formats`): its
#: fields in the order ``state_dict`` writes them. Trainer states are not merged by
#: :func:`youmu.merge_states`: the loader resizes from the list of every rank's states.
TRAINER_STATE = StateFormat(_OWNER, TRAINER_LOADER_FORMAT, (
    StateField("rank", an_int(), scope=RANK, merge=OWN),
    StateField("world_size", an_int(1)),
    StateField("epoch", an_int()),
    StateField("steps", an_int(), scope=RANK, merge=OWN),  # bounded by an epoch where one is known
    StateField("finished", a_bool, scope=RANK, merge=OWN),
    StateField("source", _source, scope=RANK, merge=OWN),  # the wrapped loader's or stream's own state
    StateField("epoch_steps", an_int(1), required=False),  # a sized epoch that ends early on every rank
), child="source")

#: Every rank's states in one (``gathered_state_dict``), in rank order.
GATHERED_STATE = StateFormat(_OWNER, GATHERED_FORMAT, (StateField("ranks", _ranks, scope=RANK, merge=OWN),))


def saved_world(state: Any) -> Any:
    """The ``world_size`` a rank's state records (``None`` for anything else)."""
    return state.get("world_size") if isinstance(state, Mapping) else None


def other_workers(state: Any, num_workers: int, pairs: bool = False) -> int | None:
    """The number of DataLoader workers a stream's rank state was saved with, when it is
    not ``num_workers`` (``None``: the same, or no stream's state); ``pairs``: the state
    of a loader of ``(batch, info)`` pairs, whose ``DynamicBatchLoader`` over an iterable
    dataset holds where the dataset stands split over its ``num_workers`` workers.

    >>> other_workers({"source": {"_snapshot": {"_main_snapshot": {"_num_workers": 2}}}}, 0), other_workers({}, 0)
    (2, None)
    """
    source = state.get("source") if isinstance(state, Mapping) else None
    if not isinstance(source, Mapping):
        return None
    if pairs:
        from youmu.batching.merge import resume_workers
        from youmu.batching.state import DYNAMIC_LOADER_FORMATS

        need = resume_workers(source) if source.get("format") in DYNAMIC_LOADER_FORMATS else None
        return need if need is not None and need != num_workers else None
    snapshot = source.get("_snapshot")  # torchdata StatefulDataLoader's state with workers
    saved = snapshot.get("_main_snapshot", {}).get("_num_workers") if isinstance(snapshot, Mapping) else 0
    return saved if isinstance(saved, int) and saved != num_workers else None


def gather_objects(channel: Any, obj: Any) -> list[Any]:
    """Every rank's picklable ``obj``, in rank order (two all-gathers on ``channel``)."""
    import numpy as np

    if channel.world_size == 1:
        return [obj]
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sizes = [int(t[0]) for t in channel.all_gather_int64([len(blob)])]
    width = -(-max(sizes) // 8)
    buf = np.zeros(width * 8, dtype=np.uint8)
    buf[: len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    rows = channel.all_gather_int64(buf.view(np.int64))
    return [pickle.loads(r.numpy().view(np.uint8)[:n].tobytes()) for r, n in zip(rows, sizes)]


def job_states(ranks: Sequence[Any]) -> list[dict[str, Any]]:
    """The ``TrainerLoader`` states of every rank of one job, in rank order; a
    :class:`~youmu.errors.StateError` names a missing or repeated rank, or a state of
    another kind (the rows a rank delivered are only in its state)."""
    states = [TRAINER_STATE.read(s, fields=("rank", "world_size"))[0] for s in ranks]
    worlds = {s["world_size"] for s in states}
    if len(worlds) > 1:
        raise StateError(f"the ranks' TrainerLoader states are of jobs of different world sizes {sorted(worlds)}")
    world = worlds.pop()
    ranks = [state_int(s, "rank", owner="TrainerLoader") for s in states]
    order = job_ranks(ranks, world, owner="TrainerLoader",
                      holds="the rows a rank delivered")
    return [states[i] for i in order]


def check_rank_state(state: Any, *, rank: int | None = None, world_size: int | None = None,
                     full_epoch: int | None = None) -> dict[str, Any]:
    """A rank's TrainerLoader state with every field checked (and of ``rank`` of
    ``world_size`` when given), its steps bounded by ``full_epoch``, a full epoch of the
    loader loading it (when known): a step count beyond it would skip the rest of the
    epoch, a ``finished`` that is not a bool or a missing source state would restart it."""
    owner = _OWNER
    expect = {"rank": rank, "world_size": world_size} if rank is not None else None
    st, values = TRAINER_STATE.read(state, expect=expect)
    st.update(values)
    if "epoch_steps" in st:
        steps = state_int(st, "steps", owner=owner, maximum=st["epoch_steps"])
        if full_epoch is not None and st["epoch_steps"] > steps + full_epoch:
            raise StateError(f"{owner} state field 'epoch_steps'={st['epoch_steps']} exceeds the steps taken "
                             f"({steps}) plus a full epoch of this loader ({full_epoch})")
    elif full_epoch is not None:
        state_int(st, "steps", owner=owner, maximum=full_epoch)
    return st
