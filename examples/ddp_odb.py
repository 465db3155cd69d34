"""Plain PyTorch DDP training with online dynamic batching (CPU, Gloo).

Every rank builds the same DynamicBatchLoader over a map-style dataset of variable
length token sequences. Batches hold as many samples as fit the token budget; every
rank takes the same steps until the data runs out (join mode), DDP's ``Join`` covers
the uneven tail, and ``info.loss_scale`` makes the averaged gradient the exact global
per-token mean.

    python examples/ddp_odb.py                   # 2 ranks spawned locally
    python examples/ddp_odb.py --world-size 3 --epochs 2
    torchrun --nproc-per-node 2 examples/ddp_odb.py   # or under torchrun
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from youmu.batching import DynamicBatchLoader, join_uneven, label_token_count
from youmu.torch import lm_collate

VOCAB = 101


class Sequences(torch.utils.data.Dataset):
    """Token sequences with a masked prompt (labels -100), lengths from a long-tail mix."""

    def __init__(self, n: int) -> None:
        rng = random.Random(7)  # 90% short, 10% long: the long tail that makes equal-count batches uneven
        self.lengths = [8 + (rng.randint(1024, 2048) if rng.random() < 0.1 else rng.randint(32, 256)) // 8 for _ in range(n)]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(1, VOCAB, (self.lengths[i],), generator=g)
        labels = ids.clone()
        labels[: self.lengths[i] // 4] = -100  # the "prompt" carries no loss
        return {"input_ids": ids, "labels": labels}


def seq_len(sample: dict[str, torch.Tensor]) -> int:
    return int(sample["input_ids"].shape[0])


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 32)
        self.rnn = torch.nn.GRU(32, 32, batch_first=True)
        self.out = torch.nn.Linear(32, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(input_ids))
        return self.out(h)


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(TinyLM())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # Created on every rank at the same point: it opens its own Gloo group for metadata.
    loader = DynamicBatchLoader(
        Sequences(args.samples),
        token_budget=args.token_budget,
        length_fn=seq_len,
        token_count_fn=label_token_count(),  # t_r = loss tokens, as the loss below counts them
        collate_fn=lm_collate,
        pool_size=args.pool_size,
        num_workers=args.num_workers,
        timeout=120,
    )
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        t0 = time.perf_counter()
        loss_total, tokens_total, steps = 0.0, 0, 0
        with join_uneven([model]):
            for batch, info in loader:
                logits = model(batch["input_ids"])
                labels = batch["labels"][:, 1:]
                loss_sum = torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum"
                )
                # mean over this rank's tokens times W * t_r / T_tok  ==  the global per-token mean after DDP
                loss = loss_sum / max(info.num_tokens, 1) * info.loss_scale
                loss.backward()
                opt.step()
                opt.zero_grad()
                loss_total += float(loss_sum.detach())
                tokens_total += info.num_tokens
                steps += 1
        summary = loader.metrics.summary()
        print(
            f"[rank {rank}] epoch {epoch}: {steps} steps, {summary['samples']} samples, "
            f"{summary['samples_per_step_global']:.1f} samples/step (global), padding "
            f"{100 * summary['padding_ratio']:.2f}%, loss/token {loss_total / max(tokens_total, 1):.3f}, "
            f"{time.perf_counter() - t0:.1f}s",
            flush=True,
        )
        if rank == 0:
            print(loader.metrics.format_summary(), flush=True)
    loader.wait_finished()  # its aligner may still be serving slower ranks' last rounds
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--token-budget", type=int, default=2048)
    p.add_argument("--pool-size", type=int, default=256)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
        train(dist.get_rank(), dist.get_world_size(), args)
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    mp.start_processes(train, args=(args.world_size, args), nprocs=args.world_size, start_method="spawn")


if __name__ == "__main__":
    main()
