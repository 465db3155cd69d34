"""Row streams: a shard's plan turned into Arrow data, with the next window's pages
read by Rust threads (GIL released) while the current one is consumed.

Example:
    >>> import youmu
    >>> from youmu.streams.rowstream import RowStream
    >>> idx = youmu.PageIndex("data/")                                  # doctest: +SKIP
    >>> s = RowStream(idx, shuffle="page", buffer_size=4096, seed=0)     # doctest: +SKIP
    >>> for table in s.iter_tables():                                    # doctest: +SKIP
    ...     ...  # pyarrow.Table chunks, rows in stream order
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import OrderedDict, deque
from collections.abc import Generator, Iterator

import numpy as np
import pyarrow as pa

from youmu._internal.args import int_arg
from youmu.errors import ArgumentTypeError, YoumuWarning
from youmu.order.sharding import Shard
from youmu.order.shuffle import (
    DEFAULT_WINDOW_PAGES,
    WINDOWS_IN_FLIGHT,
    ShardPlan,
    row_chunk_rows,
    shuffle_args,
    window_args,
    window_pages_for,
)

__all__ = ["RowStream", "DEFAULT_BUFFER_SIZE", "DEFAULT_MEMORY_BUDGET", "default_budget", "default_read_ahead",
           "window_layout"]

#: ``buffer_size`` left to youmu: windows of about 8,192 rows and at least 32 pages
#: (see :data:`youmu.order.shuffle.DEFAULT_WINDOW_PAGES`).
DEFAULT_BUFFER_SIZE: int | None = None
#: The budget of a stream given none whose windows would hold more decoded bytes
#: than this (see :func:`default_budget`): per stream, i.e. per DataLoader worker.
DEFAULT_MEMORY_BUDGET = 512 << 20


def default_budget(page_rows: np.ndarray, page_bytes: np.ndarray | None, buffer_size: int | None,
                   world_size: int, in_flight: int = WINDOWS_IN_FLIGHT) -> int | None:
    """The ``memory_budget`` a stream given none reads with: ``None`` (windows sized in
    rows alone, as always) unless the windows the settings ask for, ``in_flight`` of
    them at the files' mean decoded bytes per page (footers:
    :meth:`PageIndex.page_decoded_bytes`), would hold more than
    :data:`DEFAULT_MEMORY_BUDGET` — large rows, images above all: 8,192 rows of 300 KB
    images are 2.4 GB a window. Then the budget is :data:`DEFAULT_MEMORY_BUDGET`.
    Text and token rows (under about 21 KB a row at the default ``buffer_size``) never
    reach it, so their windows, and their streams, are what they were.

    >>> rows = np.full(1000, 100)
    >>> default_budget(rows, np.full(1000, 1 << 20), None, 1) is None  # 10 KB rows
    True
    >>> default_budget(rows, np.full(1000, 30 << 20), None, 1) == DEFAULT_MEMORY_BUDGET  # 300 KB rows
    True
    """
    if page_bytes is None or len(page_bytes) == 0:
        return None
    wanted = window_pages_for(page_rows, buffer_size, world_size)
    return DEFAULT_MEMORY_BUDGET if _over_default_budget(wanted, page_bytes, in_flight) else None


def _over_default_budget(window_pages: int, page_bytes: np.ndarray | None, in_flight: int) -> bool:
    """Whether ``in_flight`` windows of ``window_pages`` pages of the mean decoded size
    hold more than :data:`DEFAULT_MEMORY_BUDGET` (see :func:`default_budget`)."""
    if page_bytes is None or len(page_bytes) == 0:
        return False
    return in_flight * window_pages * float(np.mean(page_bytes)) > DEFAULT_MEMORY_BUDGET


def default_read_ahead(index: object, window_pages: int) -> int:
    """Windows a stream reads ahead of the one being consumed by default: what the
    files' storage suggests (:meth:`youmu.PageIndex.suggested_read_ahead`) — 1 for
    local files, which keeps the disk and the decoder busy; for objects in a store
    enough windows that their page requests fill the I/O runtime's ``max_inflight``
    slots (``⌈max_inflight / window_pages⌉``, between 4 and 8: with 20–50 ms to a first
    byte a single window ahead leaves the store idle between windows; see
    ``benches/RESULTS.md``). An index that suggests nothing reads 1 ahead.

    >>> class Store:
    ...     def suggested_read_ahead(self, window_pages): return 4
    >>> default_read_ahead(Store(), window_pages=32), default_read_ahead(object(), window_pages=32)
    (4, 1)
    """
    suggest = getattr(index, "suggested_read_ahead", None)
    return int(suggest(window_pages)) if callable(suggest) else 1


def window_layout(index: object, buffer_size: int | None, world_size: int, *, memory_budget: int | None = None,
                  read_ahead: int | None = None, page_slices: int = 1, checked: bool = False) -> tuple[int, int]:
    """``(window pages, windows read ahead)`` of a sharded stream over ``index``.
    What :class:`~youmu.torch.YoumuDataset` and :mod:`youmu.ray`'s source loaders read
    with, so both read the same windows.

    The window size shapes the shuffle, so it is a pure function of the files,
    ``buffer_size``, the world size, ``page_slices`` and ``memory_budget`` alone —
    never of where the files are or how they are read: with a budget, windows are
    sized so :data:`~youmu.order.shuffle.WINDOWS_IN_FLIGHT` of them (plus ``page_slices - 1``
    while a window is assembled) fit, whatever ``read_ahead``, the storage or
    ``set_io_options(max_inflight=...)``. Only the read-ahead adapts: ``read_ahead``
    (default :func:`default_read_ahead`) goes down to what the budget leaves besides
    the window consumed and those being assembled. A budget too small for the windows
    the settings ask for is said (a :class:`~youmu.errors.YoumuWarning`), not hidden.

    The budget is in bytes (the pages' decoded sizes from the footers,
    :meth:`PageIndex.page_decoded_bytes`), so image rows make windows of fewer pages
    than text rows. Where the largest page alone is over what the budget allows (a
    writer that put a row group of 25 images of 1 MB into one page), windows are
    single pages read one at a time with nothing ahead (``read_ahead`` 0): the peak is
    then about that one page, not a multiple, and the shuffle draws from one page per
    window (``docs/concepts/memory.md`` on ``page_slices``).

    Without ``memory_budget``, large rows get one (:func:`default_budget`), and a
    :class:`~youmu.errors.YoumuWarning` says so with the window size it gives: a
    loader is safe by default, and a budget that changes the windows is never silent.
    Passing ``memory_budget`` (any value) decides instead.

    ``buffer_size``, ``memory_budget`` and ``read_ahead`` are checked here
    (:func:`youmu.order.shuffle.window_args`) unless ``checked`` says a
    :class:`~youmu.streams.spec.StreamSpec` did (its :meth:`~youmu.streams.spec.StreamSpec.layout`).

    >>> import numpy as np
    >>> class Index:
    ...     def page_num_rows(self): return np.full(100, 50)
    ...     def page_decoded_bytes(self): return np.full(100, 25 << 20)
    >>> window_layout(Index(), buffer_size=500, world_size=2, memory_budget=1 << 40)
    (10, 1)
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     window_layout(Index(), buffer_size=500, world_size=2, memory_budget=64 << 20)
    (1, 0)
    >>> str(caught[0].message).split(" (")[0]
    'memory_budget=67108864 holds windows of 1 pages, not the 10 the settings ask for'
    """
    if not checked:
        window_args(buffer_size, memory_budget, read_ahead)
    page_rows = index.page_num_rows()  # type: ignore[attr-defined]
    in_flight = WINDOWS_IN_FLIGHT + page_slices - 1
    sizes = getattr(index, "page_decoded_bytes", None)
    page_bytes = sizes() if callable(sizes) else None
    # the windows the settings ask for, before any budget
    asked = window_pages_for(page_rows, buffer_size, world_size, checked=True)
    derived = memory_budget is None and _over_default_budget(asked, page_bytes, in_flight)
    if derived:
        memory_budget = DEFAULT_MEMORY_BUDGET
    wp = window_pages_for(page_rows, buffer_size, world_size, page_bytes=page_bytes, memory_budget=memory_budget,
                          in_flight=in_flight, checked=True)
    ahead = read_ahead if read_ahead is not None else default_read_ahead(index, wp)
    if memory_budget is not None and page_bytes is not None and len(page_bytes):
        biggest = max(int(np.max(page_bytes)), 1)
        if derived and wp < asked:
            _warn_derived(wp, asked, int(np.sum(page_bytes)) // max(int(np.sum(page_rows)), 1))
        elif wp < asked:
            _warn_shrunk(memory_budget, wp, asked, biggest * asked * in_flight)
        # windows of `wp` of the largest pages: how many fit besides the one consumed
        # and the `page_slices` being assembled
        ahead = min(ahead, max(0, int(memory_budget) // (wp * biggest) - 1 - page_slices))
    return wp, ahead


def _warn_derived(got: int, asked: int, row_bytes: int) -> None:
    """No budget given, rows large enough that the default windows would not fit one:
    youmu's default budget is used, and said."""
    warnings.warn(
        f"no memory_budget given and rows of {row_bytes:,} decoded bytes on average (from the footers): "
        f"{WINDOWS_IN_FLIGHT} windows of the {asked} pages the settings ask for would not fit in memory_budget="
        f"{DEFAULT_MEMORY_BUDGET} (youmu.streams.rowstream.DEFAULT_MEMORY_BUDGET), which this stream now reads "
        f"with: windows "
        f"of {got} pages; pass memory_budget= to choose (docs/concepts/memory.md)",
        YoumuWarning,
        stacklevel=5,  # the line that built the dataset: _warn_derived, window_layout, layout, __init__
    )


def _warn_shrunk(memory_budget: int, got: int, asked: int, needs: int) -> None:
    """A budget that cannot hold the windows the settings ask for shrinks the shuffle:
    said once per layout, with what the shuffle-quality rule needs."""
    rule = (f"windows of fewer than {DEFAULT_WINDOW_PAGES} pages shuffle less well than a full row shuffle"
            if got < DEFAULT_WINDOW_PAGES else
            f"still at least the {DEFAULT_WINDOW_PAGES} pages the shuffle-quality rule needs")
    warnings.warn(
        f"memory_budget={memory_budget} holds windows of {got} pages, not the {asked} the settings ask for "
        f"({WINDOWS_IN_FLIGHT} windows of the largest pages in flight); {rule} (docs/concepts/shuffle.md: "
        f"\"Page shuffle and pages per window\"); windows of {asked} pages need memory_budget >= {needs}",
        YoumuWarning,
        stacklevel=5,  # the line that built the dataset: _warn_shrunk, window_layout, layout, __init__
    )


class RowStream:
    """The rows of one shard of one epoch, in stream order.

    Args:
        index: a :class:`youmu.PageIndex` (or any object with the same methods).
        shuffle: ``"page"`` (default), ``"row"``, ``"local"`` or ``"none"``.
        buffer_size: rows shuffled together (page/local) or read per chunk (row);
            default: about 8,192 rows and at least 32 pages per window.
        seed, epoch: the shuffle key.
        rank, world_size, worker, num_workers: which slice of the epoch this stream
            delivers (see :mod:`youmu.order.shuffle`).
        cap: deliver at most this many rows.
        drop_last: every rank of ``world_size`` delivers exactly ``⌊rows / world_size⌋``
            rows (see :class:`youmu.order.shuffle.ShardPlan`).
        memory_budget: bytes of decoded data the stream may hold at once (windows in
            flight, row mode's page cache); windows shrink to fit (see
            :func:`window_layout`: sized for
            :data:`~youmu.order.shuffle.WINDOWS_IN_FLIGHT` windows whatever the read-ahead,
            which goes down to what is left). Default: about ``read_ahead + 2``
            windows of ``buffer_size`` rows, whatever their size.
        read_ahead: windows read ahead of the one being consumed (default
            :func:`default_read_ahead`: 1 for local files, more for object stores;
            fewer where ``memory_budget`` binds). 0: each window is read when it is
            consumed, and its shuffled rows are taken a slice at a time, so the peak
            is about one window (the mode a page over the budget is read in).
        page_slices: page mode: cut every page into this many row slices and shuffle
            those, so a window draws from that many times more pages (at that many
            times the page reads; see :mod:`youmu.order.shuffle`). Default 1.
        plan: the shard's ready :class:`~youmu.order.shuffle.ShardPlan` (a resumed epoch,
            :mod:`youmu.order.resume`) instead of the one the arguments above describe.

    Row mode keeps an LRU of decoded pages (about one window's worth): rows that land
    on a page read for an earlier chunk cost no I/O.
    """

    def __init__(
        self,
        index,
        shuffle: str = "page",
        buffer_size: int | None = DEFAULT_BUFFER_SIZE,
        seed: int = 0,
        epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        cap: int | None = None,
        page_rows: np.ndarray | None = None,
        memory_budget: int | None = None,
        window_pages: int | None = None,
        drop_last: bool = False,
        read_ahead: int | None = None,
        page_slices: int = 1,
        plan: ShardPlan | None = None,
    ) -> None:
        if not callable(getattr(index, "page_num_rows", None)):
            raise ArgumentTypeError(f"index must be a youmu.PageIndex, got {type(index).__name__}")
        shuffle, page_slices = shuffle_args(shuffle, page_slices)
        buffer_size, memory_budget, read_ahead = window_args(buffer_size, memory_budget, read_ahead)
        shard = Shard(rank, world_size, worker, num_workers)
        page_rows = index.page_num_rows() if page_rows is None else page_rows
        if window_pages is None:
            window_pages, read_ahead = window_layout(
                index, buffer_size, world_size, memory_budget=memory_budget, read_ahead=read_ahead,
                page_slices=page_slices, checked=True,
            )
        else:
            int_arg("window_pages", window_pages, minimum=1)
        # a ready plan: an epoch resumed on another topology (youmu.order.resume)
        if plan is None:
            plan = ShardPlan._from_checked(
                page_rows, shuffle, shard, window_pages=window_pages,
                # row mode's chunks: one touches ~window_pages pages (the same memory as a
                # window); page windows ignore it
                window_rows=row_chunk_rows(window_pages),
                seed=seed, epoch=epoch, cap=cap, balanced=drop_last, page_slices=page_slices,
            )
        self._setup(index, page_rows, window_pages, read_ahead, plan)

    @classmethod
    def _from_checked(cls, index: object, page_rows: np.ndarray, window_pages: int, read_ahead: int,
                      plan: ShardPlan) -> RowStream:
        """The stream of ``plan`` over settings checked and laid out already (a
        :class:`youmu.streams.spec.StreamLayout`'s): nothing checked again."""
        stream = cls.__new__(cls)
        stream._setup(index, page_rows, window_pages, read_ahead, plan)
        return stream

    def _setup(self, index, page_rows: np.ndarray, window_pages: int, read_ahead: int | None,
               plan: ShardPlan) -> None:
        self.index = index
        self.page_rows = page_rows
        self.window_pages = window_pages
        self.read_ahead = default_read_ahead(index, window_pages) if read_ahead is None else int(read_ahead)
        self.plan = plan
        self.schema: pa.Schema = index.schema
        # row mode: decoded pages by page id, least recently used first
        self._cache: OrderedDict[int, pa.RecordBatch] = OrderedDict()
        self.cache_pages = self.window_pages
        self.pages_read = 0  # row mode: pages read from the files (cache misses)

    def __len__(self) -> int:
        return self.plan.total_rows

    # -- reading: one loop, a fetch step and a delivery step ---------------------------
    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        # files may differ in nullability; the index's schema is the looser one
        if batch.schema.equals(self.schema):
            return batch
        return pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)

    def _fetch(self, i: int, alone: bool, page_bytes: np.ndarray | None) -> _Read | _RowChunk:
        """Unit ``i``'s read, begun: ``result()`` is its batches in the index's schema.
        A row-mode chunk is its rows gathered from pages (cached or read); a page window
        is its pages, shuffled by the Rust threads — or, read ``alone``, in file order
        (the delivery step takes its rows in the shuffled order)."""
        plan = self.plan
        if plan.mode.permutes_rows:
            return _RowChunk(self, i)
        pages = plan.pages_of(i)
        if not alone:
            return _Read(self, self.index.prefetch_window(pages, plan.row_order(i)))
        if page_bytes is not None and int(np.sum(page_bytes[pages])) >= BIG_WINDOW_BYTES:
            release_big_buffers()
        return _Read(self, self.index.prefetch_window(pages, None))

    def iter_tables(self, start: int = 0) -> Iterator[pa.Table]:
        """Yield tables of consecutive stream rows, beginning at position ``start``.

        The next ``read_ahead`` windows are read, decoded, concatenated and shuffled by
        Rust threads while the current one is consumed. At ``read_ahead`` 0 (page and
        local modes) each window is read when it is consumed and its shuffled rows are
        taken a slice at a time: the same rows in the same order, with about one window
        (plus a slice) held."""
        plan = self.plan
        int_arg("start", start, minimum=0)
        if start >= plan.total_rows:
            return
        i, offset = plan.window_at(start)
        remaining = plan.total_rows - start
        n = len(plan.window_ids)
        alone = self.read_ahead == 0 and not plan.mode.permutes_rows
        page_bytes = None
        if alone:
            sizes = getattr(self.index, "page_decoded_bytes", None)
            page_bytes = sizes() if callable(sizes) else None
        # row mode reads its chunks ahead even at read_ahead 0 (a chunk is its memory unit)
        depth = 0 if alone else max(self.read_ahead, 1)
        pending = deque(self._fetch(j, alone, page_bytes) for j in range(i, min(i + depth, n)))
        submitted = i + len(pending)
        while remaining > 0 and i < n:
            # the read is not held past its result (its batches are dropped with the table)
            batches = (pending.popleft() if pending else self._fetch(i, alone, page_bytes)).result()
            if depth and submitted < n:
                pending.append(self._fetch(submitted, alone, page_bytes))
                submitted += 1
            table = pa.Table.from_batches(batches, schema=self.schema)
            del batches
            # the window's part of this shard: `skip` rows into it (a window shared by two
            # ranks under drop_last), `offset` more where a resume starts
            begin = int(plan.window_skip[i]) + offset
            take = min(remaining, int(plan.window_rows[i]) - offset)
            remaining -= yield from self._deliver(table, begin, take, alone, plan.row_order(i) if alone else None)
            offset = 0
            del table  # not held while the next window is awaited
            i += 1

    #: read_ahead 0: a window's shuffled rows are taken about this fraction at a time ...
    ALONE_SLICES = 8
    #: ... and at most about this many bytes at a time (image rows: the copy of the
    #: slice the consumer still holds while the next page is decoded stays small)
    ALONE_SLICE_BYTES = 1 << 20

    def _deliver(self, table: pa.Table, begin: int, take: int, sliced: bool,
                 order: np.ndarray | None) -> Generator[pa.Table, None, int]:
        """Yield rows ``begin:begin + take`` of a unit's ``table``; return how many. A
        table read in stream order goes whole; one read alone (``sliced``) goes in
        slices of its shuffled ``order`` (``None``: file order), to bound the memory."""
        if not sliced:
            if begin or table.num_rows > take:
                table = table.slice(begin, take)
            yield table
            return int(table.num_rows)
        rows = order[begin:begin + take] if order is not None else np.arange(begin, begin + take)
        row_bytes = table.nbytes // max(table.num_rows, 1)
        step = max(1, min(-(-len(rows) // self.ALONE_SLICES), self.ALONE_SLICE_BYTES // max(row_bytes, 1)))
        for lo in range(0, len(rows), step):
            yield table.take(pa.array(rows[lo:lo + step]))
        return len(rows)

    def iter_batches(self, batch_size: int, start: int = 0) -> Iterator[pa.RecordBatch]:
        """Yield record batches of exactly ``batch_size`` rows (the last may be short)."""
        int_arg("batch_size", batch_size, minimum=1)
        carry: list[pa.RecordBatch] = []
        have = 0
        for table in self.iter_tables(start):
            for b in table.to_batches():
                carry.append(b)
                have += b.num_rows
                while have >= batch_size:
                    t = pa.Table.from_batches(carry, schema=self.schema)
                    yield t.slice(0, batch_size).combine_chunks().to_batches()[0]
                    rest = t.slice(batch_size)
                    carry = rest.to_batches()
                    have = rest.num_rows
        if have:
            yield pa.Table.from_batches(carry, schema=self.schema).combine_chunks().to_batches()[0]


#: a window read alone of at least this many decoded bytes switches on
#: :func:`release_big_buffers`
BIG_WINDOW_BYTES = 8 << 20
_RELEASED = False


def release_big_buffers() -> None:
    """Make glibc serve buffers of 4 MiB and more as their own mappings, returned to
    the OS when freed (once per process; not where ``YOUMU_MMAP_THRESHOLD`` chose
    already, see ``rust/runtime/mod.rs``).

    glibc raises its mmap threshold each time a large mapped block is freed (up to
    32 MiB), so after the first page of 25 images of 1 MB its page-sized buffers (the
    page's bytes, the decompressed page, the decoded values) come from the heaps of
    the decoding threads and stay resident once freed: measured, a stream of such
    pages then peaked at up to 5.7× a page instead of 2.45× (``benches/bench_page_peak.py``).
    Only streams whose windows are that large turn it on; buffers under 4 MiB (text
    pages) keep the heap, which is faster for them.
    """
    global _RELEASED
    if _RELEASED:
        return
    _RELEASED = True
    if os.environ.get("YOUMU_MMAP_THRESHOLD") or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD (malloc.h); a no-op where it is not glibc
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to tune
        pass


class _Read:
    """A read of the files under way; ``result()`` is its batches in the stream's schema."""

    def __init__(self, stream: RowStream, pending) -> None:
        self.stream, self.pending = stream, pending

    def result(self) -> list[pa.RecordBatch]:
        return [self.stream._conform(b) for b in self.pending.result()]


class _RowChunk:
    """A row-mode chunk being read: its pages that are cached are pinned now, the
    others are read by Rust threads; ``result()`` caches them and assembles the rows."""

    def __init__(self, stream: RowStream, i: int) -> None:
        self.stream = stream
        rows = stream.plan.rows_of(i)
        page_of_row, offset = stream.index.locate_rows(rows)
        self.pages = np.unique(page_of_row)
        cache = stream._cache
        self.hits = {int(p): cache[int(p)] for p in self.pages if int(p) in cache}
        self.missing = np.array([p for p in self.pages if int(p) not in self.hits], dtype=np.int64)
        self.pending = _Read(stream, stream.index.prefetch(self.missing)) if len(self.missing) else None
        starts = np.concatenate([[0], np.cumsum(stream.page_rows[self.pages])])
        self.take = starts[np.searchsorted(self.pages, page_of_row)] + offset

    def result(self) -> list[pa.RecordBatch]:
        s = self.stream
        got = dict(self.hits)
        if self.pending is not None:
            read = self.pending.result()
            s.pages_read += len(read)
            got.update(zip((int(p) for p in self.missing), read))
        cache = s._cache
        for p in self.pages:
            cache[int(p)] = got[int(p)]
            cache.move_to_end(int(p))
        while len(cache) > s.cache_pages:
            cache.popitem(last=False)
        table = pa.Table.from_batches([got[int(p)] for p in self.pages], schema=s.schema)
        return table.take(pa.array(self.take)).combine_chunks().to_batches()
