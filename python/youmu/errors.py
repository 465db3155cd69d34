"""youmu's exception hierarchy: every error youmu raises is a :class:`YoumuError`.

Each kind also inherits the builtin exception users would catch for it
(``IndexError`` for out-of-range ids, ``ValueError`` for bad arguments and states,
``TypeError`` for arguments of the wrong type, ``MemoryError`` for requests that
cannot fit, ``OverflowError`` for values that do not fit their type, ``OSError`` for
I/O, ``RuntimeError`` for a loader that fails while running), so ``except ValueError`` keeps working and
``except youmu.YoumuError`` catches everything youmu raises. Messages name the
argument, file, row group, page or state field at fault.

The native core maps its errors onto these classes in one place (``rust/py/errors.rs``);
the Python layers raise them directly, usually through :mod:`youmu._internal.args` (argument
checks) and :mod:`youmu.state.contract` (state checks).

Example:
    >>> import youmu
    >>> try:
    ...     youmu.PageIndex("missing.parquet")
    ... except youmu.YoumuError as e:
    ...     print(type(e).__name__)
    YoumuIOError
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

__all__ = [
    "YoumuError",
    "CorruptFileError",
    "RowError",
    "ImageError",
    "TextError",
    "UnsupportedError",
    "SchemaMismatchError",
    "ColumnNotFoundError",
    "AmbiguousColumnError",
    "PageOutOfRangeError",
    "StaleIndexError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "StateError",
    "UnknownNameError",
    "RequestTooLargeError",
    "ValueOverflowError",
    "PlanError",
    "CapacityError",
    "LoaderError",
    "ChannelError",
    "RankFailedError",
    "PeerClosedError",
    "DataStallError",
    "PrefetchError",
    "ProtocolError",
    "LoaderUnavailableError",
    "YoumuIOError",
    "StorageError",
    "ObjectNotFoundError",
    "BucketNotFoundError",
    "StorageAuthError",
    "StorageTimeoutError",
    "RetriesExhaustedError",
    "YoumuWarning",
]


class YoumuError(Exception):
    """Base class of every error youmu raises. Its message never shows a credential
    (:func:`youmu._internal.redaction.redact`: user info and signatures in URLs, secret option
    values), whichever layer built it."""

    def __str__(self) -> str:
        return _redact(super().__str__())


def _redact(text: str) -> str:
    from youmu._internal.redaction import redact  # lazily: the native core maps its errors onto these classes

    return redact(text)


class YoumuWarning(UserWarning):
    """Something works but is likely not what the user wants (e.g. a rank that will
    receive no data)."""


# -- files and the page index ------------------------------------------------------------
class CorruptFileError(YoumuError):
    """A file is not valid Parquet (or not a valid youmu index file): truncated,
    bit-flipped or inconsistent."""


class UnsupportedError(YoumuError):
    """A valid file uses a feature this build cannot read (encryption, LZO, ...)."""


_R = TypeVar("_R", bound="RowError")


class RowError(YoumuError, ValueError):
    """A row's value cannot be turned into a sample. ``reason`` says why; ``column``
    says where in the row; ``batch_row`` is the row's index in the batch a batched
    transform was given (:mod:`youmu.streams.batched`); ``file``, ``row`` (row within that
    Parquet file) and ``position`` (in the shard's stream) are filled in by the dataset
    that read the row (:meth:`located`). ``skip`` marks an error a transform's
    ``on_error="skip"`` policy wants skipped rather than raised. Subclasses say what
    kind of value it was (:class:`ImageError`, :class:`TextError`).

    The fields survive pickling, and a PyTorch ``DataLoader`` worker too: torch
    re-raises a worker's error as ``type(error)(formatted_traceback)``, from the
    message alone, so an error raised in a worker (:meth:`for_worker`) ends its
    message with one line of its fields that the rebuilt error reads back (the
    worker's traceback is kept as ``worker_traceback``).

    >>> e = TextError("text is null", column="text")
    >>> str(e.located(file="part-0.parquet", row=7, position=3))
    "text is null (column 'text', file part-0.parquet, row 7, stream position 3)"
    >>> back = TextError("Caught TextError in DataLoader worker process 0. ..." + str(e.for_worker()))
    >>> (back.column, back.reason)
    ('text', 'text is null')
    """

    #: the keyword fields of this kind, in the order its message names them
    _FIELDS: tuple[str, ...] = ("column", "batch_row", "file", "row", "position", "skip")
    column: str | None
    batch_row: int | None
    file: str | None
    row: int | None
    position: int | None
    skip: bool
    #: the traceback text a DataLoader rebuilt this error from (None if not rebuilt)
    worker_traceback: str | None = None

    def __init__(self, reason: str, **fields) -> None:
        unknown = set(fields) - set(self._FIELDS)
        if unknown:
            raise ArgumentTypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        carried = _carried_fields(self._fields_line(), reason) if not fields else None
        if carried is not None:
            worker_traceback, (reason, fields) = reason, carried
            fields = {k: v for k, v in fields.items() if k in self._FIELDS}
        super().__init__(reason)
        self.reason = reason
        for k in self._FIELDS:
            setattr(self, k, bool(fields.get(k)) if k == "skip" else fields.get(k))
        self._carry = False
        if carried is not None:
            self.worker_traceback = worker_traceback
            header = worker_traceback.split("\n", 1)[0]
            if hasattr(self, "add_note"):  # Python 3.11+: shown under the error
                self.add_note(f"{header} (the worker's traceback is in .worker_traceback)")

    @classmethod
    def _fields_line(cls) -> str:
        return f"youmu.{cls.__name__} fields: "

    def _fields(self) -> dict:
        return {k: getattr(self, k) for k in self._FIELDS}

    def __reduce__(self):  # keyword fields survive pickling (Ray, multiprocessing queues)
        return (_rebuild_row_error, (type(self), self.reason, self._fields()))

    def located(self: _R, **where) -> _R:
        """A copy with ``file``/``row``/``position`` (or any other field) filled in."""
        return type(self)(self.reason, **{**self._fields(), **where})

    def for_worker(self: _R) -> _R:
        """A copy whose message carries its fields for a DataLoader to rebuild it from."""
        e = self.located()
        e._carry = True
        return e

    def _where(self) -> list[str]:
        """What the message names besides the column and the file position."""
        return []

    def __str__(self) -> str:
        parts = [f"column {self.column!r}"] if self.column is not None else []
        parts += self._where()
        if self.file is not None:
            parts.append(f"file {self.file}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        elif self.batch_row is not None and self.position is None:
            parts.append(f"row {self.batch_row} of the batch")
        if self.position is not None:
            parts.append(f"stream position {self.position}")
        text = self.reason + (f" ({', '.join(parts)})" if parts else "")
        if self._carry:
            text += "\n" + self._fields_line() + json.dumps({"reason": self.reason, **self._fields()})
        return _redact(text)


def _carried_fields(marker: str, message: str) -> tuple[str, dict] | None:
    """``(reason, fields)`` from the last ``marker`` line of a message (None without one)."""
    at = message.rfind("\n" + marker)
    if at < 0:
        return None
    line = message[at + 1 + len(marker):].split("\n", 1)[0]
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if not isinstance(fields, dict) or not isinstance(fields.get("reason"), str):
        return None
    return fields.pop("reason"), fields


class ImageError(RowError):
    """An image in a row cannot be used: bytes no decoder reads, a truncated file, more
    pixels than the decode limit (a decompression bomb), an absurd aspect ratio.
    ``reason`` says which; ``column``, ``image`` (index in a list of images) and
    ``path`` (the image's own name, where the row stores one) say where in the row;
    the rest is :class:`RowError`'s (fields that survive DataLoader workers included).

    >>> e = ImageError("cannot identify image file", column="image", path="a.jpg")
    >>> str(e.located(file="part-0.parquet", row=7, position=3))
    "cannot identify image file (column 'image', image 'a.jpg', file part-0.parquet, row 7, stream position 3)"
    >>> back = ImageError("Caught ImageError in DataLoader worker process 0. ..." + str(e.for_worker()))
    >>> (back.path, back.reason)
    ('a.jpg', 'cannot identify image file')
    """

    _FIELDS = ("column", "image", "path", "batch_row", "file", "row", "position", "skip")
    image: int | None
    path: str | None

    def _where(self) -> list[str]:
        if self.path:
            return [f"image {self.path!r}"]
        return [f"image #{self.image}"] if self.image is not None else []


class TextError(RowError):
    """A row's text or chat cannot be tokenized: null or non-string text, a conversation
    that is not a list of messages, a message without a role or with a role the
    template does not know, a chat template that raises, a row over ``cutoff_len``
    where that is refused. ``message`` is the index of the message at fault within
    the row's conversation; the rest is :class:`RowError`'s.

    >>> str(TextError("message has no role", column="messages", message=2, batch_row=5))
    "message has no role (column 'messages', message 2, row 5 of the batch)"
    """

    _FIELDS = ("column", "message", "batch_row", "file", "row", "position", "skip")
    message: int | None

    def _where(self) -> list[str]:
        return [f"message {self.message}"] if self.message is not None else []


def _rebuild_row_error(cls: type, reason: str, fields: dict) -> RowError:
    return cls(reason, **fields)


class SchemaMismatchError(YoumuError, ValueError):
    """Two files of one dataset disagree on the selected columns."""


class ColumnNotFoundError(YoumuError, ValueError):
    """A requested column does not exist."""


class AmbiguousColumnError(ColumnNotFoundError):
    """A requested column name matches several top-level columns of a file."""


class PageOutOfRangeError(YoumuError, IndexError):
    """A page, row or sample id outside its index."""


class StaleIndexError(YoumuError):
    """A file or object changed since it was indexed (a saved index that no longer
    matches, or a file rewritten or replaced while an index over it is in use)."""


class RequestTooLargeError(YoumuError, MemoryError):
    """A request whose result cannot fit in the memory available, refused before
    anything is allocated (like numpy's ``MemoryError`` for an oversized array)."""


class ValueOverflowError(YoumuError, OverflowError):
    """A value in a file does not fit the type it is read as (an INT96 timestamp
    beyond the range of ``coerce_int96_timestamp_unit``). The file is not corrupt."""


class YoumuIOError(YoumuError, OSError):
    """The operating system (or an object store) refused an operation on a file."""


class StorageError(YoumuIOError):
    """A request to an object store failed; the message names the URL and byte range."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """No object at a URL (or an object listed a moment ago is gone)."""


class BucketNotFoundError(StorageError, FileNotFoundError):
    """The bucket (or container) of a URL does not exist."""


class StorageAuthError(StorageError, PermissionError):
    """The store refused the credentials (missing, wrong, or without permission)."""


class StorageTimeoutError(StorageError, TimeoutError):
    """A request got no answer in time (``connect_timeout``, ``read_timeout``,
    ``request_timeout``), its one retry included: a hung endpoint fails with it within
    about ``connect_timeout + 2 * read_timeout``."""


class RetriesExhaustedError(StorageError):
    """Transient failures (5xx, throttling, refused or dropped connections) outlasted
    the retries (``retries``, spread over ``retry_timeout``)."""


# -- arguments and states ----------------------------------------------------------------
class InvalidArgumentError(YoumuError, ValueError):
    """An argument of the right type whose value cannot be meaningful (out of range,
    not one of the choices, no paths, a bad glob, ...)."""


class ArgumentTypeError(YoumuError, TypeError):
    """An argument of the wrong type (a float where an int is needed, a string where
    a list is, ...)."""


class StateError(YoumuError, ValueError):
    """A state given to ``load_state_dict`` that does not fit the object: saved by
    another kind of object, with other settings, or malformed."""


class UnknownNameError(YoumuError, KeyError):
    """A name (a mixture child, a source) that the object does not have."""

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return _redact(str(self.args[0])) if self.args else ""


# -- planning ------------------------------------------------------------------------------
class PlanError(YoumuError, ValueError):
    """The sample metadata cannot satisfy a step's plan (e.g. a source has too few
    candidates).

    >>> from youmu.planning import Planner, SampleMeta
    >>> planner = Planner().mix({"web": 1.0}, global_batch_size=4).distribute(1)
    >>> planner.plan(0, SampleMeta.build(ids=[0], lengths=[10]))
    Traceback (most recent call last):
    ...
    youmu.errors.PlanError: step 0: source 'web' needs 4 samples but only 1 are buffered
    """


class CapacityError(YoumuError, ValueError):
    """Some samples fit in no micro-batch under the token capacity; ``unplaced`` lists
    their positions.

    >>> from youmu.planning import balance
    >>> try:
    ...     balance([1, 1, 1], num_buckets=1, capacity=10, sizes=[6, 6, 6])
    ... except CapacityError as e:
    ...     e.unplaced
    (1, 2)
    """

    def __init__(self, message: str, unplaced: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.unplaced: tuple[int, ...] = tuple(int(i) for i in unplaced)


# -- loaders while they run ----------------------------------------------------------------
class LoaderError(YoumuError, RuntimeError):
    """A data loader failed while running."""


class ChannelError(LoaderError):
    """A collective failed: a peer died or hung past the timeout, or the group is closed."""


class RankFailedError(LoaderError):
    """Another rank reported a local failure (its own error is raised on that rank)."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class PeerClosedError(LoaderError):
    """Another rank stopped iterating (closed its loader or exited its loop) while this
    rank still wanted batches it never consumed."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class DataStallError(LoaderError):
    """The data source produced nothing for longer than the loader's timeout."""


class PrefetchError(LoaderError):
    """A loader's background thread failed while it read ahead of the consumer (the
    ``Prefetcher``'s batches, a ``BalancedLoader``'s planned steps, a
    ``DynamicBatchLoader``'s samples, ``PageIndex.prefetch``'s pages): the message names
    the thread's loader and what it was doing, and the exception the thread met is the
    ``__cause__`` (with the thread's traceback). It is raised where the consumer asks
    for the item that failed. A youmu error met on the thread (a
    :class:`RowError`, a :class:`StorageError`, ...) is raised as it is: it already
    names its file or field, and callers act on its kind.

    >>> from youmu.distributed import Producer
    >>> def rows():
    ...     yield 1
    ...     yield {"text": "hi"}["input_ids"]  # a user's bug: no such column
    >>> try:
    ...     list(Producer(rows, depth=1, name="demo", what="a demo reading rows ahead").start())
    ... except PrefetchError as e:
    ...     print(e, "|", type(e.__cause__).__name__)
    a demo reading rows ahead failed on its background thread 'demo': KeyError: 'input_ids' | KeyError
    """


class ProtocolError(LoaderError):
    """A gathered message that no correct rank could have sent (version skew, a bug)."""


class LoaderUnavailableError(LoaderError):
    """A disaggregated loader process (a :mod:`youmu.ray` source loader or step
    planner) did not answer within the timeout: it died and cannot restart, or hangs,
    or its restart is not scheduled. ``actor`` names it. Every rank raises it, since
    every rank's plan depends on the planner and on every source.

    >>> e = LoaderUnavailableError("source loader 'job.loader0' did not answer in 30 s", actor="job.loader0")
    >>> e.actor, isinstance(e, RuntimeError)
    ('job.loader0', True)
    """

    def __init__(self, message: str, actor: str = "") -> None:
        super().__init__(message, actor)
        self.actor = actor

    def __str__(self) -> str:  # the message alone (args also carry the actor, for pickling)
        return _redact(str(self.args[0])) if self.args else ""
