"""Errors the batching layer raises; all are defined in :mod:`youmu.errors`.

``BatchingError`` is the name this layer has always used for
:class:`youmu.errors.LoaderError` (the same class): every runtime failure of a
loader, including the collective errors that the planning layer raises too.

Example:
    >>> issubclass(RankFailedError, BatchingError)
    True
"""

from __future__ import annotations

from youmu.errors import ChannelError, DataStallError, LoaderError, PeerClosedError, RankFailedError

__all__ = ["BatchingError", "ChannelError", "RankFailedError", "PeerClosedError", "DataStallError"]

#: The batching layer's name for :class:`youmu.errors.LoaderError`.
BatchingError = LoaderError
