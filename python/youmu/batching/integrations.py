"""Trainer integrations: DDP ``Join`` for join mode's uneven tail, and Hugging Face ``Trainer``.

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

A Hugging Face ``Trainer`` class made for ODB (here over a stand-in base class):

>>> class Base:
...     pass
>>> make_odb_trainer(Base).__name__, issubclass(make_odb_trainer(Base), ODBTrainerMixin)
('ODBBase', True)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["join_uneven", "ODBTrainerMixin", "make_odb_trainer", "STEP_INFO_KEY"]

#: Key under which the HF integration passes the StepInfo through the batch dict.
STEP_INFO_KEY = "odb_step_info"


def join_uneven(modules: Iterable[Any], *, enable: bool = True, throw_on_early_termination: bool = False) -> Any:
    """``torch.distributed.algorithms.Join`` over DDP modules (and other joinables),
    with ``divide_by_initial_world_size=True`` so the loss scale of ODB, Eq. 2 stays exact."""
    from torch.distributed.algorithms import Join

    return Join(
        list(modules), enable=enable, throw_on_early_termination=throw_on_early_termination,
        divide_by_initial_world_size=True,
    )


class _InfoInBatch:
    """Iterates a DynamicBatchLoader, moving ``info`` into the batch dict (HF passes only
    the batch to ``compute_loss``)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch, info in self.loader:
            if not isinstance(batch, dict):
                raise ArgumentTypeError("the HF integration needs collate_fn to return a dict of model inputs")
            yield {**batch, STEP_INFO_KEY: info}

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


class ODBTrainerMixin:
    """Mix into ``transformers.Trainer``: training batches come from ``self.odb_loader``
    and each micro-step's loss is scaled by ``info.loss_scale`` (ODB, Eq. 2).

    Requirements: ``args.max_steps > 0`` (the number of dynamic batches is not known in
    advance), no gradient accumulation, ``uneven="pad"`` on the loader in join mode
    (the Trainer has no DDP ``Join``), and a model returning ``.loss`` as the mean over
    its own label tokens (count them with :class:`~youmu.batching.loss.label_token_count`).
    Training progress is counted in optimizer steps as usual; ``info`` carries the
    global sample and token counts for logging.
    """

    odb_loader: Any

    def get_train_dataloader(self) -> Any:  # noqa: D401 - HF hook
        loader = getattr(self, "odb_loader", None)
        if loader is None:
            raise InvalidArgumentError("set trainer.odb_loader (a DynamicBatchLoader) before train()")
        return _InfoInBatch(loader)

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        info = inputs.pop(STEP_INFO_KEY, None)
        if info is None:  # evaluation batches come from the normal eval dataloader
            return super().compute_loss(model, inputs, return_outputs=return_outputs)  # type: ignore[misc]
        outputs = model(**inputs)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs[0]
        loss = loss * info.loss_scale
        return (loss, outputs) if return_outputs else loss


def make_odb_trainer(trainer_cls: Any = None) -> Any:
    """A ``Trainer`` subclass with :class:`ODBTrainerMixin` (default: ``transformers.Trainer``)."""
    if trainer_cls is None:
        from transformers import Trainer as trainer_cls
    return type(f"ODB{trainer_cls.__name__}", (ODBTrainerMixin, trainer_cls), {})
