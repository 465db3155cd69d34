"""State formats, declared once: what a saved state holds, field by field.

A :class:`StateFormat` names a format's tag (and the older tags its owner still loads,
so a version is read from the tag, never guessed from a state's shape), and each of its
fields once (:class:`StateField`): how a saved value is checked, whether it is the
rank's own, one per DataLoader worker or shared by every rank of a job, how
:func:`youmu.merge_states` combines the ranks' values, and which field nests a wrapped
object's own state (in the spirit of torchdata.nodes, whose wrappers file their
source's state under one key). The owner's writer puts the fields in their declared
order (:meth:`StateFormat.write`: a saved state's bytes follow the declaration), its
``load_state_dict`` and its merge read through :meth:`StateFormat.read`, and the hostile
tests walk :attr:`StateFormat.fields` to forge every field of every format.

Adding a field to a format is one :class:`StateField` in its owner's declaration, plus
the code that produces and consumes the value.

Example:
    >>> fmt = StateFormat("Counter", "example.Counter/2", (
    ...     StateField("epoch", an_int()),
    ...     StateField("seen", an_int(), scope=RANK, merge=SUM, required=False),
    ... ), older=("example.Counter/1",))
    >>> fmt.write({"seen": 3, "epoch": 1}, settings={"seed": 0})
    {'format': 'example.Counter/2', 'seed': 0, 'epoch': 1, 'seen': 3}
    >>> fmt.version("example.Counter/1"), fmt.per_rank
    (1, ('format', 'seen'))
    >>> fmt.read({"format": "example.Counter/1", "epoch": -1})
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: Counter state field 'epoch' must be >= 0, got -1
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from youmu.errors import InvalidArgumentError, StateError, UnknownNameError
from youmu.state.contract import check_state, is_state_int, state_bool, state_int, state_ints

__all__ = ["RANK", "WORKER", "SHARED", "SAME", "SUM", "DROP", "OWN", "Check", "StateField", "StateFormat",
           "optional", "an_int", "a_number", "a_bool", "some_ints"]

# Whose value a field holds.
RANK = "rank"  #: the rank's own (its shard, its DataLoader workers, its chain)
WORKER = "worker"  #: one value per DataLoader worker of the rank
SHARED = "shared"  #: the same on every rank of a job

# How merge_states combines the ranks' values of a field.
SAME = "same"  #: every rank's value is equal, and the merged state keeps it (a setting)
SUM = "sum"  #: the merged state holds the ranks' values added up
DROP = "drop"  #: the merged state leaves it out (what it means is in the merged chain)
OWN = "own"  #: the owner's merge reads it (positions, a chain, a nested state)

_MERGES = (SAME, SUM, DROP, OWN)

#: A field's validator: ``(state, key, owner) -> value``, the checked value of
#: ``state[key]`` (normalised: a position map's worker ids as ints, a chain as levels),
#: or a :class:`~youmu.errors.StateError` naming ``owner``'s field. It sees the whole
#: state, so a field bounded by another (positions by ``num_workers``) checks both.
Check = Callable[[Mapping[str, Any], str, str], Any]


def an_int(minimum: int = 0) -> Check:
    """An int field of at least ``minimum`` (:func:`~youmu.state.contract.state_int`)."""
    def int_field(state: Mapping[str, Any], key: str, owner: str) -> int:
        return state_int(state, key, owner=owner, minimum=minimum)
    return int_field


def a_number(state: Mapping[str, Any], key: str, owner: str) -> float:
    """A finite number field >= 0 (an int or a float, never a bool), within the range
    of every state integer (:func:`~youmu.state.contract.is_state_int`): a count that
    may be fractional (loss tokens estimated from other ranks' counts).

    >>> a_number({"seen": 12.5}, "seen", "TokenUpdates")
    12.5
    >>> a_number({"seen": float("nan")}, "seen", "TokenUpdates")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: TokenUpdates state field 'seen' must be a finite number in [0, 2**63), got nan
    """
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
            or not is_state_int(int(value)):
        raise StateError(f"{owner} state field {key!r} must be a finite number in [0, 2**63), got {value!r:.80}")
    return float(value)


def a_bool(state: Mapping[str, Any], key: str, owner: str) -> bool:
    """A bool field (:func:`~youmu.state.contract.state_bool`)."""
    return state_bool(state, key, owner=owner)


def some_ints(state: Mapping[str, Any], key: str, owner: str) -> list[int]:
    """A list of ints >= 0 (:func:`~youmu.state.contract.state_ints`)."""
    return state_ints(state, key, owner=owner)


def optional(check: Check) -> Check:
    """``check`` that lets ``None`` through (a field saved as ``None`` until it is known).

    >>> optional(an_int(1))({"workers": None}, "workers", "MapStream") is None
    True
    """
    def check_or_none(state: Mapping[str, Any], key: str, owner: str) -> Any:
        return None if state.get(key) is None else check(state, key, owner)
    check_or_none.__doc__ = f"{getattr(check, '__name__', 'check')}, or None"
    return check_or_none


@dataclass(frozen=True)
class StateField:
    """One field of a :class:`StateFormat` (see the module doc)."""

    name: str
    check: Check
    #: :data:`RANK`, :data:`WORKER` or :data:`SHARED`
    scope: str = SHARED
    #: :data:`SAME`, :data:`SUM`, :data:`DROP` or :data:`OWN`
    merge: str = SAME
    #: a state of every accepted version holds it (else it is written where it applies)
    required: bool = True

    def __post_init__(self) -> None:
        if self.scope not in (RANK, WORKER, SHARED) or self.merge not in _MERGES:
            raise InvalidArgumentError(f"state field {self.name!r}: scope {self.scope!r} / merge {self.merge!r}")
        if self.merge == SUM and self.scope == SHARED:
            raise InvalidArgumentError(f"state field {self.name!r}: a shared value is not summed over the ranks")


@dataclass(frozen=True)
class StateFormat:
    """A state format (see the module doc): its ``owner`` (how messages name it), its
    ``tag``, its declared ``fields`` in the order they are written, the ``older`` tags
    still loaded, and the field that nests a wrapped object's state (``child``, one of
    the fields). A format with open ``settings`` (a stream's: whatever its
    ``_settings()`` returns) writes them right after the tag."""

    owner: str
    tag: str
    fields: tuple[StateField, ...]
    older: tuple[str, ...] = ()
    child: str | None = None
    #: keys of the open settings that are the rank's own (its shard), not shared
    rank_settings: tuple[str, ...] = ()
    #: ``"module:function"`` that merges the ranks' states of this format for
    #: :func:`youmu.merge_states` (``None``: the row streams' common merge). Named, not
    #: imported: the owner's merge sits in a layer above this one.
    merger: str | None = None

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names) or "format" in names:
            raise InvalidArgumentError(f"{self.tag}: fields must have distinct names other than 'format': {names}")
        if self.child is not None and self.child not in names:
            raise InvalidArgumentError(f"{self.tag}: child {self.child!r} is not one of its fields")
        if self.merger is not None and (not isinstance(self.merger, str) or self.merger.count(":") != 1):
            raise InvalidArgumentError(f"{self.tag}: merger must be 'module:function', got {self.merger!r}")

    @property
    def tags(self) -> tuple[str, ...]:
        """Every tag this format's owner loads, the current one first."""
        return (self.tag, *self.older)

    def version(self, tag: Any) -> int:
        """The version a tag this format loads names (the number after its ``/``)."""
        if tag not in self.tags:
            raise StateError(f"{self.owner} state field 'format' is {tag!r:.60}, not one of {list(self.tags)}")
        return int(str(tag).rsplit("/", 1)[1])

    def field(self, name: str) -> StateField:
        """The declared field ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise UnknownNameError(f"{self.tag} declares no field {name!r}")

    def extend(self, tag: str, *fields: StateField, child: str | None = None,
               older: Sequence[str] = ()) -> StateFormat:
        """Another format with these fields too (written after this one's): a stream
        kind's own fields on the common ones."""
        return StateFormat(self.owner, tag, (*self.fields, *fields), tuple(older), child or self.child,
                           self.rank_settings, self.merger)

    def summed(self, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The :data:`SUM` fields of the ranks' checked ``states`` (or their checked
        values), each added up over the ranks, in declared order; a field no rank holds
        is left out, so a merged state's bytes change only where one does.

        >>> StateFormat("C", "example.C/1", (StateField("seen", an_int(), scope=RANK, merge=SUM),)).summed(
        ...     [{"seen": 2}, {"seen": 3}])
        {'seen': 5}
        """
        return {f.name: sum(s.get(f.name, 0) for s in states) for f in self.fields
                if f.merge == SUM and any(f.name in s for s in states)}

    @property
    def per_rank(self) -> tuple[str, ...]:
        """The keys a merge does not compare across ranks: the tag, the rank's own
        settings and every declared field but the shared settings (:data:`SAME`)."""
        return ("format", *self.rank_settings, *(f.name for f in self.fields if f.merge != SAME or f.scope != SHARED))

    def write(self, values: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A state: the tag, the open ``settings``, then the declared fields in their
        order (an optional field absent from ``values`` is not written)."""
        # a stream's state is written once per sample a loader reads ahead (its stamp):
        # one pass over the declared (name, required) pairs, the sets only on a mismatch
        out = {"format": self.tag}
        if settings:
            out.update(settings)
        written = 0
        for name, required in self._order:
            if name in values:
                out[name] = values[name]
                written += 1
            elif required:
                written = -1
                break
        if written != len(values):
            # the writer and the declaration disagree: a bug of the owner, never of the data
            unknown = set(values) - {f.name for f in self.fields}
            missing = [f.name for f in self.fields if f.required and f.name not in values]
            raise StateError(f"{self.tag}: fields {sorted(unknown)} are not declared, {missing} are missing")
        return out

    @cached_property
    def _order(self) -> tuple[tuple[str, bool], ...]:
        """``(name, required)`` of each declared field, in the order they are written."""
        return tuple((f.name, f.required) for f in self.fields)

    def read(self, state: Any, *, owner: str | None = None, expect: Mapping[str, Any] | None = None,
             fields: Sequence[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(state, values)``: ``state`` (a new dict) checked as a state of this format
        given to ``owner`` (default: the format's), its ``expect`` settings equal, and
        ``values`` the checked value of every declared field it holds (only ``fields``
        where given); a :class:`StateError` names the first field that does not fit."""
        who = owner or self.owner
        st = check_state(state, self.tags, owner=who, expect=expect,
                         required=tuple(f.name for f in self.fields if f.required))
        values = {}
        for f in self.fields:
            if f.name in st and (fields is None or f.name in fields):
                values[f.name] = f.check(st, f.name, who)
        return st, values
