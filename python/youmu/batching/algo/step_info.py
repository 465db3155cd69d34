"""What the trainer gets with every batch: :class:`StepInfo`. Pure, no torch.

Example:
    >>> info = StepInfo(step=0, num_samples=3, num_tokens=120, global_num_samples=7,
    ...                 global_num_tokens=300, loss_scale=0.8, world_size=2)
    >>> info.loss_scale * 300 / 2 == 120
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["StepInfo", "IDLE"]


class _Idle:
    """An output slot answered without a batch (its sample went into another slot's batch).

    A group of ``k`` samples answers ``k`` slots: one carries the collated batch and
    ``k - 1`` carry ``IDLE``. The loader's consumer skips IDLE; each skipped slot hands
    its credit back so the fetcher may draw one more sample.
    """

    _instance: _Idle | None = None

    def __new__(cls) -> _Idle:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "IDLE"

    def __reduce__(self) -> str:
        return "IDLE"


#: The IDLE slot marker (a singleton; compare with ``is``).
IDLE = _Idle()


@dataclass(frozen=True)
class StepInfo:
    """Metadata of one emitted step, identical across ranks where it says "global".

    Attributes:
        step: step index within the epoch, the same on every rank for the same step.
        epoch, iteration, round, step_in_round: where the step comes from
            (``iteration`` counts the non-join mode's chained logical iterations;
            ``round`` counts emitting rounds).
        rank, world_size: this rank and ``W``.
        active_ranks: ranks contributing samples to this step.
        num_samples: samples in this rank's batch.
        num_tokens: this rank's loss tokens (``token_count_fn``), ``t_r`` of ODB, Eq. 2.
        real_tokens: sum of this rank's lengths (``length_fn``).
        padded_tokens: ``num_samples * max length``, the batch's padded area.
        global_num_samples: samples in this step over all ranks.
        global_num_tokens: ``T_tok``, loss tokens in this step over all ranks
            (an estimate when ``tokens_exact`` is false).
        loss_scale: multiply the rank's mean per-token loss by this (ODB, Eq. 2:
            ``W * t_r / T_tok`` in token modes), so DDP's gradient average equals the
            global per-token mean.
        tokens_exact: whether ``global_num_tokens`` is exact.
        imbalance: max over mean of the contributing ranks' loss tokens at this step
            (1.0 = perfectly balanced).
        sample_indices: dataset indices (map-style) or arrival numbers (iterables).
        is_padding: a filler step on a rank that has run out of data
            (``uneven="pad"``): ``loss_scale`` is 0 and the batch is a repeat.
    """

    step: int
    num_samples: int
    num_tokens: int | float
    global_num_samples: int
    global_num_tokens: int | float
    loss_scale: float
    world_size: int = 1
    rank: int = 0
    epoch: int = 0
    iteration: int = 0
    round: int = 0
    step_in_round: int = 0
    active_ranks: int = 1
    real_tokens: int = 0
    padded_tokens: int = 0
    tokens_exact: bool = True
    imbalance: float = 1.0
    sample_indices: tuple[int, ...] = ()
    is_padding: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for logging and checkpoints)."""
        return asdict(self)
