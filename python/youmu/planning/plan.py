"""Deprecated name of :mod:`youmu.planning.planner` (kept for one release;
``youmu.planning.plan`` was easy to confuse with ``youmu.plan``, itself the old name of
:mod:`youmu.shuffle`).

Example:
    >>> from youmu.planning.planner import Planner      # the new home
"""

from __future__ import annotations

import warnings

from youmu.planning.planner import AXES, Mesh, PlanError, Planner, SampleMeta, StepPlan, gather_metadata

__all__ = ["SampleMeta", "Mesh", "Planner", "StepPlan", "PlanError", "gather_metadata", "AXES"]

warnings.warn("youmu.planning.plan was renamed youmu.planning.planner; the old name goes away in the next release",
              DeprecationWarning, stacklevel=2)
