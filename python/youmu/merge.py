"""``merge_states``: the states the ranks of a job saved, as ONE state that every rank
of a new job — any world size, any number of DataLoader workers — loads to deliver
the rest of the epoch exactly once (the math: :mod:`youmu.order.resume`).

Accepted per rank: the ``state_dict()`` of a ``DynamicBatchLoader`` (its own merge:
:mod:`youmu.batching.merge`), of a youmu stream (``YoumuDataset``,
``MapStream`` / ``MixtureStream``, ``pack``), possibly itself resumed from a merged
state, or of a torchdata ``StatefulDataLoader`` over one (each worker's dataset state
is taken from its snapshot; save it with the default ``snapshot_every_n_steps=1`` so
the snapshot is what was yielded). Loader states are merged by their own modules, the
merge each format's declaration names (:mod:`youmu.state.catalog`): a
``DynamicBatchLoader``'s by :mod:`youmu.batching.merge`, a ``BalancedLoader``'s by
:mod:`youmu.planning.state.merge`, a ``RayBalancedLoader``'s by :mod:`youmu.ray.merge`.
Each gets :func:`merge_states` itself for the stream states nested in its own, and every merge checks through
:mod:`youmu.state.jobs`.

Loading: ``stream.load_state_dict(merged)`` on every rank of the new job, then iterate
the stream, or build a fresh ``StatefulDataLoader`` over it (its workers copy the
loaded stream). The merged state is not a loader state.

Example:
    >>> s0 = {"format": "youmu.MapStream/1", "world_size": 2, "rank": 0, "run": 1, "drop_last": False,
    ...       "data": "d", "epoch": 0, "num_workers": 1, "positions": {0: 3}}
    >>> merged = merge_states([s0, {**s0, "rank": 1, "positions": {0: 2}}])
    >>> merged["format"], merged["resumed"]
    ('youmu.MergedState/1', [{'world_size': 2, 'num_workers': [1, 1], 'positions': [[3], [2]]}])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from youmu.errors import StateError
from youmu.state.bounds import check_tree
from youmu.state.catalog import merger_of
from youmu.state.contract import state_positions
from youmu.state.jobs import OWNER, Merge
from youmu.state.stream import POSITIONS, STREAM_FORMATS, position_width, with_worker_positions
from youmu.state.stream_merge import merge_stream_ranks, stream_rank

__all__ = ["merge_states"]

#: The row streams, merged here; a wrapping stream (``pack``: its format declares the
#: child it nests) is merged by its entry in the table.
_ROW_STREAMS = tuple(tag for tag, f in STREAM_FORMATS.items() if f.child is None)
_WRAPPING_STREAMS = tuple(tag for tag, f in STREAM_FORMATS.items() if f.child is not None)

#: A loader's or a wrapping stream's merge, as its format's declaration names it.
_MergeFn = Callable[[Sequence[Mapping[str, Any]], Merge], dict[str, Any]]


def _unwrap_loader(state: Mapping[str, Any], i: int) -> tuple[Any, int | None, dict[int, Any]]:
    """(stream state or None, worker count, {worker: that worker's stream state}) of a
    ``StatefulDataLoader`` state; a stream state passes through."""
    if "_snapshot" in state:  # StatefulDataLoader with workers
        since = state.get("_steps_since_snapshot")
        if since not in (0, None):
            raise StateError(f"{OWNER}: states[{i}] is a StatefulDataLoader state taken {since} steps after its "
                             "last snapshot: its workers' states miss those steps; save with "
                             "snapshot_every_n_steps=1 (the default)")
        snaps = state["_snapshot"].get("_worker_snapshots") if isinstance(state["_snapshot"], Mapping) else None
        if not isinstance(snaps, Mapping) or not snaps:
            raise StateError(f"{OWNER}: states[{i}] is a StatefulDataLoader state without worker snapshots")
        per = {}
        for snap in snaps.values():
            if not isinstance(snap, Mapping) or not isinstance(snap.get("worker_id"), int):
                raise StateError(f"{OWNER}: states[{i}] has a malformed worker snapshot")
            per[snap["worker_id"]] = snap.get("dataset_state")
        if sorted(per) != list(range(len(per))):
            raise StateError(f"{OWNER}: states[{i}] has snapshots of workers {sorted(per)}")
        return None, len(per), per
    if "dataset_state" in state and "fetcher_state" in state:  # StatefulDataLoader, num_workers=0
        return state["dataset_state"], None, {}
    return state, None, {}


def _stream_state(state: Any, i: int) -> Mapping[str, Any]:
    """States[``i``] as one stream state: a ``StatefulDataLoader``'s (with or without
    workers) unwrapped; a stream's or a loader's passes through."""
    if not isinstance(state, Mapping):
        raise StateError(f"{OWNER}: states[{i}] must be a state dict, got {type(state).__name__}")
    single, loader_workers, per_worker = _unwrap_loader(state, i)
    if loader_workers is not None:
        got = [s for s in per_worker.values() if isinstance(s, Mapping)]
        if not got:
            raise StateError(f"{OWNER}: states[{i}]: no worker of the StatefulDataLoader holds a stream state")
        width = position_width(got[0].get("format"))
        positions: dict[int, Any] = {}
        for w, s in per_worker.items():
            if isinstance(s, Mapping):
                # a worker's copy may also hold other workers' loaded positions: take its own
                own = state_positions(s, POSITIONS, owner=OWNER, width=width, workers=loader_workers)
                if w in own:
                    positions[w] = own[w]
        single = with_worker_positions(got[0], positions, loader_workers)
    if not isinstance(single, Mapping):
        raise StateError(f"{OWNER}: states[{i}] is a {type(single).__name__}, not the state of a youmu stream "
                         f"or of a StatefulDataLoader over one")
    return single


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state for any topology from the states every rank of a job saved (see the
    module doc). Raises :class:`~youmu.errors.StateError` naming the field for states
    of different streams, data, seeds, epochs or settings, a missing or repeated rank,
    or a state of another kind — never a state that would lose or repeat rows.

    The merged state holds the stream's settings, the epoch and a chain of levels
    (:mod:`youmu.order.resume`): per job of the epoch, per rank its worker count and per
    worker its position — about 3 ints per old shard (``DDP ranks × workers``), however
    many rows were consumed.
    """
    if isinstance(states, Mapping) or not isinstance(states, Sequence) or not states:
        raise StateError(f"{OWNER} takes a non-empty list of the states the ranks saved, got {type(states).__name__}")
    for i, s in enumerate(states):
        check_tree(s, owner=f"{OWNER}: states[{i}]")  # before any field is read
    merger: _MergeFn | None = merger_of(states[0].get("format") if isinstance(states[0], Mapping) else None)
    if merger is not None:  # a loader's states
        return merger(states, merge_states)
    unwrapped = [_stream_state(s, i) for i, s in enumerate(states)]
    merger = merger_of(unwrapped[0].get("format"))
    if merger is not None:  # a wrapping stream's, maybe saved by a StatefulDataLoader
        return merger(unwrapped, merge_states)
    for i, st in enumerate(unwrapped):
        if st.get("format") not in _ROW_STREAMS:
            raise StateError(f"{OWNER}: states[{i}] is a {st.get('format')} state, not the state of a youmu stream "
                             f"({', '.join((*_ROW_STREAMS, *_WRAPPING_STREAMS))}) or of a StatefulDataLoader over one")
    return merge_stream_ranks([stream_rank(st, i) for i, st in enumerate(unwrapped)])
