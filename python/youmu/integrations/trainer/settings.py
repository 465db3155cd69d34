"""The trainer settings a loader of ``(batch, info)`` pairs needs, checked when the
trainer takes it (``YoumuTrainerMixin``, ``YoumuDataModule``): every rank takes the same
number of steps unless the trainer can ``Join`` ranks, and the trainer's gradient
accumulation is the loader's batches per optimizer step, and a trainer that saves
checkpoints gets a loader that can save its state mid-epoch. A stream of samples takes
any trainer settings.

Example:
    >>> from youmu.batching import DynamicBatchLoader
    >>> loader = DynamicBatchLoader([{"input_ids": [1, 2, 3]}] * 8, token_budget=16, length_fn=lambda s: 3,
    ...                             num_workers=0)
    >>> check_accumulation(loader, "gradient_accumulation_steps", 1)  # each batch is one optimizer step
    >>> check_equal_steps(loader, "Lightning")  # join mode, uneven="stop": ranks may stop apart
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: Lightning has no DDP Join: build the DynamicBatchLoader with uneven='pad' ...
    >>> loader.close()
"""

from __future__ import annotations

from typing import Any

from youmu.errors import InvalidArgumentError
from youmu.state.contract import yields_pairs

__all__ = ["check_equal_steps", "check_accumulation", "check_checkpointable"]


def check_equal_steps(source: Any, trainer: str) -> None:
    """Refuse a ``DynamicBatchLoader`` ``source`` whose ranks may stop at different steps
    (join mode with ``uneven="stop"``) for a ``trainer`` that cannot ``Join`` them: its
    DDP all-reduces would wait forever for the rank that stopped."""
    cfg = getattr(source, "config", None) if yields_pairs(source) else None
    if cfg is not None and getattr(cfg, "join", False) and getattr(cfg, "uneven", "") == "stop":
        raise InvalidArgumentError(
            f"{trainer} has no DDP Join: build the DynamicBatchLoader with uneven='pad' so every rank takes the "
            "same number of steps (a rank out of data takes zero-weight filler steps)"
        )


def check_accumulation(source: Any, option: str, value: int) -> None:
    """Refuse a trainer's gradient accumulation (its ``option`` set to ``value``) that
    does not match a loader ``source`` of ``(batch, info)`` pairs: a
    ``DynamicBatchLoader``'s batches are optimizer steps (1), a ``BalancedLoader``'s or
    ``RayBalancedLoader`` client's ``num_microbatches`` micro-batches make one. Their
    ``loss_scale`` is per step, so another count would step the optimizer on part of a
    step's gradient, and a checkpoint would fall inside a step (a resume then looks like
    a replay to a job that counts its data in steps). Streams take any accumulation."""
    if not yields_pairs(source):
        return
    per_step = int(getattr(source, "num_microbatches", 1))
    if value != per_step:
        raise InvalidArgumentError(
            f"{type(source).__name__} yields {per_step} batch(es) per optimizer step (their loss_scale is "
            f"per step): use {option}={per_step}, got {value}"
        )


def check_checkpointable(source: Any, trainer: str, saves: bool) -> None:
    """Refuse a ``DynamicBatchLoader`` ``source`` that cannot save a mid-epoch state (an
    iterable dataset without ``state_dict``/``load_state_dict``) for a ``trainer`` that
    ``saves`` checkpoints: refused when the trainer is built, not at its first
    checkpoint, hours in. A map-style dataset, or one with those methods (``YoumuDataset``,
    with any ``num_workers``), can."""
    cfg = getattr(source, "config", None) if saves and yields_pairs(source) else None
    if cfg is not None and getattr(cfg, "kind", None) == "iterable" and not hasattr(cfg.dataset, "state_dict"):
        from youmu.batching.config import stateless_message

        raise InvalidArgumentError(f"{trainer} saves checkpoints, but {stateless_message(cfg.dataset)} "
                                   "(or turn the trainer's checkpoints off)")
