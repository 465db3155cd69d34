"""youmu's exception hierarchy.

Every error raised by youmu is a :class:`YoumuError`; each kind also inherits the
builtin exception users would catch for it (``IndexError`` for out-of-range ids,
``ValueError`` for bad arguments, ``OSError`` for I/O). Messages name the file and,
where known, the row group, page and byte offset.

Example:
    >>> import youmu
    >>> try:
    ...     youmu.PageIndex("missing.parquet")
    ... except youmu.YoumuError as e:
    ...     print(type(e).__name__)
    YoumuIOError
"""

from __future__ import annotations


class YoumuError(Exception):
    """Base class of every error youmu raises."""


class CorruptFileError(YoumuError):
    """A file is not valid Parquet: truncated, bit-flipped or inconsistent."""


class UnsupportedError(YoumuError):
    """A valid file uses a feature this build cannot read (encryption, LZO, ...)."""


class SchemaMismatchError(YoumuError, ValueError):
    """Two files of one dataset disagree on the selected columns."""


class ColumnNotFoundError(YoumuError, ValueError):
    """A requested column does not exist."""


class PageOutOfRangeError(YoumuError, IndexError):
    """A page or row id outside the index."""


class StaleIndexError(YoumuError):
    """A file or object changed since it was indexed (a saved index that no longer
    matches, or a file rewritten or replaced while an index over it is in use)."""


class InvalidArgumentError(YoumuError, ValueError):
    """An argument that cannot be meaningful (no paths, bad glob, ...)."""


class YoumuIOError(YoumuError, OSError):
    """The operating system refused an operation on a file."""


class StorageError(YoumuIOError):
    """A request to an object store failed; the message names the URL and byte range."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """No object at a URL (or an object listed a moment ago is gone)."""


class BucketNotFoundError(StorageError, FileNotFoundError):
    """The bucket (or container) of a URL does not exist."""


class StorageAuthError(StorageError, PermissionError):
    """The store refused the credentials (missing, wrong, or without permission)."""


class StorageTimeoutError(StorageError, TimeoutError):
    """A request timed out, retries included."""


class RetriesExhaustedError(StorageError):
    """Transient failures (5xx, throttling, dropped connections) outlasted the retries."""


__all__ = [
    "YoumuError",
    "CorruptFileError",
    "UnsupportedError",
    "SchemaMismatchError",
    "ColumnNotFoundError",
    "PageOutOfRangeError",
    "StaleIndexError",
    "InvalidArgumentError",
    "YoumuIOError",
    "StorageError",
    "ObjectNotFoundError",
    "BucketNotFoundError",
    "StorageAuthError",
    "StorageTimeoutError",
    "RetriesExhaustedError",
]
