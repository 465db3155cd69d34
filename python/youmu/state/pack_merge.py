"""``pack``'s own entry in :func:`youmu.merge_states`' table: the packing positions of
every rank — per worker, the row the next sequence starts in and the tokens of it
already taken — become one more level of the wrapped stream's chain, tokens included,
and the merged pack state nests the wrapped stream's merged state (as the live states
nest it). Torch-free: it reads states, not streams.

Example:
    >>> inner = {"format": "youmu.MapStream/1", "world_size": 2, "rank": 0, "run": 1, "drop_last": False,
    ...          "data": "d", "epoch": 0, "positions": {0: 0}}
    >>> p0 = {"format": PACK_FORMAT, "seq_len": 8, "column": "input_ids", "eos_id": None, "pad_id": None,
    ...       "epoch": 0, "num_workers": 1, "positions": {0: [3, 2]}, "dataset": inner}
    >>> p1 = {**p0, "positions": {0: [1, 0]}, "dataset": {**inner, "rank": 1}}
    >>> merged = merge_pack_states([p0, p1], None)
    >>> merged["dataset"]["resumed"][0]["tokens"]
    [[2], [0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from youmu.errors import StateError
from youmu.state.jobs import OWNER, JobStates, Merge
from youmu.state.stream import PACK_FORMAT, PACK_POSITION_WIDTH, WRAPPED, encode_merged, shared_settings
from youmu.state.stream_merge import merge_stream_ranks, stream_rank

__all__ = ["merge_pack_states"]


def merge_pack_states(states: Sequence[Mapping[str, Any]], merge: Merge | None) -> dict[str, Any]:
    """The merged state of a ``pack`` stream from every rank's (``merge``, the table's
    own :func:`youmu.merge_states`, is not needed: the wrapped stream is a row stream)."""
    del merge
    job = JobStates(list(states), kind="stream", rank=_rank)
    job.same("format", lambda s: s.get("format"))
    for i, s in enumerate(states):
        if not isinstance(s.get(WRAPPED), Mapping):
            raise StateError(f"{OWNER}: states[{i}] (a {PACK_FORMAT} state) has no {WRAPPED!r} state")
    rows = [stream_rank(s, i, shard=s[WRAPPED], width=PACK_POSITION_WIDTH) for i, s in enumerate(states)]
    settings = job.same_settings(shared_settings)
    inner = merge_stream_ranks(rows, what="the wrapped stream's ", tokens=True)
    return encode_merged(PACK_FORMAT, settings, inner["epoch"], wrapped=inner)


def _rank(state: Mapping[str, Any]) -> Any:
    """The rank a pack state's wrapped stream records (for the messages)."""
    inner = state.get(WRAPPED)
    return inner.get("rank") if isinstance(inner, Mapping) else None
