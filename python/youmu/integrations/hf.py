"""Hugging Face ``Trainer`` fed by youmu.

``make_trainer()`` returns a ``transformers.Trainer`` subclass that takes its training
batches from a :class:`~youmu.integrations.trainer_loader.TrainerLoader`:

* the loader goes to the training loop as is — never through ``accelerator.prepare``, so
  Accelerate neither re-shards it nor dispatches rank 0's batches (``dispatch_batches``
  breaks on the differing batch shapes of dynamic batching), and ``split_batches`` does
  not apply;
* ``len(loader)`` is the steps per epoch on every rank, so ``num_train_epochs`` works
  without ``max_steps`` for sized streams (a dynamic-batch epoch: pass
  ``steps_per_epoch=odb_steps_per_epoch(dbl)`` to the loader, or set ``max_steps``);
* each checkpoint (``checkpoint-N/``) gets ``youmu_loader_rank{r}.json``, every rank's
  own loader state (JSON, :mod:`youmu.state.files`: loading a checkpoint never runs
  code), and ``train(resume_from_checkpoint=...)`` loads it: the stream
  continues exactly where it stopped. ``ignore_data_skip`` is forced on, so the Trainer
  does not fast-forward the loader batch by batch (hours on a large epoch), and the
  resumed epoch's pass is counted from where the loader stopped, so gradient accumulation
  keeps its optimizer steps (the epoch's short last one included). A job of another
  world size reads every rank's file and resumes from all of them
  (:func:`load_loader_state`); the Trainer's own step and epoch counts are its own then
  (set ``max_steps`` for such a job: ``num_train_epochs`` counts in the new epoch length);
* with a ``DynamicBatchLoader`` source, ``compute_loss`` multiplies the model's mean
  per-token loss by ``info.loss_scale`` (ODB, Eq. 2); gradient accumulation must be 1
  (each dynamic step is one optimizer step) and the loader should use ``uneven="pad"``
  (the Trainer has no DDP ``Join``), so every rank takes the same steps. A
  ``BalancedLoader``'s micro-batches work the same way with
  ``gradient_accumulation_steps=num_microbatches``;
* every log line carries the loader's metrics (``youmu/tokens_per_s``,
  ``youmu/padding_ratio``, ``youmu/data_wait_p99_ms``, ``youmu/mixture/<source>``).

Example (with a stand-in base class; a real one is ``transformers.Trainer``):

>>> class Base:
...     pass
>>> make_trainer(Base).__name__, issubclass(make_trainer(Base), YoumuTrainerMixin)
('YoumuBase', True)
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from youmu._internal.args import instance_arg, int_arg
from youmu.errors import ArgumentTypeError, InvalidArgumentError, StateError
from youmu.integrations.trainer.batch_info import scale_loss, split_info
from youmu.integrations.trainer.settings import check_accumulation, check_checkpointable, check_equal_steps
from youmu.integrations.trainer.states import other_workers
from youmu.integrations.trainer_loader import TrainerLoader
from youmu.state.files import read_state, write_state

__all__ = ["YoumuTrainerMixin", "make_trainer", "loader_state_path", "load_loader_state", "STATE_FILE"]

#: Per-rank loader state inside a Trainer checkpoint folder.
STATE_FILE = "youmu_loader_rank{rank}.json"
# what youmu wrote before states were JSON: named in the error, never read (unpickling runs code)
_PICKLED_FILE = "youmu_loader_rank{rank}.pkl"


def loader_state_path(checkpoint_dir: str | os.PathLike[str], rank: int) -> str:
    """Where rank ``rank``'s loader state lives in a Trainer checkpoint folder."""
    return os.path.join(_folder(checkpoint_dir), STATE_FILE.format(rank=int_arg("rank", rank, minimum=0)))


def _folder(checkpoint_dir: Any) -> str:
    if not isinstance(checkpoint_dir, (str, os.PathLike)):
        raise ArgumentTypeError(f"checkpoint_dir must be a path (str or os.PathLike), got "
                                f"{type(checkpoint_dir).__name__}")
    return os.fspath(checkpoint_dir)


def _read_state(path: str) -> Any:
    return read_state(path)


def _refuse_pickled(checkpoint_dir: str | os.PathLike[str], rank: int) -> None:
    old = os.path.join(os.fspath(checkpoint_dir), _PICKLED_FILE.format(rank=rank))
    if os.path.lexists(old):
        raise StateError(
            f"checkpoint {checkpoint_dir} holds a pickled youmu loader state ({old}) from an older youmu: it is no "
            "longer read, since unpickling a file runs any code its author put in it. Resume from a checkpoint saved "
            f"by this version ({STATE_FILE.format(rank=rank)}), or, if you trust the file, unpickle it yourself and "
            "pass the state to loader.load_state_dict"
        )


def load_loader_state(loader: TrainerLoader, checkpoint_dir: str | os.PathLike[str]) -> None:
    """Load a Trainer checkpoint's youmu loader state into ``loader``: this rank's file
    when the checkpoint was saved by a job of this world size (as before), else every
    rank's file of the saving job, merged by :meth:`TrainerLoader.load_state_dict`
    (collective then: every rank calls it) — also for a job of the same size whose
    stream (or ``DynamicBatchLoader`` over an iterable dataset) runs another number of
    DataLoader workers. A missing file is a
    :class:`~youmu.errors.StateError` naming the rank and the path."""
    instance_arg("loader", loader, TrainerLoader, "a youmu.integrations.TrainerLoader")
    own = loader_state_path(checkpoint_dir, loader.rank)
    if not os.path.lexists(own):
        _refuse_pickled(checkpoint_dir, loader.rank)
    state = _read_state(own) if os.path.lexists(own) else None
    saved = state.get("world_size") if isinstance(state, dict) else None
    workers = getattr(loader.source, "num_workers", 0) if loader.pairs else loader.num_workers
    if state is not None and saved in (loader.world_size, None) and (
            saved is None or other_workers(state, workers, loader.pairs) is None):
        loader.load_state_dict(state)  # this job's size (or not a loader state: refused there)
        return
    if saved is None:
        # this rank's file is absent: a job of another size saved it, or it is lost
        pattern = STATE_FILE.format(rank="*")
        found = sorted(int(m.group(1)) for p in glob.glob(os.path.join(os.fspath(checkpoint_dir), pattern))
                       if (m := re.search(r"rank(\d+)\.json$", p)))
        if not found:
            pickled = sorted(glob.glob(os.path.join(os.fspath(checkpoint_dir), _PICKLED_FILE.format(rank="*"))))
            if pickled:
                _refuse_pickled(checkpoint_dir, int(re.findall(r"rank(\d+)\.pkl$", pickled[0])[0]))
            raise StateError(
                f"checkpoint {checkpoint_dir} has no youmu loader state ({own}): saved by a Trainer without the youmu "
                "integration?"
            )
        first = _read_state(loader_state_path(checkpoint_dir, found[0]))
        saved = first.get("world_size") if isinstance(first, dict) else None
        if not isinstance(saved, int) or saved == loader.world_size:
            raise StateError(f"checkpoint {checkpoint_dir} has no youmu loader state for rank {loader.rank} ({own})")
    missing = [r for r in range(saved) if not os.path.lexists(loader_state_path(checkpoint_dir, r))]
    if missing:
        raise StateError(
            f"checkpoint {checkpoint_dir} was saved by {saved} ranks but has no youmu loader state for rank(s) "
            f"{missing} ({loader_state_path(checkpoint_dir, missing[0])}): resuming on {loader.world_size} ranks needs "
            "every rank's state"
        )
    loader.load_state_dict([_read_state(loader_state_path(checkpoint_dir, r)) for r in range(saved)])


def _callback_class() -> Any:
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class YoumuStateCallback(TrainerCallback):
        """Writes this rank's loader state into the checkpoint the Trainer just saved."""

        def __init__(self, trainer: Any) -> None:
            self.trainer = trainer

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = os.path.join(self.trainer._get_output_dir(None), f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            loader = self.trainer.youmu_loader
            os.makedirs(folder, exist_ok=True)
            write_state(loader_state_path(folder, loader.rank), loader.state_dict())

    return YoumuStateCallback


class _TrainerView:
    """The loader as the Trainer sees it: everything but ``set_epoch``. The Trainer calls
    ``set_epoch`` with its own epoch count, which restarts at 0 when it resumes a loader of
    unknown length (it cannot tell how many epochs the steps covered); under the one epoch
    rule that would start epoch 0 afresh instead of continuing the loaded epoch. The
    loader counts its epochs itself."""

    def __init__(self, loader: TrainerLoader) -> None:
        self._loader = loader

    def __iter__(self) -> Any:
        return iter(self._loader)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name == "set_epoch":
            raise AttributeError(f"the Trainer's epoch count does not reach the loader ({name})")
        return getattr(self._loader, name)


class YoumuTrainerMixin:
    """Mix into ``transformers.Trainer`` (see the module doc); pass ``train_loader=``."""

    youmu_loader: TrainerLoader

    def __init__(self, *args: Any, train_loader: TrainerLoader | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if train_loader is not None:
            self.set_train_loader(train_loader)

    def set_train_loader(self, loader: TrainerLoader) -> None:
        if not isinstance(loader, TrainerLoader):
            raise InvalidArgumentError(
                f"train_loader must be a youmu.integrations.TrainerLoader, got {type(loader).__name__}"
            )
        check_equal_steps(loader.source, "the Hugging Face Trainer")
        args = self.args  # type: ignore[attr-defined]
        saves = str(getattr(args.save_strategy, "value", args.save_strategy)) != "no"
        check_checkpointable(loader.source, "the Hugging Face Trainer", saves)
        check_accumulation(loader.source, "gradient_accumulation_steps", args.gradient_accumulation_steps)
        self.youmu_loader = loader
        # youmu resumes from its own state: the Trainer's batch-by-batch fast-forward would
        # skip the already-resumed stream a second time
        args.ignore_data_skip = True
        if loader.pairs:
            # youmu scales each batch's loss for the whole step (ODB, Eq. 2): the Trainer must
            # neither count tokens itself (an extra gather per step) nor divide by the
            # accumulation steps
            self.model_accepts_loss_kwargs = False
            self.loss_is_scaled_for_ga = True
        if not any(type(cb).__name__ == "YoumuStateCallback" for cb in self.callback_handler.callbacks):  # type: ignore[attr-defined]
            self.add_callback(_callback_class()(self))  # type: ignore[attr-defined]

    def get_train_dataloader(self) -> Any:  # noqa: D401 - HF hook
        loader = getattr(self, "youmu_loader", None)
        if loader is None:
            return super().get_train_dataloader()  # type: ignore[misc]
        return _TrainerView(loader)

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        # transformers' one pass over the loader. After a mid-epoch resume the loader holds
        # only the epoch's remaining batches, but with ignore_data_skip the Trainer counts
        # the pass from the epoch's start: when gradient_accumulation_steps does not divide
        # the epoch, its short last accumulation step then never steps the optimizer and
        # its gradient leaks into the next epoch's first step. Count this pass as what is left.
        loader = getattr(self, "youmu_loader", None)
        if (
            loader is not None
            and kwargs.get("resume_from_checkpoint") is not None
            and kwargs.get("epoch") == kwargs.get("epochs_trained")
            and "steps_in_epoch" in kwargs
            and loader.has_length()
            and not loader.epoch_ended
            and loader._taken > 0
        ):
            left = kwargs["steps_in_epoch"] - loader._taken
            kwargs["steps_in_epoch"] = left
            kwargs["num_update_steps_per_epoch"] = -(-left // self.args.gradient_accumulation_steps)  # type: ignore[attr-defined]
        return super()._run_epoch(*args, **kwargs)  # type: ignore[misc]

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        inputs, info = split_info(inputs)
        if info is None:
            return super().compute_loss(  # type: ignore[misc]
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        outputs = model(**inputs)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs[0]
        loss = scale_loss(loss, info)
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        loader = getattr(self, "youmu_loader", None)
        if loader is not None and "loss" in logs:  # training logs, not eval/summary ones
            logs = {**logs, **loader.metrics()}
        super().log(logs, *args, **kwargs)  # type: ignore[misc]

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        loader = getattr(self, "youmu_loader", None)
        if loader is not None and resume_from_checkpoint:
            if resume_from_checkpoint is True:
                from transformers.trainer_utils import get_last_checkpoint

                resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)  # type: ignore[attr-defined]
                if resume_from_checkpoint is None:
                    raise InvalidArgumentError(
                        f"no checkpoint found in {self.args.output_dir}"  # type: ignore[attr-defined]
                    )
            load_loader_state(loader, resume_from_checkpoint)
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]
        finally:
            if loader is not None:
                loader.close()  # the Trainer abandons the iterator at max_steps


def make_trainer(trainer_cls: Any = None) -> Any:
    """A ``Trainer`` subclass with :class:`YoumuTrainerMixin` (default: ``transformers.Trainer``)."""
    if trainer_cls is None:
        from transformers import Trainer as trainer_cls
    instance_arg("trainer_cls", trainer_cls, type, "a Trainer class (transformers.Trainer or a subclass)")
    return type(f"Youmu{trainer_cls.__name__}", (YoumuTrainerMixin, trainer_cls), {})
