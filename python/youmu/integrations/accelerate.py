"""Accelerate (a plain ``Accelerator`` loop) fed by youmu.

:func:`prepare` registers a :class:`~youmu.integrations.trainer_loader.TrainerLoader` with the
accelerator and hands it back — without wrapping it:

* no ``DataLoaderShard`` re-sharding and no ``DataLoaderDispatcher``: with
  ``dispatch_batches`` Accelerate reads every batch on rank 0 and broadcasts slices,
  which fails as soon as ranks' batches differ in shape (dynamic batching's whole point)
  and makes rank 0 read everything; ``split_batches`` does not apply either. youmu
  already gave each rank its own shard;
* ``accelerator.save_state(dir)`` saves every rank's loader state (gathered into the
  checkpoint's ``custom_checkpoint_<i>.pkl`` as plain data: dicts, lists, strings and
  numbers, :mod:`youmu.state.files`) and ``accelerator.load_state(dir)`` gives
  each rank its own back: the stream continues exactly, in constant time, instead of
  ``skip_first_batches`` reading and dropping the consumed batches. A job of another
  number of processes loads the same checkpoint: every rank merges all the saved ranks'
  states and the epoch's rest is delivered once over the new ranks, with equal steps
  (:meth:`TrainerLoader.load_state_dict`);
* gradient accumulation (``Accelerator(gradient_accumulation_steps=k)`` with
  ``accelerator.accumulate(model)``) steps the optimizer on each epoch's last batch, as
  for Accelerate's own DataLoaders: the epoch's short last step is taken and its gradient
  does not leak into the next epoch. For an unsized stream pass ``steps_per_epoch``, or
  the epoch's end is known only after its last batch and the accumulation runs on;
* a loader of ``(batch, info)`` pairs fixes how many of its batches make one optimizer
  step (a ``BalancedLoader``'s ``num_microbatches``, one for a ``DynamicBatchLoader``:
  their ``loss_scale`` is the step's): ``Accelerator(gradient_accumulation_steps=k)``
  with another ``k`` above 1 is refused here, as the HF ``Trainer`` and Lightning refuse
  theirs (``accumulate`` would step the optimizer on groups the loss scale was not
  made for). ``k = 1`` leaves the stepping to the loop;
* with ``k = num_microbatches`` above 1 the loop is Accelerate's own
  (``with accelerator.accumulate(model):`` ... ``accelerator.backward(loss)``), and the
  gradient at each optimizer step is the per-token mean over the step's tokens, every
  rank's micro-batches together (ODB, Eq. 2). ``accelerator.backward`` divides each
  loss by ``k`` (DeepSpeed's engine does the same), made for micro-batch losses that
  are means of their own; a micro-batch's ``loss_scale`` already weighs it for the whole
  step, so the loader hands out each batch's info with ``loss_scale`` times ``k``, which
  that division cancels. Pass the scaled loss to ``accelerator.backward`` (a bare
  ``loss.backward()`` would get ``k`` times the gradient), and log ``loss`` unscaled;
* batches land on ``accelerator.device``.

The loop (``split_info``/``scale_loss`` apply a dynamic batch's token-level loss scale;
they do nothing for fixed-size batches)::

    loader = prepare(accelerator, TrainerLoader(DynamicBatchLoader(..., uneven="pad")))
    model, opt = accelerator.prepare(model, opt)
    for epoch in range(epochs):
        for batch in loader:
            inputs, info = split_info(batch)
            accelerator.backward(scale_loss(model(**inputs)["loss"], info))
            opt.step(); opt.zero_grad()
        log_metrics(accelerator, loader)

Example:
    >>> from youmu.integrations.trainer.states import GATHERED_FORMAT
    >>> GATHERED_FORMAT
    'youmu.TrainerLoader.ranks/1'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from youmu._internal.args import instance_arg, opt_int_arg
from youmu.errors import ArgumentTypeError
from youmu.integrations.trainer.batch_info import INFO_KEY, undivided
from youmu.integrations.trainer.settings import check_accumulation
from youmu.integrations.trainer_loader import TrainerLoader
from youmu.state.files import envelope, is_plain_state, open_envelope

__all__ = ["prepare", "log_metrics", "CheckpointedLoader"]


class CheckpointedLoader:
    """What the accelerator saves for a loader: every rank's state in one object
    (``state_dict`` is collective; Accelerate calls it on every rank in ``save_state``)."""

    def __init__(self, loader: TrainerLoader) -> None:
        self.loader = instance_arg("loader", loader, TrainerLoader, "a youmu.integrations.TrainerLoader")

    def state_dict(self) -> dict[str, Any]:
        # plain data (youmu.state.files): the checkpoint holds no object a load would construct
        return envelope(self.loader.gathered_state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # a checkpoint of an older youmu holds the state itself (Accelerate unpickled it)
        self.loader.load_state_dict(open_envelope(state, where="the accelerator checkpoint's youmu loader state")
                                    if is_plain_state(state) else state)


class _PassEntry:
    """A pass of the loader as Accelerate's ``GradientState`` sees a dataloader it iterates."""

    remainder = -1  # no duplicated samples padding the last batch (youmu's ranks take equal steps)

    def __init__(self) -> None:
        self.end_of_dataloader = False


def _follow_passes(gradient_state: Any, loader: TrainerLoader) -> Callable[[Iterator[Any]], Iterator[Any]]:
    # Accelerate's accumulate() steps the optimizer every k batches and on the dataloader's
    # last one, which it learns from GradientState: its own DataLoaderShard registers itself
    # there for each pass and flags the last batch. youmu's loader is not wrapped by
    # accelerator.prepare, so it registers each pass the same way; without it the epoch's
    # short last accumulation step never steps the optimizer and its gradient leaks into the
    # next epoch's first step (and the step count runs across epochs, off the epoch's own)
    def on_pass(batches: Iterator[Any]) -> Iterator[Any]:
        entry = _PassEntry()
        gradient_state._add_dataloader(entry)
        # read per pass, as accelerator.backward reads it per call
        per_step = int(getattr(gradient_state, "num_steps", 1) or 1) if loader.pairs else 1
        try:
            for batch in batches:
                entry.end_of_dataloader = loader.epoch_ended
                if per_step != 1 and isinstance(batch, dict) and INFO_KEY in batch:
                    # accelerator.backward divides the loss by per_step; loss_scale is the step's already
                    batch = {**batch, INFO_KEY: undivided(batch[INFO_KEY], per_step)}
                yield batch
        finally:
            gradient_state._remove_dataloader(entry)

    return on_pass


def _accelerator_arg(accelerator: Any) -> Any:
    # duck-typed as Accelerate itself is used: what prepare and log_metrics call on it
    if not all(hasattr(accelerator, a) for a in ("device", "register_for_checkpointing", "gradient_state", "log")):
        raise ArgumentTypeError(f"accelerator must be an accelerate.Accelerator, got {type(accelerator).__name__}")
    return accelerator


def prepare(accelerator: Any, loader: TrainerLoader) -> TrainerLoader:
    """Register ``loader`` for ``save_state``/``load_state``, have its passes mark the
    epoch's end for gradient accumulation, and move its batches to the accelerator's
    device; returns the loader itself (iterate it as a DataLoader). Accelerate's
    ``gradient_accumulation_steps``, where above 1, must be the loader's batches per
    optimizer step (:class:`~youmu.errors.InvalidArgumentError` otherwise)."""
    if not isinstance(loader, TrainerLoader):
        raise ArgumentTypeError(
            f"loader must be a youmu.integrations.TrainerLoader, got {type(loader).__name__}; do not pass a youmu "
            "stream to accelerator.prepare (it would re-shard it)"
        )
    _accelerator_arg(accelerator)
    accumulation = getattr(accelerator, "gradient_accumulation_steps", 1)
    if accumulation != 1:  # 1: Accelerate does not accumulate, the loop steps the optimizer itself
        check_accumulation(loader.source, "the Accelerator's gradient_accumulation_steps", accumulation)
    if loader.device is None and str(accelerator.device) != "cpu":
        loader.device = accelerator.device
    accelerator.register_for_checkpointing(CheckpointedLoader(loader))
    loader.on_pass = _follow_passes(accelerator.gradient_state, loader)
    return loader


def log_metrics(accelerator: Any, loader: TrainerLoader, step: int | None = None) -> dict[str, float]:
    """Send the loader's metrics (tokens/s, padding ratio, data wait, mixture shares) to
    the accelerator's trackers; returns them."""
    _accelerator_arg(accelerator)
    instance_arg("loader", loader, TrainerLoader, "a youmu.integrations.TrainerLoader")
    values = loader.metrics()
    accelerator.log(values, step=opt_int_arg("step", step, minimum=0))
    return values
