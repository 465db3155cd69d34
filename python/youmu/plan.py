"""Deprecated name of :mod:`youmu.shuffle` (kept for one release; ``youmu.plan`` was
easy to confuse with ``youmu.planning``).

Example:
    >>> from youmu.shuffle import ShardPlan      # the new home
"""

from __future__ import annotations

import warnings

from youmu.shuffle import (
    SHUFFLE_MODES,
    WINDOWS_IN_FLIGHT,
    ShardPlan,
    ShuffleMode,
    all_window_rows,
    dropped_rows,
    positions_to_rows,
    row_chunk_rows,
    window_pages_for,
)

__all__ = [
    "SHUFFLE_MODES",
    "WINDOWS_IN_FLIGHT",
    "ShardPlan",
    "ShuffleMode",
    "all_window_rows",
    "positions_to_rows",
    "dropped_rows",
    "row_chunk_rows",
    "window_pages_for",
]

warnings.warn("youmu.plan was renamed youmu.shuffle; the old name goes away in the next release",
              DeprecationWarning, stacklevel=2)
