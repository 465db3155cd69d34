"""Shared by the trainer examples (train_hf.py, train_accelerate.py, train_lightning.py,
train_mesh.py): a small synthetic token corpus in Parquet (two sources with long-tailed
lengths) and a launcher that starts ranks on 127.0.0.1 with the environment torchrun
would give them (so each trainer finds its process group as in a real job).
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

VOCAB = 256


def write_corpus(out: Path, rows: dict[str, int] | None = None) -> dict[str, Path]:
    """``{source: parquet path}``: token rows (``input_ids``) with long-tailed lengths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for k, (name, n) in enumerate((rows or {"web": 768, "code": 256}).items()):
        path = out / f"{name}.parquet"
        if not path.exists():
            rng = np.random.default_rng(k)
            lengths = np.clip(rng.lognormal(3.3, 0.7, n).astype(int), 4, 192)
            ids = [rng.integers(1, VOCAB, m, dtype=np.int32) for m in lengths]
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), tmp,
                           data_page_size=16 << 10, write_page_index=True)
            os.replace(tmp, path)
        paths[name] = path
    return paths


def lm_sample(row: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A Parquet row as a causal-LM sample (labels = inputs; the model shifts them)."""
    ids = torch.as_tensor(row["input_ids"], dtype=torch.long)
    return {"input_ids": ids, "labels": ids.clone()}


class LMSamples:
    """A map-style dataset (a ``RowDataset``, a ``MixtureDataset``) of rows as LM samples."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return lm_sample(self.rows[i])


def _entry(rank: int, world: int, port: int, fn: Callable[..., None], args: Any) -> None:
    # mp.spawn leaves "spawn" as its children's start method, so each rank's DataLoader
    # workers would be fresh interpreters importing torch and the tokenizer again (tens of
    # seconds on a loaded machine). Ranks started by torchrun use the platform's default
    # (fork on Linux): so do these.
    multiprocessing.set_start_method(None, force=True)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        fn(rank, world, args)
    finally:
        dist.destroy_process_group()


def launch(fn: Callable[..., None], world: int, args: Any) -> None:
    """Run ``fn(rank, world, args)`` on ``world`` CPU ranks over Gloo (as torchrun would)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_entry, args=(world, port, fn, args), nprocs=world, join=True)


def workdir(given: str | None, prefix: str) -> Path:
    return Path(given) if given else Path(tempfile.mkdtemp(prefix=prefix))
