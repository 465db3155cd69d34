"""youmu: feed LLM training straight from Parquet, at page granularity.

The native core (``youmu._core``) is loaded on first use of one of its names, so
``import youmu.batching`` or ``import youmu.planning`` works without touching it.

Example:
    >>> import youmu
    >>> idx = youmu.PageIndex("data/")          # doctest: +SKIP
    >>> batch = idx.read_page(0)                  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "RowDataset": "youmu.rows",
    "FlatMixture": "youmu.mixture",
    "MixtureDataset": "youmu.mixture",
    "RowStream": "youmu.stream",
    "YoumuError": "youmu.errors",
    "CorruptFileError": "youmu.errors",
    "UnsupportedError": "youmu.errors",
    "SchemaMismatchError": "youmu.errors",
    "ColumnNotFoundError": "youmu.errors",
    "PageOutOfRangeError": "youmu.errors",
    "StaleIndexError": "youmu.errors",
    "InvalidArgumentError": "youmu.errors",
    "YoumuIOError": "youmu.errors",
    "StorageError": "youmu.errors",
    "ObjectNotFoundError": "youmu.errors",
    "BucketNotFoundError": "youmu.errors",
    "StorageAuthError": "youmu.errors",
    "StorageTimeoutError": "youmu.errors",
    "RetriesExhaustedError": "youmu.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'youmu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
