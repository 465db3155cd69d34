"""Multisource planning in the manner of MegaScale-Data: cost models, workload
balancing, declarative per-step plans and a balanced loader.

* cost models — :func:`attention_cost`, :class:`CostModel` (``a·Σl² + b·Σl + c``,
  from a :class:`ModelConfig`/preset or calibrated with :meth:`CostModel.fit`)
  (``cost``);
* balancing — :func:`balance`/:func:`balance_detailed` (greedy LPT, Karmarkar–Karp,
  token capacity, reorder-only), :func:`imbalance`/:func:`compare` (max/mean,
  max/min, virtual-clock step time) (``balance``);
* plans — :class:`Planner` (``mix → distribute → cost → balance → plan``,
  MegaScale-Data §3.3) over :class:`SampleMeta` gathered with
  :func:`gather_metadata` (``planner``); mixing schedules
  :class:`MixingSchedule`/:class:`MixtureSchedule` (``schedule``);
* the loader — :class:`BalancedLoader` (balanced global batches per step, exact loss
  scales in :class:`MicroBatchInfo`, mid-epoch ``state_dict``/``load_state_dict``)
  (``loader``, built from ``sources``, ``exchange``, ``checkpoint`` and ``info``);
  vision-language models — an image encoder balanced with the backbone:
  :func:`balance_hybrid` (MegaScale-Data's hybrid balance, features routed between
  ranks) and :func:`balance_colocated` (both costs, images on their sample's rank),
  :func:`module_imbalance` (``hybrid``)
  and :func:`pack_microbatch` (``packing``).

Everything deterministic here is a pure function of its inputs, so every rank can
compute the same plan from the same (all-gathered) sample metadata. Nothing here
imports youmu's native core, and no module imports torch when it is imported (the
loader's channel and :func:`pack_microbatch` import it when used). Bad arguments raise
:class:`~youmu.errors.ArgumentTypeError` (a ``TypeError``: wrong type) or
:class:`~youmu.errors.InvalidArgumentError` (a ``ValueError``: out of range), naming
the argument; a step's grid is at most
:data:`~youmu.planning.engine.metrics.MAX_SLOTS` (rank, micro-batch) slots.

Example:
    >>> from youmu.planning import attention_cost, balance
    >>> costs = attention_cost([[8000], [500], [700], [7000], [300], [200]], "llama-12b")
    >>> balance(costs, num_buckets=2)      # 8000+200 | 500+700+7000+300
    [(1, 0), (0, 0), (0, 0), (0, 0), (0, 0), (1, 0)]
"""

from __future__ import annotations

from youmu.planning.balanced_loader import BalancedLoader
from youmu.planning.engine.balance import METHODS, balance, balance_detailed
from youmu.planning.engine.cost import PRESETS, CostModel, ModelConfig, attention_cost
from youmu.planning.engine.hybrid import (
    ColocatedResult,
    HybridResult,
    balance_colocated,
    balance_hybrid,
    module_imbalance,
)
from youmu.planning.engine.meta import SampleMeta, gather_metadata
from youmu.planning.engine.metrics import BalanceResult, Imbalance, compare, imbalance
from youmu.planning.engine.planner import Mesh, Planner, StepPlan
from youmu.planning.engine.schedule import MixingSchedule, MixtureSchedule, as_schedule
from youmu.planning.settings import PlanSettings
from youmu.planning.steps.microbatch import HybridBatch, MicroBatchInfo, default_docs
from youmu.planning.steps.packing import pack_microbatch

__all__ = [
    "BalanceResult",
    "BalancedLoader",
    "ColocatedResult",
    "CostModel",
    "HybridBatch",
    "HybridResult",
    "Imbalance",
    "METHODS",
    "Mesh",
    "MicroBatchInfo",
    "MixingSchedule",
    "MixtureSchedule",
    "ModelConfig",
    "PRESETS",
    "PlanSettings",
    "Planner",
    "SampleMeta",
    "StepPlan",
    "as_schedule",
    "attention_cost",
    "balance",
    "balance_colocated",
    "balance_detailed",
    "balance_hybrid",
    "compare",
    "default_docs",
    "gather_metadata",
    "imbalance",
    "module_imbalance",
    "pack_microbatch",
]

