"""``merge_states``: the states the ranks of a job saved, as ONE state that every rank
of a new job — any world size, any number of DataLoader workers — loads to deliver
the rest of the epoch exactly once (the math: :mod:`youmu.resume`).

Accepted per rank: the ``state_dict()`` of a ``DynamicBatchLoader`` (its own merge:
:mod:`youmu.batching.merge`), of a youmu stream (``YoumuDataset``,
``MapStream`` / ``MixtureStream``, ``pack``), possibly itself resumed from a merged
state, or of a torchdata ``StatefulDataLoader`` over one (each worker's dataset state
is taken from its snapshot; save it with the default ``snapshot_every_n_steps=1`` so
the snapshot is what was yielded). Loader states are merged by their own modules, found
in a table keyed by each loader's own format constant: a ``DynamicBatchLoader``'s by
:mod:`youmu.batching.merge`, a ``BalancedLoader``'s by :mod:`youmu.planning.merge`, a
``RayBalancedLoader``'s by :mod:`youmu.ray.merge`. Each gets :func:`merge_states` itself
for the stream states nested in its own, and every merge checks through
:mod:`youmu.jobstates`.

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
from youmu.jobstates import MERGED_FORMAT, OWNER, JobStates, Level, Merge, check_shards
from youmu.resume import decode_levels, encode_levels
from youmu.stateful import state_int, state_positions

__all__ = ["merge_states"]

# fields of a stream state that are not settings shared by all ranks
_PER_RANK = ("format", "rank", "world_size", "epoch", "num_workers", "positions", "resumed", "dataset")
_OWNER = OWNER


def _stream_formats() -> tuple[str, str, str]:
    """The stream owners' format tags: (one of a row stream, another, the packing
    wrapper's) — the streams are torch datasets, imported when their states are merged."""
    from youmu.torch.dataset import YoumuDataset
    from youmu.torch.mapstream import MapStream
    from youmu.torch.pack import PackedDataset

    return YoumuDataset.state_format, MapStream.state_format, PackedDataset.state_format


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


def _rank_state(state: Any, i: int, streams: tuple[str, ...], pack_format: str) -> _Rank:
    if not isinstance(state, Mapping):
        raise StateError(f"{_OWNER}: states[{i}] must be a state dict, got {type(state).__name__}")
    single, loader_workers, per_worker = _unwrap_loader(state, i)
    if loader_workers is not None:
        got = [s for s in per_worker.values() if isinstance(s, Mapping)]
        if not got:
            raise StateError(f"{_OWNER}: states[{i}]: no worker of the StatefulDataLoader holds a stream state")
        base = dict(got[0])
        width = 2 if base.get("format") == pack_format else 1
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
    if not isinstance(single, Mapping) or single.get("format") not in streams:
        fmt = single.get("format") if isinstance(single, Mapping) else type(single).__name__
        raise StateError(f"{_OWNER}: states[{i}] is a {fmt} state, not the state of a youmu stream "
                         f"({', '.join(streams)}) or of a StatefulDataLoader over one")
    fmt = single["format"]
    pack = fmt == pack_format
    shard = single.get("dataset") if pack else single
    if not isinstance(shard, Mapping):
        raise StateError(f"{_OWNER}: states[{i}] (a {fmt} state) has no 'dataset' state")
    rank = state_int(shard, "rank", owner=_OWNER)
    world = state_int(shard, "world_size", owner=_OWNER, minimum=1)
    epoch = state_int(single, "epoch", owner=_OWNER)
    raw_pos = state_positions(single, "positions", owner=_OWNER, width=2 if pack else 1)
    nw = single.get("num_workers")
    nw = 1 if nw is None else state_int(single, "num_workers", owner=_OWNER, minimum=1)
    check_shards([nw], owner=_OWNER, where=f"states[{i}] field 'num_workers'")
    if any(w >= nw for w in raw_pos):
        raise StateError(f"{_OWNER}: states[{i}] field 'positions' has workers {sorted(raw_pos)} but num_workers={nw}")
    positions = {w: (p[0] if isinstance(p, tuple) else p) for w, p in raw_pos.items()}
    tokens = {w: p[1] for w, p in raw_pos.items() if isinstance(p, tuple)}
    settings = {k: v for k, v in single.items() if k not in _PER_RANK}
    inner_settings = {k: v for k, v in shard.items() if k not in _PER_RANK} if pack else {}
    chain = shard.get("resumed")
    return _Rank(fmt, settings, shard.get("format") if pack else None, inner_settings, rank, world, epoch, nw,
                 positions, tokens, chain)


def _mergers() -> dict[str, Callable[[Sequence[Mapping[str, Any]], Merge], dict[str, Any]]]:
    """Loaders' own merges, by the format constant of the states they save (imported
    on use: the loaders' packages need not be loaded to merge a stream's states)."""
    from youmu.batching.config import STATE_FORMAT as BATCHING_FORMAT
    from youmu.batching.merge import merge_loader_states
    from youmu.planning.checkpoint import STATE_FORMAT as BALANCED_FORMAT
    from youmu.planning.merge import merge_balanced_states
    from youmu.ray.merge import merge_ray_states
    from youmu.ray.state import CLIENT_FORMAT

    return {BATCHING_FORMAT: merge_loader_states, BALANCED_FORMAT: merge_balanced_states,
            CLIENT_FORMAT: merge_ray_states}


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
    merger = _mergers().get(first) if isinstance(first, str) else None
    if merger is not None:
        return merger(states, merge_states)
    return _merge_streams(states)


def _merge_streams(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stream merge: one level more on the epoch's chain (:mod:`youmu.resume`)."""
    *rows, pack_format = _stream_formats()
    ranks = [_rank_state(s, i, (*rows, pack_format), pack_format) for i, s in enumerate(states)]
    pack = ranks[0].fmt == pack_format
    job = JobStates(ranks, kind="stream", rank=lambda r: r.rank)
    fmt = job.same("format", lambda r: r.fmt)
    job.same("data", lambda r: (r.inner_settings if pack else r.settings).get("data"))
    epoch = job.same("epoch", lambda r: r.epoch)
    world = job.same("world_size", lambda r: r.world_size)
    settings = job.same_settings(lambda r: r.settings)
    inner = job.same_settings(lambda r: r.inner_settings, "the wrapped stream's ") if pack else {}
    if pack:
        job.same("format", lambda r: r.inner_fmt, "the wrapped stream's ")
    by_rank = job.in_rank_order(world, holds="the rows a rank delivered")
    chain_raw = job.same("resumed", lambda r: r.chain)
    chain: list[Level] = decode_levels(chain_raw, _OWNER) if chain_raw is not None else []
    check_shards([r.num_workers for r in by_rank], owner=_OWNER, where="the states' 'num_workers'")
    level = Level(
        world, tuple(r.num_workers for r in by_rank),
        tuple(tuple(r.positions.get(k, 0) for k in range(r.num_workers)) for r in by_rank),
        tuple(tuple(r.tokens.get(k, 0) for k in range(r.num_workers)) for r in by_rank) if pack else None,
    )
    levels = encode_levels([*chain, level])
    if not pack:
        return {"format": MERGED_FORMAT, "stream": fmt, **settings, "epoch": epoch, "resumed": levels}
    inner_fmt = ranks[0].inner_fmt
    return {"format": MERGED_FORMAT, "stream": fmt, **settings, "epoch": epoch,
            "dataset": {"format": MERGED_FORMAT, "stream": inner_fmt, **inner, "epoch": epoch, "resumed": levels}}
