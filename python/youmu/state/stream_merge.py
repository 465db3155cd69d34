"""The merge of a stream's states: a row stream's (a Parquet stream,
``MapStream``/``MixtureStream``) become one level more on the epoch's chain of jobs
(:mod:`youmu.order.resume`), checked through :mod:`youmu.state.jobs`; a wrapping
stream's (``pack``: a format that declares a child, :mod:`youmu.state.stream`) put
their positions in the level of the stream they nest, with the tokens of partly packed
rows, and nest its merged state. Fields a format declares beyond the common ones merge
as declared (:mod:`youmu.state.formats`: equal settings kept, counts summed, the
rank's own left out).

Example:
    >>> s0 = {"format": "youmu.MapStream/1", "world_size": 2, "rank": 0, "run": 1, "drop_last": False,
    ...       "data": "d", "epoch": 0, "num_workers": 1, "positions": {0: 3}}
    >>> ranks = [stream_rank(s, i) for i, s in enumerate([s0, {**s0, "rank": 1, "positions": {0: 2}}])]
    >>> merge_stream_ranks(ranks)["resumed"]
    [{'world_size': 2, 'num_workers': [1, 1], 'positions': [[3], [2]]}]
    >>> p0 = {"format": "youmu.PackedDataset/1", "seq_len": 8, "column": "input_ids", "eos_id": None,
    ...       "pad_id": None, "epoch": 0, "num_workers": 1, "positions": {0: [3, 2]}, "dataset": s0}
    >>> p1 = {**p0, "positions": {0: [1, 0]}, "dataset": {**s0, "rank": 1}}
    >>> merge_wrapping_states([p0, p1], None)["dataset"]["resumed"][0]["tokens"]
    [[2], [0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from youmu.errors import StateError
from youmu.order.resume import Level
from youmu.state.contract import state_int
from youmu.state.jobs import OWNER, JobStates, Merge, check_shards, decode_chain
from youmu.state.stream import (
    EPOCH,
    NUM_WORKERS,
    RESUMED,
    encode_merged,
    format_of,
    own_values,
    position_width,
    shared_settings,
    worker_positions,
)

__all__ = ["StreamRank", "stream_rank", "merge_stream_ranks", "merge_wrapping_states"]


@dataclass
class StreamRank:
    """One rank's row-stream state, normalised."""

    fmt: str
    settings: dict[str, Any]
    rank: int
    world_size: int
    epoch: int
    num_workers: int
    positions: dict[int, int]
    chain: Any
    #: tokens of each worker's partly packed row (a wrapping ``pack``'s; none of a row stream's own)
    tokens: dict[int, int] = field(default_factory=dict)
    #: the kind's own declared fields, checked (:func:`youmu.state.stream.own_values`)
    own: dict[str, Any] = field(default_factory=dict)


def stream_rank(state: Mapping[str, Any], i: int, *, shard: Mapping[str, Any] | None = None,
                width: int = 1) -> StreamRank:
    """States[``i``] as a :class:`StreamRank`: its positions (``width`` ints per worker:
    ``(row, tokens)`` for a wrapping ``pack``, whose wrapped stream's state is ``shard``)."""
    shard = state if shard is None else shard
    rank = state_int(shard, "rank", owner=OWNER)
    world = state_int(shard, "world_size", owner=OWNER, minimum=1)
    epoch = state_int(state, EPOCH, owner=OWNER)
    nw, raw_pos = worker_positions(state, owner=OWNER, who=f"{OWNER}: states[{i}]", width=width)
    nw = 1 if nw is None else nw
    check_shards([nw], owner=OWNER, where=f"states[{i}] field {NUM_WORKERS!r}")
    positions = {w: (p[0] if isinstance(p, tuple) else p) for w, p in raw_pos.items()}
    tokens = {w: p[1] for w, p in raw_pos.items() if isinstance(p, tuple)}
    own = own_values(shard, owner=f"{OWNER}: states[{i}]")
    return StreamRank(str(shard.get("format")), shared_settings(shard), rank, world, epoch, nw, positions,
                      shard.get(RESUMED), tokens, own)


def merge_stream_ranks(ranks: Sequence[StreamRank], *, what: str = "", tokens: bool = False) -> dict[str, Any]:
    """The merged state of one row stream from every rank's (``what``: whose stream, for
    the messages; ``tokens``: the level records each worker's tokens of a partly packed
    row)."""
    job = JobStates(ranks, kind="stream", rank=lambda r: r.rank)
    fmt = job.same("format", lambda r: r.fmt, what)
    job.same("data", lambda r: r.settings.get("data"))
    epoch = job.same(EPOCH, lambda r: r.epoch)
    world = job.same("world_size", lambda r: r.world_size)
    settings = job.same_settings(lambda r: r.settings, what)
    by_rank = job.in_rank_order(world, holds="the rows a rank delivered")
    chain_raw = job.same(RESUMED, lambda r: r.chain)
    chain: list[Level] = decode_chain(chain_raw, OWNER, tokens=True) if chain_raw is not None else []
    check_shards([r.num_workers for r in by_rank], owner=OWNER, where=f"the states' {NUM_WORKERS!r}")
    level = Level(
        world, tuple(r.num_workers for r in by_rank),
        tuple(tuple(r.positions.get(k, 0) for k in range(r.num_workers)) for r in by_rank),
        tuple(tuple(r.tokens.get(k, 0) for k in range(r.num_workers)) for r in by_rank) if tokens else None,
    )
    return encode_merged(fmt, settings, epoch, chain=[*chain, level], own=_merged_own(fmt, by_rank))


def _merged_own(fmt: str, ranks: Sequence[StreamRank]) -> dict[str, Any]:
    """The kind's own fields a merged state holds, as their declarations say (the
    settings among them are in the shared settings already)."""
    return format_of(fmt).summed([r.own for r in ranks])


def merge_wrapping_states(states: Sequence[Mapping[str, Any]], merge: Merge | None) -> dict[str, Any]:
    """The merged state of a wrapping stream (a format with a declared child: ``pack``)
    from every rank's: its positions — per worker, for ``pack``, the row the next
    sequence starts in and the tokens of it already taken — become one more level of
    the wrapped stream's chain, tokens included, and the merged state nests the wrapped
    stream's merged state, as the live states nest it (``merge``, the table's own
    :func:`youmu.merge_states`, is not needed: the wrapped stream is a row stream)."""
    del merge
    fmt = format_of(states[0].get("format"))
    child = fmt.child
    assert child is not None, fmt.tag
    job = JobStates(list(states), kind="stream", rank=lambda s: _child_rank(s, child))
    job.same("format", lambda s: s.get("format"))
    for i, s in enumerate(states):
        if not isinstance(s.get(child), Mapping):
            raise StateError(f"{OWNER}: states[{i}] (a {fmt.tag} state) has no {child!r} state")
    width = position_width(fmt.tag)
    rows = [stream_rank(s, i, shard=s[child], width=width) for i, s in enumerate(states)]
    settings = job.same_settings(shared_settings)
    inner = merge_stream_ranks(rows, what="the wrapped stream's ", tokens=width > 1)
    return encode_merged(fmt.tag, settings, inner["epoch"], wrapped=inner)


def _child_rank(state: Mapping[str, Any], child: str) -> Any:
    """The rank a wrapping stream's state's child records (for the messages)."""
    inner = state.get(child)
    return inner.get("rank") if isinstance(inner, Mapping) else None
