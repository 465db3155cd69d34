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
        drop_last: every rank delivers the same number of items: the index space is cut
            to a multiple of ``world_size · run``.
        transform: applied to each item in the worker; ``None`` results are dropped.
        chunk: positions fetched per ``__getitems__`` call.
        run: consecutive indices dealt together (1: index by index; see
            :class:`youmu.torch.MixtureStream` for why runs help Parquet children).

    Run ``q`` (indices ``[q·run, (q+1)·run)``) goes to rank ``q % world_size``; a rank's
    k-th run goes to worker ``k % num_workers``. State (``state_dict``): items consumed
    per worker, ``world_size``, ``run`` and the number of workers; resume with the same
    three.
    """

    def __init__(
        self,
        dataset: Any,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        chunk: int = 256,
        run: int = 1,
    ) -> None:
        super().__init__()
        if isinstance(run, bool) or not isinstance(run, int) or run < 1:
            raise ValueError(f"run must be a positive int, got {run!r}")
        self.dataset = dataset
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.run = run
        self.drop_last = drop_last
        self.transform = transform
        self.chunk = max(1, int(chunk))
        self._positions: dict[int, int] = {}
        self._num_workers_seen: int | None = None
        self._done: set[int] = set()  # workers whose iteration reached the end

    def _n(self) -> int:
        n = len(self.dataset)
        span = self.world_size * self.run
        return n - n % span if self.drop_last else n

    def _count(self, worker: int, num_workers: int) -> int:
        """Items of a (rank, worker) shard."""
        n = self._n()
        runs = -(-n // self.run)  # the last run may be short
        first, step = self.rank + self.world_size * worker, self.world_size * num_workers
        mine = max(0, -(-(runs - first) // step))
        if mine == 0:
            return 0
        last = first + step * (mine - 1)
        return mine * self.run - ((last + 1) * self.run - n if last == runs - 1 else 0)

    def _index(self, pos: int, worker: int, num_workers: int) -> int:
        """Global index of a shard's item number `pos`."""
        j, o = divmod(pos, self.run)
        q = self.rank + self.world_size * (worker + num_workers * j)
        return q * self.run + o

    def __len__(self) -> int:
        return self._count(0, 1)

    def state_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "run": self.run, "num_workers": self._num_workers_seen,
                "positions": dict(self._positions)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["world_size"] != self.world_size:
            raise ValueError(f"state was saved with world_size={state['world_size']}, not {self.world_size}")
        if state.get("run", 1) != self.run:
            raise ValueError(f"state was saved with run={state.get('run', 1)}, not {self.run}")
        self._positions = {int(k): int(v) for k, v in state["positions"].items()}
        self._num_workers_seen = state.get("num_workers")
        self._done = set()

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
        count = self._count(worker, num_workers)
        pos = self._positions.get(worker, 0)
        get_many = getattr(self.dataset, "__getitems__", None)
        while pos < count:
            # consecutive global indices: the rest of the current run, at most `chunk`
            stop = min(count, (pos // self.run + 1) * self.run, pos + self.chunk)
            if self.run == 1:  # one index per run: fetch a strided chunk at once
                stop = min(count, pos + self.chunk)
                idx = [self._index(k, worker, num_workers) for k in range(pos, stop)]
            else:
                lo = self._index(pos, worker, num_workers)
                idx = list(range(lo, lo + stop - pos))
            for item in get_many(idx) if get_many else [self.dataset[i] for i in idx]:
                yield pos, item
                pos += 1

    def __iter__(self) -> Iterator[Any]:
        worker, _ = self._worker()
        if worker in self._done:  # the previous iteration finished: start over
            self._done.discard(worker)
            self._positions.pop(worker, None)
        for pos, item in self.iter_positions():
            self._positions[worker] = pos + 1
            if self.transform is not None:
                item = self.transform(item)
                if item is None:
                    continue
            yield item
        # keep the final position: a state saved now resumes to the (empty) rest
        self._done.add(worker)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dataset!r}, rank={self.rank}, world_size={self.world_size}, run={self.run})"


__all__ = ["MapStream"]
