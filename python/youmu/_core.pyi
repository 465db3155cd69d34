"""Type stubs for youmu's native module (``youmu._core``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, final

from typing_extensions import Self

__all__ = [
    "PageIndex",
    "PendingPages",
    "Permutation",
    "FlatMap",
    "MixtureMap",
    "_permutation_from_key",
    "io_stats",
    "set_num_threads",
    "num_threads",
    "set_fast_decode",
    "column_pages",
    "set_io_options",
    "io_options",
    "redact",
    "is_secret_key",
    "listing_prefix",
    "listed_data",
]

import numpy as np
import numpy.typing as npt
import pyarrow as pa

_Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]
# Ids: ints (not bools), as a list, tuple or range, or a 1-D numpy array of any integer
# dtype (strided and reversed views included). Floats, bools, bytes and str are refused
# with ArgumentTypeError (a TypeError).
_Ids = Sequence[int] | npt.NDArray[np.integer] | range
_Int96Unit = Literal["s", "ms", "us", "ns"]
_StorageOptions = Mapping[str, str | bool | int | float]

@final
class PageIndex:
    """Global page index over Parquet files (file → row group → page).

    ``paths``: a local file, directory or glob, a ``file://`` URL, an object-store URL
    or prefix (``s3://bucket/prefix/``, ``gs://``, ``az://``/``abfs://``,
    ``http(s)://``), or a list of these. Discovery rules (regular files only; names
    starting with ``.`` or ``_`` skipped; ``*.parquet``/``*.parq``/``*.pq`` in any case
    when walking, listing or globbing; sorted) are in ``rust/paths.rs``.

    ``storage_options``: object_store configuration keys (``endpoint``, ``region``,
    ``access_key_id``, ``secret_access_key``, ``timeout``, ...), applied over the
    ``AWS_*``/``GOOGLE_*``/``AZURE_*`` environment; an ``http://`` endpoint allows plain
    HTTP. They are kept for pickling into workers, never written by ``save`` (which, like
    ``load``, also takes the URL of an object: an index kept in the store). How reads
    are made (requests in flight, coalescing, retries, timeouts, open files) is set
    process-wide with :func:`set_io_options`.

    ``coerce_int96_timestamp_unit``: the unit INT96 timestamps are read in (as pyarrow's
    option of that name; ``None``: as each file's Arrow schema says, else nanoseconds);
    a value beyond the unit's range is a ``ValueOverflowError``, not a wrapped value.
    ``progress(done, total)`` is called as files are indexed; an exception it raises
    stops the build and is raised as it was.

    ``save`` writes index format 3 (checksummed; an older format is a
    ``StaleIndexError`` telling to rebuild), atomically for local paths.
    """

    def __new__(
        cls,
        paths: _Path | Iterable[_Path],
        columns: Sequence[str] | None = None,
        progress: Callable[[int, int], object] | None = None,
        coerce_int96_timestamp_unit: _Int96Unit | None = None,
        storage_options: _StorageOptions | None = None,
    ) -> Self: ...
    @staticmethod
    def load(path: _Path, storage_options: _StorageOptions | None = None) -> PageIndex: ...
    def save(self, path: _Path) -> None: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(
        data: bytes | bytearray, storage_options: _StorageOptions | None = None, verify: bool | None = None
    ) -> PageIndex: ...
    @staticmethod
    def concat(parts: Sequence[PageIndex]) -> PageIndex: ...
    def __len__(self) -> int: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def num_files(self) -> int: ...
    @property
    def files(self) -> list[str]: ...
    @property
    def columns(self) -> list[str]: ...
    @property
    def coerce_int96_timestamp_unit(self) -> _Int96Unit | None: ...
    @property
    def is_remote(self) -> bool: ...
    @property
    def skipped(self) -> list[tuple[str, str]]: ...
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def table_bytes(self) -> int: ...
    def page_info(self, i: int) -> dict[str, int | str]: ...
    def page_num_rows(self) -> npt.NDArray[np.int64]: ...
    def page_byte_sizes(self) -> npt.NDArray[np.int64]: ...
    def page_decoded_bytes(self) -> npt.NDArray[np.int64]: ...
    def file_page_starts(self) -> npt.NDArray[np.int64]: ...
    def locate_rows(self, rows: _Ids) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def read_page(self, i: int) -> pa.RecordBatch: ...
    def read_pages(self, ids: _Ids) -> list[pa.RecordBatch]: ...
    def prefetch(self, ids: _Ids) -> PendingPages: ...
    def read_rows(self, rows: _Ids) -> pa.RecordBatch: ...
    def read_window(self, ids: _Ids, take: _Ids | None = None) -> pa.RecordBatch: ...
    def suggested_read_ahead(self, window_pages: int) -> int: ...
    def prefetch_window(self, ids: _Ids, take: _Ids | None = None) -> PendingPages: ...
    def file_info(self, i: int) -> dict[str, int | str | None]: ...
    def column_chunks(self, i: int) -> list[dict[str, int | str | bool | list[str]]]: ...

@final
class PendingPages:
    """Pages being read in the background by youmu's thread pool."""

    def result(self) -> list[pa.RecordBatch]: ...
    def done(self) -> bool: ...

@final
class Permutation:
    """Keyed pseudo-random permutation of ``range(n)`` in O(1) memory."""

    seed: int
    epoch: int
    key: int
    def __new__(
        cls, n: int, seed: int | None = None, epoch: int | None = None, purpose: str | int | None = None
    ) -> Self: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> int: ...
    def inverse(self, x: int) -> int: ...
    def take(self, idx: _Ids) -> npt.NDArray[np.int64]: ...
    def inverse_take(self, idx: _Ids) -> npt.NDArray[np.int64]: ...
    def range(self, start: int | None = None, stop: int | None = None) -> npt.NDArray[np.int64]: ...

@final
class FlatMap:
    """Keyed permutation of the concatenation of children of the given lengths (the
    index math of ``youmu.FlatMixture``)."""

    seed: int
    shuffle: bool
    lengths: list[int]
    offsets: npt.NDArray[np.int64]
    def __new__(cls, lengths: Sequence[int], seed: int | None = None, shuffle: bool | None = None) -> Self: ...
    def __len__(self) -> int: ...
    def locate(self, i: int) -> tuple[int, int]: ...
    def locate_many(self, idx: _Ids) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def position(self, child: int, local: int) -> int: ...

@final
class MixtureMap:
    """Weighted block mixture with an exact allocation (the index math of
    ``youmu.MixtureDataset``): index -> (child, index in child, pass)."""

    names: list[str]
    lengths: list[int]
    block_size: int
    seed: int
    policy: str
    chunks: list[int] | None
    stage_bounds: list[tuple[int, int | None]]
    def __new__(
        cls,
        names: Sequence[str],
        lengths: Sequence[int],
        stages: Sequence[tuple[int, Sequence[float]]],
        block_size: int | None = None,
        seed: int | None = None,
        policy: str = "restart",
        length: int | None = None,
        chunks: Sequence[int] | None = None,
    ) -> Self: ...
    def __len__(self) -> int: ...
    def locate(self, i: int) -> tuple[int, int, int]: ...
    def locate_many(
        self, idx: _Ids
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def samples_many(self, idx: _Ids) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def counts(self, i: int) -> list[int]: ...
    def position(self, child: int, sample: int) -> int | None: ...
    def block_counts(self, stage: int, block: int) -> list[int]: ...
    def stage_counts(self, stage: int, k: int) -> list[int]: ...
    def stage_of(self, i: int) -> int: ...
    def window_bounds(self) -> list[list[float]]: ...

def _permutation_from_key(n: int, seed: int, epoch: int, key: int) -> Permutation: ...
def io_stats() -> dict[str, int]: ...
def set_num_threads(n: int) -> None: ...
def column_pages(path: _Path, storage_options: _StorageOptions | None = None) -> list[dict[str, object]]:
    """What ``youmu inspect`` reports, one pass per file: for a path, directory, glob,
    object URL or prefix (found as ``PageIndex`` finds its paths), one dict per file or
    object with ``path`` and either ``error``, ``skipped`` (why discovery passed it over),
    or ``size``, ``etag``, ``version``, ``num_rows``, ``num_row_groups``, ``num_columns``
    (leaf columns), ``created_by``, ``requests`` (GETs sent for it) and ``columns``: per
    top-level column ``name``, ``codecs``, ``encodings``, ``chunks_with_offset_index``
    and either its pages as the page column of an index (``num_pages``,
    ``page_num_rows``, ``page_byte_sizes``, ``row_groups_with_offset_index``,
    ``row_groups_header_scanned``, ``row_groups_merged_pages``,
    ``row_groups_page_granular``) or ``error``."""

def set_fast_decode(on: bool) -> None: ...
def set_io_options(
    *,
    max_inflight: int | None = None,
    coalesce_gap: int | None = None,
    max_open_files: int | None = None,
    tail_bytes: int | None = None,
    retries: int | None = None,
    retry_timeout: float | None = None,
    request_timeout: float | None = None,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    io_threads: int | None = None,
) -> None:
    """Process-wide I/O settings (keywords left out keep their value; none changes what
    is read, so saved indexes stay valid). Defaults, or ``YOUMU_MAX_INFLIGHT``,
    ``YOUMU_COALESCE_GAP``, ``YOUMU_MAX_OPEN_FILES``, ``YOUMU_RETRIES`` at first use:

    - ``max_inflight`` (64): object-store requests in flight, all indexes together.
    - ``coalesce_gap`` (65536): ranges of one object at most this many bytes apart are
      fetched with one GET (0: only touching ranges).
    - ``max_open_files`` (a quarter of ``RLIMIT_NOFILE``, 16..16384): local file handles
      kept open (least recently used closed first).
    - ``tail_bytes`` (262144): bytes of an object's tail read by an index build's first GET.
    - ``retries`` (10), ``retry_timeout`` (180 s): transient errors (5xx, throttling,
      refused, dropped or truncated connections) are retried with exponential backoff
      and jitter stretched so the retries span ``retry_timeout``: a store restarting
      for seconds or minutes is waited out. A request that got no answer in time is
      retried once, and a store that never answered this process and refuses
      connections (a wrong endpoint) once.
    - ``request_timeout`` (30 s, connect to last byte), ``connect_timeout`` (5 s),
      ``read_timeout`` (10 s: no byte, the first or the next, for this long): per
      request; the ``timeout``/``connect_timeout``/``read_timeout`` storage options
      override them per index. A hung endpoint (it accepts connections, never
      answers) fails with ``StorageTimeoutError`` within about ``connect_timeout + 2 *
      read_timeout`` (20-25 s by default).
    - ``io_threads`` (cores, 2..8): threads of the I/O runtime (they only move bytes;
      read when a process first touches an object store).

    Ranges (integers, not bools; the ``YOUMU_*`` variables take the same ones, and a
    variable that is not an integer in range is an ``InvalidArgumentError`` naming it):
    ``max_inflight`` 1..16384, ``coalesce_gap`` 0..2**30, ``max_open_files`` 1..the soft
    ``RLIMIT_NOFILE``, ``tail_bytes`` 8..2**30, ``retries`` 0..100, ``io_threads``
    1..256; timeouts are seconds above 0 and at most a week. Anything else is an
    ``ArgumentTypeError`` or ``InvalidArgumentError`` naming the keyword.
    """

def io_options() -> dict[str, int | float]: ...
def redact(text: str) -> str:
    """``text`` with credentials blanked out: user info in URLs, signature and token
    query parameters (``sig=``, ``X-Amz-Signature=``...), and secret ``storage_options``
    values this process has seen. Every youmu error message goes through it.

    >>> from youmu._core import redact
    >>> redact("http://admin:hunter2@host/x.parquet?sv=1&sig=abc")
    'http://***@host/x.parquet?sv=***&sig=***'
    """
def is_secret_key(key: str) -> bool:
    """Whether a ``storage_options`` key names a secret (``secret_access_key``,
    ``aws_session_token``, ``password``...): its value is never shown.

    >>> from youmu._core import is_secret_key
    >>> is_secret_key("aws_secret_access_key"), is_secret_key("endpoint")
    (True, False)
    """
def num_threads() -> int: ...
def listing_prefix(key: str) -> str | None:
    """How a listing answers ``key`` (the part of a URL inside its store or repository):
    ``None`` when it names one object and nothing is listed, else the prefix to list."""
def listed_data(key: str, listed: list[str]) -> list[str]:
    """The keys among ``listed`` that ``key`` takes by the rules of ``PageIndex`` paths, sorted."""
