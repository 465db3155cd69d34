"""Mixture weights that change at a resume: new weights (or a new curriculum) from the
resume point on, every row of the old weights delivered exactly once.

A :class:`~youmu.mixture.MixtureDataset` is a pure map from a global index to
``(child, draw number)``, and a child's draws are numbered in the order the index
visits them, across stages. So the rows delivered so far are those of the indices
delivered so far, and a stage boundary placed at an index ``T`` past all of them, on
the old stage's block grid, changes nothing before ``T`` while every child's draws
after ``T`` continue from its count at ``T``. A resume with other weights therefore
takes the *switch point* ``T``: the first block boundary of the old schedule at or
after the last index any rank delivered (the job's merged state — :func:`youmu.merge_states`
— knows every rank's position; one rank's own state does not, and all ranks must agree
on ``T``). The indices left before ``T`` are delivered under the old weights (what the
killed ranks had in flight: at most a few runs per DataLoader worker plus one block),
the indices from ``T`` under the new ones. This is MegaScale-Data's mixing model (a
weight change applies from the step it is made at, never to samples already planned),
and the same rule ``BalancedLoader`` schedules follow.

What a stream state records (``"mixture"``): the settings that fix the map (seed, block
size, policy, per child a fingerprint, its length and chunk), the weight stages of the
epoch as given, and each switch made in the epoch (the level of the resume chain it was
made at, ``T``, the mixture's length after it). A state without it (saved before this
was recorded) loads only with unchanged weights.

Honoured: any new weights or curriculum; a child added (it had weight 0 before ``T``: a
child's map does not depend on children with weight 0); a child given weight 0.
Refused, saying why: a child removed (rows of it may be owed before ``T``: give it
weight 0 instead), a child whose data changed, another seed, block size or policy (the
delivered part would map to other rows), and a change loaded from one rank's own state.

Example:
    >>> from youmu.mixture import MixtureDataset
    >>> old = MixtureDataset({"a": list(range(100)), "b": list(range(50))}, {"a": 1, "b": 1}, block_size=8)
    >>> switch_point(old, 13)                     # the next block boundary after index 12
    16
    >>> new = old.with_stages([(0, {"a": 1.0})])
    >>> spliced_stages(old.raw_stages, new.raw_stages, 16)
    [(0, {'a': 1.0, 'b': 1.0}), (16, {'a': 1.0, 'b': 0.0})]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from youmu.errors import StateError
from youmu.order.resume import Units
from youmu.state.contract import data_fingerprint, same_data, state_value_int

if TYPE_CHECKING:
    from youmu.mixture import MixtureDataset

__all__ = ["Switch", "Saved", "describe", "read", "check_same_map", "same_from", "switch_point", "spliced_stages",
           "splicer", "delivered_end", "state_field"]

Stages = list[tuple[int, dict[str, float]]]


@dataclass(frozen=True)
class Switch:
    """A weight change inside an epoch: made before level ``level`` of the resume chain
    dealt its units, new weights from index ``at``, the mixture ``length`` long after it."""

    level: int
    at: int
    length: int


@dataclass(frozen=True)
class Saved:
    """The ``"mixture"`` field of a stream state, validated."""

    desc: dict[str, Any]
    stages: Stages
    switches: list[Switch]
    origin_len: int


def describe(ds: MixtureDataset) -> dict[str, Any]:
    """What fixes ``ds``'s map, for a state: settings, per child ``[fingerprint, length,
    chunk]``, the stages as given (positive weights) and the length."""
    cached = getattr(ds, "_change_description", None)
    if cached is not None:
        return cached
    chunks, lengths = ds.child_chunks, ds.lengths
    out = {
        "seed": ds.seed, "block_size": ds.block_size, "policy": ds.policy,
        "children": {n: [data_fingerprint(c), lengths[n], chunks[n]] for n, c in ds.children.items()},
        "stages": [[start, {n: w for n, w in weights.items() if w > 0}] for start, weights in ds.raw_stages],
        "len": len(ds),
    }
    ds._change_description = out  # type: ignore[attr-defined]  # the children do not change
    return out


def state_field(ds: MixtureDataset, switches: Sequence[Switch], origin_len: int) -> dict[str, Any]:
    """The ``"mixture"`` field of a stream state over ``ds`` (the epoch's effective mixture)."""
    return {**describe(ds), "switches": [[s.level, s.at, s.length] for s in switches], "origin_len": origin_len}



def _weights(value: Any, what: str, owner: str) -> dict[str, float]:
    if not isinstance(value, Mapping) or not value:
        raise StateError(f"{owner} state field 'mixture'{what} must be a non-empty {{name: weight}} mapping")
    out = {}
    for name, w in value.items():
        if not isinstance(name, str) or isinstance(w, bool) or not isinstance(w, (int, float)) \
                or not math.isfinite(w) or w <= 0:
            raise StateError(f"{owner} state field 'mixture'{what} holds {name!r}: {w!r:.40}, "
                             "not a name and a positive weight")
        out[name] = float(w)
    return out


def read(raw: Any, owner: str) -> Saved:
    """Validate a state's ``"mixture"`` field (an edited or foreign one is refused)."""
    if not isinstance(raw, Mapping):
        raise StateError(f"{owner} state field 'mixture' must be a mapping, got {type(raw).__name__}")
    for key in ("seed", "block_size", "policy", "children", "stages", "len", "switches", "origin_len"):
        if key not in raw:
            raise StateError(f"{owner} state field 'mixture' has no {key!r}")
    children = raw["children"]
    if not isinstance(children, Mapping) or not all(
            isinstance(n, str) and isinstance(v, (list, tuple)) and len(v) == 3 for n, v in children.items()):
        raise StateError(f"{owner} state field 'mixture'['children'] must map names to [fingerprint, length, chunk]")
    stages_raw = raw["stages"]
    if not isinstance(stages_raw, (list, tuple)) or not stages_raw:
        raise StateError(f"{owner} state field 'mixture'['stages'] must be a non-empty list")
    stages: Stages = []
    for k, st in enumerate(stages_raw):
        if not isinstance(st, (list, tuple)) or len(st) != 2:
            raise StateError(f"{owner} state field 'mixture'['stages'][{k}] must be [start, {{name: weight}}]")
        start = state_value_int(st[0], f"'mixture'['stages'][{k}][0]", owner=owner)
        if stages and start <= stages[-1][0] or not stages and start != 0:
            raise StateError(f"{owner} state field 'mixture'['stages'] starts must begin at 0 and increase")
        weights = _weights(st[1], f"['stages'][{k}][1]", owner)
        unknown = sorted(set(weights) - set(children))
        if unknown:
            raise StateError(f"{owner} state field 'mixture'['stages'][{k}] names no child of the state: {unknown}")
        stages.append((start, weights))
    switches_raw = raw["switches"]
    if not isinstance(switches_raw, (list, tuple)):
        raise StateError(f"{owner} state field 'mixture'['switches'] must be a list")
    switches = []
    for k, sw in enumerate(switches_raw):
        if not isinstance(sw, (list, tuple)) or len(sw) != 3:
            raise StateError(f"{owner} state field 'mixture'['switches'][{k}] must be [level, index, length]")
        switches.append(Switch(*(state_value_int(v, f"'mixture'['switches'][{k}]", owner=owner) for v in sw)))
    for a, b in zip(switches, switches[1:]):
        if b.level <= a.level:
            raise StateError(f"{owner} state field 'mixture'['switches'] levels must increase")
    length = state_value_int(raw["len"], "'mixture'['len']", owner=owner)
    origin_len = state_value_int(raw["origin_len"], "'mixture'['origin_len']", owner=owner)
    # the epoch's first mixture had the same children: its length is one the state
    # describes (the mixture's, a switch's) or their sum's under "restart" by default;
    # a forged one would size the resume's run table (8 bytes per run) before any check
    sizes = [state_value_int(v[1], f"'mixture'['children'][{n!r}][1]", owner=owner) for n, v in children.items()]
    most = max(length, sum(sizes), *(sw.length for sw in switches))
    if origin_len > most:
        raise StateError(f"{owner} state field 'mixture'['origin_len']={origin_len:,} is longer than any mixture the "
                         f"state describes (at most {most:,}: its length, its switches', its children's together)")
    return Saved(dict(raw), stages, switches, origin_len)


def check_same_map(saved: Saved, ds: MixtureDataset, owner: str) -> None:
    """Refuse a mixture whose map of the delivered indices would differ from the saved
    one's (the weights aside), saying what differs."""
    for key in ("seed", "block_size", "policy"):
        mine = getattr(ds, key)
        if saved.desc[key] != mine:
            raise StateError(f"state was saved over a mixture with {key}={saved.desc[key]!r} but this one has "
                             f"{key}={mine!r}: the rows already delivered would map to other rows")
    mine = describe(ds)["children"]
    for name, entry in saved.desc["children"].items():
        if name not in mine:
            raise StateError(f"the mixture of the state has a child {name!r} that this mixture lacks: rows of it may "
                             "still be owed under the old weights; keep the child and give it weight 0 instead")
        if list(entry)[1:] != list(mine[name])[1:] or not same_data(list(entry)[0], mine[name][0]):
            raise StateError(f"child {name!r} is other data than when the state was saved (fingerprint, length, "
                             f"chunk {list(entry)} then, {list(mine[name])} now)")


def _normalised(stages: Sequence[tuple[int, Mapping[str, float]]], start: int) -> list[tuple[int, dict[str, float]]]:
    """The stages in force from ``start`` on (the first clamped to begin there), weights
    normalised and zeros left out."""
    out = []
    for k, (s, w) in enumerate(stages):
        end = stages[k + 1][0] if k + 1 < len(stages) else None
        if end is not None and end <= start:
            continue
        total = sum(w.values())
        out.append((max(s, start), {n: x / total for n, x in sorted(w.items()) if x > 0}))
    return out


def same_from(a: Sequence[tuple[int, Mapping[str, float]]], b: Sequence[tuple[int, Mapping[str, float]]],
              start: int) -> bool:
    """Whether schedules ``a`` and ``b`` set the same weights at every index from ``start``
    on, with the same stage boundaries (relative error 1e-12)."""
    na, nb = _normalised(a, start), _normalised(b, start)
    if len(na) != len(nb):
        return False
    for (sa, wa), (sb, wb) in zip(na, nb):
        if sa != sb or wa.keys() != wb.keys() or any(abs(wa[n] - wb[n]) > 1e-12 * max(wa[n], wb[n]) for n in wa):
            return False
    return True


def switch_point(old: MixtureDataset, delivered_end: int) -> int:
    """The first block boundary of ``old``'s stage in force at ``delivered_end`` at or
    after it (or that stage's end): indices before it map as they did."""
    if delivered_end <= 0:
        return 0
    stage = old.stages[old.stage_of(delivered_end - 1)] if delivered_end > 0 else old.stages[0]
    into = delivered_end - stage.start
    t = stage.start + -(-into // old.block_size) * old.block_size
    return t if stage.end is None else min(t, stage.end)


def spliced_stages(old: Sequence[tuple[int, Mapping[str, float]]], new: Sequence[tuple[int, Mapping[str, float]]],
                   at: int) -> Stages:
    """``old``'s stages before ``at``, then ``new``'s weights in force at ``at``, then
    ``new``'s later stages."""
    before = [(s, dict(w)) for s, w in old if s < at]
    current = [dict(w) for s, w in new if s <= at][-1]
    return [*before, (at, current), *((s, dict(w)) for s, w in new if s > at)]


def _fresh(at: int, length: int, run: int) -> Units:
    """Units (runs of the index space) covering indices ``[at, length)``."""
    if length <= at:
        return Units.make([], [], [])
    q = np.arange(at // run, -(-length // run), dtype=np.int64)
    lo = np.maximum(at - q * run, 0)
    hi = np.minimum(run, length - q * run)
    return Units.make(q, lo, hi)


def splicer(switches: Sequence[Switch], run: int) -> Callable[[int, Units], Units]:
    """The ``between`` hook of :func:`youmu.order.resume.remaining_after` that applies
    ``switches``: at its level, a switch keeps the units left before its index and
    replaces the rest by fresh runs up to its length."""
    at_level = {s.level: s for s in switches}

    def between(depth: int, units: Units) -> Units:
        sw = at_level.get(depth)
        if sw is None:
            return units
        start = units.base * run
        hi = np.minimum(units.hi, sw.at - start)
        kept = Units(units.base, units.lo, hi, units.head, units.key).take(hi > units.lo)
        fresh = _fresh(sw.at, sw.length, run)
        key = np.arange(len(fresh), dtype=np.int64) + (int(kept.key.max()) + 1 if len(kept) else 0)
        return Units.concat([kept, Units(fresh.base, fresh.lo, fresh.hi, fresh.head, key)])

    return between


def delivered_end(left: Units, cover: int, run: int) -> int:
    """One past the last index of ``[0, cover)`` that is not in the units ``left``
    (disjoint runs of the index space): every index from it on is undelivered."""
    if not len(left):
        return cover
    start = left.base * run + left.lo
    stop = left.base * run + left.hi
    order = np.argsort(-start, kind="stable")
    end = cover
    for s, e in zip(start[order].tolist(), stop[order].tolist()):
        if e < end:
            break
        end = min(end, s)
    return end
