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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.utils.data import IterableDataset

from youmu.streams.parquet import ParquetStream
from youmu.streams.rowstream import DEFAULT_BUFFER_SIZE
from youmu.streams.spec import StreamSpec

__all__ = ["YoumuDataset"]


class YoumuDataset(ParquetStream, IterableDataset):
    """Rows of Parquet files, shuffled at page granularity.

    Args:
        paths: file, directory, glob or list of these, a ready ``youmu.PageIndex``, or a
            ``youmu.FlatMixture`` of Parquet sources (its children's pages form one space).
        columns: top-level columns (the first one's pages are the shuffle unit).
        shuffle: ``"page"`` (default), ``"row"``, ``"local"`` or ``"none"``.
        buffer_size: rows shuffled together (about this many rows per window). Default:
            about 8,192 rows and at least 32 pages per window — shuffle quality depends
            on the distinct pages per window (:attr:`window_pages`; see
            ``docs/concepts/shuffle.md``).
        seed: shuffle seed; ``set_epoch`` reshuffles.
        rank, world_size: default from ``torch.distributed`` when initialised.
        transform: called on each row in the worker; returning ``None`` drops the row.
            A batched transform (:mod:`youmu.streams.batched`, e.g. :class:`youmu.text.Tokenize`)
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
            ``docs/concepts/shuffle.md``.
        read_ahead: windows read ahead of the one being consumed (default
            :func:`youmu.streams.rowstream.default_read_ahead`: 1 for local files, 4–8 for object
            stores, from the I/O runtime's ``max_inflight``). More hides storage
            latency at the cost of memory (``memory_budget`` accounts for it, and
            lowers it where it binds). 0: each window is read when consumed.
        storage_options: object-store settings for URLs (``endpoint``, ``region``,
            ``access_key_id``, ...), as :class:`youmu.PageIndex` takes them (and
            ``youmu.RowDataset``, the Ray ``Source``, the CLI's ``--storage-option``).

    Every row is delivered exactly once per epoch across all ranks and workers
    (``drop_last=False``). The dataset follows youmu's stream contract
    (:mod:`youmu.state.contract`): each ``iter()`` is an independent pass from the resume
    point; ``state_dict()`` holds the seed, epoch and rows consumed per worker, and a
    new dataset with the same arguments continues exactly where the old one stopped
    after ``load_state_dict``. With DataLoader workers use torchdata's
    ``StatefulDataLoader``, which calls these methods inside each worker.
    A job that comes back with another world size or worker count resumes from
    :func:`youmu.merge_states` of all its ranks' states (``docs/guides/resume-topology.md``).
    """

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
        spec = StreamSpec(columns=columns, shuffle=shuffle, buffer_size=buffer_size, seed=seed, transform=transform,
                          drop_last=drop_last, output=output, memory_budget=memory_budget, read_ahead=read_ahead,
                          page_slices=page_slices, storage_options=storage_options)
        super().__init__(paths, spec, rank=rank, world_size=world_size, _stacklevel=2)
