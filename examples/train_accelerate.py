"""A plain Accelerate loop fed by youmu (CPU, 2 ranks over Gloo, a tiny torch model).

    python examples/train_accelerate.py          # Parquet rows packed into sequences
    python examples/train_accelerate.py --odb    # online dynamic batching

The loader is registered with the accelerator, never wrapped: no re-sharding, no rank-0
``dispatch_batches`` (which breaks on dynamic batches' differing shapes). The first job
stops at ``--stop-at`` after ``accelerator.save_state``; the second one
``load_state``s and continues the stream exactly where it stopped.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from trainer_data import VOCAB, LMSamples, launch, workdir, write_corpus


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 32)
        self.head = torch.nn.Linear(32, VOCAB)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **_: Any) -> dict:
        logits = self.head(self.emb(input_ids))
        if labels is None:  # packed sequences: predict the next token
            labels = torch.cat([input_ids[:, 1:], torch.full_like(input_ids[:, :1], -100)], 1)
        else:
            labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], 1)
        return {"loss": torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)}


def build_loader(args: argparse.Namespace, paths: dict[str, Any]) -> Any:
    from youmu.batching import DynamicBatchLoader, label_token_count
    from youmu.integrations import TrainerLoader
    from youmu.streams.rows import RowDataset
    from youmu.torch import YoumuDataset, collate_packed, lm_collate, pack

    if not args.odb:
        packed = pack(YoumuDataset(str(paths["web"]), columns=["input_ids"]), seq_len=128, eos_id=0)
        return TrainerLoader(packed, batch_size=8, collate_fn=collate_packed)  # ranks agree on each step
    rows = RowDataset(str(paths["web"]), columns=["input_ids"])
    dbl = DynamicBatchLoader(LMSamples(rows), token_budget=2048, length_fn=lambda s: len(s["input_ids"]),
                             token_count_fn=label_token_count(), collate_fn=lm_collate, pool_size=128,
                             num_workers=0, uneven="pad")
    return TrainerLoader(dbl)


def run(rank: int, world: int, args: argparse.Namespace) -> None:
    from accelerate import Accelerator

    from youmu.integrations import scale_loss, split_info
    from youmu.integrations.accelerate import log_metrics, prepare

    paths = write_corpus(args.out / "data")
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    loader = prepare(accelerator, build_loader(args, paths))
    model = TinyLM()
    model, opt = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    ckpt = str(args.out / "ckpt")
    t0 = time.perf_counter()
    if args.resume:
        accelerator.load_state(ckpt)  # model, optimizer, RNG and every rank's loader state
    step = 0
    for _ in range(loader.epoch, args.epochs):
        for batch in loader:
            inputs, info = split_info(batch)
            accelerator.backward(scale_loss(model(**inputs)["loss"], info))
            opt.step()
            opt.zero_grad()
            step += 1
            if not args.resume and step == args.stop_at:
                accelerator.save_state(ckpt)
                accelerator.print(f"first job: saved at step {step}, epoch {loader.epoch}")
                return
        log_metrics(accelerator, loader)
    accelerator.print(f"resumed job: {step} more steps to epoch {loader.epoch}, {time.perf_counter() - t0:.1f}s; "
                      f"{loader.metrics()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--odb", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--stop-at", type=int, default=15)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.out = workdir(args.out, "youmu-accelerate-")
    for resume in (False, True):
        args.resume = resume
        launch(run, 2, args)


if __name__ == "__main__":
    main()
