"""youmu's exception hierarchy.

Every error raised by youmu is a :class:`YoumuError`; each kind also inherits the
builtin exception users would catch for it (``IndexError`` for out-of-range ids,
``ValueError`` for bad arguments, ``TypeError`` for arguments of the wrong type,
``MemoryError`` for requests that cannot fit, ``OverflowError`` for values that do not
fit their type, ``OSError`` for I/O). Messages name the file and,
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


class AmbiguousColumnError(ColumnNotFoundError):
    """A requested column name matches several top-level columns of a file."""


class PageOutOfRangeError(YoumuError, IndexError):
    """A page or row id outside the index."""


class StaleIndexError(YoumuError):
    """A saved index no longer matches the files on disk."""


class InvalidArgumentError(YoumuError, ValueError):
    """An argument that cannot be meaningful (no paths, bad glob, ...)."""


class ArgumentTypeError(YoumuError, TypeError):
    """An argument of the wrong type (floats or bools as ids, a str for a list, ...)."""


class RequestTooLargeError(YoumuError, MemoryError):
    """A request whose result cannot fit in the memory available, refused before
    anything is allocated (like numpy's ``MemoryError`` for an oversized array)."""


class ValueOverflowError(YoumuError, OverflowError):
    """A value in a file does not fit the type it is read as (an INT96 timestamp
    beyond the range of ``coerce_int96_timestamp_unit``). The file is not corrupt."""


class YoumuIOError(YoumuError, OSError):
    """The operating system refused an operation on a file."""


__all__ = [
    "YoumuError",
    "CorruptFileError",
    "UnsupportedError",
    "SchemaMismatchError",
    "ColumnNotFoundError",
    "AmbiguousColumnError",
    "PageOutOfRangeError",
    "StaleIndexError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "RequestTooLargeError",
    "ValueOverflowError",
    "YoumuIOError",
]
