"""Multisource planning (issue 6): cost models, workload balancing, declarative
per-step plans and a balanced loader.

* cost models — :func:`attention_cost`, :class:`CostModel` (``a·Σl² + b·Σl + c``,
  from a :class:`ModelConfig`/preset or calibrated with :meth:`CostModel.fit`);
* balancing — :func:`balance`/:func:`balance_detailed` (greedy LPT, Karmarkar–Karp,
  token capacity, reorder-only), :func:`imbalance`/:func:`compare` (max/mean,
  max/min, virtual-clock step time);
* plans — :class:`Planner` (``mix → distribute → cost → balance → plan``) over
  :class:`SampleMeta` gathered with :func:`gather_metadata`; mixing schedules
  :class:`MixingSchedule`/:class:`MixtureSchedule`;
* the loader — :class:`BalancedLoader` (balanced global batches per step, exact loss
  scales in :class:`MicroBatchInfo`, mid-epoch ``state_dict``/``load_state_dict``)
  and :func:`pack_microbatch`.

Everything deterministic here is a pure function of its inputs, so every rank can
compute the same plan from the same (all-gathered) sample metadata. Nothing here
imports youmu's native core; torch is imported lazily (loader, collate). Bad
arguments raise ``TypeError`` (wrong type) or ``ValueError`` (out of range), naming
the argument.

Example:
    >>> from youmu.planning import attention_cost, balance
    >>> costs = attention_cost([[8000], [500], [700], [7000], [300], [200]], "llama-12b")
    >>> balance(costs, num_buckets=2)      # 8000+200 | 500+700+7000+300
    [(1, 0), (0, 0), (0, 0), (0, 0), (0, 0), (1, 0)]
"""

from __future__ import annotations

from youmu.planning.balance import (
    METHODS,
    BalanceResult,
    CapacityError,
    Imbalance,
    balance,
    balance_detailed,
    compare,
    imbalance,
)
from youmu.planning.packing import pack_microbatch
from youmu.planning.cost import PRESETS, CostModel, ModelConfig, attention_cost
from youmu.planning.loader import BalancedLoader, MicroBatchInfo, default_docs
from youmu.planning.planner import Mesh, PlanError, Planner, SampleMeta, StepPlan, gather_metadata
from youmu.planning.schedule import MixingSchedule, MixtureSchedule, as_schedule

__all__ = [
    "BalancedLoader",
    "MicroBatchInfo",
    "default_docs",
    "pack_microbatch",
    "METHODS",
    "PRESETS",
    "BalanceResult",
    "CapacityError",
    "CostModel",
    "Imbalance",
    "Mesh",
    "MixingSchedule",
    "MixtureSchedule",
    "ModelConfig",
    "PlanError",
    "Planner",
    "SampleMeta",
    "StepPlan",
    "as_schedule",
    "attention_cost",
    "balance",
    "balance_detailed",
    "compare",
    "gather_metadata",
    "imbalance",
]

