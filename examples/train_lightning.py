"""Lightning (``Trainer`` with the DDP strategy, CPU/Gloo, 2 ranks) fed by youmu: a mixture of
two Parquet sources streamed by ``MapStream``, or online dynamic batching.

    python examples/train_lightning.py          # fixed-size batches from a mixture
    python examples/train_lightning.py --odb    # dynamic batches

``YoumuDataModule`` hands Lightning a loader that is not a ``DataLoader``, so no
``DistributedSampler`` is injected (youmu shards); every checkpoint carries each rank's
loader state, and ``fit(ckpt_path=...)`` continues the stream exactly. The first job stops
at ``--stop-at`` (a ``ModelCheckpoint`` saves there), the second resumes from that file.
"""

from __future__ import annotations

import argparse
import glob
from typing import Any

import torch
from trainer_data import VOCAB, LMSamples, launch, lm_sample, workdir, write_corpus


def make_loader_factory(args: argparse.Namespace, paths: dict[str, Any]) -> Any:
    from youmu.batching import DynamicBatchLoader, label_token_count
    from youmu.integrations import TrainerLoader, odb_steps_per_epoch
    from youmu.mixture import MixtureDataset
    from youmu.torch import MapStream, lm_collate

    def make() -> TrainerLoader:  # called in setup(), once DDP is up
        mix = MixtureDataset({k: str(v) for k, v in paths.items()}, {"web": 0.7, "code": 0.3}, block_size=64,
                             length=1024)
        if not args.odb:
            stream = MapStream(mix, drop_last=True, transform=lm_sample)
            return TrainerLoader(stream, batch_size=8, collate_fn=lm_collate)
        dbl = DynamicBatchLoader(LMSamples(mix), token_budget=2048, length_fn=lambda s: len(s["input_ids"]),
                                 token_count_fn=label_token_count(), collate_fn=lm_collate, pool_size=128,
                                 num_workers=0, uneven="pad")
        return TrainerLoader(dbl, steps_per_epoch=odb_steps_per_epoch(dbl))

    return make


def run(rank: int, world: int, args: argparse.Namespace) -> None:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.strategies import DDPStrategy

    from youmu.integrations import scale_loss, split_info
    from youmu.integrations.lightning import LoaderMetrics, YoumuDataModule

    class LM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, 32)
            self.head = torch.nn.Linear(32, VOCAB)

        def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
            inputs, info = split_info(batch)  # info: a dynamic batch's StepInfo (None for fixed batches)
            logits = self.head(self.emb(inputs["input_ids"]))[:, :-1]
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), inputs["labels"][:, 1:].flatten(),
                                                     ignore_index=-100)
            return scale_loss(loss, info)  # ODB's exact token-level scale

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    paths = write_corpus(args.out / "data")
    torch.manual_seed(0)
    ckpt_dir = args.out / "ckpt"
    callbacks: list[Any] = [LoaderMetrics(every_n_steps=10)]
    if not args.resume:
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=args.stop_at, save_top_k=-1))
    trainer = pl.Trainer(
        accelerator="cpu", devices=world, strategy=DDPStrategy(process_group_backend="gloo"),
        max_epochs=args.epochs, max_steps=-1 if args.resume else args.stop_at, logger=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks, default_root_dir=str(args.out),
    )
    dm = YoumuDataModule(make_loader_factory(args, paths))
    ckpt = sorted(glob.glob(f"{ckpt_dir}/*.ckpt"))[-1] if args.resume else None
    trainer.fit(LM(), datamodule=dm, ckpt_path=ckpt)
    if rank == 0:
        what = "resumed" if args.resume else "first"
        metrics = {k: round(float(v), 3) for k, v in trainer.callback_metrics.items()}
        print(f"{what} job: global step {trainer.global_step}, loader epoch {dm.loader.epoch}; {metrics}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--odb", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--stop-at", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.out = workdir(args.out, "youmu-lightning-")
    for resume in (False, True):
        args.resume = resume
        launch(run, 2, args)


if __name__ == "__main__":
    main()
