"""``YoumuDataset``: a ``torch.utils.data.IterableDataset`` over Parquet rows with
page-level shuffling, exact sharding over DDP ranks × DataLoader workers, and resume
from a few integers.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from youmu.torch import YoumuDataset
    >>> ds = YoumuDataset("data/", columns=["input_ids"], shuffle="page", seed=0)   # doctest: +SKIP
    >>> for epoch in range(2):                                                       # doctest: +SKIP
    ...     ds.set_epoch(epoch)
    ...     for row in DataLoader(ds, batch_size=None, num_workers=2):
    ...         ...
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.data import IterableDataset, get_worker_info

from youmu.convert import OUTPUTS, rows as convert_rows
from youmu.plan import SHUFFLE_MODES, rank_caps, row_chunk_rows, window_pages_for
from youmu.stream import DEFAULT_BUFFER_SIZE, RowStream


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is not None and world_size is not None:
        r, w = rank, world_size
    elif torch.distributed.is_available() and torch.distributed.is_initialized():
        r = torch.distributed.get_rank() if rank is None else rank
        w = torch.distributed.get_world_size() if world_size is None else world_size
    else:
        r, w = rank or 0, world_size or 1
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"rank {r} is not in range(world_size={w})")
    return r, w


class YoumuDataset(IterableDataset):
    """Rows of Parquet files, shuffled at page granularity.

    Args:
        paths: file, directory, glob or list of these, a ready ``youmu.PageIndex``, or a
            ``youmu.FlatMixture`` of Parquet sources (its children's pages form one space).
        columns: top-level columns (the first one's pages are the shuffle unit).
        shuffle: ``"page"`` (default), ``"row"``, ``"local"`` or ``"none"``.
        buffer_size: rows shuffled together (about this many rows per window).
        seed: shuffle seed; ``set_epoch`` reshuffles.
        rank, world_size: default from ``torch.distributed`` when initialised.
        transform: called on each row in the worker; returning ``None`` drops the row.
        drop_last: every rank delivers the same number of rows; the remainder is
            reported by ``dropped_rows()``.
        output: ``"torch"``, ``"numpy"``, ``"arrow"`` or ``"python"``.
        memory_budget: bytes of decoded data each process (main or DataLoader worker)
            may hold for reading: windows shrink so the one being consumed and the one
            read ahead fit (estimated from the files' metadata,
            :meth:`youmu.PageIndex.page_decoded_bytes`). Default ``None``: windows of
            about ``buffer_size`` rows. Part of the shuffle, like ``buffer_size``: resume
            with the same value.

    Every row is delivered exactly once per epoch across all ranks and workers
    (``drop_last=False``). ``state_dict()`` holds the seed, epoch and rows consumed per
    worker; a new dataset with the same arguments and ``load_state_dict`` continues
    exactly where the old one stopped. With DataLoader workers use torchdata's
    ``StatefulDataLoader``, which calls these methods inside each worker.
    """

    def __init__(
        self,
        paths: Any,
        columns: Sequence[str] | None = None,
        shuffle: str = "page",
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        drop_last: bool = False,
        output: str = "torch",
        memory_budget: int | None = None,
    ) -> None:
        super().__init__()
        from youmu._core import PageIndex

        if shuffle not in SHUFFLE_MODES:
            raise ValueError(f"shuffle must be one of {SHUFFLE_MODES}, got {shuffle!r}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        if isinstance(paths, PageIndex):
            self.index = paths
        elif hasattr(paths, "page_index") and callable(paths.page_index):
            # a FlatMixture of Parquet sources: shuffle pages across all of them
            self.index = paths.page_index()
        elif isinstance(getattr(paths, "index", None), PageIndex):
            self.index = paths.index  # a youmu.RowDataset: same files, streamed by pages
        elif hasattr(paths, "__getitem__") and hasattr(paths, "__len__") and not isinstance(paths, (str, bytes, list, tuple)):
            # A weighted MixtureDataset (or any map-style dataset) has no page space to
            # shuffle: its order is already the mixture's. Say what to use instead
            # rather than failing later on "expected a path".
            raise TypeError(
                f"YoumuDataset reads Parquet files, a PageIndex or a FlatMixture of Parquet sources; "
                f"got a map-style {type(paths).__name__}. Stream it with youmu.torch.MixtureStream "
                "(runs of indices, page-friendly) or youmu.torch.MapStream (index by index)"
            )
        else:
            self.index = PageIndex(paths, columns=list(columns) if columns else None)
        if columns is not None and list(columns) != self.index.columns:
            raise ValueError(
                f"columns={list(columns)} but the given index reads {self.index.columns}; "
                "build the PageIndex with those columns (or omit columns=)"
            )
        self.shuffle = shuffle
        self.buffer_size = int(buffer_size)
        self.seed = int(seed)
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.transform = transform
        self.drop_last = drop_last
        self.output = output
        self.epoch = 0
        self._page_rows = self.index.page_num_rows()
        self.memory_budget = memory_budget
        # a pure function of the files, world size, buffer_size and budget: computed once
        self._wp = window_pages_for(
            self._page_rows, self.buffer_size, self.world_size,
            page_bytes=self.index.page_decoded_bytes() if memory_budget is not None else None,
            memory_budget=memory_budget,
        )
        # rows consumed per worker id in the current epoch (this process's view)
        self._positions: dict[int, int] = {}
        self._num_workers_seen: int | None = None
        # workers whose iteration reached the end of the epoch
        self._done: set[int] = set()

    # -- epoch and state ----------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` and start it from the beginning."""
        self.epoch = int(epoch)
        self._positions = {}
        self._done = set()

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "shuffle": self.shuffle,
            "world_size": self.world_size,
            "window_pages": self._wp,
            "num_workers": self._num_workers_seen,
            "positions": dict(self._positions),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("seed", "shuffle", "world_size"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"state was saved with {key}={state.get(key)!r} but this dataset has {getattr(self, key)!r}"
                )
        if "window_pages" in state and state["window_pages"] != self._wp:
            raise ValueError(
                f"state was saved with windows of {state['window_pages']} pages but this dataset uses {self._wp} "
                "(buffer_size or memory_budget differ): the shuffle would differ, so the rest of the epoch "
                "would not be the uninterrupted one"
            )
        self.epoch = int(state["epoch"])
        self._positions = {int(k): int(v) for k, v in state["positions"].items()}
        self._num_workers_seen = state.get("num_workers")
        self._done = set()

    # -- sizes ----------------------------------------------------------------------------
    def _window_pages(self) -> int:
        return self._wp

    def _row_chunk(self) -> int | None:
        return row_chunk_rows(self._window_pages()) if self.shuffle == "row" else None

    def _caps(self, num_workers: int) -> dict[tuple[int, int], int] | None:
        if not self.drop_last:
            return None
        caps, _ = rank_caps(
            self._page_rows, self.shuffle, window_pages=self._window_pages(), window_rows=self._row_chunk(),
            seed=self.seed, epoch=self.epoch, world_size=self.world_size, num_workers=num_workers,
        )
        return caps

    def dropped_rows(self) -> int:
        """Rows ``drop_last`` leaves out of this epoch (0 without ``drop_last``)."""
        if not self.drop_last:
            return 0
        return rank_caps(
            self._page_rows, self.shuffle, window_pages=self._window_pages(), window_rows=self._row_chunk(),
            seed=self.seed, epoch=self.epoch, world_size=self.world_size, num_workers=1,
        )[1]

    def __len__(self) -> int:
        """Rows this rank delivers in the current epoch."""
        caps = self._caps(1)
        if caps is not None:
            return caps[self.rank, 0]
        return len(self._stream(0, 1))

    # -- iteration ------------------------------------------------------------------------
    def _stream(self, worker: int, num_workers: int) -> RowStream:
        caps = self._caps(num_workers)
        return RowStream(
            self.index, self.shuffle, self.buffer_size, self.seed, self.epoch,
            rank=self.rank, world_size=self.world_size, worker=worker, num_workers=num_workers,
            cap=None if caps is None else caps[self.rank, worker], page_rows=self._page_rows,
            window_pages=self._wp,
        )

    def _worker(self) -> tuple[int, int]:
        info = get_worker_info()
        return (0, 1) if info is None else (info.id, info.num_workers)

    def iter_positions(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(position, row)`` for this process's shard, from its saved position.
        Rows are converted but not transformed (used by packing)."""
        worker, num_workers = self._worker()
        if self._num_workers_seen is not None and self._positions and self._num_workers_seen != num_workers:
            raise ValueError(
                f"state was saved with {self._num_workers_seen} DataLoader workers; resume with the same number"
            )
        self._num_workers_seen = num_workers
        stream = self._stream(worker, num_workers)
        pos = self._positions.get(worker, 0)
        in_worker = get_worker_info() is not None
        for table in stream.iter_tables(pos):
            for row in convert_rows(table, self.output, compact=in_worker):
                yield pos, row
                pos += 1

    def __iter__(self) -> Iterator[Any]:
        worker, _ = self._worker()
        if worker in self._done:
            # the previous iteration finished the epoch: this one starts it over
            # (call set_epoch to reshuffle)
            self._done.discard(worker)
            self._positions.pop(worker, None)
        for pos, row in self.iter_positions():
            self._positions[worker] = pos + 1
            if self.transform is not None:
                row = self.transform(row)
                if row is None:
                    continue
            yield row
        # Keep the final position: a state saved now resumes to the (empty) rest of the
        # epoch rather than replaying it.
        self._done.add(worker)
