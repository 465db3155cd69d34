"""A plain PyTorch DDP loop fed by youmu (CPU, Gloo, 2 ranks). Copy this.

    python examples/ddp_youmu.py data/ --steps 50

Each rank gets its own exactly-once share of every epoch (rank and world size come from
torch.distributed); DataLoader workers pack token rows into fixed-length sequences.
"""

from __future__ import annotations

import argparse
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from youmu.torch import YoumuDataset, collate_packed, pack


def run(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    torch.set_num_threads(1)
    ds = YoumuDataset(args.data, columns=[args.column], shuffle="page", seed=0)  # rank/world from dist
    loader = DataLoader(pack(ds, seq_len=args.seq_len), batch_size=4, num_workers=1, collate_fn=collate_packed)
    model = DDP(torch.nn.Sequential(torch.nn.Embedding(args.vocab, 64), torch.nn.Linear(64, args.vocab)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    for epoch in range(10**9):
        ds.set_epoch(epoch)  # reshuffle; every row once per epoch across all ranks
        before = step
        for batch in loader:
            ids = batch["input_ids"].clamp(max=args.vocab - 1)
            loss = torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if rank == 0 and step % 10 == 0:
                print(f"step {step} loss {loss.item():.3f}")
            if step == args.steps:
                dist.destroy_process_group()
                return
        if step == before:  # this rank's share of the data cannot fill a batch: fail, don't spin
            raise RuntimeError(f"rank {rank}: no batch in epoch {epoch}; the dataset is too small for this setup")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--column", default="input_ids")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=50_304)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(2, port, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
