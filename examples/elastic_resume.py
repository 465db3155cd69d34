"""Elastic resume: train the demo's tiny GPT on CPU ranks (Gloo, DDP), preempt the job,
and resume it on another number of ranks and DataLoader workers — every row is trained
exactly once per epoch.

Each epoch runs as three jobs. A job is preempted at a step of this script's choosing:
every rank saves its loader's ``state_dict()`` (rank 0 also the model), the processes
exit, and ``youmu.merge_states`` turns the ranks' states into ONE state that every rank
of the next job — another world size, another ``num_workers`` — loads.

* epoch 0: ``YoumuDataset`` through torchdata's ``StatefulDataLoader``,
  4 ranks × 2 workers → 3 ranks × 1 worker → 2 ranks × 1 worker;
* epoch 1: ``DynamicBatchLoader`` (token-budget batches, the same number of steps on
  every rank) over a map-style ``RowDataset``, 4 ranks × 2 workers → 3 × 1 → 2 × 1,
  with a larger ``token_budget`` after the first resume (allowed: it takes effect from
  the resume step, and the step count continues).

At the end it prints one line per epoch, ``verified: ...``, after checking the row ids
every rank trained: each row of the corpus exactly once.

    python examples/elastic_resume.py [--rows 1536] [--out elastic-out]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPTConfig, TinyGPT, lm_loss  # noqa: E402
from trainer_data import VOCAB, launch, workdir  # noqa: E402

#: (ranks, DataLoader workers, steps before the preemption at the default --rows; None: to the epoch's end)
JOBS = [(4, 2, 6), (3, 1, 5), (2, 1, None)]
ODB_BUDGETS = [256, 384, 384]  # token_budget per job of the DynamicBatchLoader epoch
DEFAULT_ROWS = 1536


def write_rows(path: Path, n: int) -> None:
    """``n`` token rows with long-tailed lengths, each with its ``id``."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(2.8, 0.6, n).astype(int), 4, 63)
    ids = [rng.integers(1, VOCAB, m, dtype=np.int32) for m in lengths]
    pq.write_table(pa.table({"id": np.arange(n, dtype=np.int64), "input_ids": pa.array(ids, pa.list_(pa.int32()))}),
                   path, row_group_size=64)


def collate(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Rows padded to the longest (pad id 0, masked out of the loss)."""
    t = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), t, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r["input_ids"])] = torch.as_tensor(r["input_ids"], dtype=torch.long)
    return {"row_id": torch.as_tensor([int(r["id"]) for r in rows]), "input_ids": ids}


def row_tokens(row: dict[str, Any]) -> int:
    return len(row["input_ids"])


def _model(out: Path) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=VOCAB, seq_len=64, d_model=32, n_layers=1, n_heads=2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ckpt = out / "model.pt"
    if ckpt.exists():  # the job before was preempted: continue its model
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
    return torch.nn.parallel.DistributedDataParallel(model), opt


def _loss(model: torch.nn.Module, batch: dict[str, torch.Tensor], scale: float | None) -> torch.Tensor:
    ids = batch["input_ids"]
    logits = model(ids)
    if scale is None:
        return lm_loss(logits, ids, ignore=ids == 0)
    return lm_loss(logits, ids, ignore=ids == 0, reduction="sum") * scale  # exact token-mean across ranks


def _youmu_loader(rank: int, world: int, job: dict[str, Any]) -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from youmu.torch import YoumuDataset

    ds = YoumuDataset(job["data"], columns=["id", "input_ids"], buffer_size=64, seed=1, rank=rank, world_size=world,
                      output="python")
    if job["merged"] is not None:
        ds.load_state_dict(torch.load(job["merged"]))  # the dataset, before the loader is built
    workers = job["workers"]
    return StatefulDataLoader(ds, batch_size=8, collate_fn=collate, num_workers=workers,
                              multiprocessing_context="fork" if workers else None)


def _odb_loader(rank: int, world: int, job: dict[str, Any]) -> Any:
    import youmu
    from youmu.batching import DynamicBatchLoader

    rows = youmu.RowDataset(job["data"], columns=["id", "input_ids"])
    loader = DynamicBatchLoader(rows, token_budget=job["budget"], length_fn=row_tokens, collate_fn=collate,
                                pool_size=64, num_workers=job["workers"], uneven="pad", seed=1,
                                multiprocessing_context="fork" if job["workers"] else None)
    loader.set_epoch(1)
    if job["merged"] is not None:
        loader.load_state_dict(torch.load(job["merged"]))
    return loader


def run_job(rank: int, world: int, job: dict[str, Any]) -> None:
    """One rank of one job: train until the preemption step (or the epoch's end)."""
    out = Path(job["out"])
    model, opt = _model(out)
    odb = job["kind"] == "odb"
    loader = _odb_loader(rank, world, job) if odb else _youmu_loader(rank, world, job)
    trained: list[int] = []
    steps: list[int] = []
    it = iter(loader)
    with model.join(enable=not odb):  # DDP's Join: StatefulDataLoader ranks end at different steps
        for step, item in enumerate(it):
            batch, info = item if odb else (item, None)
            loss = _loss(model, batch, info.loss_scale if info is not None else None)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if info is None or not info.is_padding:
                trained += batch["row_id"].tolist()
            steps.append(info.step if info is not None else step)
            if job["stop"] is not None and len(steps) >= job["stop"]:
                break
    if job["stop"] is not None:  # preempted: every rank saves its loader's state
        torch.save(loader.state_dict(), out / f"state-rank{rank}.pt")
    if rank == 0:  # and the model, for the next job
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict()}, out / "model.pt")
    if odb:
        loader.close()
        loader.wait_finished(60)
    (out / f"{job['name']}-rank{rank}.json").write_text(json.dumps({"rows": trained, "steps": steps}))
    dist.barrier()


def run_epoch(kind: str, data: Path, out: Path, n: int) -> str:
    merged = None
    trained: list[int] = []
    layout = []
    for j, (world, workers, stop) in enumerate(JOBS):
        if stop is not None:  # preempt at the same share of the epoch whatever its size
            stop = max(1, round(stop * n / DEFAULT_ROWS))
        name = f"{kind}-job{j}"
        job = dict(kind=kind, name=name, data=str(data), out=str(out), merged=merged, workers=workers, stop=stop,
                   budget=ODB_BUDGETS[j])
        t0 = time.perf_counter()
        launch(run_job, world, job)
        ranks = [json.loads((out / f"{name}-rank{r}.json").read_text()) for r in range(world)]
        trained += [i for r in ranks for i in r["rows"]]
        steps = {len(r["steps"]) for r in ranks}
        span = f"{ranks[0]['steps'][0]}..{ranks[0]['steps'][-1]}" if ranks[0]["steps"] else "none"
        print(f"  {kind} job {j}: {world} ranks x {workers} workers, steps {span} "
              f"(steps per rank {sorted(steps)}), {sum(len(r['rows']) for r in ranks)} rows, "
              f"{time.perf_counter() - t0:.1f}s" + (" -> preempted" if stop is not None else ""))
        if stop is not None:
            import youmu

            states = [torch.load(out / f"state-rank{r}.pt") for r in range(world)]
            merged = str(out / f"{kind}-merged{j}.pt")
            torch.save(youmu.merge_states(states), merged)
            for r in range(world):
                (out / f"state-rank{r}.pt").unlink()
        layout.append(f"{world}x{workers}")
    counts = Counter(trained)
    once = sorted(counts) == list(range(n)) and max(counts.values()) == 1
    missing = n - len(counts)
    repeated = sum(1 for c in counts.values() if c > 1)
    verdict = "every row trained exactly once" if once else f"FAILED ({missing} rows missing, {repeated} repeated)"
    return f"verified: {kind}: {len(trained)} of {n} rows over jobs {' -> '.join(layout)}: {verdict}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows of the corpus (the test runs 384)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = workdir(args.out, "youmu-elastic-")
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.pt").unlink(missing_ok=True)
    data = out / "rows.parquet"
    write_rows(data, args.rows)
    lines = []
    for kind in ("youmu", "odb"):
        what = "YoumuDataset + StatefulDataLoader" if kind == "youmu" else "DynamicBatchLoader"
        print(f"epoch {0 if kind == 'youmu' else 1} ({what}):", flush=True)
        lines.append(run_epoch(kind, data, out, args.rows))
    for line in lines:
        print(line)
    return 0 if all("exactly once" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
