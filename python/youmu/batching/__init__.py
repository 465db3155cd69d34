"""Online dynamic batching (ODB) with DGAP cross-rank alignment.

Length-grouped, variable-size batches whose padded area stays under a token budget,
with every DDP rank taking the same number of steps. Pure parts (grouping, alignment,
protocol, simulation, sampling arithmetic, loss formulas, metrics) import without
torch; the loader, the channel and the integrations import torch when first used.

Example:
    >>> from youmu.batching import form_groups
    >>> form_groups([100, 200, 500, 800], token_budget=1000)
    [[0, 1], [2], [3]]
"""

from __future__ import annotations

import importlib
from typing import Any

from youmu.batching.alignment import (
    CLOSED,
    FAILED,
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
from youmu.batching.errors import BatchingError, ChannelError, DataStallError, PeerClosedError, RankFailedError
from youmu.batching.grouping import batch_size_for, form_groups, padded_tokens
from youmu.batching.info import IDLE, StepInfo
from youmu.batching.loss import LOSS_SCALING_MODES, label_token_count, loss_scale, scaled_token_loss
from youmu.batching.metrics import BatchingMetrics, MetricsSnapshot
from youmu.batching.sampling import rank_indices, sampler_quota
from youmu.batching.simulate import fixed_batch_padding, simulate, simulate_ranks

# torch-backed names, imported on first use (PEP 562)
_LAZY: dict[str, str] = {
    "DynamicBatchLoader": "youmu.batching.loader",
    "GlooChannel": "youmu.dist.channel",
    "pad_collate": "youmu.torch.collate",
    "PadCollate": "youmu.torch.collate",
    "join_uneven": "youmu.batching.integrations",
    "ODBTrainerMixin": "youmu.batching.integrations",
    "make_odb_trainer": "youmu.batching.integrations",
}

__all__ = [
    "DynamicBatchLoader",
    "GlooChannel",
    "StepInfo",
    "IDLE",
    "BatchingMetrics",
    "MetricsSnapshot",
    "pad_collate",
    "PadCollate",
    "join_uneven",
    "ODBTrainerMixin",
    "make_odb_trainer",
    "form_groups",
    "batch_size_for",
    "padded_tokens",
    "target_group_count",
    "split_groups",
    "keep_largest_groups",
    "align_groups",
    "align_sizes",
    "plan_round",
    "RankReport",
    "RoundPlan",
    "AlignedSizes",
    "NOT_READY",
    "FINISHED",
    "FAILED",
    "CLOSED",
    "message_bytes",
    "loss_scale",
    "scaled_token_loss",
    "label_token_count",
    "LOSS_SCALING_MODES",
    "simulate",
    "simulate_ranks",
    "fixed_batch_padding",
    "rank_indices",
    "sampler_quota",
    "BatchingError",
    "ChannelError",
    "RankFailedError",
    "PeerClosedError",
    "DataStallError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'youmu.batching' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
