"""Hugging Face ``Trainer`` fed by youmu: Parquet rows → online dynamic batching → Trainer.

Needs ``transformers`` and ``accelerate`` (not in youmu's requirements)::

    pip install transformers accelerate
    python examples/hf_trainer.py                      # one process, CPU
    torchrun --nproc-per-node 2 examples/hf_trainer.py # DDP: every rank the same steps

What it shows:

* a ``youmu.RowDataset`` over Parquet token rows (map-style, sharded by the loader);
* ``DynamicBatchLoader`` forming token-budget batches after preprocessing, with
  ``uneven="pad"``: the ``Trainer`` has no DDP ``Join``, so a rank that runs out of data
  first takes zero-weight filler steps instead of leaving its peers waiting;
* ``make_odb_trainer()``: a ``Trainer`` subclass that takes its batches from the loader
  and multiplies each step's loss by ``info.loss_scale``, so DDP's averaged gradient is
  the exact per-token mean over all ranks' label tokens.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import youmu  # noqa: E402
from youmu.batching import (  # noqa: E402
    DynamicBatchLoader,
    label_token_count,
    make_odb_trainer,  # noqa: E402
    pad_collate,
)

VOCAB = 512


def write_corpus(path: Path, rows: int = 4000, seed: int = 0) -> None:
    """Token rows with long-tailed lengths, as a tokenised dump would have them."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(4.0, 0.8, rows).astype(int), 4, 512)
    ids = [rng.integers(1, VOCAB, n, dtype=np.int32) for n in lengths]
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # ranks may race to write it
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), tmp,
                   data_page_size=64 << 10, write_page_index=True)
    os.replace(tmp, path)


def to_sample(row: dict) -> dict:
    ids = torch.tensor(row["input_ids"], dtype=torch.long)  # a copy: the row's buffer is read-only
    return {"input_ids": ids, "labels": ids.clone()}


class Samples(torch.utils.data.Dataset):
    """Rows of a RowDataset turned into causal-LM samples (runs in the loader's workers)."""

    def __init__(self, rows: youmu.RowDataset) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return to_sample(self.rows[i])


def collate(samples: list[dict]) -> dict:
    return pad_collate(samples)  # input_ids padded with 0, labels with -100, attention_mask


def main() -> None:
    import transformers

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--token-budget", type=int, default=4096)
    p.add_argument("--out", default=None)
    args = p.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="youmu-hf-"))
    out.mkdir(parents=True, exist_ok=True)
    data = out / "tokens.parquet"
    if not data.exists():
        write_corpus(data)

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=512, n_embd=64, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0))
    targs = transformers.TrainingArguments(
        output_dir=str(out / "trainer"), max_steps=args.steps, per_device_train_batch_size=1,
        learning_rate=1e-3, logging_steps=10, save_strategy="no", report_to=[], use_cpu=True,
        dataloader_num_workers=0, ddp_find_unused_parameters=False,
    )
    # Under torchrun, TrainingArguments sets up torch.distributed (Gloo on CPU) when its
    # device is first read. The loader finds its peers at construction, so build it after.
    _ = targs.device
    loader = DynamicBatchLoader(
        Samples(youmu.RowDataset(data, columns=["input_ids"], output="numpy")),
        token_budget=args.token_budget,
        length_fn=lambda s: int(s["input_ids"].shape[0]),
        token_count_fn=label_token_count(),  # tokens that enter the shifted LM loss
        collate_fn=collate,
        buffer_size=256,
        num_workers=0,
        uneven="pad",
        pad_batch=lambda: collate([to_sample({"input_ids": [1, 2]})]),
    )
    Trainer = make_odb_trainer(transformers.Trainer)
    trainer = Trainer(model=model, args=targs)
    trainer.odb_loader = loader
    try:
        trainer.train()
    finally:
        # The Trainer stops at max_steps mid-epoch and abandons the iterator: close the
        # loader, or wait_finished() (and interpreter exit) would wait for a consumer.
        loader.close()
        loader.wait_finished()
    if loader.rank == 0:
        print(loader.metrics.format_summary())


if __name__ == "__main__":
    main()
