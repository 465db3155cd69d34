"""Errors of the batching layer. Each is a :class:`youmu.errors.YoumuError`.

Example:
    >>> issubclass(RankFailedError, BatchingError)
    True
"""

from __future__ import annotations

from youmu.errors import YoumuError

__all__ = ["BatchingError", "ChannelError", "RankFailedError", "PeerClosedError", "DataStallError"]


class BatchingError(YoumuError, RuntimeError):
    """Base class of the batching layer's runtime errors."""


class ChannelError(BatchingError):
    """A collective failed: a peer died or hung past the timeout, or the group is closed."""


class RankFailedError(BatchingError):
    """Another rank reported a local failure (its own error is raised on that rank)."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class PeerClosedError(BatchingError):
    """Another rank stopped iterating (closed its loader or exited its loop) while this
    rank still wanted batches it never consumed."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class DataStallError(BatchingError):
    """The data source produced nothing for longer than the loader's timeout."""
