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

import numbers
from collections.abc import Mapping
from typing import Any

from youmu.errors import ArgumentTypeError

__all__ = ["INFO_KEY", "device_arg", "split_info", "scale_loss", "trainer_batch"]

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

