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

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from youmu.batched import batched_pass, is_batched
from youmu.convert import rows as convert_rows
from youmu.distributed.world import rank_and_world
from youmu.resume import Origin
from youmu.spec import SpecAttributes, StreamLayout, StreamSpec
from youmu.stateful import state_int
from youmu.stream import DEFAULT_BUFFER_SIZE, RowStream
from youmu.torch.sharded import SKIP, PositionalStream, in_worker_process
from youmu.torch.skips import SkipLog, locate, reporting_pass

__all__ = ["YoumuDataset"]


class YoumuDataset(SpecAttributes, PositionalStream[Any]):
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
            A batched transform (:mod:`youmu.batched`, e.g. :class:`youmu.text.Tokenize`)
            is called with a page's rows at a time as an Arrow table instead, and its
            result converted with ``output``; states still count rows.
        drop_last: every rank delivers exactly ``⌊rows / world_size⌋`` rows (fewer than
            ``world_size`` rows are left out, reported by ``dropped_rows()``); without
            it ranks differ by up to a window of rows, and a rank that would get no rows
            at all is warned about (DDP would wait for it).
        output: ``"torch"``, ``"numpy"``, ``"arrow"`` or ``"python"``.
        memory_budget: bytes of decoded data each process (main or DataLoader worker)
            may hold for reading: windows shrink so the one being consumed and the one
            read ahead fit (estimated from the files' metadata,
            :meth:`youmu.PageIndex.page_decoded_bytes`) — sized in bytes, so image rows
            make windows of fewer pages than text rows; the same windows on local
            files and on an object store, whatever ``read_ahead`` (only the read-ahead
            goes down to what the budget leaves). A budget that shrinks the windows
            below what ``buffer_size`` asks for warns. A page over what the budget
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
        #: the settings, checked once (youmu.spec); ``ds.shuffle``, ``ds.seed``, ... read them
        self.spec = StreamSpec(columns=columns, shuffle=shuffle, buffer_size=buffer_size, seed=seed,
                               transform=transform, drop_last=drop_last, output=output, memory_budget=memory_budget,
                               read_ahead=read_ahead, page_slices=page_slices, storage_options=storage_options)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        #: the windows over these files for this world size (a pure function of both: computed once)
        self.layout: StreamLayout = self.spec.layout(paths, self.world_size)
        # a resumed epoch reads the windows of the job that started it (youmu.resume)
        self._resumed_wp: int | None = None
        #: rows the transform skipped in this process (``on_error="skip"``; see youmu.torch.skips)
        self.skip_log = SkipLog()
        self.layout.check_rank_gets_rows(self.rank, stacklevel=2)

    @property
    def index(self) -> Any:
        """The :class:`youmu.PageIndex` the rows are read from."""
        return self.layout.index

    @property
    def read_ahead(self) -> int:
        """Windows read ahead of the one being consumed (the default resolved, and
        lowered where ``memory_budget`` binds)."""
        return self.layout.read_ahead

    @property
    def transform(self) -> Callable[[Any], Any] | None:  # type: ignore[override]  # read-only: the spec's
        return self.spec.transform

    # -- the stream contract ----------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        return self.layout.settings(self.rank, self._window_pages())

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
        return self._resumed_wp if self._levels and self._resumed_wp else self.layout.window_pages

    # -- resumed epochs (youmu.merge_states) ------------------------------------------------
    def _adopt(self, state: Mapping[str, Any]) -> None:
        self._resumed_wp = state_int(state, "window_pages", owner=type(self).__name__, minimum=1)

    def _adopted_state(self) -> Any:
        return self._resumed_wp

    def _restore_adopted(self, saved: Any) -> None:
        self._resumed_wp = saved

    def _origin(self, levels: Any) -> Origin:
        return self.layout.origin(self.epoch, self._window_pages())

    def dropped_rows(self) -> int:
        """Rows ``drop_last`` leaves out of this epoch (0 without ``drop_last``)."""
        return self.layout.dropped_rows()

    def __len__(self) -> int:
        """Rows this rank delivers in the current epoch."""
        return len(self._stream(0, 1))

    # -- iteration ------------------------------------------------------------------------
    def _stream(self, worker: int, num_workers: int, epoch: int | None = None) -> RowStream:
        epoch = self.epoch if epoch is None else epoch
        return self.layout.stream(self.rank, worker, num_workers, epoch, window_pages=self._window_pages(),
                                  units=self._resumed_units(worker, num_workers, epoch))

    def _items(self, worker: int, num_workers: int, start: int) -> Iterator[Any]:
        compact = in_worker_process()
        for table in self._stream(worker, num_workers).iter_tables(start):
            yield from convert_rows(table, self.spec.output, compact=compact)
            del table  # not held while the next window is read (image windows are large)

    def _pass(self, worker: int, num_workers: int, start: int) -> Iterator[tuple[int, Any]]:
        if is_batched(self.transform):
            # a page's rows at a time (youmu.batched: tokenizers); positions still count rows
            stream = self._stream(worker, num_workers)
            for pos, item in batched_pass(
                stream.iter_tables(start), self.transform, self.spec.output, start,  # type: ignore[arg-type]
                where=lambda pos: locate(self.index, stream.plan, self.layout.page_rows, pos),
                compact=in_worker_process(), in_worker=in_worker_process(),
            ):
                yield pos, SKIP if item is None else item
            return
        if not getattr(self.transform, "reports_rows", False):
            yield from super()._pass(worker, num_workers, start)
            return
        # a transform that may find rows bad (youmu.vision.VisionTransform): errors name
        # the file and row; rows it skips are counted and reported (youmu.torch.skips)
        stream = self._stream(worker, num_workers)
        yield from reporting_pass(
            self._items(worker, num_workers, start), self.transform, start,  # type: ignore[arg-type]
            lambda pos: locate(self.index, stream.plan, self.layout.page_rows, pos), self.skip_log,
        )
