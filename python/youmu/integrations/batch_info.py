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

from collections.abc import Mapping
from typing import Any

__all__ = ["INFO_KEY", "split_info", "scale_loss"]

#: Key under which a ``DynamicBatchLoader``'s / ``BalancedLoader``'s step info travels in the batch.
INFO_KEY = "youmu_info"


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
    return loss if info is None else loss * info.loss_scale

