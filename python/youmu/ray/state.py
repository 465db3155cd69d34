"""The Ray step planner's state (:class:`PlannerState`): where planning stands at a
step's start — the step, every (rank, source) stream position, every rank's arrival
counter, the carried records and each rank's last micro-batch. A few integers and
references, no samples: clients keep the latest and a restarted planner resumes from
it (:mod:`youmu.ray.planner_actor`). Its ``carry`` entries are parsed by the planning layer's
one carry parser (:func:`youmu.planning.steps.carry.parse_carry`), the one
:class:`~youmu.planning.BalancedLoader` states use.

**Resume on another number of ranks** (:func:`youmu.merge_states` over the clients'
states, :mod:`youmu.ray.merge`). The state is already global — every client holds the
same one — but its positions are positions in each (rank, source) stream *as laid out
for the old world size*, and references point into those streams. So a resize keeps
the old layout instead of translating it, exactly as :mod:`youmu.order.resume` does for a
``YoumuDataset``:

* the old job's positions become one more *job* of the epoch's ``resumed`` chain
  (``(world size, positions[rank][source])``): per source, a
  :class:`youmu.order.resume.Level` of ``W`` ranks × one worker. The new ranks' streams are
  the rows that chain left, dealt anew (``resolve`` → ``StreamLayout.stream(units=)``
  for Parquet sources, a merged stream state for stream functions), read from
  position 0 — no row delivered before is in them, and none left out;
* the carried samples keep their references into the streams they came from. Every
  stream of the epoch has a number — job ``d``'s rank ``r`` is ``sum(W of earlier
  jobs) + r`` — and a reference's *origin* is that number, so a loader can still read
  an old stream's row by position (through its row map). They are dealt round-robin
  over the new ranks (``carry[rank::W']``, as :mod:`youmu.planning.state.merge` deals a
  ``BalancedLoader``'s);
* arrival ids continue past every id the old job gave (``max(next_index) · W``);
  the new ranks have no last micro-batch (a padding slot before their first is
  empty, as after a ``BalancedLoader`` merge).

In a state the chain is written per source, each in the one wire form of a chain
(:func:`youmu.state.jobs.encode_chains`); states that wrote it as a list of jobs are
still read. Nothing is translated, so the merge needs no data and a chain composes any number
of resizes (2 → 3 → 1). With the same world size the state is taken as it is (new
batch size, token budget or mixing schedule from the resume step, every stream where
it stood).

Example:
    >>> st = PlannerState.initial(epoch=0, world_size=2, num_sources=3)
    >>> st.positions, st.next_index
    (((0, 0, 0), (0, 0, 0)), (0, 0))
    >>> PlannerState.from_dict(st.to_dict(), world_size=2, num_sources=3) == st
    True
    >>> st = PlannerState(0, 5, ((4, 2), (3, 1)), ((False, False),) * 2, (6, 5), (((9, 1, (7,), 7, 1, 0),), ()),
    ...                   (None, None))
    >>> big = st.resized(3)                   # the old job becomes job 0 of the chain
    >>> big.resumed, big.positions, big.next_index, big.carry[0]
    (((2, ((4, 2), (3, 1))),), ((0, 0), (0, 0), (0, 0)), (4, 4, 4), ((9, 1, (7,), 7, 1, 0),))
    >>> big.streams_before, big.origin(1)   # rank 1 of the new job reads stream 3
    (2, 3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu.errors import StateError
from youmu.order.resume import Level
from youmu.planning.steps.carry import parse_carry
from youmu.state.contract import state_value_int, state_value_ints
from youmu.state.formats import OWN, RANK, StateField, StateFormat, an_int
from youmu.state.jobs import decode_chains, encode_chains

__all__ = ["PlannerState", "Ref", "Chain", "Job", "CLIENT_FORMAT", "CLIENT_STATE", "source_levels"]

#: tag of :meth:`youmu.ray.RayBalancedLoader.state_dict`
CLIENT_FORMAT = "youmu.ray.RayBalancedLoader/1"


def _as_saved(st: Mapping[str, Any], key: str, owner: str) -> Any:
    """A value the client compares with its deployment's (the settings' fingerprint,
    the source order, the portable settings, the data fingerprint)."""
    return st[key]


def _planner(st: Mapping[str, Any], key: str, owner: str) -> Mapping[str, Any]:
    """The planner state (:meth:`PlannerState.from_dict` reads it for the client's
    world size and sources)."""
    if not isinstance(st[key], Mapping):
        raise StateError(f"{owner} state field {key!r} must be a planner state (a dict), got {type(st[key]).__name__}")
    return st[key]


#: A client's state, declared once (:mod:`youmu.state.formats`): its fields in the order
#: ``state_dict`` writes them. ``sources``, ``settings`` and ``data`` (what a merge
#: needs) are absent from states saved before such states could be merged.
CLIENT_STATE = StateFormat("RayBalancedLoader", CLIENT_FORMAT, (
    StateField("world_size", an_int(1)),
    StateField("rank", an_int(), scope=RANK, merge=OWN),
    StateField("num_microbatches", an_int(1)),
    StateField("config", _as_saved),
    StateField("epoch", an_int()),
    StateField("step", an_int()),
    StateField("microbatch", an_int()),
    StateField("planner", _planner, merge=OWN),  # the same on every client: the merge checks and rebuilds it
    StateField("sources", _as_saved, required=False),
    StateField("settings", _as_saved, required=False),
    StateField("data", _as_saved, required=False),
), merger="youmu.ray.merge:merge_ray_states")

#: a sample in a plan: (source number, origin stream, position in that stream); the
#: origin stream of the current job's rank ``r`` is ``streams_before + r``
Ref = tuple[int, int, int]
#: a job of the epoch that ran before a resize: (world size, positions[rank][source])
Job = tuple[int, tuple[tuple[int, ...], ...]]
#: a carried record: (id, source, documents, tokens, position, origin stream)
Carried = tuple[int, int, tuple[int, ...], int, int, int]

_OWNER = "youmu.ray planner"


@dataclass(frozen=True)
class Chain:
    """What a source loader needs to build any stream of an epoch that was resized:
    the sources' names (in the planner's numbering) and the jobs before the current
    one. Hashable: loaders key their streams by it.

    >>> c = Chain(("web", "code"), ((2, ((4, 2), (3, 1))),))
    >>> c.locate(1, world_size=3), c.locate(3, world_size=3)   # (depth, rank, world size)
    ((0, 1, 2), (1, 1, 3))
    >>> [lv.positions for lv in c.levels("code", 1)]
    [((2,), (1,))]
    """

    names: tuple[str, ...]
    jobs: tuple[Job, ...]

    def locate(self, stream: int, world_size: int) -> tuple[int, int, int]:
        """``(depth, rank, world size)`` of stream number ``stream`` (the current job,
        of ``world_size`` ranks, is at depth ``len(jobs)``)."""
        s = stream
        for d, (w, _) in enumerate(self.jobs):
            if s < w:
                return d, s, w
            s -= w
        if not 0 <= s < world_size:
            raise StateError(f"{_OWNER}: stream {stream} is not a stream of this epoch "
                             f"({sum(w for w, _ in self.jobs) + world_size} streams)")
        return len(self.jobs), s, world_size

    def levels(self, name: str, depth: int) -> list[Level]:
        """Source ``name``'s :class:`~youmu.order.resume.Level` of each job before ``depth``."""
        return source_levels(self.jobs[:depth], self.names.index(name))


def source_levels(jobs: Sequence[Job], source: int) -> list[Level]:
    """Source number ``source``'s chain of ``jobs``: per job a
    :class:`~youmu.order.resume.Level` of its ranks × one worker."""
    return [Level(w, (1,) * w, tuple((p[source],) for p in pos)) for w, pos in jobs]


@dataclass(frozen=True)
class PlannerState:
    """Where planning stands at the start of ``step`` (see the module doc). Plain
    integers and references: ``to_dict`` is what checkpoints hold."""

    epoch: int
    step: int
    positions: tuple[tuple[int, ...], ...]
    done: tuple[tuple[bool, ...], ...]
    next_index: tuple[int, ...]
    carry: tuple[tuple[Carried, ...], ...]
    last: tuple[tuple[Ref, ...] | None, ...]
    resumed: tuple[Job, ...] = ()

    @classmethod
    def initial(cls, epoch: int, world_size: int, num_sources: int) -> PlannerState:
        """The start of ``epoch``: nothing read."""
        return cls(epoch, 0, ((0,) * num_sources,) * world_size, ((False,) * num_sources,) * world_size,
                   (0,) * world_size, ((),) * world_size, (None,) * world_size)

    @property
    def world_size(self) -> int:
        return len(self.positions)

    @property
    def streams_before(self) -> int:
        """Streams of the jobs before this one (the current ranks' numbers start there)."""
        return sum(w for w, _ in self.resumed)

    def origin(self, rank: int) -> int:
        """The stream number of rank ``rank``'s streams."""
        return self.streams_before + rank

    def chain(self, names: Sequence[str]) -> Chain | None:
        """What loaders need to build this epoch's streams (``None``: never resized)."""
        return Chain(tuple(names), self.resumed) if self.resumed else None

    def resized(self, world_size: int) -> PlannerState:
        """This state for a job of ``world_size`` ranks (see the module doc); the same
        state for the same world size."""
        w = self.world_size
        if world_size == w:
            return self
        num_sources = len(self.positions[0])
        entries = [e for c in self.carry for e in c]
        first = math.ceil(max(self.next_index) * w / world_size)  # past every id the old ranks gave
        done = tuple(all(d[c] for d in self.done) for c in range(num_sources))
        return PlannerState(self.epoch, self.step, ((0,) * num_sources,) * world_size, (done,) * world_size,
                            (first,) * world_size, tuple(tuple(entries[r::world_size]) for r in range(world_size)),
                            (None,) * world_size, (*self.resumed, (w, self.positions)))

    def renumbered(self, old: Sequence[str], new: Sequence[str]) -> PlannerState:
        """This state with its sources numbered in the order ``new`` (a new schedule may
        list them in another order) instead of ``old``."""
        if list(old) == list(new):
            return self
        if sorted(old) != sorted(new):
            raise StateError(f"{_OWNER} state has sources {sorted(old)}, this deployment reads {sorted(new)}")
        where = [list(old).index(n) for n in new]  # new number -> old number
        to_new = {o: k for k, o in enumerate(where)}

        def cols(rows: Any) -> Any:
            return tuple(tuple(row[o] for o in where) for row in rows)

        carry = tuple(tuple((i, to_new[s], d, t, p, o) for i, s, d, t, p, o in c) for c in self.carry)
        last = tuple(None if b is None else tuple((to_new[s], o, p) for s, o, p in b) for b in self.last)
        return PlannerState(self.epoch, self.step, cols(self.positions), cols(self.done), self.next_index, carry,
                            last, tuple((w, cols(pos)) for w, pos in self.resumed))

    def to_dict(self) -> dict[str, Any]:
        out = {"epoch": self.epoch, "step": self.step,
               "positions": [list(p) for p in self.positions], "done": [list(d) for d in self.done],
               "next_index": list(self.next_index),
               # the origin stream is written only where it is not the holding rank's own
               "carry": [[[i, s, list(d), t, p, *([o] if o != self.origin(r) else [])] for i, s, d, t, p, o in c]
                         for r, c in enumerate(self.carry)],
               "last": [None if b is None else [list(x) for x in b] for b in self.last]}
        if self.resumed:  # per source, its chain in the one wire form of a chain
            out["resumed"] = encode_chains([source_levels(self.resumed, c) for c in range(len(self.positions[0]))])
        return out

    @classmethod
    def from_dict(cls, d: Any, *, world_size: int, num_sources: int) -> PlannerState:
        """Parse and check a state (a :class:`~youmu.errors.StateError` names the field)."""
        if not isinstance(d, Mapping):
            raise StateError(f"{_OWNER} state must be a dict, got {type(d).__name__}")

        def per_rank(key: str, n: int = world_size, v: Any = None) -> list[Any]:
            v = d.get(key) if v is None else v
            if not isinstance(v, (list, tuple)) or len(v) != n:
                raise StateError(f"{_OWNER} state field {key!r} must have one entry per rank ({n}), "
                                 f"got {v!r:.80}")
            return list(v)

        epoch, step = (state_value_int(d.get(k), repr(k), owner=_OWNER) for k in ("epoch", "step"))
        raw = d.get("resumed")
        chains = decode_chains(raw, _OWNER, count=num_sources) if raw not in (None, []) else []
        jobs: list[Job] = [(lv.world_size, tuple(tuple(c[depth].positions[r][0] for c in chains)
                                                 for r in range(lv.world_size)))
                           for depth, lv in enumerate(chains[0] if chains else [])]
        before = sum(w for w, _ in jobs)
        streams = before + world_size
        positions = tuple(state_value_ints(p, f"'positions'[{r}]", owner=_OWNER, n=num_sources)
                          for r, p in enumerate(per_rank("positions")))
        done = []
        for r, v in enumerate(per_rank("done")):
            if not isinstance(v, (list, tuple)) or len(v) != num_sources or not all(isinstance(x, bool) for x in v):
                raise StateError(f"{_OWNER} state field 'done'[{r}] must be {num_sources} bools")
            done.append(tuple(v))
        next_index = state_value_ints(d.get("next_index"), "'next_index'", owner=_OWNER, n=world_size)
        carry = []
        for r, entries in enumerate(per_rank("carry")):
            if not isinstance(entries, (list, tuple)):
                raise StateError(f"{_OWNER} state field 'carry'[{r}] must be a list, got {type(entries).__name__}")
            origins = []
            for k, e in enumerate(entries):
                o = e[5] if isinstance(e, (list, tuple)) and len(e) == 6 else before + r
                if isinstance(o, bool) or not isinstance(o, int) or not 0 <= o < streams:
                    raise StateError(f"{_OWNER} state field 'carry'[{r}][{k}] names origin stream {o!r}, not one of "
                                     f"the epoch's {streams} streams")
                origins.append(o)
            held = parse_carry([e[:5] if isinstance(e, (list, tuple)) else e for e in entries], owner=_OWNER,
                               where=f"'carry'[{r}]", num_sources=num_sources, positions=True)
            carry.append(tuple((h.id, h.source, tuple(h.docs), h.tokens, int(h.payload), o)
                               for h, o in zip(held, origins)))
        last: list[tuple[Ref, ...] | None] = []
        for r, b in enumerate(per_rank("last")):
            if b is None:
                last.append(None)
                continue
            if not isinstance(b, (list, tuple)):
                raise StateError(f"{_OWNER} state field 'last'[{r}] must be a list of (source, stream, position)")
            refs = [state_value_ints(x, f"'last'[{r}]", owner=_OWNER, n=3) for x in b]
            if any(s >= num_sources or o >= streams for s, o, _ in refs):
                raise StateError(f"{_OWNER} state field 'last'[{r}] names a source or stream this state has not")
            last.append(tuple((a, o, p) for a, o, p in refs))
        return cls(epoch, step, positions, tuple(done), next_index, tuple(carry), tuple(last), tuple(jobs))
