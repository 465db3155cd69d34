"""Deprecated name of :mod:`youmu.batching.simulation` (kept for one release).

The module was renamed so that it no longer shares a name with
:mod:`youmu.planning.simulate`; import from the new home:

Example:
    >>> from youmu.batching.simulation import simulate, simulate_ranks   # the new home
"""

from __future__ import annotations

import warnings

from youmu.batching.simulation import SimulationResult, fixed_batch_padding, simulate, simulate_ranks

__all__ = ["SimulationResult", "simulate_ranks", "simulate", "fixed_batch_padding"]

warnings.warn(
    "youmu.batching.simulate was renamed youmu.batching.simulation; the old name goes away in the next release",
    DeprecationWarning,
    stacklevel=2,
)
