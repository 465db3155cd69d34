"""The Ray step planner's state (:class:`PlannerState`): where planning stands at a
step's start — the step, every (rank, source) stream position, every rank's arrival
counter, the carried records and each rank's last micro-batch. A few integers and
references, no samples: clients keep the latest and a restarted planner resumes from
it (:mod:`youmu.ray.planner_actor`). Its ``carry`` entries are parsed by the planning layer's
one carry parser (:func:`youmu.planning.state.parse_carry`), the one
:class:`~youmu.planning.BalancedLoader` states use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from youmu.errors import StateError
from youmu.planning.state import parse_carry

__all__ = ["PlannerState", "Ref"]

#: a sample in a plan: (source number, origin rank, position in that rank's stream)
Ref = tuple[int, int, int]

_OWNER = "youmu.ray planner"


@dataclass(frozen=True)
class PlannerState:
    """Where planning stands at the start of ``step`` (see the module doc). Plain
    integers and references: ``to_dict`` is what checkpoints hold.

    >>> st = PlannerState.initial(epoch=0, world_size=2, num_sources=3)
    >>> st.positions, st.next_index
    (((0, 0, 0), (0, 0, 0)), (0, 0))
    >>> PlannerState.from_dict(st.to_dict(), world_size=2, num_sources=3) == st
    True
    """

    epoch: int
    step: int
    positions: tuple[tuple[int, ...], ...]
    done: tuple[tuple[bool, ...], ...]
    next_index: tuple[int, ...]
    carry: tuple[tuple[tuple[int, int, tuple[int, ...], int, int], ...], ...]
    last: tuple[tuple[Ref, ...] | None, ...]

    @classmethod
    def initial(cls, epoch: int, world_size: int, num_sources: int) -> PlannerState:
        """The start of ``epoch``: nothing read."""
        return cls(epoch, 0, ((0,) * num_sources,) * world_size, ((False,) * num_sources,) * world_size,
                   (0,) * world_size, ((),) * world_size, (None,) * world_size)

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step,
                "positions": [list(p) for p in self.positions], "done": [list(d) for d in self.done],
                "next_index": list(self.next_index),
                "carry": [[[i, s, list(d), t, p] for i, s, d, t, p in c] for c in self.carry],
                "last": [None if b is None else [list(x) for x in b] for b in self.last]}

    @classmethod
    def from_dict(cls, d: Any, *, world_size: int, num_sources: int) -> PlannerState:
        """Parse and check a state (a :class:`~youmu.errors.StateError` names the field)."""
        if not isinstance(d, Mapping):
            raise StateError(f"{_OWNER} state must be a dict, got {type(d).__name__}")

        def ints(v: Any, what: str, n: int | None = None) -> tuple[int, ...]:
            if not isinstance(v, (list, tuple)) or (n is not None and len(v) != n) or not all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
                size = f"{n} " if n is not None else ""
                raise StateError(f"{_OWNER} state field {what} must be a list of {size}ints >= 0, got {v!r:.80}")
            return tuple(int(x) for x in v)

        def per_rank(key: str) -> list[Any]:
            v = d.get(key)
            if not isinstance(v, (list, tuple)) or len(v) != world_size:
                raise StateError(f"{_OWNER} state field {key!r} must have one entry per rank ({world_size}), "
                                 f"got {v!r:.80}")
            return list(v)

        epoch, step = (ints([d.get(k)], repr(k))[0] for k in ("epoch", "step"))
        positions = tuple(ints(p, f"'positions'[{r}]", num_sources) for r, p in enumerate(per_rank("positions")))
        done = []
        for r, v in enumerate(per_rank("done")):
            if not isinstance(v, (list, tuple)) or len(v) != num_sources or not all(isinstance(x, bool) for x in v):
                raise StateError(f"{_OWNER} state field 'done'[{r}] must be {num_sources} bools")
            done.append(tuple(v))
        next_index = ints(d.get("next_index"), "'next_index'", world_size)
        carry = tuple(
            tuple((h.id, h.source, tuple(h.docs), h.tokens, int(h.payload))
                  for h in parse_carry(entries, owner=_OWNER, where=f"'carry'[{r}]", num_sources=num_sources,
                                       positions=True))
            for r, entries in enumerate(per_rank("carry")))
        last: list[tuple[Ref, ...] | None] = []
        for r, b in enumerate(per_rank("last")):
            if b is None:
                last.append(None)
                continue
            if not isinstance(b, (list, tuple)):
                raise StateError(f"{_OWNER} state field 'last'[{r}] must be a list of (source, rank, position)")
            refs = [ints(x, f"'last'[{r}]", 3) for x in b]
            last.append(tuple((a, o, p) for a, o, p in refs))
        return cls(epoch, step, positions, tuple(done), next_index, carry, tuple(last))


