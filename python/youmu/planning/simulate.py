"""Deprecated name of :mod:`youmu.planning.workloads` (kept for one release;
``youmu.batching`` has a ``simulate`` module of its own).

Example:
    >>> from youmu.planning.workloads import coyo_like      # the new home
"""

from __future__ import annotations

import warnings

from youmu.planning.workloads import (
    COYO_LONG_TOKEN_SHARE,
    COYO_SHORT_SHARE,
    Workload,
    arrival_assignment,
    coyo_like,
    lognormal_lengths,
    navit_like,
    next_fit_pack,
)

__all__ = ["Workload", "coyo_like", "navit_like", "lognormal_lengths", "arrival_assignment", "next_fit_pack",
           "COYO_SHORT_SHARE", "COYO_LONG_TOKEN_SHARE"]

warnings.warn("youmu.planning.simulate was renamed youmu.planning.workloads; the old name goes away in the next "
              "release", DeprecationWarning, stacklevel=2)
