"""Hugging Face ``Trainer`` fed by youmu vs fed the usual ways, side by side on the same data
and model (2 CPU ranks over Gloo, a 1-layer GPT-2, Parquet token rows).

Contenders:

* ``youmu``: ``TrainerLoader(YoumuDataset(...))`` through ``youmu.integrations.hf``;
* ``map-style``: a ``torch.utils.data.Dataset`` over the rows read into memory, given to
  the Trainer as ``train_dataset`` (its ``RandomSampler`` + Accelerate sharding; what
  Lightning's and PyTorch's docs suggest). HF ``datasets`` itself is not used: its pins
  conflict with the project's venv (``make peers-venv`` keeps it apart), and a Trainer
  needs it in the same process;
* ``iterable``: a ``torch.utils.data.IterableDataset`` streaming the Parquet file (what
  HF's docs suggest for data that does not fit in memory, as ``datasets``' streaming mode
  does), each rank keeping its split of the rows as ``split_dataset_by_node`` would:
  the Trainer then needs ``max_steps``, cannot dispatch from rank 0 (``dispatch_batches``
  raises on padded batches of different shapes, so it is turned off) and resumes by
  reading and dropping the consumed batches one by one.

Figures per contender: training samples/s over the run, the training loop's wait for
each batch (p50/p99 of the time ``next()`` on the loader takes), and the time a resume
at 50 % of the epoch takes from ``train(resume_from_checkpoint=...)`` to the first
batch of the resumed run (model, optimizer and data state loaded, data positioned).

    python benches/bench_trainers.py --rows 20000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

VOCAB = 256
BATCH = 16


def write_rows(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(3.3, 0.6, rows).astype(int), 4, 128)
    ids = [rng.integers(1, VOCAB, n, dtype=np.int32) for n in lengths]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), path, data_page_size=64 << 10,
                   write_page_index=True)


def lm_sample(row: dict[str, Any]) -> dict[str, torch.Tensor]:
    ids = torch.as_tensor(row["input_ids"], dtype=torch.long)
    return {"input_ids": ids, "labels": ids.clone()}


class MapRows(torch.utils.data.Dataset):
    """The rows in memory, map-style."""

    def __init__(self, path: str) -> None:
        self.rows = pq.read_table(path).column("input_ids").to_pylist()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return lm_sample({"input_ids": self.rows[i]})


class StreamRows(torch.utils.data.IterableDataset):
    """The rows streamed from Parquet, record batch by record batch; each rank keeps every
    W-th row (what ``datasets.distributed.split_dataset_by_node`` does for a stream)."""

    def __init__(self, path: str, rank: int, world: int) -> None:
        self.path, self.rank, self.world = path, rank, world

    def __iter__(self):
        k = 0
        for rb in pq.ParquetFile(self.path).iter_batches(batch_size=1024, columns=["input_ids"]):
            for ids in rb.column(0).to_pylist():
                if k % self.world == self.rank:
                    yield lm_sample({"input_ids": ids})
                k += 1


class Timed:
    """The loader the Trainer iterates, timing each ``next()`` (the loop's wait for data)."""

    def __init__(self, inner: Any, waits: list[float]) -> None:
        self.inner, self.waits = inner, waits

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __iter__(self):
        it = iter(self.inner)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.waits.append(time.perf_counter() - t0)
            yield batch


def make(kind: str, path: str, out: str, *, max_steps: int, save_steps: int, timed: list[float] | None) -> Any:
    import transformers

    from youmu.integrations import TrainerLoader
    from youmu.integrations.hf import make_trainer
    from youmu.torch import YoumuDataset, lm_collate

    transformers.set_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=1, n_head=2))
    targs = transformers.TrainingArguments(
        output_dir=out, max_steps=max_steps, per_device_train_batch_size=BATCH, learning_rate=1e-3, report_to=[],
        use_cpu=True, disable_tqdm=True, logging_strategy="no", save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500, dataloader_num_workers=0, ddp_find_unused_parameters=False,
        # an iterable's padded batches differ in shape: rank-0 dispatch (the default for
        # iterables) raises, so each rank reads its own split
        accelerator_config={"dispatch_batches": False} if kind == "iterable" else None,
    )
    base = make_trainer() if kind == "youmu" else transformers.Trainer

    class Bench(base):  # type: ignore[misc, valid-type]
        def get_train_dataloader(self) -> Any:
            loader = super().get_train_dataloader()
            return Timed(loader, timed) if timed is not None else loader

    if kind == "youmu":
        ds = YoumuDataset(path, columns=["input_ids"], drop_last=True, transform=lm_sample, seed=0)
        return Bench(model=model, args=targs, train_loader=TrainerLoader(ds, batch_size=BATCH, collate_fn=lm_collate))
    data = MapRows(path) if kind == "map-style" else StreamRows(path, dist.get_rank(), dist.get_world_size())
    return Bench(model=model, args=targs, train_dataset=data, data_collator=lm_collate)


def rank_main(rank: int, world: int, port: int, kind: str, path: str, work: str, steps: int, result: str) -> None:
    import transformers

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    half = steps // 2
    # the full run: throughput and the wait for data
    waits: list[float] = []
    trainer = make(kind, path, f"{work}/{kind}", max_steps=steps, save_steps=half, timed=waits)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    # resume at 50 %: from train() to the first batch of the resumed run
    first: dict[str, float] = {}

    class FirstStep(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # after the first batch was fetched
            first.setdefault("t", time.perf_counter())
            control.should_training_stop = True

    trainer = make(kind, path, f"{work}/{kind}", max_steps=steps, save_steps=0, timed=None)
    trainer.add_callback(FirstStep())
    t1 = time.perf_counter()
    trainer.train(resume_from_checkpoint=f"{work}/{kind}/checkpoint-{half}")
    resume = first["t"] - t1
    if rank == 0:
        ms = sorted(w * 1000 for w in waits)
        Path(result).write_text(json.dumps({
            "contender": kind, "steps": steps, "samples_per_s": steps * BATCH * world / wall,
            "wait_p50_ms": statistics.median(ms), "wait_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
            "resume_at_50pct_s": resume,
        }))
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--contenders", default="youmu,map-style,iterable")
    p.add_argument("--out", default="benches/trainers.json")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="youmu-bench-trainers-")
    path = f"{work}/rows.parquet"
    write_rows(Path(path), args.rows)
    steps = args.rows // (BATCH * 2)  # one epoch over 2 ranks
    results = []
    for kind in args.contenders.split(","):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        res_file = f"{work}/{kind}.json"
        mp.spawn(rank_main, args=(2, port, kind, path, work, steps, res_file), nprocs=2, join=True)
        results.append(json.loads(Path(res_file).read_text()))
        print(json.dumps(results[-1]), flush=True)
    Path(args.out).write_text(json.dumps({"rows": args.rows, "batch": BATCH, "ranks": 2, "results": results}, indent=1))
    print("| contender | samples/s | wait p50 ms | wait p99 ms | resume at 50% (s) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['contender']} | {r['samples_per_s']:.0f} | {r['wait_p50_ms']:.2f} | {r['wait_p99_ms']:.2f} | "
              f"{r['resume_at_50pct_s']:.2f} |")


if __name__ == "__main__":
    main()
