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

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from youmu._args import bool_arg, callable_arg, choice_arg, int_arg, opt_int_arg, storage_options_arg
from youmu.convert import OUTPUTS
from youmu.convert import rows as convert_rows
from youmu.distributed.world import rank_and_world
from youmu.errors import ArgumentTypeError, InvalidArgumentError, YoumuWarning
from youmu.resume import Origin, shard_plan
from youmu.sharding import Shard
from youmu.shuffle import MAX_PAGE_SLICES, SHUFFLE_MODES, all_window_rows, dropped_rows, row_chunk_rows
from youmu.stateful import data_fingerprint, state_int
from youmu.stream import DEFAULT_BUFFER_SIZE, RowStream, window_layout
from youmu.torch.sharded import PositionalStream, in_worker_process
from youmu.torch.skips import SkipLog, locate, reporting_pass

__all__ = ["YoumuDataset"]


def _map_style(obj: Any) -> bool:
    """A map-style dataset (``len`` and ``[i]``) that is not a path list."""
    return hasattr(obj, "__len__") and hasattr(obj, "__getitem__") and not isinstance(obj, (str, bytes, list, tuple))


class YoumuDataset(PositionalStream[Any]):
    """Rows of Parquet files, shuffled at page granularity.

    Args:
        paths: file, directory, glob or list of these, a ready ``youmu.PageIndex``, or a
            ``youmu.FlatMixture`` of Parquet sources (its children's pages form one space).
        columns: top-level columns (the first one's pages are the shuffle unit).
        shuffle: ``"page"`` (default), ``"row"``, ``"local"`` or ``"none"``.
        buffer_size: rows shuffled together (about this many rows per window). Default:
            about 8,192 rows and at least 32 pages per window — shuffle quality depends
            on the distinct pages per window (:attr:`window_pages`; see the README's
            shuffle guidance).
        seed: shuffle seed; ``set_epoch`` reshuffles.
        rank, world_size: default from ``torch.distributed`` when initialised.
        transform: called on each row in the worker; returning ``None`` drops the row.
        drop_last: every rank delivers exactly ``⌊rows / world_size⌋`` rows (fewer than
            ``world_size`` rows are left out, reported by ``dropped_rows()``); without
            it ranks differ by up to a window of rows, and a rank that would get no rows
            at all is warned about (DDP would wait for it).
        output: ``"torch"``, ``"numpy"``, ``"arrow"`` or ``"python"``.
        memory_budget: bytes of decoded data each process (main or DataLoader worker)
            may hold for reading: windows shrink so the one being consumed and the one
            read ahead fit (estimated from the files' metadata,
            :meth:`youmu.PageIndex.page_decoded_bytes`) — sized in bytes, so image rows
            make windows of fewer pages than text rows. A page over what the budget
            allows is read alone, without read-ahead (peak about that page). Default
            ``None``: windows of about ``buffer_size`` rows, whatever their bytes: set
            it for image data. Part of the shuffle, like ``buffer_size``: resume with
            the same value.
        page_slices: page mode only: shuffle pages cut into this many row slices, so a
            window of ``buffer_size`` rows draws from that many times more pages — more
            diverse early batches, at that many times the page reads (each page is read
            once per slice). Part of the shuffle (saved in the state). Default 1; see
            the README's shuffle guidance.
        read_ahead: windows read ahead of the one being consumed (default
            :func:`youmu.stream.default_read_ahead`: 1 for local files, 4–8 for object
            stores, from the I/O runtime's ``max_inflight``). More hides storage
            latency at the cost of memory (``memory_budget`` accounts for it, and
            lowers it where it binds). 0: each window is read when consumed.
        storage_options: object-store settings for URLs (``endpoint``, ``region``,
            ``access_key_id``, ...), as :class:`youmu.PageIndex` takes them (and
            ``youmu.RowDataset``, the Ray ``Source``, the CLI's ``--storage-option``).

    Every row is delivered exactly once per epoch across all ranks and workers
    (``drop_last=False``). The dataset follows youmu's stream contract
    (:mod:`youmu.stateful`): each ``iter()`` is an independent pass from the resume
    point; ``state_dict()`` holds the seed, epoch and rows consumed per worker, and a
    new dataset with the same arguments continues exactly where the old one stopped
    after ``load_state_dict``. With DataLoader workers use torchdata's
    ``StatefulDataLoader``, which calls these methods inside each worker.
    A job that comes back with another world size or worker count resumes from
    :func:`youmu.merge_states` of all its ranks' states (README: "Resume on another
    topology").
    """

    state_format = "youmu.YoumuDataset/1"
    resume_adopts = ("window_pages",)

    def __init__(
        self,
        paths: Any,
        columns: Sequence[str] | None = None,
        shuffle: str = "page",
        buffer_size: int | None = DEFAULT_BUFFER_SIZE,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        drop_last: bool = False,
        output: str = "torch",
        memory_budget: int | None = None,
        read_ahead: int | None = None,
        page_slices: int = 1,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from youmu._core import PageIndex

        choice_arg("shuffle", shuffle, SHUFFLE_MODES)
        choice_arg("output", output, OUTPUTS)
        buffer_size = opt_int_arg("buffer_size", buffer_size, minimum=1)
        seed = int_arg("seed", seed, minimum=0, maximum=(1 << 64) - 1)
        callable_arg("transform", transform, optional=True)
        drop_last = bool_arg("drop_last", drop_last)
        opt_int_arg("memory_budget", memory_budget, minimum=1)
        opt_int_arg("read_ahead", read_ahead, minimum=0)
        page_slices = int_arg("page_slices", page_slices, minimum=1, maximum=MAX_PAGE_SLICES)
        if page_slices > 1 and shuffle != "page":
            raise InvalidArgumentError(f"page_slices={page_slices} needs shuffle='page' (got shuffle={shuffle!r})")
        if isinstance(columns, (str, bytes)):
            raise ArgumentTypeError(f"columns must be a list of column names, got {type(columns).__name__} {columns!r}")
        self.rank, self.world_size = rank_and_world(rank, world_size)
        storage_options = storage_options_arg(storage_options)
        if storage_options is not None and not isinstance(paths, (str, bytes, list, tuple)) and \
                not hasattr(paths, "__fspath__"):
            raise InvalidArgumentError(f"storage_options apply to paths and URLs; a {type(paths).__name__} was "
                                       "built with its own (pass them where it was built)")
        if isinstance(paths, PageIndex):
            self.index = paths
        elif hasattr(paths, "page_index") and callable(paths.page_index):
            # a FlatMixture of Parquet sources: shuffle pages across all of them
            self.index = paths.page_index()
        elif isinstance(getattr(paths, "index", None), PageIndex):
            self.index = paths.index  # a youmu.RowDataset: same files, streamed by pages
        elif _map_style(paths):
            # A weighted MixtureDataset (or any map-style dataset) has no page space to
            # shuffle: its order is already the mixture's. Say what to use instead
            # rather than failing later on "expected a path".
            raise ArgumentTypeError(
                f"YoumuDataset reads Parquet files, a PageIndex or a FlatMixture of Parquet sources; "
                f"got a map-style {type(paths).__name__}. Stream it with youmu.torch.MixtureStream "
                "(runs of indices, page-friendly) or youmu.torch.MapStream (index by index)"
            )
        else:
            self.index = PageIndex(paths, columns=list(columns) if columns else None,
                                   storage_options=storage_options)
        if columns is not None and list(columns) != self.index.columns:
            raise InvalidArgumentError(
                f"columns={list(columns)} but the given index reads {self.index.columns}; "
                "build the PageIndex with those columns (or omit columns=)"
            )
        self.shuffle = shuffle
        self.buffer_size = buffer_size
        self.page_slices = page_slices
        self.seed = seed
        self.transform = transform
        self.drop_last = drop_last
        self.output = output
        self._page_rows = self.index.page_num_rows()
        self._fingerprint: str | None = None
        # a resumed epoch reads the windows of the job that started it (youmu.resume)
        self._resumed_wp: int | None = None
        self._resumed_rows: tuple[int, int, Any] | None = None
        self.memory_budget = memory_budget
        # a pure function of the files, world size, buffer_size and budget: computed once
        self._wp, self.read_ahead = window_layout(self.index, self.buffer_size, self.world_size,
                                                  memory_budget=memory_budget, read_ahead=read_ahead,
                                                  page_slices=page_slices)
        #: rows the transform skipped in this process (``on_error="skip"``; see youmu.torch.skips)
        self.skip_log = SkipLog()
        self._check_rank_gets_rows()

    def _check_rank_gets_rows(self) -> None:
        """A rank with no rows would leave its DDP peers waiting in their collectives."""
        if self.drop_last and self.index.num_rows < self.world_size:
            raise InvalidArgumentError(
                f"drop_last=True with {self.index.num_rows} rows over world_size={self.world_size} ranks leaves every "
                "rank with nothing"
            )
        if not self.drop_last and self.index.num_rows and len(self) == 0:
            warnings.warn(
                f"rank {self.rank} of {self.world_size} gets no rows ({self.index.num_rows} rows in {len(self.index)} "
                f"pages): a DDP job would wait for it; use drop_last=True (every rank the same number of rows) or "
                "fewer ranks",
                YoumuWarning,
                stacklevel=3,
            )

    # -- the stream contract ----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        return {"seed": self.seed, "shuffle": self.shuffle, "world_size": self.world_size, "rank": self.rank,
                "window_pages": self._window_pages(), "drop_last": self.drop_last, "page_slices": self.page_slices,
                "data": self._data_fingerprint()}

    def _data_fingerprint(self) -> str:
        # computed once (state_dict may be called per row): a pure function of the index
        if self._fingerprint is None:
            self._fingerprint = data_fingerprint(self.index)
        return self._fingerprint


    def shard_length(self, worker: int, num_workers: int, epoch: int | None = None) -> int:
        return len(self._stream(worker, num_workers, epoch))

    # -- sizes ----------------------------------------------------------------------------
    @property
    def window_pages(self) -> int:
        """Pages per shuffle window (page and local modes): what shuffle quality depends
        on — windows of 32 pages or more trained as well as a full row shuffle in
        ``benches/shuffle_quality.py``; with ``page_slices=k`` a window draws from about
        ``k`` times as many pages. An epoch resumed from a merged state keeps the
        windows of the job that started it."""
        return self._window_pages()

    def _window_pages(self) -> int:
        return self._resumed_wp if self._levels and self._resumed_wp else self._wp

    # -- resumed epochs (youmu.merge_states) ------------------------------------------------
    def _adopt(self, state: Mapping[str, Any]) -> None:
        self._resumed_wp = state_int(state, "window_pages", owner=type(self).__name__, minimum=1)

    def _adopted_state(self) -> Any:
        return self._resumed_wp

    def _restore_adopted(self, saved: Any) -> None:
        self._resumed_wp = saved

    def _window_rows(self) -> Any:
        """Rows of every window of the resumed epoch (page modes; computed once)."""
        key = (self.epoch, self._window_pages())
        if self._resumed_rows is None or self._resumed_rows[:2] != key:
            rows = all_window_rows(self._page_rows, self.shuffle, key[1], self.seed, key[0],
                                   page_slices=self.page_slices)
            self._resumed_rows = (*key, rows)
        return self._resumed_rows[2]

    def _origin(self, levels: Any) -> Origin:
        if self.shuffle == "row":
            return Origin(np.array([self.index.num_rows], dtype=np.int64),
                          "block-balanced" if self.drop_last else "block")
        return Origin(self._window_rows(), "balanced" if self.drop_last else "rr")

    def _row_chunk(self) -> int | None:
        return row_chunk_rows(self._window_pages()) if self.shuffle == "row" else None

    def dropped_rows(self) -> int:
        """Rows ``drop_last`` leaves out of this epoch (0 without ``drop_last``)."""
        return dropped_rows(self.index.num_rows, self.world_size) if self.drop_last else 0

    def __len__(self) -> int:
        """Rows this rank delivers in the current epoch."""
        return len(self._stream(0, 1))

    # -- iteration ------------------------------------------------------------------------
    def _stream(self, worker: int, num_workers: int, epoch: int | None = None) -> RowStream:
        epoch = self.epoch if epoch is None else epoch
        units = self._resumed_units(worker, num_workers, epoch)
        plan = None if units is None else shard_plan(
            units, None if self.shuffle == "row" else self._window_rows(), mode=self.shuffle,
            page_rows=self._page_rows, window_pages=self._window_pages(), seed=self.seed, epoch=epoch,
            shard=Shard(self.rank, self.world_size, worker, num_workers), drop_last=self.drop_last,
            page_slices=self.page_slices)
        return RowStream(
            self.index, self.shuffle, self.buffer_size, self.seed, epoch,
            rank=self.rank, world_size=self.world_size, worker=worker, num_workers=num_workers,
            page_rows=self._page_rows, window_pages=self._window_pages(), drop_last=self.drop_last,
            read_ahead=self.read_ahead, page_slices=self.page_slices, plan=plan,
        )

    def _items(self, worker: int, num_workers: int, start: int) -> Iterator[Any]:
        compact = in_worker_process()
        for table in self._stream(worker, num_workers).iter_tables(start):
            yield from convert_rows(table, self.output, compact=compact)
            del table  # not held while the next window is read (image windows are large)

    def _pass(self, worker: int, num_workers: int, start: int) -> Iterator[tuple[int, Any]]:
        if not getattr(self.transform, "reports_rows", False):
            yield from super()._pass(worker, num_workers, start)
            return
        # a transform that may find rows bad (youmu.vision.VisionTransform): errors name
        # the file and row; rows it skips are counted and reported (youmu.torch.skips)
        stream = self._stream(worker, num_workers)
        yield from reporting_pass(
            self._items(worker, num_workers, start), self.transform, start,  # type: ignore[arg-type]
            lambda pos: locate(self.index, stream.plan, self._page_rows, pos), self.skip_log,
        )
