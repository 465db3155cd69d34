"""Hugging Face ``Trainer`` fed by youmu vs fed the usual ways, side by side on the same data
and model (2 CPU ranks over Gloo, a 1-layer GPT-2, Parquet token rows).

Contenders:

* ``youmu``: ``TrainerLoader(YoumuDataset(...))`` through ``youmu.integrations.hf``;
* ``map-style``: a ``torch.utils.data.Dataset`` over the rows read into memory, given to
  the Trainer as ``train_dataset`` (its ``RandomSampler`` + Accelerate sharding);
* ``hf-map`` / ``hf-stream``: HF ``datasets`` as its docs suggest for the Trainer —
  ``load_dataset("parquet")`` (Arrow conversion, per-rank cache) as ``train_dataset``, or
  ``streaming=True`` split per rank by ``split_dataset_by_node`` (``dispatch_batches``
  off, as for ``iterable``). ``datasets``' pins conflict with the project venv's, so these
  two run in the peers' interpreter (``make peers-venv``: the same torch, transformers
  and accelerate versions), on the same file; without it they are skipped with a line;
* ``lightning-youmu`` / ``lightning-map``: Lightning with DDP, fed by ``YoumuDataModule``
  or by a plain ``DataLoader(shuffle=True)`` over the in-memory rows (what Lightning's
  docs suggest; it injects a ``DistributedSampler``);
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
For Lightning the wait is the time between one step's end and the next one's start.

    python benches/bench_trainers.py --rows 20000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import PEERS_PYTHON, peers_python  # noqa: E402

VOCAB = 256
BATCH = 16
CONTENDERS = ("youmu", "map-style", "iterable", "hf-map", "hf-stream", "lightning-youmu", "lightning-map")


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

    from youmu.torch import lm_collate

    transformers.set_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=1, n_head=2))
    targs = transformers.TrainingArguments(
        output_dir=out, max_steps=max_steps, per_device_train_batch_size=BATCH, learning_rate=1e-3, report_to=[],
        use_cpu=True, disable_tqdm=True, logging_strategy="no", save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500, dataloader_num_workers=0, ddp_find_unused_parameters=False,
        # an iterable's padded batches differ in shape: rank-0 dispatch (the default for
        # iterables) raises, so each rank reads its own split
        accelerator_config={"dispatch_batches": False} if kind in ("iterable", "hf-stream") else None,
    )
    if kind == "youmu":
        from youmu.integrations.hf import make_trainer

        base = make_trainer()
    else:
        base = transformers.Trainer

    class Bench(base):  # type: ignore[misc, valid-type]
        def get_train_dataloader(self) -> Any:
            loader = super().get_train_dataloader()
            return Timed(loader, timed) if timed is not None else loader

    if kind == "youmu":
        from youmu.integrations import TrainerLoader
        from youmu.torch import YoumuDataset

        ds = YoumuDataset(path, columns=["input_ids"], drop_last=True, transform=lm_sample, seed=0)
        return Bench(model=model, args=targs, train_loader=TrainerLoader(ds, batch_size=BATCH, collate_fn=lm_collate))
    if kind.startswith("hf-"):
        data = hf_dataset(kind, path)
        return Bench(model=model, args=targs, train_dataset=data, data_collator=hf_collate)
    data = MapRows(path) if kind == "map-style" else StreamRows(path, dist.get_rank(), dist.get_world_size())
    return Bench(model=model, args=targs, train_dataset=data, data_collator=lm_collate)


def hf_collate(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    from youmu.torch import lm_collate

    return lm_collate([lm_sample(r) for r in rows])


def hf_dataset(kind: str, path: str) -> Any:
    """HF ``datasets`` as its docs suggest for a Trainer: map-style (``load_dataset``'s
    Arrow conversion, per-rank cache folder) or streaming, split per rank with
    ``split_dataset_by_node``."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    datasets.disable_progress_bars()
    if kind == "hf-map":
        cache = f"{Path(path).parent}/hf-cache-{dist.get_rank()}"
        return datasets.load_dataset("parquet", data_files=path, split="train", cache_dir=cache).with_format("numpy")
    ds = datasets.load_dataset("parquet", data_files=path, split="train", streaming=True).with_format("numpy")
    return split_dataset_by_node(ds, rank=dist.get_rank(), world_size=dist.get_world_size())


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


def lightning_main(rank: int, world: int, port: int, kind: str, path: str, work: str, steps: int, result: str) -> None:
    """Lightning with DDP over Gloo: ``youmu`` through ``YoumuDataModule``, or a plain
    ``DataLoader(shuffle=True)`` over the in-memory rows (Lightning injects its
    ``DistributedSampler``). The wait for data is the time from one step's end to the
    next one's start (Lightning fetches inside its loop, so a loader cannot be wrapped
    without hiding it from Lightning's sampler injection)."""
    import lightning.pytorch as pl
    import transformers
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.strategies import DDPStrategy

    from youmu.integrations import TrainerLoader
    from youmu.integrations.lightning import YoumuDataModule
    from youmu.torch import YoumuDataset, lm_collate

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            transformers.set_seed(0)
            self.model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
                vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=1, n_head=2))

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
            return self.model(**batch).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Waits(pl.Callback):
        def __init__(self) -> None:
            self.waits: list[float] = []
            self.last: float | None = None
            self.first: float | None = None

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            now = time.perf_counter()
            self.first = self.first or now
            if self.last is not None:
                self.waits.append(now - self.last)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.last = time.perf_counter()

    def fit(max_steps: int, ckpt: str | None, cbs: list[Any]) -> None:
        trainer = pl.Trainer(
            accelerator="cpu", devices=world, strategy=DDPStrategy(process_group_backend="gloo"), max_epochs=1,
            max_steps=max_steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
            default_root_dir=f"{work}/{kind}", enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in cbs),
            callbacks=cbs)
        if kind == "lightning-youmu":
            def make_loader() -> TrainerLoader:
                ds = YoumuDataset(path, columns=["input_ids"], drop_last=True, transform=lm_sample, seed=0)
                return TrainerLoader(ds, batch_size=BATCH, collate_fn=lm_collate)

            trainer.fit(Module(), datamodule=YoumuDataModule(make_loader), ckpt_path=ckpt)
        else:
            loader = torch.utils.data.DataLoader(MapRows(path), batch_size=BATCH, shuffle=True, collate_fn=lm_collate)
            trainer.fit(Module(), train_dataloaders=loader, ckpt_path=ckpt)

    half = steps // 2
    waits = Waits()
    saver = ModelCheckpoint(dirpath=f"{work}/{kind}-ckpt", every_n_train_steps=half, save_top_k=-1)
    t0 = time.perf_counter()
    fit(steps, None, [waits, saver])
    wall = time.perf_counter() - t0
    first = Waits()
    ckpt = sorted(Path(f"{work}/{kind}-ckpt").glob(f"*step={half}*.ckpt"))[0]
    t1 = time.perf_counter()
    fit(half + 1, str(ckpt), [first])  # one step past the checkpoint
    if rank == 0:
        ms = sorted(w * 1000 for w in waits.waits)
        Path(result).write_text(json.dumps({
            "contender": kind, "steps": steps, "samples_per_s": steps * BATCH * world / wall,
            "wait_p50_ms": statistics.median(ms), "wait_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
            "resume_at_50pct_s": (first.first or time.perf_counter()) - t1,
        }))
    dist.destroy_process_group()


def spawn(kind: str, path: str, work: str, steps: int) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res_file = f"{work}/{kind}.json"
    fn = lightning_main if kind.startswith("lightning-") else rank_main
    mp.spawn(fn, args=(2, port, kind, path, work, steps, res_file), nprocs=2, join=True)
    return json.loads(Path(res_file).read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--out", default="benches/trainers.json")
    p.add_argument("--peers-python", default=PEERS_PYTHON, help="runs the hf-* contenders (make peers-venv)")
    p.add_argument("--data", help="internal: the Parquet file (the peers' run reuses the main run's)")
    args = p.parse_args()
    kinds = args.contenders.split(",")
    if args.data:  # the peers' interpreter, started below: run what it was given
        work = str(Path(args.data).parent)
        res = [spawn(k, args.data, work, args.rows // (BATCH * 2)) for k in kinds]
        Path(args.out).write_text(json.dumps(res))
        return
    work = tempfile.mkdtemp(prefix="youmu-bench-trainers-")
    path = f"{work}/rows.parquet"
    write_rows(Path(path), args.rows)
    steps = args.rows // (BATCH * 2)  # one epoch over 2 ranks
    results = []
    peers = [k for k in kinds if k.startswith("hf-")]
    py = peers_python(args.peers_python, "HF datasets contenders") if peers else None
    for kind in kinds:
        if kind.startswith("hf-"):
            if py is None or kind != peers[0]:
                continue
            # HF `datasets` lives in the peers' venv: its contenders run there, on the same file
            out = f"{work}/peers.json"
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(Path(__file__).resolve().parents[1] / "python"), os.environ.get("PYTHONPATH", "")]))
            run = subprocess.run([py, __file__, "--rows", str(args.rows), "--contenders", ",".join(peers),
                                  "--data", path, "--out", out], env=env, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"HF datasets contenders failed: {run.stderr[-2000:]}", flush=True)
                continue
            got = json.loads(Path(out).read_text())
        else:
            got = [spawn(kind, path, work, steps)]
        for r in got:
            results.append(r)
            print(json.dumps(r), flush=True)
    Path(args.out).write_text(json.dumps({"rows": args.rows, "batch": BATCH, "ranks": 2, "results": results}, indent=1))
    print("| contender | samples/s | wait p50 ms | wait p99 ms | resume at 50% (s) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['contender']} | {r['samples_per_s']:.0f} | {r['wait_p50_ms']:.2f} | {r['wait_p99_ms']:.2f} | "
              f"{r['resume_at_50pct_s']:.2f} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
