"""The state of a youmu stream, in one place: its format tags, its fields, and the one
writer and reader of a rank's own state (``state_dict`` / ``load_state_dict`` of every
positional stream, :mod:`youmu.streams.core`) and of a merged one (:func:`youmu.merge_states`).
Torch-free and below the streams, so merging or checking a stream's states never imports
torch. A new field is an edit here (its writer, its reader, whether it is per rank) and
a test.

A rank's state is ``{"format": tag, **settings, "epoch", "num_workers", "positions"}``
plus ``"resumed"`` (the chain of jobs before this one in the epoch,
:func:`youmu.state.jobs.encode_chain`) in an epoch resumed on another topology; a
wrapping stream (``pack``) nests its stream's state under ``"dataset"``. The settings
are the stream's own (:meth:`youmu.streams.core.ShardedStream._settings`); those that
are not the shard's (:data:`PER_RANK`) are what a merge compares across ranks and a
merged state keeps.

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
from youmu.state.contract import check_state, state_int, state_positions
from youmu.state.jobs import MERGED_FORMAT, Level, decode_chain, encode_chain, load_merged

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
    "RankState",
    "position_width",
    "encode",
    "decode",
    "worker_positions",
    "with_worker_positions",
    "shared_settings",
    "chain_of",
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

# The fields of a rank's state besides its tag and settings.
EPOCH = "epoch"
NUM_WORKERS = "num_workers"  #: DataLoader workers of the latest pass (``None``: none yet)
POSITIONS = "positions"  #: ``{worker: position}``, a position one int or a list of ``width``
RESUMED = "resumed"  #: the chain of the epoch's earlier jobs (an epoch resumed on another topology)
WRAPPED = "dataset"  #: a wrapping stream's wrapped stream's own state

#: Fields of a stream state that are not settings all ranks of a job share.
PER_RANK = ("format", "rank", "world_size", EPOCH, NUM_WORKERS, POSITIONS, RESUMED, WRAPPED)

_WIDTHS = {PACK_FORMAT: PACK_POSITION_WIDTH}


class RankState(NamedTuple):
    """A rank's own stream state, checked (:func:`decode`)."""

    fields: dict[str, Any]  # the whole state, as a new dict
    epoch: int
    num_workers: int | None
    positions: dict[int, Any]  # worker -> int, or a tuple of ``width`` ints
    chain: list[Level] | None


def position_width(fmt: Any) -> int:
    """Ints per worker position of the streams tagged ``fmt`` (1 unless it says more).

    >>> position_width(PACK_FORMAT), position_width(MAPSTREAM_FORMAT)
    (2, 1)
    """
    return _WIDTHS.get(fmt, 1)


def encode(fmt: str, settings: Mapping[str, Any], *, epoch: int, num_workers: int | None,
           positions: Mapping[int, Any], chain: Sequence[Level] | None = None) -> dict[str, Any]:
    """A rank's state: ``positions`` per worker (a tuple is written as a list) and, for
    an epoch resumed on another topology, its ``chain``."""
    return {
        "format": fmt,
        **settings,
        EPOCH: epoch,
        NUM_WORKERS: num_workers,
        POSITIONS: {w: list(p) if isinstance(p, tuple) else p for w, p in positions.items()},
        **({RESUMED: encode_chain(chain)} if chain else {}),
    }


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


def chain_of(state: Mapping[str, Any], owner: str) -> list[Level]:
    """The chain of earlier jobs a state holds (tokens of partly packed rows included)."""
    return decode_chain(state[RESUMED], owner, tokens=True)


def decode(state: Any, fmt: str, *, owner: str, expect: Mapping[str, Any] | None = None, width: int = 1,
           adopts: Sequence[str] = ()) -> RankState:
    """A rank's own state given to ``owner.load_state_dict``, checked: its tag, the
    ``expect`` settings (those in ``adopts`` are taken from a resumed epoch's state
    instead), its epoch, worker positions and chain; a :class:`StateError` names the
    first field that does not fit."""
    resumed = isinstance(state, Mapping) and RESUMED in state
    want = {k: v for k, v in (expect or {}).items() if not (resumed and k in adopts)}
    st = check_state(state, fmt, owner=owner, expect=want, required=(EPOCH, POSITIONS))
    epoch = state_int(st, EPOCH, owner=owner)
    nw, positions = worker_positions(st, owner=owner, width=width)
    return RankState(st, epoch, nw, positions, chain_of(st, owner) if resumed else None)


def with_worker_positions(state: Mapping[str, Any], positions: Mapping[int, Any], num_workers: int) -> dict[str, Any]:
    """``state`` with other workers' positions: a rank's state put together from the
    states its DataLoader workers saved (torchdata's ``StatefulDataLoader``)."""
    return {**state, POSITIONS: dict(positions), NUM_WORKERS: num_workers}


def shared_settings(state: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a rank's state every rank of its job shares (all but :data:`PER_RANK`)."""
    return {k: v for k, v in state.items() if k not in PER_RANK}


def encode_merged(fmt: str, settings: Mapping[str, Any], epoch: int, *, chain: Sequence[Level] | None = None,
                  wrapped: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The merged state of a ``fmt`` stream: its shared settings, the epoch, and the
    chain of the epoch's jobs (a row stream) or the wrapped stream's merged state (a
    wrapping one)."""
    out = {"format": MERGED_FORMAT, "stream": fmt, **settings, EPOCH: epoch}
    if chain is not None:
        out[RESUMED] = encode_chain(chain)
    if wrapped is not None:
        out[WRAPPED] = wrapped
    return out


def decode_merged(state: Any, fmt: str, *, owner: str, expect: Mapping[str, Any], adopts: Sequence[str] = (),
                  wrapped: bool = False) -> tuple[dict[str, Any], int, list[Level] | None]:
    """``(fields, epoch, chain)`` of a merged state of ``fmt`` streams given to
    ``owner.load_state_dict``, checked against ``expect`` (the shard's settings aside:
    a merged state is any topology's; those in ``adopts`` are taken from it instead); a
    wrapping stream's (``wrapped``) holds its stream's merged state instead of a chain."""
    expect = {k: v for k, v in expect.items() if k not in (*PER_RANK, *adopts)}
    st = load_merged(state, fmt, owner=owner, expect=expect, required=(EPOCH, WRAPPED if wrapped else RESUMED))
    epoch = state_int(st, EPOCH, owner=owner)
    if wrapped:
        if not isinstance(st[WRAPPED], Mapping):
            raise StateError(f"{owner} merged state has no {WRAPPED!r} state")
        return st, epoch, None
    return st, epoch, chain_of(st, owner)
