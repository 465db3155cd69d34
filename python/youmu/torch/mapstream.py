"""``MapStream`` and ``MixtureStream`` as torch ``IterableDataset`` s: the torch-free
streams of :mod:`youmu.mixture.mapstream` (their sharding, runs, states and mixture weight
changes are there), with torch's base class added so a ``DataLoader`` takes them.

Example:
    >>> from torch.utils.data import IterableDataset
    >>> from youmu.mixture import MixtureDataset
    >>> from youmu.torch import MapStream, MixtureStream
    >>> mix = MixtureDataset({"a": list(range(100)), "b": list(range(10))}, {"a": 0.9, "b": 0.1},
    ...                      block_size=16, length=110)
    >>> isinstance(MapStream(mix, rank=0, world_size=2), IterableDataset)
    True
    >>> len(list(MixtureStream(mix, rank=0, world_size=2)))   # runs 0, 2, 4, 6 of 16
    62
"""

from __future__ import annotations

from typing import Any

from youmu.mixture import mapstream
from youmu.torch.sharded import PositionalStream

__all__ = ["MapStream", "MixtureStream"]


class MapStream(mapstream.MapStream, PositionalStream[Any]):
    """:class:`youmu.mixture.mapstream.MapStream` as a torch ``IterableDataset``: the same
    arguments, items and states (see there).

    Args:
        dataset: anything with ``len`` and ``[i]`` (``__getitems__`` is used when present).
        rank, world_size: default from ``torch.distributed`` when initialised.
        drop_last: every rank delivers the same number of items: the index space is cut
            to a multiple of ``world_size · run``.
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: positions fetched per ``__getitems__`` call.
        run: consecutive indices dealt together (1: index by index; see
            :class:`MixtureStream` for why runs help Parquet children).
    """


class MixtureStream(mapstream.MixtureStream, MapStream):
    """:class:`youmu.mixture.mapstream.MixtureStream` as a torch ``IterableDataset``: a
    :class:`MapStream` whose ``run`` defaults to the mixture's ``block_size`` (see there).

    Args:
        dataset: anything with ``len`` and ``[i]`` (``__getitems__`` is used when present).
        rank, world_size: default from ``torch.distributed`` when initialised.
        run: consecutive indices dealt together.
        drop_last: every rank delivers the same number of items: the index space is cut
            to a multiple of ``world_size · run`` (fewer than that many are dropped).
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: indices fetched per ``__getitems__`` call (at most one run).
    """
