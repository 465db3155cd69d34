"""Hugging Face ``Trainer`` fed by youmu (CPU, 2 ranks over Gloo, a 1-layer GPT-2).

    python examples/train_hf.py              # Parquet rows, fixed-size batches
    python examples/train_hf.py --odb        # a mixture, online dynamic batching

The run stops at step ``--stop-at`` after saving a checkpoint, and a second job resumes
from it: the Trainer's checkpoint holds each rank's youmu state, so the resumed job
continues the stream exactly, without fast-forwarding batch by batch. What youmu
handles for the Trainer: sharding (no sampler, no ``accelerator.prepare`` of the loader),
steps per epoch (``num_train_epochs`` works), the loader state, ODB's loss scale, and
``youmu/*`` metrics in every log line.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from trainer_data import VOCAB, LMSamples, launch, lm_sample, workdir, write_corpus


def build_loader(args: argparse.Namespace, paths: dict[str, Any]) -> Any:
    from youmu.batching import DynamicBatchLoader, label_token_count
    from youmu.integrations import TrainerLoader, odb_steps_per_epoch
    from youmu.mixture import MixtureDataset
    from youmu.torch import YoumuDataset, lm_collate

    if not args.odb:
        rows = YoumuDataset(str(paths["web"]), columns=["input_ids"], drop_last=True, transform=lm_sample)
        return TrainerLoader(rows, batch_size=8, collate_fn=lm_collate)
    mix = MixtureDataset({k: str(v) for k, v in paths.items()}, {"web": 0.7, "code": 0.3}, block_size=64,
                         length=1024)
    dbl = DynamicBatchLoader(  # the mixture is map-style: the loader shards it over the ranks
        LMSamples(mix), token_budget=2048, length_fn=lambda s: len(s["input_ids"]),
        token_count_fn=label_token_count(), collate_fn=lm_collate, pool_size=128, num_workers=0,
        uneven="pad",  # the Trainer has no DDP Join: every rank takes the same steps
    )
    return TrainerLoader(dbl, steps_per_epoch=odb_steps_per_epoch(dbl))


def run(rank: int, world: int, args: argparse.Namespace) -> None:
    import transformers

    from youmu.integrations.hf import make_trainer

    paths = write_corpus(args.out / "data")
    transformers.set_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=256, n_embd=32, n_layer=1, n_head=2))
    targs = transformers.TrainingArguments(
        output_dir=str(args.out / "trainer"), num_train_epochs=args.epochs, learning_rate=1e-3, logging_steps=5,
        save_strategy="steps", save_steps=args.stop_at, report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, ddp_find_unused_parameters=False,
    )
    t0 = time.perf_counter()
    loader = build_loader(args, paths)
    trainer = make_trainer()(model=model, args=targs, train_loader=loader)
    if args.resume:
        trainer.train(resume_from_checkpoint=True)
    else:
        trainer.add_callback(_StopAt(args.stop_at))
        trainer.train()
    if rank == 0:
        what = "resumed" if args.resume else "first"
        print(f"{what} job: global step {trainer.state.global_step}, epoch {loader.epoch}, "
              f"{time.perf_counter() - t0:.1f}s; {loader.metrics()}")


class _StopAt:
    """Stop (after the checkpoint at that step) as if the job were preempted."""

    def __new__(cls, step: int) -> Any:
        import transformers

        class StopAt(transformers.TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step == step:
                    control.should_training_stop = True

        return StopAt()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--odb", action="store_true", help="a mixture with online dynamic batching")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--stop-at", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.out = workdir(args.out, "youmu-hf-")
    for resume in (False, True):
        args.resume = resume
        launch(run, 2, args)


if __name__ == "__main__":
    main()
