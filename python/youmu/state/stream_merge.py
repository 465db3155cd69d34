"""The merge of a row stream's states (a Parquet stream, ``MapStream``/``MixtureStream``):
one level more on the epoch's chain of jobs (:mod:`youmu.order.resume`), checked through
:mod:`youmu.state.jobs`. :func:`youmu.merge_states` calls it for row streams; a
wrapping stream's own merge (``pack``'s, :mod:`youmu.state.pack_merge`) calls it for the
stream it wraps, with the tokens of its partly packed rows.

Example:
    >>> s0 = {"format": "youmu.MapStream/1", "world_size": 2, "rank": 0, "run": 1, "drop_last": False,
    ...       "data": "d", "epoch": 0, "num_workers": 1, "positions": {0: 3}}
    >>> ranks = [stream_rank(s, i) for i, s in enumerate([s0, {**s0, "rank": 1, "positions": {0: 2}}])]
    >>> merge_stream_ranks(ranks)["resumed"]
    [{'world_size': 2, 'num_workers': [1, 1], 'positions': [[3], [2]]}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from youmu.state.contract import state_int
from youmu.state.jobs import OWNER, JobStates, Level, check_shards, decode_chain
from youmu.state.stream import EPOCH, NUM_WORKERS, RESUMED, encode_merged, shared_settings, worker_positions

__all__ = ["StreamRank", "stream_rank", "merge_stream_ranks"]


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
    return StreamRank(str(shard.get("format")), shared_settings(shard), rank, world, epoch, nw, positions,
                      shard.get(RESUMED), tokens)


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
    return encode_merged(fmt, settings, epoch, chain=[*chain, level])
