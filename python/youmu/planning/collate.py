"""Deprecated name of :mod:`youmu.planning.packing` (kept for one release; three
modules were called ``collate.py``).

Example:
    >>> from youmu.planning.packing import pack_microbatch      # the new home
"""

from __future__ import annotations

import warnings

from youmu.planning.packing import pack_microbatch

__all__ = ["pack_microbatch"]

warnings.warn("youmu.planning.collate was renamed youmu.planning.packing; the old name goes away in the next "
              "release", DeprecationWarning, stacklevel=2)
