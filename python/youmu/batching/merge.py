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
  strided over ranks as ``DistributedSampler`` does: :mod:`youmu.batching.sampling`);
  a *level* records one job's layout — per rank its position in that order and its
  pending sampler positions. The samples left after a level, in a fixed order (every
  rank's pending ones, then the unread tails in permutation order), are the sequence
  the next job strides over its ranks; a chain of levels composes any number of resizes
  (2 ranks → 3 → 2). A level holds ``world_size`` positions plus at most about
  ``pool_size`` keys per rank, however many samples were consumed.
* **Iterable datasets** (mid-epoch states need ``num_workers=0`` and a dataset with
  ``state_dict``, e.g. ``YoumuDataset``): the datasets' own states are merged by the
  stream merge (:func:`youmu.merge_states`), and the carried samples (replay and
  overflow payloads) are dealt round-robin to the new ranks, which group them first.

The step count continues: every rank of the new job starts at the first step not
consumed, and the round protocol (DGAP) keeps every rank at the same number of steps
on the new world size. Only join mode resumes on another topology (non-join mode
drops samples at every logical stop by design, ODB Lemma 4).

Example (map-style, the order rank 1 of 3 reads after a 2-rank job):
    >>> settings = {"n": 10, "seed": 0, "shuffle": False, "pad_sampler": False}
    >>> level = Level(world_size=2, positions=(3, 2), pending=((1,), ()))   # rank 0 still holds its key 1
    >>> rank_order(settings, 0, [level], rank=0, world_size=1).tolist()   # its pending sample 2, then the tails
    [2, 5, 6, 7, 8, 9]
    >>> rank_order(settings, 0, [level], rank=1, world_size=3).tolist()
    [5, 8]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from youmu.errors import StateError
from youmu.resume import MERGED_FORMAT
from youmu.stateful import check_state, job_ranks, state_int, state_ints, state_levels

__all__ = ["Level", "rank_order", "merge_loader_states", "resume_from_merged", "decode_chain", "encode_chain",
           "FIXED_SETTINGS"]

_OWNER = "merge_states"
_STATE_FORMAT = "youmu.batching/1"  # youmu.batching.config.STATE_FORMAT (imported lazily there: torch-free here)

#: Settings a merged state must share with the loader that loads it (``token_budget``
#: and ``pool_size`` may change: they take effect from the resume step).
FIXED_SETTINGS = ("kind", "n", "data", "seed", "shuffle", "join", "pad_sampler", "shuffle_steps", "loss_scaling",
                  "uneven", "encoder_budget")


@dataclass(frozen=True)
class Level:
    """One job's layout over a map-style dataset: ``positions[r]`` samples of rank
    ``r``'s order were read, of which ``pending[r]`` (sampler positions) were not
    delivered."""

    world_size: int
    positions: tuple[int, ...]
    pending: tuple[tuple[int, ...], ...]


# -- map-style orders ------------------------------------------------------------------------
def _first_sequence(settings: Mapping[str, Any], epoch: int, world_size: int) -> np.ndarray:
    """The sampler views of the epoch's first job (``world_size`` ranks): rank ``r``
    reads ``seq[r::world_size]``, exactly :func:`~youmu.batching.sampling.rank_indices`."""
    from youmu.batching.sampling import rank_indices, sampler_quota

    n = int(settings["n"])
    perm = np.asarray(rank_indices(n, 1, 0, seed=int(settings["seed"]), epoch=epoch, shuffle=bool(settings["shuffle"]),
                                   pad=False), dtype=np.int64)
    if settings["pad_sampler"] and n:
        padding = sampler_quota(n, world_size).padding  # DistributedSampler's repeats, cyclically
        perm = np.concatenate([perm, np.resize(perm, padding)])
    return perm


def _after(seq: np.ndarray, level: Level, depth: int) -> np.ndarray:
    """The samples a level left, in the order the next job strides over: every rank's
    pending ones (rank order, then their order in the state), then the unread tails in
    ``seq`` order."""
    w = level.world_size
    idx = np.arange(len(seq), dtype=np.int64)
    pending = []
    for r in range(w):
        mine = len(range(r, len(seq), w))
        p, keys = level.positions[r], level.pending[r]
        where = f"'resumed'[{depth}] rank {r}"
        if p > mine:
            raise StateError(f"{_OWNER}: state field 'position' of {where} is {p}, past the end of that rank's "
                             f"{mine} samples (another dataset?)")
        if len(set(keys)) != len(keys) or any(k >= p for k in keys):
            raise StateError(f"{_OWNER}: state field 'pending' of {where} must list distinct sampler positions "
                             f"below its position {p}, got {list(keys)[:8]}")
        pending.append(r + w * np.asarray(keys, dtype=np.int64))
    positions = np.asarray(level.positions, dtype=np.int64)
    tail = idx // w >= positions[idx % w]
    return np.concatenate([seq[np.concatenate([np.zeros(0, np.int64), *pending])], seq[tail]])


def rank_order(settings: Mapping[str, Any], epoch: int, levels: Sequence[Level], *, rank: int,
               world_size: int) -> np.ndarray:
    """The dataset indices rank ``rank`` of ``world_size`` reads in a job resumed after
    ``levels`` (map-style), in order."""
    if not levels:
        raise StateError(f"{_OWNER}: a merged DynamicBatchLoader state holds no level")
    seq = _first_sequence(settings, epoch, levels[0].world_size)
    for depth, lv in enumerate(levels):
        seq = _after(seq, lv, depth)
    return seq[rank::world_size]


def encode_chain(levels: Sequence[Level]) -> list[dict[str, Any]]:
    """Levels as plain lists (JSON- and ``torch.save``-friendly)."""
    return [{"world_size": lv.world_size, "positions": list(lv.positions), "pending": [list(p) for p in lv.pending]}
            for lv in levels]


def decode_chain(raw: Any, owner: str) -> list[Level]:
    """The ``resumed`` field of a ``DynamicBatchLoader`` state, validated (a
    :class:`StateError` names the first field that does not fit)."""
    out = []
    for f, lv in state_levels({"resumed": raw}, "resumed", owner=owner):
        w = state_int(lv, "world_size", owner=f"{owner} {f}", minimum=1)
        positions = state_ints(lv, "positions", owner=f"{owner} {f}")
        pending = lv.get("pending")
        if len(positions) != w or not isinstance(pending, (list, tuple)) or len(pending) != w:
            raise StateError(f"{owner} state field {f} must hold one position and one 'pending' list per rank "
                             f"({w}), got {len(positions)} positions and {pending!r:.60}")
        keys = tuple(tuple(state_ints({"pending": p}, "pending", owner=f"{owner} {f}")) for p in pending)
        out.append(Level(w, tuple(positions), keys))
    return out


# -- merging ----------------------------------------------------------------------------------
def _pending(st: Mapping[str, Any]) -> list[int]:
    return [k for step in st["replay"] for k in step["keys"]] + list(st["overflow"])


def _same(states: list[dict[str, Any]], field: str, get: Any) -> Any:
    first = get(states[0])
    for st in states[1:]:
        v = get(st)
        if v != first or type(v) is not type(first):
            raise StateError(f"{_OWNER}: DynamicBatchLoader states of rank {states[0]['rank']} and rank {st['rank']} "
                             f"differ in {field!r} ({first!r:.60} vs {v!r:.60}): they were not saved by one job "
                             "at one point")
    return first


def _checked(state: Any, i: int) -> dict[str, Any]:
    from youmu.batching.config import check_saved_state

    if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
        fmt = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise StateError(f"{_OWNER}: states[{i}] is a {fmt} state, not a DynamicBatchLoader ({_STATE_FORMAT}) "
                         "state like states[0]: one merge takes the states of one kind of loader")
    st = check_saved_state(state, owner=f"{_OWNER}: states[{i}]")
    if not isinstance(st.get("settings"), Mapping):
        raise StateError(f"{_OWNER}: states[{i}] has no 'settings' field (saved by an older youmu): it resumes "
                         "its own rank only")
    return st


def merge_loader_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ``"youmu.MergedState/1"`` state of a ``DynamicBatchLoader`` from the
    states all ranks of a job saved at one step (see the module doc). A
    :class:`~youmu.errors.StateError` names the field for states of different
    datasets, seeds, epochs or settings, a missing or repeated rank, or a state of
    another kind."""
    checked = [_checked(s, i) for i, s in enumerate(states)]
    _same(checked, "kind", lambda s: s["kind"])
    for key in sorted(set().union(*(s["settings"] for s in checked))):  # name the setting that differs
        _same(checked, key, lambda s, key=key: s["settings"].get(key))
    settings = dict(checked[0]["settings"])
    epoch = _same(checked, "epoch", lambda s: s["epoch"])
    world = _same(checked, "world_size", lambda s: s["world_size"])
    _same(checked, "config", lambda s: s["config"])
    if not settings.get("join"):
        raise StateError(f"{_OWNER}: DynamicBatchLoader states with join=False resume only on their own topology "
                         "(non-join mode drops the samples fetched at each logical stop)")
    job_ranks([st["rank"] for st in checked], world, owner=_OWNER, holds="the samples a rank delivered")
    ranks = sorted(checked, key=lambda s: s["rank"])
    live = [s for s in ranks if not s["done"]]
    _same(live or ranks, "iteration", lambda s: s["iteration"])
    # the first step not consumed: the same on every live rank (DGAP keeps ranks in step)
    step = _same(live, "step", lambda s: s["step"] - len(s["replay"])) if live else max(s["step"] for s in ranks)
    out: dict[str, Any] = {
        "format": MERGED_FORMAT, "stream": _STATE_FORMAT, "kind": ranks[0]["kind"], **settings, "epoch": epoch,
        "iteration": ranks[0]["iteration"], "round": max(s["round"] for s in ranks), "step": step,
        "emitted": max(s["emitted"] for s in ranks), "done": not live,
    }
    if ranks[0]["kind"] == "map":
        chain_raw = _same(ranks, "resumed", lambda s: s.get("resumed"))
        chain = decode_chain(chain_raw, _OWNER) if chain_raw is not None else []
        orders = [len(rank_order(settings, epoch, chain, rank=r, world_size=world)) if chain else None
                  for r in range(world)]
        positions: list[int] = []
        pending: list[tuple[int, ...]] = []
        for r, st in enumerate(ranks):
            if st["done"]:  # its whole order was delivered
                positions.append(orders[r] or 0 if chain else _first_len(settings, world, r))
                pending.append(())
            else:
                positions.append(st["position"])
                pending.append(tuple(_pending(st)))
        levels = [*chain, Level(world, tuple(positions), tuple(pending))]
        rank_order(settings, epoch, levels, rank=0, world_size=1)  # validates every level
        out["resumed"] = encode_chain(levels)
        return out
    from youmu.merge import merge_states

    sources = []
    for st in ranks:
        if st["source_state"] is None:
            raise StateError(f"{_OWNER}: the state of rank {st['rank']} holds no dataset state (field "
                             "'source_state'): save iterable-dataset states after the first step, with num_workers=0 "
                             "and a dataset with state_dict() (e.g. YoumuDataset)")
        sources.append(st["source_state"])
    carried = []
    for st in ranks:
        for k in _pending(st):
            carried.append(list(st["payloads"][k]))
    out["source_state"] = merge_states(sources)
    out["carried"] = carried
    return out


def _first_len(settings: Mapping[str, Any], world: int, rank: int) -> int:
    from youmu.batching.sampling import sampler_quota

    n = int(settings["n"])
    return sampler_quota(n, world).per_rank if settings["pad_sampler"] else len(range(rank, n, world))


# -- loading ------------------------------------------------------------------------------------
def resume_from_merged(state: Any, config: Any) -> dict[str, Any]:
    """The resume state of this rank of ``config`` (a ``LoaderConfig``) from a merged
    state: settings checked field by field (a :class:`StateError` naming the first
    that differs), then this rank's share of the samples left."""
    owner = "DynamicBatchLoader"
    mine = config.resume_settings
    st = check_state(state, MERGED_FORMAT, owner=owner, required=("stream", "kind", "epoch", "step"))
    if st["stream"] != _STATE_FORMAT:
        raise StateError(f"{owner}.load_state_dict got a merged state of a {st['stream']!r}, not of a "
                         f"DynamicBatchLoader ({_STATE_FORMAT})")
    check_state(st, MERGED_FORMAT, owner=owner, expect={k: mine[k] for k in FIXED_SETTINGS})
    for key in ("epoch", "iteration", "round", "step", "emitted"):
        state_int(st, key, owner=owner)
    if not isinstance(st.get("done"), bool):
        raise StateError(f"{owner} state field 'done' must be a bool, got {type(st.get('done')).__name__}")
    out = config.fresh_state(st["epoch"])
    out.update({k: st[k] for k in ("iteration", "round", "step", "emitted", "done")})
    if config.kind == "map":
        levels = decode_chain(st.get("resumed"), owner)
        rank_order(mine, st["epoch"], levels, rank=0, world_size=1)  # validates every level
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
