"""DDP ``Join`` for join mode's uneven tail.

Join mode drains every rank's data, so ranks finish at different steps. Two ways to
keep DDP's collectives matched:

* :func:`join_uneven` (PyTorch DDP): ``torch.distributed.algorithms.Join`` lets a rank
  that ran out shadow its peers' gradient all-reduces with zeros. Keep
  ``divide_by_initial_world_size=True`` (the default here): DDP then still divides by
  ``W``, so ``loss_scale = W * t_r / T_tok`` with ``T_tok`` summed over the ranks still
  active stays exact.
* ``DynamicBatchLoader(..., uneven="pad")`` for engines without ``Join`` (DeepSpeed,
  custom loops): every rank yields the same number of steps; a rank out of data gets
  filler steps (``info.is_padding``, ``loss_scale == 0``) and runs forward/backward on
  them, contributing zero gradient.

Example::

    with join_uneven([ddp_model]):
        for batch, info in loader:
            (model(**batch).loss * info.loss_scale).backward()
            opt.step(); opt.zero_grad()

>>> import inspect
>>> inspect.signature(join_uneven).parameters["throw_on_early_termination"].default
False

The trainers' own integrations (Hugging Face ``Trainer``, Accelerate, Lightning,
``DeviceMesh`` jobs) live in :mod:`youmu.integrations`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["join_uneven"]


def join_uneven(modules: Iterable[Any], *, enable: bool = True, throw_on_early_termination: bool = False) -> Any:
    """``torch.distributed.algorithms.Join`` over DDP modules (and other joinables),
    with ``divide_by_initial_world_size=True`` so the loss scale of ODB, Eq. 2 stays exact."""
    from torch.distributed.algorithms import Join

    return Join(
        list(modules), enable=enable, throw_on_early_termination=throw_on_early_termination,
        divide_by_initial_world_size=True,
    )

