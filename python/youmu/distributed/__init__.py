"""youmu's distributed toolkit, shared by the batching, planning and torch layers (and
the multi-node work built on them).

* :class:`GlooChannel` and :func:`channel_for` — a dedicated Gloo group for CPU
  metadata exchange, with timeouts, made from a process group, the default group or
  a ``TCPStore`` rendezvous; :func:`abandon_collectives` for interpreter exit;
* :func:`all_gather_varlen` / :func:`all_gather_bytes` — variable-length all-gathers;
* :func:`fingerprint` / :func:`describe` — hashes of the settings ranks must share;
* :class:`Producer` / :class:`Credits` / :class:`Failure` — one bounded background
  producer thread, and the exception it hands to its consumer;
* :data:`FAILED` / :data:`CLOSED` and :func:`raise_for_stopped_peers` — the one set of
  codes by which a rank tells its peers it failed or closed, and their one reaction;
* :func:`rank_and_world` — rank and world size from the caller or ``torch.distributed``;
* the collective errors it raises (:class:`~youmu.errors.ChannelError`,
  :class:`~youmu.errors.RankFailedError`, :class:`~youmu.errors.PeerClosedError`) are
  :mod:`youmu.errors`' (importable from ``youmu``), like every youmu error.

torch is imported only when a channel needs it.

Example:
    >>> from youmu.distributed import GlooChannel, all_gather_varlen
    >>> [v.tolist() for v in all_gather_varlen(GlooChannel.local(), [1, 2])]
    [[1, 2]]
"""

from __future__ import annotations

from youmu.distributed.channel import DEFAULT_TIMEOUT, GlooChannel, abandon_collectives, channel_for
from youmu.distributed.fingerprint import describe, fingerprint
from youmu.distributed.gather import all_gather_bytes, all_gather_varlen
from youmu.distributed.producer import END, Credits, Failure, Producer
from youmu.distributed.status import CLOSED, FAILED, raise_for_stopped_peers, stopped_peers
from youmu.distributed.world import rank_and_world

__all__ = [
    "CLOSED",
    "DEFAULT_TIMEOUT",
    "END",
    "FAILED",
    "Credits",
    "Failure",
    "GlooChannel",
    "Producer",
    "abandon_collectives",
    "all_gather_bytes",
    "all_gather_varlen",
    "channel_for",
    "describe",
    "fingerprint",
    "raise_for_stopped_peers",
    "rank_and_world",
    "stopped_peers",
]
