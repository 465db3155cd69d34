"""``merge_states``: the states the ranks of a job saved, as ONE state that every rank
of a new job — any world size, any number of DataLoader workers — loads to deliver
the rest of the epoch exactly once (the math: :mod:`youmu.resume`).

Accepted per rank: the ``state_dict()`` of a ``DynamicBatchLoader`` (its own merge:
:mod:`youmu.batching.merge`), of a youmu stream (``YoumuDataset``,
``MapStream`` / ``MixtureStream``, ``pack``), possibly itself resumed from a merged
state, or of a torchdata ``StatefulDataLoader`` over one (each worker's dataset state
is taken from its snapshot; save it with the default ``snapshot_every_n_steps=1`` so
the snapshot is what was yielded). Loader states are merged by their own modules
(``_loader_mergers``): a ``BalancedLoader``'s by :mod:`youmu.planning.merge`.

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
from dataclasses import dataclass
from typing import Any

from youmu.errors import StateError
from youmu.resume import MERGED_FORMAT, Level, decode_levels, encode_levels
from youmu.stateful import job_ranks, state_int, state_positions

__all__ = ["merge_states", "MERGED_FORMAT"]

_PACK = "youmu.PackedDataset/1"
_STREAMS = ("youmu.YoumuDataset/1", "youmu.MapStream/1", _PACK)
# fields of a stream state that are not settings shared by all ranks
_PER_RANK = ("format", "rank", "world_size", "epoch", "num_workers", "positions", "resumed", "dataset")
_OWNER = "merge_states"
# loader states merged by their own modules (format -> "module:function", imported on use)
@dataclass
class _Rank:
    """One rank's state, normalised."""

    fmt: str
    settings: dict[str, Any]
    inner_fmt: str | None
    inner_settings: dict[str, Any]
    rank: int
    world_size: int
    epoch: int
    num_workers: int
    positions: dict[int, int]
    tokens: dict[int, int]
    chain: Any


def _unwrap_loader(state: Mapping[str, Any], i: int) -> tuple[Any, int | None, dict[int, Any]]:
    """(stream state or None, worker count, {worker: that worker's stream state}) of a
    ``StatefulDataLoader`` state; a stream state passes through."""
    if "_snapshot" in state:  # StatefulDataLoader with workers
        since = state.get("_steps_since_snapshot")
        if since not in (0, None):
            raise StateError(f"{_OWNER}: states[{i}] is a StatefulDataLoader state taken {since} steps after its "
                             "last snapshot: its workers' states miss those steps; save with "
                             "snapshot_every_n_steps=1 (the default)")
        snaps = state["_snapshot"].get("_worker_snapshots") if isinstance(state["_snapshot"], Mapping) else None
        if not isinstance(snaps, Mapping) or not snaps:
            raise StateError(f"{_OWNER}: states[{i}] is a StatefulDataLoader state without worker snapshots")
        per = {}
        for snap in snaps.values():
            if not isinstance(snap, Mapping) or not isinstance(snap.get("worker_id"), int):
                raise StateError(f"{_OWNER}: states[{i}] has a malformed worker snapshot")
            per[snap["worker_id"]] = snap.get("dataset_state")
        if sorted(per) != list(range(len(per))):
            raise StateError(f"{_OWNER}: states[{i}] has snapshots of workers {sorted(per)}")
        return None, len(per), per
    if "dataset_state" in state and "fetcher_state" in state:  # StatefulDataLoader, num_workers=0
        return state["dataset_state"], None, {}
    return state, None, {}


def _rank_state(state: Any, i: int) -> _Rank:
    if not isinstance(state, Mapping):
        raise StateError(f"{_OWNER}: states[{i}] must be a state dict, got {type(state).__name__}")
    single, loader_workers, per_worker = _unwrap_loader(state, i)
    if loader_workers is not None:
        got = [s for s in per_worker.values() if isinstance(s, Mapping)]
        if not got:
            raise StateError(f"{_OWNER}: states[{i}]: no worker of the StatefulDataLoader holds a stream state")
        base = dict(got[0])
        width = 2 if base.get("format") == _PACK else 1
        positions: dict[int, Any] = {}
        for w, s in per_worker.items():
            if isinstance(s, Mapping):
                # a worker's copy may also hold other workers' loaded positions: take its own
                own = state_positions(s, "positions", owner=_OWNER, width=width)
                if w in own:
                    positions[w] = own[w]
        base["positions"] = positions
        base["num_workers"] = loader_workers
        single = base
    if not isinstance(single, Mapping) or single.get("format") not in _STREAMS:
        fmt = single.get("format") if isinstance(single, Mapping) else type(single).__name__
        raise StateError(f"{_OWNER}: states[{i}] is a {fmt} state, not the state of a youmu stream "
                         f"({', '.join(_STREAMS)}) or of a StatefulDataLoader over one")
    fmt = single["format"]
    pack = fmt == _PACK
    shard = single.get("dataset") if pack else single
    if not isinstance(shard, Mapping):
        raise StateError(f"{_OWNER}: states[{i}] (a {fmt} state) has no 'dataset' state")
    rank = state_int(shard, "rank", owner=_OWNER)
    world = state_int(shard, "world_size", owner=_OWNER, minimum=1)
    epoch = state_int(single, "epoch", owner=_OWNER)
    raw_pos = state_positions(single, "positions", owner=_OWNER, width=2 if pack else 1)
    nw = single.get("num_workers")
    nw = 1 if nw is None else state_int(single, "num_workers", owner=_OWNER, minimum=1)
    if any(w >= nw for w in raw_pos):
        raise StateError(f"{_OWNER}: states[{i}] field 'positions' has workers {sorted(raw_pos)} but num_workers={nw}")
    positions = {w: (p[0] if isinstance(p, tuple) else p) for w, p in raw_pos.items()}
    tokens = {w: p[1] for w, p in raw_pos.items() if isinstance(p, tuple)}
    settings = {k: v for k, v in single.items() if k not in _PER_RANK}
    inner_settings = {k: v for k, v in shard.items() if k not in _PER_RANK} if pack else {}
    chain = shard.get("resumed")
    return _Rank(fmt, settings, shard.get("format") if pack else None, inner_settings, rank, world, epoch, nw,
                 positions, tokens, chain)


def _same(ranks: list[_Rank], field: str, get: Any, what: str = "") -> Any:
    first = get(ranks[0])
    for r in ranks[1:]:
        v = get(r)
        if v != first or type(v) is not type(first):
            raise StateError(f"{_OWNER}: states of rank {ranks[0].rank} and rank {r.rank} differ in {what}{field!r} "
                             f"({first!r:.60} vs {v!r:.60}): they were not saved by one job at one point")
    return first


def _same_settings(ranks: list[_Rank], get: Any, what: str) -> dict[str, Any]:
    keys = sorted(set().union(*(get(r).keys() for r in ranks)))
    for k in keys:
        _same(ranks, k, lambda r, k=k: get(r).get(k), what)
    return dict(get(ranks[0]))


def _loader_mergers() -> dict[str, Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]]:
    """Loaders' own merges, by the format of the states they save (imported on use:
    the loaders' packages need not be loaded to merge a stream's states)."""
    from youmu.batching.merge import merge_loader_states
    from youmu.planning.merge import merge_balanced_states

    def merge_ray_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        from youmu.ray.merge import merge_ray_states  # imports Ray: only for its clients' states

        return merge_ray_states(states)

    return {"youmu.batching/1": merge_loader_states, "youmu.planning.BalancedLoader/2": merge_balanced_states,
            "youmu.ray.RayBalancedLoader/1": merge_ray_states}


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state for any topology from the states every rank of a job saved (see the
    module doc). Raises :class:`~youmu.errors.StateError` naming the field for states
    of different streams, data, seeds, epochs or settings, a missing or repeated rank,
    or a state of another kind — never a state that would lose or repeat rows.

    The merged state holds the stream's settings, the epoch and a chain of levels
    (:mod:`youmu.resume`): per job of the epoch, per rank its worker count and per
    worker its position — about 3 ints per old shard (``DDP ranks × workers``), however
    many rows were consumed.
    """
    if isinstance(states, Mapping) or not isinstance(states, Sequence) or not states:
        raise StateError(f"{_OWNER} takes a non-empty list of the states the ranks saved, got {type(states).__name__}")
    first = states[0].get("format") if isinstance(states[0], Mapping) else None
    merger = _loader_mergers().get(first) if isinstance(first, str) else None
    if merger is not None:
        return merger(states)
    ranks = [_rank_state(s, i) for i, s in enumerate(states)]
    fmt = _same(ranks, "format", lambda r: r.fmt)
    _same(ranks, "data", lambda r: (r.inner_settings if fmt == _PACK else r.settings).get("data"))
    _same(ranks, "epoch", lambda r: r.epoch)
    world = _same(ranks, "world_size", lambda r: r.world_size)
    settings = _same_settings(ranks, lambda r: r.settings, "")
    inner = _same_settings(ranks, lambda r: r.inner_settings, "the wrapped stream's ") if fmt == _PACK else {}
    if fmt == _PACK:
        _same(ranks, "format", lambda r: r.inner_fmt, "the wrapped stream's ")
    job_ranks([r.rank for r in ranks], world, owner=_OWNER, holds="the rows a rank delivered")
    chain_raw = _same(ranks, "resumed", lambda r: r.chain)
    chain: list[Level] = decode_levels(chain_raw, _OWNER) if chain_raw is not None else []
    by_rank = sorted(ranks, key=lambda r: r.rank)
    level = Level(
        world, tuple(r.num_workers for r in by_rank),
        tuple(tuple(r.positions.get(k, 0) for k in range(r.num_workers)) for r in by_rank),
        tuple(tuple(r.tokens.get(k, 0) for k in range(r.num_workers)) for r in by_rank) if fmt == _PACK else None,
    )
    levels = encode_levels([*chain, level])
    epoch = ranks[0].epoch
    if fmt != _PACK:
        return {"format": MERGED_FORMAT, "stream": fmt, **settings, "epoch": epoch, "resumed": levels}
    inner_fmt = ranks[0].inner_fmt
    return {"format": MERGED_FORMAT, "stream": fmt, **settings, "epoch": epoch,
            "dataset": {"format": MERGED_FORMAT, "stream": inner_fmt, **inner, "epoch": epoch, "resumed": levels}}
