"""youmu: feed LLM training straight from Parquet, at page granularity.

The native core (``youmu._core``) and the dataset classes are loaded on first use of
one of their names (PEP 562), so ``import youmu.batching`` or ``import youmu.planning``
stays light. Type checkers see the real names through the ``TYPE_CHECKING`` imports.

Layers (see ``docs/architecture.md``): the Rust core (:class:`PageIndex`,
:class:`Permutation`), pure maps (:mod:`youmu.order.sharding`, :mod:`youmu.order.shuffle`,
:mod:`youmu.mixture`), row streams (:class:`RowStream`), the stream contract
(:mod:`youmu.state.contract`), torch adapters (:mod:`youmu.torch`), the distributed toolkit
(:mod:`youmu.distributed`), online dynamic batching (:mod:`youmu.batching`) and multisource
planning (:mod:`youmu.planning`). Every error is a :class:`YoumuError`.

Example:
    >>> import youmu
    >>> idx = youmu.PageIndex("data/")          # doctest: +SKIP
    >>> batch = idx.read_page(0)                  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from youmu._internal.lazy import lazy_attributes
from youmu.errors import (
    AmbiguousColumnError,
    ArgumentTypeError,
    BucketNotFoundError,
    CapacityError,
    ChannelError,
    ColumnNotFoundError,
    CorruptFileError,
    DataStallError,
    ImageError,
    InvalidArgumentError,
    LoaderError,
    LoaderUnavailableError,
    ObjectNotFoundError,
    PageOutOfRangeError,
    PeerClosedError,
    PlanError,
    PrefetchError,
    ProtocolError,
    RankFailedError,
    RequestTooLargeError,
    RetriesExhaustedError,
    RowError,
    SchemaMismatchError,
    StaleIndexError,
    StateError,
    StorageAuthError,
    StorageError,
    StorageTimeoutError,
    TextError,
    UnknownNameError,
    UnsupportedError,
    ValueOverflowError,
    YoumuError,
    YoumuIOError,
    YoumuWarning,
)

if TYPE_CHECKING:
    from youmu._core import (
        PageIndex,
        Permutation,
        io_options,
        io_stats,
        num_threads,
        set_fast_decode,
        set_io_options,
        set_num_threads,
    )
    from youmu.merge import merge_states
    from youmu.mixture import FlatMixture, MixtureDataset
    from youmu.streams.rows import RowDataset
    from youmu.streams.rowstream import RowStream

__version__ = "0.1.0"

# Names re-exported from submodules, resolved lazily (PEP 562).
_LAZY: dict[str, str] = {
    "PageIndex": "youmu._core",
    "Permutation": "youmu._core",
    "io_stats": "youmu._core",
    "set_num_threads": "youmu._core",
    "num_threads": "youmu._core",
    "set_fast_decode": "youmu._core",
    "set_io_options": "youmu._core",
    "io_options": "youmu._core",
    "RowDataset": "youmu.streams.rows",
    "FlatMixture": "youmu.mixture",
    "MixtureDataset": "youmu.mixture",
    "RowStream": "youmu.streams.rowstream",
    "merge_states": "youmu.merge",
}

__all__ = [
    "AmbiguousColumnError",
    "ArgumentTypeError",
    "BucketNotFoundError",
    "CapacityError",
    "ChannelError",
    "ColumnNotFoundError",
    "CorruptFileError",
    "ImageError",
    "RowError",
    "TextError",
    "DataStallError",
    "FlatMixture",
    "InvalidArgumentError",
    "LoaderError",
    "LoaderUnavailableError",
    "MixtureDataset",
    "ObjectNotFoundError",
    "PageIndex",
    "PageOutOfRangeError",
    "PeerClosedError",
    "Permutation",
    "PlanError",
    "PrefetchError",
    "ProtocolError",
    "RankFailedError",
    "RequestTooLargeError",
    "RetriesExhaustedError",
    "RowDataset",
    "RowStream",
    "SchemaMismatchError",
    "StaleIndexError",
    "StateError",
    "StorageAuthError",
    "StorageError",
    "StorageTimeoutError",
    "UnknownNameError",
    "UnsupportedError",
    "ValueOverflowError",
    "YoumuError",
    "YoumuIOError",
    "YoumuWarning",
    "__version__",
    "io_options",
    "merge_states",
    "io_stats",
    "num_threads",
    "set_fast_decode",
    "set_io_options",
    "set_num_threads",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
