"""The positional stream core (:mod:`youmu.streams.core`) as torch ``IterableDataset`` s:
what youmu's torch streams (``MapStream``, ``pack``) subclass, so a ``DataLoader``
takes them. The contract, the states and the epochs are the core's; this module adds
only the torch base class.

Example:
    >>> from torch.utils.data import IterableDataset
    >>> from youmu.torch.sharded import ShardedStream
    >>> class Evens(ShardedStream):
    ...     state_format = "example.Evens/1"
    ...     def _settings(self): return {}
    ...     def _start(self): return 0
    ...     def _pass(self, worker, num_workers, start):
    ...         for i in range(start, 6, 2):
    ...             yield i + 2, i
    >>> isinstance(Evens(), IterableDataset), list(Evens())
    (True, [0, 2, 4])
"""

from __future__ import annotations

from typing import TypeVar

from torch.utils.data import IterableDataset

from youmu.streams import core as positional

__all__ = ["ShardedStream", "PositionalStream"]

T = TypeVar("T")
P = TypeVar("P")


class ShardedStream(positional.ShardedStream[T, P], IterableDataset[T]):
    """A :class:`youmu.streams.core.ShardedStream` that is a torch ``IterableDataset``."""


class PositionalStream(positional.PositionalStream[T], ShardedStream[T, int]):
    """A :class:`youmu.streams.core.PositionalStream` that is a torch ``IterableDataset``."""
