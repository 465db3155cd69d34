"""The step info that rides in a trainer's batch: a ``DynamicBatchLoader``'s or
``BalancedLoader``'s ``(batch, info)`` pair reaches the trainer as the batch dict with
``info`` under :data:`INFO_KEY`; :func:`split_info` takes it out again and
:func:`scale_loss` applies ``info.loss_scale``, ODB's token-level loss scaling.

Example:
    >>> inputs, info = split_info({"input_ids": [1, 2], INFO_KEY: None})
    >>> inputs, scale_loss(2.0, info)
    ({'input_ids': [1, 2]}, 2.0)
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

from youmu.errors import ArgumentTypeError

__all__ = ["INFO_KEY", "device_arg", "split_info", "scale_loss", "trainer_batch", "undivided"]

#: Key under which a ``DynamicBatchLoader``'s / ``BalancedLoader``'s step info travels in the batch.
INFO_KEY = "youmu_info"


def trainer_batch(item: Any, pairs: bool, device: Any = None) -> Any:
    """What the trainer gets for a delivered ``item``: a loader's ``(batch, info)`` pair
    (``pairs``) as the batch dict with ``info`` under :data:`INFO_KEY`, a stream's batch
    as it is; tensors moved to ``device`` when one is given.

    >>> trainer_batch(({"input_ids": [1]}, "info"), pairs=True)
    {'input_ids': [1], 'youmu_info': 'info'}
    """
    if pairs:
        batch, info = item
        if not isinstance(batch, dict):
            raise ArgumentTypeError(
                "the trainer integrations need the loader's collate_fn to return a dict of model inputs, got "
                f"{type(batch).__name__}"
            )
        item = {**batch, INFO_KEY: info}
    if device is not None:
        item = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in item.items()}
    return item


def device_arg(device: Any) -> Any:
    """``device`` when torch can place a tensor there (``None``: leave batches where they
    are), else :class:`~youmu.errors.ArgumentTypeError` naming it (checked when the
    loader is built, not at its first batch)."""
    if device is None:
        return None
    import torch

    try:
        torch.device(device)
    except (TypeError, RuntimeError, ValueError) as e:
        raise ArgumentTypeError(f"device must be a torch.device, a device string such as 'cuda:0', or None, got "
                                f"{type(device).__name__} {device!r:.40} ({e})") from None
    return device


def split_info(batch: Any) -> tuple[Any, Any]:
    """``(model inputs, info or None)``: the batch without :data:`INFO_KEY`."""
    if isinstance(batch, Mapping) and INFO_KEY in batch:
        inputs = {k: v for k, v in batch.items() if k != INFO_KEY}
        return inputs, batch[INFO_KEY]
    return batch, None


def scale_loss(loss: Any, info: Any) -> Any:
    """``loss * info.loss_scale`` (ODB, Eq. 2: the rank's mean per-token loss times
    ``W · t_r / T_tok``, so DDP's gradient average is the per-token mean over every rank's
    tokens); ``loss`` unchanged when ``info`` is ``None`` (a fixed-size batch)."""
    if info is None:
        return loss
    scale = getattr(info, "loss_scale", None)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ArgumentTypeError(f"info must be a batch's step info (split_info's second value) or None, got "
                                f"{type(info).__name__} {info!r:.40}")
    return loss * scale


def undivided(info: Any, steps: int) -> Any:
    """``info`` with ``loss_scale`` times ``steps``, for a trainer that divides each
    micro-batch's loss by its ``steps`` gradient accumulation steps (Accelerate's
    ``backward``, Lightning's automatic optimization, DeepSpeed's engine): that division
    is made for micro-batch losses that are means of their own, while a
    ``BalancedLoader`` micro-batch's ``loss_scale`` already weighs it for the whole
    step, so it would leave each optimizer step's gradient ``steps`` times too small.
    ``info`` as it is for one step, or when it is ``None`` (a fixed-size batch).

    >>> from youmu.batching.algo.step_info import StepInfo
    >>> info = StepInfo(step=0, num_samples=1, num_tokens=3, global_num_samples=2,
    ...                 global_num_tokens=6, loss_scale=0.25)
    >>> undivided(info, 2).loss_scale, undivided(None, 2)
    (0.5, None)
    """
    if steps == 1 or info is None or isinstance(info, type) or not hasattr(info, "__dataclass_fields__"):
        return info
    return dataclasses.replace(info, loss_scale=info.loss_scale * steps)
