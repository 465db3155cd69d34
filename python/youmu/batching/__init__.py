"""Online dynamic batching (ODB) with DGAP cross-rank alignment.

Length-grouped, variable-size batches whose padded area stays under a token budget,
with every DDP rank taking the same number of steps. Pure parts (grouping, alignment,
protocol, simulation, sampling arithmetic, loss formulas, metrics) import without
torch; the loader, the channel and the integrations import torch when first used.

Modules: :mod:`~youmu.batching.algo.grouping` (ODB, Eq. 1), :mod:`~youmu.batching.algo.alignment`
(the round plan: ODB, Eq. 3, Alg. 1), :mod:`~youmu.batching.algo.protocol` (one rank's side of a
round), :mod:`~youmu.batching.algo.simulation` (``W`` ranks in one process),
:mod:`~youmu.batching.algo.sampling`, :mod:`~youmu.batching.algo.loss` (ODB, Eq. 2),
:mod:`~youmu.batching.runtime.metrics`; the loader itself: :mod:`~youmu.batching.dynamic_loader`
(``DynamicBatchLoader``) over :mod:`~youmu.batching.config`,
:mod:`~youmu.batching.runtime.feed`, :mod:`~youmu.batching.runtime.aligner` (its
:mod:`~youmu.batching.runtime.handshake`),
:mod:`~youmu.batching.runtime.epoch` and :mod:`~youmu.batching.runtime.shutdown`.

Example:
    >>> from youmu.batching import form_groups
    >>> form_groups([100, 200, 500, 800], token_budget=1000)
    [[0, 1], [2], [3]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from youmu._internal.lazy import lazy_attributes
from youmu.batching.algo.alignment import (
    FINISHED,
    NOT_READY,
    AlignedSizes,
    RankReport,
    RoundPlan,
    align_groups,
    align_sizes,
    keep_largest_groups,
    message_bytes,
    plan_round,
    split_groups,
    target_group_count,
)
from youmu.batching.algo.grouping import batch_size_for, form_groups, padded_tokens
from youmu.batching.algo.loss import LOSS_SCALING_MODES, TokenUpdates, label_token_count, loss_scale, scaled_token_loss
from youmu.batching.algo.sampling import rank_indices, sampler_quota
from youmu.batching.algo.simulation import fixed_batch_padding, simulate, simulate_ranks
from youmu.batching.algo.step_info import IDLE, StepInfo
from youmu.batching.runtime.metrics import BatchingMetrics, MetricsSnapshot

if TYPE_CHECKING:  # the names below load on first use (they import torch)
    from youmu.batching.ddp_join import join_uneven
    from youmu.batching.dynamic_loader import DynamicBatchLoader
    from youmu.torch.collate import lm_collate as lm_collate  # the alias below

# torch-backed names, imported on first use (PEP 562)
_LAZY: dict[str, str] = {
    "DynamicBatchLoader": "youmu.batching.dynamic_loader",
    "join_uneven": "youmu.batching.ddp_join",
    # An alias, not a name of this package (its one public path is youmu.torch.lm_collate):
    # earlier READMEs and examples imported it from here, and their code keeps working.
    "lm_collate": "youmu.torch.collate",
}

__all__ = [
    "AlignedSizes",
    "BatchingMetrics",
    "DynamicBatchLoader",
    "FINISHED",
    "IDLE",
    "LOSS_SCALING_MODES",
    "MetricsSnapshot",
    "NOT_READY",
    "RankReport",
    "RoundPlan",
    "StepInfo",
    "TokenUpdates",
    "align_groups",
    "align_sizes",
    "batch_size_for",
    "fixed_batch_padding",
    "form_groups",
    "join_uneven",
    "keep_largest_groups",
    "label_token_count",
    "loss_scale",
    "message_bytes",
    "padded_tokens",
    "plan_round",
    "rank_indices",
    "sampler_quota",
    "scaled_token_loss",
    "simulate",
    "simulate_ranks",
    "split_groups",
    "target_group_count",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
