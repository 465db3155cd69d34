"""The words a rank says when it stops early, and how its peers react: one set of codes
shared by every collective loader protocol (ODB's round reports in
:mod:`youmu.batching.algo.alignment`, the step exchange of :mod:`youmu.planning.steps.exchange`).

A rank whose data raised says :data:`FAILED`; a rank whose consumer stopped iterating
says :data:`CLOSED`. Both are negative, so a protocol whose status word is otherwise a
count (ODB sends its number of groups) can carry them in the same word. Every peer
learns it in the same collective and reacts the same way: a failure anywhere wins over
a close, and both name the ranks.

Example:
    >>> stopped_peers([3, CLOSED, 0, FAILED])
    ((3,), (1,))
    >>> raise_for_stopped_peers([0, CLOSED], loader="BalancedLoader")
    Traceback (most recent call last):
    ...
    youmu.errors.PeerClosedError: rank(s) [1] closed their BalancedLoader while this rank iterates
"""

from __future__ import annotations

from collections.abc import Sequence

from youmu.errors import PeerClosedError, RankFailedError

__all__ = ["FAILED", "CLOSED", "stopped_peers", "raise_for_stopped_peers"]

#: Reading this rank's data raised: every rank raises (the failing rank its own error).
FAILED = -2
#: This rank's consumer stopped iterating: its peers stop instead of waiting on it.
CLOSED = -3


def stopped_peers(statuses: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(ranks that failed, ranks that closed)`` from every rank's status word."""
    failed = tuple(k for k, s in enumerate(statuses) if s == FAILED)
    closed = tuple(k for k, s in enumerate(statuses) if s == CLOSED)
    return failed, closed


def raise_for_stopped_peers(statuses: Sequence[int], *, loader: str) -> None:
    """Raise :class:`~youmu.errors.RankFailedError` if any rank failed, else
    :class:`~youmu.errors.PeerClosedError` if any closed its ``loader``."""
    failed, closed = stopped_peers(statuses)
    if failed:
        raise RankFailedError(f"rank(s) {list(failed)} failed while reading their data", failed)
    if closed:
        raise PeerClosedError(f"rank(s) {list(closed)} closed their {loader} while this rank iterates", closed)
