"""``MixtureStream``: a map-style mixture (or any map-style dataset) as an
``IterableDataset`` that deals *runs* of consecutive indices over DDP ranks ×
DataLoader workers — exactly once, resumable from a few integers.

Why runs: with chunk-local child orders (``MixtureDataset(child_chunk=...)``, the
default for Parquet children), consecutive indices of a mixture draw neighbouring rows
of each child, so a worker that takes a run of indices reads each Parquet page it
touches once (its ``RowDataset(cache_pages=...)`` serves the rest of the page). Dealing
single indices round-robin (``youmu.torch.MapStream``) spreads every child's
consecutive draws over all ranks × workers, and each of them decodes the page.

The price: a worker's k-th item is run-aligned, so ranks reach a given global index
up to one run apart (a stage of a curriculum starts up to ``run`` items earlier on
one worker than on another). The data of every index is still exactly the mixture's;
use ``MapStream`` where stage switches must fall on the same step on every rank.

Run ``q`` (indices ``[q·run, (q+1)·run)``) goes to rank ``q % world_size``; a rank's
k-th run goes to worker ``k % num_workers``.

Example:
    >>> from youmu.mixture import MixtureDataset
    >>> from youmu.torch.mixture import MixtureStream
    >>> mix = MixtureDataset({"a": list(range(100)), "b": list(range(10))}, {"a": 0.9, "b": 0.1},
    ...                      block_size=16, length=110)
    >>> items = list(MixtureStream(mix, rank=0, world_size=2))   # runs 0, 2, 4, 6 of 16
    >>> len(items)
    62
"""

from __future__ import annotations

from typing import Any, Callable

from youmu.torch.mapstream import MapStream


class MixtureStream(MapStream):
    """Iterate a map-style dataset in runs of consecutive indices, sharded exactly once.

    A :class:`~youmu.torch.MapStream` whose ``run`` defaults to the mixture's
    ``block_size`` (1024 for datasets without one) and whose ``chunk`` is larger.

    Args:
        dataset: anything with ``len`` and ``[i]`` (``__getitems__`` is used when present).
        rank, world_size: default from ``torch.distributed`` when initialised.
        run: consecutive indices dealt together.
        drop_last: every rank delivers the same number of items: the index space is cut
            to a multiple of ``world_size · run`` (fewer than that many are dropped).
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: indices fetched per ``__getitems__`` call (at most one run).
    """

    def __init__(
        self,
        dataset: Any,
        rank: int | None = None,
        world_size: int | None = None,
        run: int | None = None,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        chunk: int = 4096,
    ) -> None:
        run = run if run is not None else getattr(dataset, "block_size", 1024)
        super().__init__(dataset, rank=rank, world_size=world_size, drop_last=drop_last, transform=transform,
                         chunk=chunk, run=run)


__all__ = ["MixtureStream"]
