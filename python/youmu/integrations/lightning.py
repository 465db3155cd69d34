"""Lightning (``lightning.pytorch.Trainer``, DDP on CPU/Gloo or GPUs) fed by youmu.

:class:`YoumuDataModule` builds a :class:`~youmu.integrations.trainer_loader.TrainerLoader` in
``setup`` (after the strategy started the process group, so youmu finds its rank) and
returns it from ``train_dataloader``:

* Lightning cannot inject a ``DistributedSampler`` — it only rewrites
  ``torch.utils.data.DataLoader`` instances, and youmu's loader is not one (youmu
  already sharded the data, exactly once); ``use_distributed_sampler`` may stay on;
* ``len()`` is the steps per epoch on every rank, so ``max_epochs``, schedulers and
  progress bars work without counting;
* the checkpoint (``ModelCheckpoint`` or ``trainer.save_checkpoint``) carries every
  rank's loader state under the data module's key (``state_dict`` is gathered from all
  ranks, as Lightning calls it on every rank), and ``trainer.fit(ckpt_path=...)`` gives
  each rank its own back: the epoch continues exactly where it stopped, in constant time.
  (Lightning's own loader-state saving keeps rank 0's state only and would give it to
  every rank; the data module hands Lightning a view without state methods so that
  cannot happen.) The state is the position after the last batch *trained*, not the
  last one fetched: Lightning's fetcher pulls one batch ahead of an unsized loader, so
  the loader keeps its state as of each batch it hands out
  (:meth:`~youmu.integrations.trainer_loader.TrainerLoader.follow_consumption`) and the
  data module reports each batch the training loop moves to the device. A job of
  another number of ranks resumes from that checkpoint too: the epoch continues on
  the new ranks, every sample of it once. The data module then has Lightning re-read the loader's length each epoch
  (``reload_dataloaders_every_n_epochs=1``, unless set): the resumed epoch and the full
  ones after it differ in length, and Lightning would otherwise keep the first;
* a ``BalancedLoader`` (or ``RayBalancedLoader`` client) yields ``num_microbatches``
  micro-batches per optimizer step, each scaled for the whole step: the ``Trainer`` needs
  ``accumulate_grad_batches=num_microbatches`` (another value is refused in ``setup``:
  it would step the optimizer on part of a step, and checkpoint inside one). Lightning's
  automatic optimization divides each ``training_step`` loss by
  ``accumulate_grad_batches``, made for micro-batch losses that are means of their own;
  the data module hands out each training batch's info with ``loss_scale`` times
  ``accumulate_grad_batches``, which that division cancels, so each optimizer step's
  gradient is the per-token mean over the step (manual optimization, which divides
  nothing, gets ``loss_scale`` as it is);
* :class:`LoaderMetrics` logs tokens/s, padding ratio, data wait and mixture shares
  through ``LightningModule.log_dict``.

In ``training_step``, ``split_info``/``scale_loss`` apply a dynamic batch's token-level
loss scale (ODB, Eq. 2; nothing for fixed-size batches)::

    def training_step(self, batch, batch_idx):
        inputs, info = split_info(batch)
        return scale_loss(self.model(**inputs)["loss"], info)

    dm = YoumuDataModule(lambda: TrainerLoader(MapStream(mixture, drop_last=True), batch_size=8))
    trainer = L.Trainer(strategy="ddp", max_epochs=2, callbacks=[LoaderMetrics()])
    trainer.fit(module, datamodule=dm, ckpt_path="last")

Example:
    >>> dm = YoumuDataModule(lambda: None)
    >>> dm.loader is None
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lightning.pytorch as pl

from youmu._internal.args import bool_arg, int_arg
from youmu.errors import ArgumentTypeError, StateError
from youmu.integrations.trainer.batch_info import INFO_KEY, split_info, undivided
from youmu.integrations.trainer.settings import check_accumulation, check_checkpointable, check_equal_steps
from youmu.integrations.trainer_loader import TrainerLoader
from youmu.state.files import envelope, is_plain_state, open_envelope

__all__ = ["YoumuDataModule", "LoaderMetrics", "LoaderView"]


class LoaderView:
    """What Lightning iterates: the loader's batches and length, and nothing else (no
    ``state_dict``: the data module saves every rank's state, see the module doc)."""

    def __init__(self, loader: TrainerLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


class YoumuDataModule(pl.LightningDataModule):
    """A data module over a youmu :class:`TrainerLoader` built by ``make_loader()``
    (called once, on every rank, in ``setup``).

    A fit resumed from a checkpoint that holds no loader state under this data module's
    key (saved without it, or with another data module class) is a
    :class:`~youmu.errors.StateError` when the trainer asks for its data: Lightning
    would restore the model's step and silently start the data over, replaying what the
    model already saw (HF's integration refuses the same case). ``restart_data=True``
    starts the data at the loader's beginning on purpose.
    """

    def __init__(self, make_loader: Callable[[], TrainerLoader | None], *, restart_data: bool = False) -> None:
        super().__init__()
        if not callable(make_loader):
            raise ArgumentTypeError(f"make_loader must be a callable returning a TrainerLoader, got {make_loader!r}")
        self.make_loader = make_loader
        self.restart_data = bool_arg("restart_data", restart_data)
        self.loader: TrainerLoader | None = None
        self._pending: Mapping[str, Any] | None = None
        self._restored = False  # a checkpoint's loader state reached load_state_dict
        self._checked = False  # the first train_dataloader() after fit started checked that

    def setup(self, stage: str) -> None:
        if self.loader is None and stage == "fit":
            loader = self.make_loader()
            if not isinstance(loader, TrainerLoader):
                raise ArgumentTypeError(f"make_loader() must return a TrainerLoader, got {type(loader).__name__}")
            check_equal_steps(loader.source, "Lightning")
            trainer: Any = self.trainer  # attached by fit before setup; None when called by hand
            if trainer is not None:
                # a BalancedLoader's micro-batches of one step train under one optimizer step
                check_accumulation(loader.source, "accumulate_grad_batches", trainer.accumulate_grad_batches)
                check_checkpointable(loader.source, "Lightning", bool(trainer.checkpoint_callbacks))
            # Lightning's prefetching fetcher pulls a batch ahead of the one it trains (of an
            # unsized loader): the checkpoint must hold the position of the trained one
            loader.follow_consumption()
            self.loader = loader
            if self._pending is not None:
                self._load(self._pending)
                self._pending = None

    def train_dataloader(self) -> LoaderView:
        if self.loader is None:
            self.setup("fit")
        assert self.loader is not None
        if not self._checked:
            self._checked = True
            self._check_restored()
        return LoaderView(self.loader)

    def _check_restored(self) -> None:
        """Refuse a resumed fit whose checkpoint gave the data nothing (see the class doc):
        Lightning asks for the data after it restored the checkpoint."""
        trainer: Any = self.trainer
        ckpt = getattr(trainer, "ckpt_path", None) if trainer is not None else None
        if ckpt and not self._restored and not self.restart_data:
            raise StateError(
                f"checkpoint {ckpt} holds no youmu loader state (no {type(self).__qualname__!r} entry: saved without "
                f"this data module, or with another data module class): the model resumes at step "
                f"{trainer.global_step} but the data would start over, replaying samples it already trained on; pass "
                f"{type(self).__name__}(..., restart_data=True) to restart the data on purpose"
            )

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        trainer: Any = self.trainer
        if self.loader is not None and trainer is not None and trainer.training and not trainer.sanity_checking:
            self.loader.mark_consumed()  # the training loop moves the batch it trains now
        # the step info is a frozen dataclass, which Lightning's collection mapping refuses
        inputs, info = split_info(batch)
        module: Any = trainer.lightning_module if trainer is not None else None
        if info is not None and trainer.training and module is not None and module.automatic_optimization:
            # Lightning divides training_step's loss by accumulate_grad_batches; a
            # BalancedLoader micro-batch's loss_scale is already the whole step's
            info = undivided(info, trainer.accumulate_grad_batches)
        moved = super().transfer_batch_to_device(inputs, device, dataloader_idx)
        return moved if info is None else {**moved, INFO_KEY: info}

    def state_dict(self) -> dict[str, Any]:
        """Every rank's loader state (collective: Lightning calls it on every rank)."""
        # plain data (youmu.state.files): the checkpoint holds no object a load would construct
        return {} if self.loader is None else envelope(self.loader.gathered_state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, Mapping):
            raise StateError(f"the Lightning checkpoint's youmu loader state must be a dict, got "
                             f"{type(state_dict).__name__}")
        if not state_dict:
            raise StateError("the checkpoint holds no youmu loader state (saved before the loader was built?)")
        if is_plain_state(state_dict):  # else a checkpoint of an older youmu: the state itself
            state_dict = open_envelope(state_dict, where="the Lightning checkpoint's youmu loader state")
        self._restored = True
        if self.loader is None:
            self._pending = state_dict
        else:
            self._load(state_dict)

    def _load(self, state: Mapping[str, Any]) -> None:
        assert self.loader is not None
        self.loader.load_state_dict(state)
        trainer: Any = self.trainer  # its reload setting is set at run time, not declared
        resized = self.loader.epoch_steps is not None
        if resized and trainer is not None and not trainer.reload_dataloaders_every_n_epochs:
            # Lightning measures len(train_dataloader) when it loads it, once per fit by
            # default: loading it each epoch gives the full epochs after a resized one
            # their own length (else they would stop at the resumed epoch's)
            trainer.reload_dataloaders_every_n_epochs = 1

    def teardown(self, stage: str) -> None:
        if self.loader is not None:
            self.loader.close()


class LoaderMetrics(pl.Callback):
    """Log the loader's metrics every ``every_n_steps`` training steps."""

    def __init__(self, every_n_steps: int = 50) -> None:
        self.every_n_steps = int_arg("every_n_steps", every_n_steps, minimum=1)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        dm = trainer.datamodule
        loader = getattr(dm, "loader", None)
        if isinstance(loader, TrainerLoader) and (trainer.global_step % self.every_n_steps == 0):
            pl_module.log_dict(loader.metrics(), on_step=True, on_epoch=False, rank_zero_only=True)
