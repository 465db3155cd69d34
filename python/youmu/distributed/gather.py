"""Variable-length all-gathers over a :class:`~youmu.distributed.channel.GlooChannel`.

Gloo's all_gather needs the same length on every rank; these helpers gather the
lengths first, then the vectors padded to the longest (two collectives), and hand
back each rank's vector at its own length.

Example:
    >>> from youmu.distributed.channel import GlooChannel
    >>> [v.tolist() for v in all_gather_varlen(GlooChannel.local(), [3, 1, 4])]
    [[3, 1, 4]]
    >>> all_gather_bytes(GlooChannel.local(), b"hello")
    [b'hello']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["all_gather_varlen", "all_gather_bytes"]


def all_gather_varlen(channel: Any, values: Sequence[int] | np.ndarray) -> list[np.ndarray]:
    """Every rank's int64 vector, in rank order, each at the length its rank sent.
    Every rank of the channel calls it."""
    vec = np.asarray(values, dtype=np.int64).reshape(-1)
    sizes = [int(r[0]) for r in channel.all_gather_rows([vec.size])]
    padded = np.zeros(max(sizes), dtype=np.int64)
    padded[: vec.size] = vec
    rows = channel.all_gather_int64(padded)
    return [r.numpy()[: sizes[k]] for k, r in enumerate(rows)]


def all_gather_bytes(channel: Any, blob: bytes) -> list[bytes]:
    """Every rank's byte string, in rank order (carried as int64 words)."""
    words = (len(blob) + 7) // 8
    raw = np.frombuffer(blob + b"\0" * (words * 8 - len(blob)), dtype=np.int64)
    vecs = all_gather_varlen(channel, np.concatenate([[len(blob)], raw]).astype(np.int64))
    return [v[1:].tobytes()[: int(v[0])] for v in vecs]
