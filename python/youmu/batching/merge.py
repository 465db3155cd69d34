"""Resume a ``DynamicBatchLoader`` on another topology: the states every rank of a job
saved, merged into ONE state (:func:`merge_loader_states`, reached through
:func:`youmu.merge_states`) that every rank of a new job — any world size, any
``num_workers``, a new ``token_budget`` or ``pool_size`` — loads
(:func:`resume_from_merged`, inside ``load_state_dict``) to emit the rest of the epoch
exactly once.

What a rank has not delivered is named by its state: the samples of the round it was
in (the steps planned but not yet consumed, *replay*, and the ODB pool's leftover,
*overflow*) and the source's position. Those samples count as not delivered, as does
anything fetched past the position (a worker's prefetch, the fetch queue).

* **Map-style datasets**: a rank reads its sampler order (the epoch's permutation,
  strided over ranks as ``DistributedSampler`` does: :mod:`youmu.batching.algo.sampling`);
  a *level* records one job's layout — per rank its position in that order and its
  pending sampler positions. The samples left after a level, in a fixed order (every
  rank's pending ones, then the unread tails in permutation order), are the sequence
  the next job strides over its ranks; a chain of levels composes any number of resizes
  (2 ranks → 3 → 2). A level holds ``world_size`` positions plus at most about
  ``pool_size`` keys per rank, however many samples were consumed.
* **Iterable datasets** (mid-epoch states need a dataset with ``state_dict``, e.g.
  ``YoumuDataset``): the datasets' own states are merged by the stream merge
  (:func:`youmu.merge_states`) — read by DataLoader workers, a rank's is put together
  from its workers' copies' (:func:`rank_source_state`), so the new job may run
  another ``num_workers`` too — and the carried samples (replay and overflow payloads)
  are dealt round-robin to the new ranks, which group them first.

The step count continues: every rank of the new job starts at the first step not
consumed, and the round protocol (DGAP) keeps every rank at the same number of steps
on the new world size. Only join mode resumes on another topology (non-join mode
drops samples at every logical stop by design, ODB Lemma 4).

Example (map-style, the order rank 1 of 3 reads after a 2-rank job):
    >>> settings = {"n": 10, "seed": 0, "shuffle": False, "pad_sampler": False}
    >>> level = sampler_level(2, (3, 2), ((1,), ()))   # rank 0 still holds its key 1
    >>> rank_order(settings, 0, [level], rank=0, world_size=1).tolist()   # its pending sample 2, then the tails
    [2, 5, 6, 7, 8, 9]
    >>> rank_order(settings, 0, [level], rank=1, world_size=3).tolist()
    [5, 8]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from youmu.batching.config import LoaderConfig
from youmu.batching.state import (
    COUNTERS,
    LOADER_STATE,
    fresh_state,
    pooled_keys,
    read_merged,
    read_rank_state,
)
from youmu.errors import StateError
from youmu.order.resume import Level
from youmu.state.contract import state_int, state_positions
from youmu.state.jobs import MERGED_FORMAT, OWNER, JobStates, Merge, encode_chain, is_merged, one_kind
from youmu.state.stream import POSITIONS, position_width, with_worker_positions

__all__ = ["sampler_level", "rank_order", "chain_length", "merge_loader_states", "resume_from_merged",
           "check_loader_state", "rank_source_state", "resume_workers"]

_KIND = "DynamicBatchLoader"


def sampler_level(world_size: int, positions: Sequence[int], pending: Sequence[Sequence[int]]) -> Level:
    """A map-style job: one sampler position per rank (one "worker"), and the sampler
    positions each rank read but did not deliver."""
    return Level(world_size, (1,) * world_size, tuple((int(p),) for p in positions),
                 pending=tuple(tuple(k) for k in pending))


# -- map-style orders ------------------------------------------------------------------------
def _first_sequence(settings: Mapping[str, Any], epoch: int, world_size: int) -> np.ndarray:
    """The sampler views of the epoch's first job (``world_size`` ranks): rank ``r``
    reads ``seq[r::world_size]``, exactly :func:`~youmu.batching.algo.sampling.rank_indices`."""
    from youmu.batching.algo.sampling import rank_indices, sampler_quota

    n = int(settings["n"])
    perm = np.asarray(rank_indices(n, 1, 0, seed=int(settings["seed"]), epoch=epoch, shuffle=bool(settings["shuffle"]),
                                   pad=False), dtype=np.int64)
    if settings["pad_sampler"] and n:
        padding = sampler_quota(n, world_size).padding  # DistributedSampler's repeats, cyclically
        perm = np.concatenate([perm, np.resize(perm, padding)])
    return perm


def _check_level(length: int, level: Level, depth: int) -> list[int]:
    """Each rank's share of a sequence of ``length`` samples that ``level`` strided,
    after checking the level's positions and pending keys against it (without the
    sequence: a forged dataset size allocates nothing)."""
    w = level.world_size
    shares = []
    for r in range(w):
        mine = len(range(r, length, w))
        p, keys = level.positions[r][0], level.pending[r] if level.pending is not None else ()
        where = f"'resumed'[{depth}] rank {r}"
        if p > mine:
            raise StateError(f"{OWNER}: state field 'position' of {where} is {p}, past the end of that rank's "
                             f"{mine} samples (another dataset?)")
        if len(set(keys)) != len(keys) or any(k >= p for k in keys):
            raise StateError(f"{OWNER}: state field 'pending' of {where} must list distinct sampler positions "
                             f"below its position {p}, got {list(keys)[:8]}")
        shares.append(mine)
    return shares


def _first_length(settings: Mapping[str, Any], world_size: int) -> int:
    """Sampler views of the epoch's first job: the dataset, padded as ``DistributedSampler``."""
    from youmu.batching.algo.sampling import sampler_quota

    n = state_int(settings, "n", owner=f"{_KIND} state field 'settings'")
    return sampler_quota(n, world_size).views if settings.get("pad_sampler") and n else n


def chain_length(settings: Mapping[str, Any], levels: Sequence[Level]) -> int:
    """Samples left after ``levels`` (every level checked, :func:`_check_level`): index
    math only, so a state is validated before anything of its claimed size exists."""
    if not levels:
        raise StateError(f"{OWNER}: a merged DynamicBatchLoader state holds no level")
    length = _first_length(settings, levels[0].world_size)
    for depth, lv in enumerate(levels):
        shares = _check_level(length, lv, depth)
        length = sum(m - lv.positions[r][0] + len(lv.pending[r] if lv.pending is not None else ())
                     for r, m in enumerate(shares))
    return length


def _after(seq: np.ndarray, level: Level, depth: int) -> np.ndarray:
    """The samples a level left, in the order the next job strides over: every rank's
    pending ones (rank order, then their order in the state), then the unread tails in
    ``seq`` order."""
    _check_level(len(seq), level, depth)
    w = level.world_size
    idx = np.arange(len(seq), dtype=np.int64)
    pending = [r + w * np.asarray(level.pending[r] if level.pending is not None else (), dtype=np.int64)
               for r in range(w)]
    positions = np.asarray([p[0] for p in level.positions], dtype=np.int64)
    tail = idx // w >= positions[idx % w]
    return np.concatenate([seq[np.concatenate([np.zeros(0, np.int64), *pending])], seq[tail]])


def rank_order(settings: Mapping[str, Any], epoch: int, levels: Sequence[Level], *, rank: int,
               world_size: int) -> np.ndarray:
    """The dataset indices rank ``rank`` of ``world_size`` reads in a job resumed after
    ``levels`` (map-style), in order."""
    chain_length(settings, levels)  # every level checked before the epoch's order is drawn
    seq = _first_sequence(settings, epoch, levels[0].world_size)
    for depth, lv in enumerate(levels):
        seq = _after(seq, lv, depth)
    return seq[rank::world_size]


# -- merging ----------------------------------------------------------------------------------
def _checked(state: Mapping[str, Any], i: int) -> tuple[dict[str, Any], list[Level] | None]:
    st, levels = read_rank_state(state, owner=f"{OWNER}: states[{i}]")
    if not isinstance(st.get("settings"), Mapping):
        raise StateError(f"{OWNER}: states[{i}] has no 'settings' field (saved by an older youmu): it resumes "
                         "its own rank only")
    return st, levels


def merge_loader_states(states: Sequence[Mapping[str, Any]], merge: Merge) -> dict[str, Any]:
    """One ``"youmu.MergedState/1"`` state of a ``DynamicBatchLoader`` from the
    states all ranks of a job saved at one step (see the module doc; ``merge``: the
    stream merge for an iterable dataset's states, :func:`youmu.merge_states`). A
    :class:`~youmu.errors.StateError` names the field for states of different
    datasets, seeds, epochs or settings, a missing or repeated rank, or a state of
    another kind."""
    # every version's states merge (a job's ranks saved one version; the merged state is today's)
    same = [dict(s, format=LOADER_STATE.tag) if isinstance(s, Mapping) and s.get("format") in
            LOADER_STATE.tags else s for s in states] if isinstance(states, Sequence) else states
    read = [_checked(s, i) for i, s in enumerate(one_kind(same, LOADER_STATE.tag, kind=_KIND))]
    checked = [st for st, _ in read]
    job = JobStates(checked, kind=_KIND)
    job.same("kind")
    settings = job.same_settings(lambda s: s["settings"])
    epoch = job.same("epoch")
    world = job.same("world_size")
    job.same("config")
    if not settings.get("join"):
        raise StateError(f"{OWNER}: DynamicBatchLoader states with join=False resume only on their own topology "
                         "(non-join mode drops the samples fetched at each logical stop)")
    ranks = job.in_rank_order(world, holds="the samples a rank delivered")
    live = JobStates([s for s in ranks if not s["done"]], kind=_KIND)
    (live if live.states else job).same("iteration")
    # the first step not consumed: the same on every live rank (DGAP keeps ranks in step)
    step = live.same("step", lambda s: s["step"] - len(s["replay"])) if live.states else max(s["step"] for s in ranks)
    out: dict[str, Any] = {
        "format": MERGED_FORMAT, "stream": LOADER_STATE.tag, "kind": ranks[0]["kind"], **settings, "epoch": epoch,
        "iteration": ranks[0]["iteration"], "round": max(s["round"] for s in ranks), "step": step,
        "emitted": max(s["emitted"] for s in ranks), "done": not live.states, **LOADER_STATE.summed(ranks),
    }
    if ranks[0]["kind"] == "map":
        job.same("resumed")  # in today's form, each decoded once by read_rank_state
        chain = read[0][1] or []
        # what each rank's whole order holds: a finished rank delivered all of it
        left = chain_length(settings, chain) if chain else _first_length(settings, world)
        positions: list[int] = []
        pending: list[tuple[int, ...]] = []
        for r, st in enumerate(ranks):
            if st["done"]:
                positions.append(len(range(r, left, world)) if chain or not settings.get("pad_sampler")
                                 else left // world)
                pending.append(())
            else:
                positions.append(st["position"])
                pending.append(tuple(pooled_keys(st)))
        levels = [*chain, sampler_level(world, positions, pending)]
        chain_length(settings, levels)  # validates every level
        out["resumed"] = encode_chain(levels)
        return out
    sources = [rank_source_state(st) for st in ranks]
    carried = []
    for st in ranks:
        for k in pooled_keys(st):
            carried.append(list(st["payloads"][k]))
    out["source_state"] = merge(sources)
    out["carried"] = carried
    return out


def rank_source_state(st: Mapping[str, Any]) -> Any:
    """The dataset state of a rank's iterable ``DynamicBatchLoader`` state (checked), as
    one stream state a merge takes: read in the training process, the dataset's own;
    read by DataLoader workers, the rank's state put together from its workers' (each
    worker's own position, as of the last sample taken from it; a worker nothing was
    taken from stands where the pass started)."""
    workers = st.get("workers")
    if workers is None:
        if st["source_state"] is None:
            raise StateError(f"{OWNER}: the state of rank {st['rank']} holds no dataset state (field "
                             "'source_state'): save iterable-dataset states after the first step, from a dataset "
                             "with state_dict() (e.g. YoumuDataset)")
        return st["source_state"]
    states = workers["states"]
    got = [s for s in (st["source_state"], *states) if isinstance(s, Mapping)]
    if not got:
        raise StateError(f"{OWNER}: the state of rank {st['rank']} holds no dataset state (fields 'source_state', "
                         "'workers'): save iterable-dataset states after the first step")
    width = position_width(got[0].get("format"))
    positions: dict[int, Any] = {}
    for w, s in enumerate(states):
        if s is not None:
            # a worker's copy may also hold the positions other workers loaded: take its own
            own = state_positions(s, POSITIONS, owner=f"{OWNER}: rank {st['rank']} 'workers'[{w}]", width=width)
            if w in own:
                positions[w] = own[w]
    return with_worker_positions(got[0], positions, len(states))


def resume_workers(state: Any) -> int | None:
    """The DataLoader workers a ``DynamicBatchLoader`` rank state must resume with, when
    it holds where an iterable dataset stands split over them (0: read in the training
    process); ``None`` when any number fits (map-style, not begun, done, a merged state)."""
    if not isinstance(state, Mapping) or state.get("kind") != "iterable" or state.get("done") is not False:
        return None
    workers = state.get("workers")
    if isinstance(workers, Mapping) and isinstance(workers.get("states"), (list, tuple)):
        return len(workers["states"])
    source = state.get("source_state")
    return 0 if isinstance(source, Mapping) and not is_merged(source) else None


# -- loading ------------------------------------------------------------------------------------
def resume_from_merged(state: Any, config: LoaderConfig) -> dict[str, Any]:
    """The resume state of this rank of ``config`` from a merged state, read once
    (:func:`youmu.batching.state.read_merged`: settings checked field by field, a
    :class:`StateError` naming the first that differs), then this rank's share of the
    samples left."""
    owner = _KIND
    mine = config.resume_settings
    st = read_merged(state, mine, owner=owner)
    out = fresh_state(config, st["epoch"], LOADER_STATE.summed([st]))
    out.update({k: st[k] for k in (*COUNTERS[1:], "done")})
    if config.kind == "map":
        levels = st["resumed"]
        chain_length(mine, levels)  # validates every level
        out["resumed"] = encode_chain(levels)
        return out
    carried = st.get("carried")
    if not isinstance(carried, (list, tuple)) or any(not isinstance(p, (list, tuple)) or len(p) not in (3, 4)
                                                     for p in carried):
        raise StateError(f"{owner} state field 'carried' must be a list of (sample, length, tokens) entries")
    if st.get("source_state") is None or not hasattr(config.dataset, "load_state_dict"):
        raise StateError(f"{owner} state field 'source_state': a merged iterable state needs the dataset's merged "
                         "state and a dataset with load_state_dict")
    share = list(carried[config.rank::config.world_size])
    out.update(overflow=list(range(len(share))), position=len(share), source_state=st["source_state"],
               payloads={k: tuple(p) for k, p in enumerate(share)})
    return out


def check_loader_state(state: Any, config: LoaderConfig) -> dict[str, Any]:
    """``state`` validated for a loader with ``config`` (``load_state_dict``): a
    :class:`~youmu.errors.StateError` naming the first field that does not fit, never an
    ``AttributeError`` or ``KeyError`` later. A merged state
    (:func:`youmu.merge_states`) becomes this rank's share
    (:func:`resume_from_merged`). Returns a new dict."""
    owner = _KIND
    if is_merged(state):
        return resume_from_merged(state, config)
    st, levels = read_rank_state(state, expect={"world_size": config.world_size, "rank": config.rank,
                                                "kind": config.kind}, pool_size=config.pool_size)
    if st["config"] != config.fingerprint:
        raise StateError(
            f"state field 'config' ({st['config']!r}) says it was saved with different loader settings "
            f"(token_budget, pool_size, join, seed, dataset size, ...): this loader's is {config.fingerprint}"
        )
    keys = pooled_keys(st)
    if config.kind == "map":
        if levels is not None:  # a rank of a job resumed from a merged state
            left = chain_length(config.resume_settings, levels)
            mine = len(range(config.rank, left, config.world_size))
        else:
            n, w = config.size or 0, config.world_size
            mine = -(-n // w) if config.pad_sampler else len(range(config.rank, n, w))
        bad = [k for k in keys if k >= mine]
        if bad or st["position"] > mine:
            raise StateError(
                f"{owner} state positions ({bad[:3] or st['position']}) are out of range for this rank's "
                f"{mine} samples (another dataset?)"
            )
    elif st["source_state"] is not None and not hasattr(config.dataset, "load_state_dict"):
        raise StateError("the state holds a dataset state but the dataset has no load_state_dict")
    else:
        saved = resume_workers(st)
        if saved is not None and saved != config.num_workers:
            # the dataset's rows are split over the workers: another split is a merge's re-deal
            raise StateError(
                f"{owner} state field 'workers': saved with num_workers={saved}, this loader has num_workers="
                f"{config.num_workers}; an iterable dataset's position is split over its DataLoader workers, so "
                "resuming on another number of workers goes through youmu.merge_states([every rank's state]) "
                "(one rank: merge_states([state])), loaded on every rank"
            )
        if st["workers"] is not None and not hasattr(config.dataset, "load_state_dict"):
            raise StateError("the state holds the workers' dataset states but the dataset has no load_state_dict")
    return st
