"""``MapStream``: any map-style dataset (``len`` + indexing) — a ``MixtureDataset``, a
``FlatMixture``, a ``RowDataset`` — as an ``IterableDataset`` sharded exactly once over
DDP ranks × DataLoader workers, resumable from a few integers.

Positions are dealt round-robin: index ``i`` goes to rank ``i % world_size``, and a
rank's k-th index to worker ``k % num_workers`` (so a rank's items do not depend on its
worker count). Striding, unlike contiguous blocks, keeps every rank at the same region
of the global index at the same step, which is what makes mixture stages (curricula,
defined on the global index) switch at the same step on every rank. Map-style reads
are random access anyway, so striding costs no I/O locality.

Example:
    >>> from youmu.mixture import MixtureDataset
    >>> from youmu.torch import MapStream
    >>> mix = MixtureDataset({"a": list(range(100)), "b": list(range(10))}, {"a": 0.9, "b": 0.1})
    >>> items = list(MapStream(mix, rank=0, world_size=2))
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from torch.utils.data import IterableDataset, get_worker_info

from youmu.torch.dataset import _dist_defaults


class MapStream(IterableDataset):
    """Iterate a map-style dataset's positions, sharded and resumable.

    Args:
        dataset: anything with ``len`` and ``[i]`` (``__getitems__`` is used when present).
        rank, world_size: default from ``torch.distributed`` when initialised.
        drop_last: every rank delivers the same number of items (``len // world_size``).
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: positions fetched per ``__getitems__`` call.
    """

    def __init__(
        self,
        dataset: Any,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        chunk: int = 256,
    ) -> None:
        super().__init__()
        self.dataset = dataset
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.drop_last = drop_last
        self.transform = transform
        self.chunk = max(1, int(chunk))
        self._positions: dict[int, int] = {}
        self._num_workers_seen: int | None = None

    def _n(self) -> int:
        n = len(self.dataset)
        return n - n % self.world_size if self.drop_last else n

    def _stride(self, worker: int, num_workers: int) -> tuple[int, int, int]:
        """(first index, step, number of indices) of a (rank, worker) shard."""
        first, step = self.rank + self.world_size * worker, self.world_size * num_workers
        n = self._n()
        return first, step, max(0, (n - first + step - 1) // step)

    def __len__(self) -> int:
        return self._stride(0, 1)[2]

    def state_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "num_workers": self._num_workers_seen, "positions": dict(self._positions)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["world_size"] != self.world_size:
            raise ValueError(f"state was saved with world_size={state['world_size']}, not {self.world_size}")
        self._positions = {int(k): int(v) for k, v in state["positions"].items()}
        self._num_workers_seen = state.get("num_workers")

    def _worker(self) -> tuple[int, int]:
        info = get_worker_info()
        return (0, 1) if info is None else (info.id, info.num_workers)

    def iter_positions(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(position, item)`` from this worker's saved position (no transform),
        the protocol ``youmu.torch.pack`` resumes through."""
        worker, num_workers = self._worker()
        if self._positions and self._num_workers_seen not in (None, num_workers):
            raise ValueError(f"state was saved with {self._num_workers_seen} workers; resume with the same number")
        self._num_workers_seen = num_workers
        first, step, count = self._stride(worker, num_workers)
        pos = self._positions.get(worker, 0)
        get_many = getattr(self.dataset, "__getitems__", None)
        while pos < count:
            idx = [first + step * k for k in range(pos, min(pos + self.chunk, count))]
            for item in get_many(idx) if get_many else [self.dataset[i] for i in idx]:
                yield pos, item
                pos += 1

    def __iter__(self) -> Iterator[Any]:
        worker, _ = self._worker()
        for pos, item in self.iter_positions():
            self._positions[worker] = pos + 1
            if self.transform is not None:
                item = self.transform(item)
                if item is None:
                    continue
            yield item
        self._positions.pop(worker, None)  # finished: the next iteration starts over
