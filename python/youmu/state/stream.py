"""The state of a youmu stream, in one place: its formats, declared field by field
(:mod:`youmu.state.formats`), and the one writer and reader of a rank's own state
(``state_dict`` / ``load_state_dict`` of every positional stream,
:mod:`youmu.streams.core`) and of a merged one (:func:`youmu.merge_states`). Torch-free
and below the streams, so merging or checking a stream's states never imports torch.

A new field of a stream's state is a :class:`~youmu.state.formats.StateField` in the
declarations below (its check, whether it is per rank, how a merge combines it) and
the stream that produces it (``ShardedStream._state_fields`` writes it,
``_take_state_fields`` takes it back, from a rank's state or a merged one); the
writer, the readers and the merge (:mod:`youmu.state.stream_merge`) follow the
declaration.

A rank's state is ``{"format": tag, **settings, "epoch", "num_workers", "positions"}``
plus ``"resumed"`` (the chain of jobs before this one in the epoch,
:func:`youmu.state.jobs.encode_chain`) in an epoch resumed on another topology, and the
kind's own fields: a ``MapStream`` over a mixture records its ``"mixture"``, a wrapping
stream (``pack``) nests its stream's state under ``"dataset"`` (its declared child). The
settings are the stream's own (:meth:`youmu.streams.core.ShardedStream._settings`);
those that are not the shard's (:meth:`~youmu.state.formats.StateFormat.per_rank`) are
what a merge compares across ranks and a merged state keeps.

Example:
    >>> st = encode(MAPSTREAM_FORMAT, {"world_size": 1, "rank": 0}, epoch=0, num_workers=2, positions={1: 4})
    >>> st
    {'format': 'youmu.MapStream/1', 'world_size': 1, 'rank': 0, 'epoch': 0, 'num_workers': 2, 'positions': {1: 4}}
    >>> decode(st, MAPSTREAM_FORMAT, owner="MapStream", expect={"world_size": 1}).positions
    {1: 4}
    >>> decode({**st, "positions": {2: 0}}, MAPSTREAM_FORMAT, owner="MapStream")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: MapStream state field 'positions' has workers [2] but num_workers=2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from youmu.errors import StateError
from youmu.order.resume import Level
from youmu.state.contract import state_int, state_positions
from youmu.state.formats import OWN, RANK, SHARED, WORKER, StateField, StateFormat
from youmu.state.jobs import MERGED_FORMAT, decode_chain, encode_chain, load_merged

__all__ = [
    "PARQUET_STREAM_FORMAT",
    "MAPSTREAM_FORMAT",
    "PACK_FORMAT",
    "PACK_POSITION_WIDTH",
    "EPOCH",
    "NUM_WORKERS",
    "POSITIONS",
    "RESUMED",
    "WRAPPED",
    "PER_RANK",
    "STREAM_FORMATS",
    "RankState",
    "format_of",
    "position_width",
    "encode",
    "decode",
    "worker_positions",
    "with_worker_positions",
    "shared_settings",
    "chain_of",
    "own_values",
    "encode_merged",
    "decode_merged",
]

#: The tag of a Parquet stream's states (the same stream, read by torch or by Ray).
PARQUET_STREAM_FORMAT = "youmu.YoumuDataset/1"

#: The tag of a ``MapStream``'s (and ``MixtureStream``'s) states.
MAPSTREAM_FORMAT = "youmu.MapStream/1"

#: The tag of a ``pack(...)`` stream's states (``PackedDataset``).
PACK_FORMAT = "youmu.PackedDataset/1"

#: Ints per worker position of a ``pack`` stream: the row the next sequence starts in
#: and the tokens of it already taken.
PACK_POSITION_WIDTH = 2

# The fields of every stream's state besides its tag and settings.
EPOCH = "epoch"
NUM_WORKERS = "num_workers"  #: DataLoader workers of the latest pass (``None``: none yet)
POSITIONS = "positions"  #: ``{worker: position}``, a position one int or a list of ``width``
RESUMED = "resumed"  #: the chain of the epoch's earlier jobs (an epoch resumed on another topology)
WRAPPED = "dataset"  #: a wrapping stream's wrapped stream's own state


def worker_positions(state: Mapping[str, Any], *, owner: str, who: str | None = None,
                     width: int = 1) -> tuple[int | None, dict[int, Any]]:
    """``(num_workers or None, {worker: position})`` of a rank's state, checked: every
    worker below ``num_workers`` (``who``: how a message names the state, by default
    ``"<owner> state"``)."""
    nw = state.get(NUM_WORKERS)
    if nw is not None:
        nw = state_int(state, NUM_WORKERS, owner=owner, minimum=1)
    positions = state_positions(state, POSITIONS, owner=owner, width=width, workers=nw)
    if nw is not None and any(w >= nw for w in positions):
        bad = sorted(w for w in positions if w >= nw)
        raise StateError(f"{who or owner + ' state'} field {POSITIONS!r} has workers {bad[:8]}{'...' * (len(bad) > 8)} "
                         f"but {NUM_WORKERS}={nw}")
    return nw, positions


# -- the declarations ------------------------------------------------------------------------------
def _epoch(st: Mapping[str, Any], key: str, owner: str) -> int:
    return state_int(st, key, owner=owner)


def _num_workers(st: Mapping[str, Any], key: str, owner: str) -> int | None:
    return None if st.get(key) is None else state_int(st, key, owner=owner, minimum=1)


def _positions(width: int) -> Any:
    def positions(st: Mapping[str, Any], key: str, owner: str) -> dict[int, Any]:
        return worker_positions(st, owner=owner, width=width)[1]
    return positions


def _chain(st: Mapping[str, Any], key: str, owner: str) -> list[Level]:
    return decode_chain(st[key], owner, field=key, tokens=True)


def _dict(st: Mapping[str, Any], key: str, owner: str) -> Mapping[str, Any]:
    """A nested state or description: a dict (its owner reads what is in it)."""
    if not isinstance(st.get(key), Mapping):
        raise StateError(f"{owner} state has no {key!r} state (got {type(st.get(key)).__name__})")
    return st[key]


def _stream_format(owner: str, tag: str, width: int = 1, *own: StateField, child: str | None = None) -> StateFormat:
    """A stream kind's format: the fields every stream's state holds, then its own. A
    wrapping stream's (one with a ``child``) merges through the wrapped stream's merge."""
    return StateFormat(owner, tag, (
        StateField(EPOCH, _epoch, scope=SHARED, merge=OWN),
        StateField(NUM_WORKERS, _num_workers, scope=RANK, merge=OWN, required=False),
        StateField(POSITIONS, _positions(width), scope=WORKER, merge=OWN),
        StateField(RESUMED, _chain, scope=RANK, merge=OWN, required=False),
        *own,
    ), child=child, rank_settings=("rank", "world_size"),
        merger="youmu.state.stream_merge:merge_wrapping_states" if child is not None else None)


#: The stream formats, each declared once: its fields are written in this order.
STREAM_FORMATS: dict[str, StateFormat] = {f.tag: f for f in (
    _stream_format("YoumuDataset", PARQUET_STREAM_FORMAT),
    # the weights and stages of a mixture a MapStream reads: the same on every rank, and
    # what a resume with new weights splices (youmu.mixture.change reads it)
    _stream_format("MapStream", MAPSTREAM_FORMAT, 1, StateField("mixture", _dict, required=False)),
    _stream_format("PackedDataset", PACK_FORMAT, PACK_POSITION_WIDTH,
                   StateField(WRAPPED, _dict, scope=RANK, merge=OWN, required=False), child=WRAPPED),
)}

#: The fields every stream's state holds (the stream core writes and reads them itself).
_CORE = (EPOCH, NUM_WORKERS, POSITIONS, RESUMED)

#: Fields of a stream state that are not settings all ranks of a job share.
PER_RANK = tuple(dict.fromkeys(k for f in STREAM_FORMATS.values() for k in f.per_rank))


def format_of(fmt: Any, width: int = 1) -> StateFormat:
    """The declared format tagged ``fmt`` (a stream class of a user's, e.g. a test's,
    gets the common fields under its own tag).

    >>> format_of(PACK_FORMAT).child, format_of("example.Evens/1").owner
    ('dataset', 'example.Evens/1')
    """
    known = STREAM_FORMATS.get(fmt) if isinstance(fmt, str) else None
    return known if known is not None else _stream_format(str(fmt), str(fmt), width)


class RankState(NamedTuple):
    """A rank's own stream state, checked (:func:`decode`)."""

    fields: dict[str, Any]  # the whole state, as a new dict
    epoch: int
    num_workers: int | None
    positions: dict[int, Any]  # worker -> int, or a tuple of ``width`` ints
    chain: list[Level] | None
    #: the kind's own declared fields, checked (beyond :data:`_CORE`)
    own: dict[str, Any] = {}


def position_width(fmt: Any) -> int:
    """Ints per worker position of the streams tagged ``fmt`` (1 unless it says more).

    >>> position_width(PACK_FORMAT), position_width(MAPSTREAM_FORMAT)
    (2, 1)
    """
    return PACK_POSITION_WIDTH if fmt == PACK_FORMAT else 1


def encode(fmt: str, settings: Mapping[str, Any], *, epoch: int, num_workers: int | None,
           positions: Mapping[int, Any], chain: Sequence[Level] | None = None,
           own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A rank's state: ``positions`` per worker (a tuple is written as a list), for an
    epoch resumed on another topology its ``chain``, and the kind's ``own`` fields."""
    core: dict[str, Any] = {
        EPOCH: epoch,
        NUM_WORKERS: num_workers,
        POSITIONS: {w: list(p) if isinstance(p, tuple) else p for w, p in positions.items()},
    }
    if chain:
        core[RESUMED] = encode_chain(chain)
    if own:
        return format_of(fmt).write({**core, **own}, settings)
    # A loader reading ahead stamps each sample with this state (DynamicBatchLoader:
    # 80,000 per epoch of the layers benchmark), so without the kind's own fields the
    # state is put together here, in one dict, as StateFormat.write would: the tag, the
    # settings, then the common fields, which every stream format declares first and in
    # _CORE's order (_stream_format); the declaration check has nothing to catch in
    # fields this signature fixes. The tag is the format's (format_of(fmt).tag == fmt).
    return {"format": str(fmt), **settings, **core}


def chain_of(state: Mapping[str, Any], owner: str) -> list[Level]:
    """The chain of earlier jobs a state holds (tokens of partly packed rows included)."""
    return _chain(state, RESUMED, owner)


def own_values(state: Mapping[str, Any], *, owner: str, fields: Sequence[str] | None = None) -> dict[str, Any]:
    """The kind's own declared fields ``state`` holds (a rank's state or a merged one),
    checked: what ``ShardedStream._take_state_fields`` receives."""
    fmt = format_of(state.get("stream") if state.get("format") == MERGED_FORMAT else state.get("format"))
    return {f.name: f.check(state, f.name, owner) for f in fmt.fields
            if f.name not in _CORE and f.name in state and (fields is None or f.name in fields)}


def decode(state: Any, fmt: str, *, owner: str, expect: Mapping[str, Any] | None = None, width: int = 1,
           adopts: Sequence[str] = ()) -> RankState:
    """A rank's own state given to ``owner.load_state_dict``, checked: its tag, the
    ``expect`` settings (those in ``adopts`` are taken from a resumed epoch's state
    instead), its epoch, worker positions, chain and the kind's own fields; a
    :class:`StateError` names the first field that does not fit."""
    resumed = isinstance(state, Mapping) and RESUMED in state
    want = {k: v for k, v in (expect or {}).items() if not (resumed and k in adopts)}
    st, values = format_of(fmt, width).read(state, owner=owner, expect=want)
    return RankState(st, values[EPOCH], values.get(NUM_WORKERS), values[POSITIONS], values.get(RESUMED),
                     {k: v for k, v in values.items() if k not in _CORE})


def with_worker_positions(state: Mapping[str, Any], positions: Mapping[int, Any], num_workers: int) -> dict[str, Any]:
    """``state`` with other workers' positions: a rank's state put together from the
    states its DataLoader workers saved (torchdata's ``StatefulDataLoader``)."""
    return {**state, POSITIONS: dict(positions), NUM_WORKERS: num_workers}


def shared_settings(state: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a rank's state every rank of its job shares (all but the per-rank
    ones its format declares, :data:`PER_RANK` for youmu's)."""
    skip = {*PER_RANK, *format_of(state.get("format")).per_rank}
    return {k: v for k, v in state.items() if k not in skip}


def encode_merged(fmt: str, settings: Mapping[str, Any], epoch: int, *, chain: Sequence[Level] | None = None,
                  wrapped: Mapping[str, Any] | None = None, own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The merged state of a ``fmt`` stream: its shared settings, the epoch, the kind's
    ``own`` merged fields, and the chain of the epoch's jobs (a row stream) or the
    wrapped stream's merged state (a wrapping one)."""
    out = {"format": MERGED_FORMAT, "stream": fmt, **settings, EPOCH: epoch, **(own or {})}
    if chain is not None:
        out[RESUMED] = encode_chain(chain)
    if wrapped is not None:
        out[format_of(fmt).child or WRAPPED] = wrapped
    return out


def decode_merged(state: Any, fmt: str, *, owner: str, expect: Mapping[str, Any], adopts: Sequence[str] = (),
                  wrapped: bool = False) -> tuple[dict[str, Any], int, list[Level] | None]:
    """``(fields, epoch, chain)`` of a merged state of ``fmt`` streams given to
    ``owner.load_state_dict``, checked against ``expect`` (the shard's settings aside:
    a merged state is any topology's; those in ``adopts`` are taken from it instead); a
    wrapping stream's (``wrapped``) holds its stream's merged state instead of a chain."""
    per_rank = format_of(fmt).per_rank
    child = format_of(fmt).child or WRAPPED
    expect = {k: v for k, v in expect.items() if k not in (*per_rank, *adopts)}
    st = load_merged(state, fmt, owner=owner, expect=expect, required=(EPOCH, child if wrapped else RESUMED))
    epoch = _epoch(st, EPOCH, owner)
    if wrapped:
        if not isinstance(st[child], Mapping):
            raise StateError(f"{owner} merged state has no {child!r} state")
        return st, epoch, None
    return st, epoch, chain_of(st, owner)
