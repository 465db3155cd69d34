"""The training loop's wait for data on a GPU: how long each step waits for its batch.

    python benches/gpu_wait.py [--quick] [--step-ms 50] [--steps 200]

Target: at most 3 ms per step (the loop should never see the loader). The "step" is a
chain of matmuls sized to about ``--step-ms`` on the device, launched asynchronously as
a training step is; the wait is the time ``next()`` on the loader plus the batch's
host-to-device copy take on the loop's thread (pinned memory, ``non_blocking=True``),
so it is what the GPU would sit idle for if the loader fell behind. Three feeds over
the same generated data, each with 2 DataLoader workers:

* ``pages`` — ``YoumuDataset`` over ``list<int32>`` token rows (page shuffle), batches
  of 8 padded by ``lm_collate`` in the workers, ``pin_memory=True``;
* ``odb`` — the same rows through ``DynamicBatchLoader`` (one process, no
  torch.distributed), padded and pinned in the loop;
* ``sft`` — chats templated online (``ChatTemplate``, assistant-only labels) into
  ``TrainerLoader``, batches of 8.

Without CUDA it prints "no CUDA" and exits 0 (the script is meant for a lent GPU
machine; ``benches/limits.py`` runs it anyway).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def _tokens(path: Path, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(6.0, 0.8, rows).astype(np.int64), 16, 2048)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 50_000, int(lens.sum()), np.int32)))
    pq.write_table(pa.table({"input_ids": ids}), path, compression="zstd", use_dictionary=False,
                   write_page_index=True, row_group_size=4096)


def _to(batch: Any, device: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch


def measure(batches: Iterable[Any], device: Any, step: Callable[[], None], steps: int) -> dict[str, float]:
    """Per step: the wait for the next batch (``next`` + its non-blocking copy), then the
    step launched; the first 5 steps (workers starting) are not counted."""
    import torch

    it = iter(batches)
    waits = []
    for k in range(steps + 5):
        t = time.perf_counter()
        try:
            b = _to(next(it), device)
        except StopIteration:
            break
        w = time.perf_counter() - t
        if k >= 5:
            waits.append(w * 1e3)
        step()
        del b
    torch.cuda.synchronize()
    if not waits:
        return {"steps": 0}
    return {"steps": len(waits), "wait_p50_ms": round(statistics.median(waits), 3),
            "wait_p99_ms": round(float(np.percentile(waits, 99)), 3), "wait_mean_ms": round(statistics.mean(waits), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--step-ms", type=float, default=50.0, help="the simulated training step")
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA")
        return
    from torch.utils.data import DataLoader

    from youmu.batching import DynamicBatchLoader
    from youmu.torch import YoumuDataset, lm_collate

    dev = torch.device("cuda")
    steps = 40 if a.quick else a.steps
    x = torch.randn(4096, 4096, device=dev)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        x @ x
    torch.cuda.synchronize()
    per = max((time.perf_counter() - t) / 10, 1e-6)
    reps = max(1, round(a.step_ms / 1e3 / per))

    def step() -> None:
        for _ in range(reps):
            x @ x

    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "step_ms": a.step_ms}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tokens.parquet"
        _tokens(path, 20_000 if a.quick else 100_000)
        ds = YoumuDataset(path, shuffle="page", seed=0, output="numpy")
        out["pages"] = measure(DataLoader(ds, batch_size=8, num_workers=2, collate_fn=lm_collate, pin_memory=True,
                                          persistent_workers=False), dev, step, steps)

        def padded(samples: list[Any]) -> Any:
            return {k: v.pin_memory() for k, v in lm_collate(samples).items()}

        dbl = DynamicBatchLoader(ds, token_budget=16384, length_fn=lambda s: len(s["input_ids"]), collate_fn=padded,
                                 num_workers=2)
        out["odb"] = measure((b for b, _ in dbl), dev, step, steps)
        dbl.close()
        try:
            out["sft"] = _sft(Path(d), dev, step, steps)
        except Exception as e:  # noqa: BLE001 - the row says why it did not run
            out["sft"] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
    worst = max((v.get("wait_p50_ms", 0) for v in out.values() if isinstance(v, dict)), default=0)
    print(f"p50 wait per step: pages {out['pages'].get('wait_p50_ms')} ms, odb {out['odb'].get('wait_p50_ms')} ms, "
          f"sft {out['sft'].get('wait_p50_ms', out['sft'].get('error'))} ms (worst {worst} ms; {out['device']})")


def _sft(d: Path, dev: Any, step: Callable[[], None], steps: int) -> dict[str, float]:
    """Chats templated online into ``TrainerLoader``, as ``examples/sft_demo.py`` feeds
    its ``Trainer``."""
    import bench_text as bt
    import pyarrow as pa
    import pyarrow.parquet as pq
    from torch.utils.data import DataLoader

    from youmu.text import ChatTemplate
    from youmu.torch import YoumuDataset, lm_collate

    texts = bt.corpus(4000)
    tok = bt.tokenizer(texts, 8000)
    chats = [[{"role": "user", "content": texts[i]}, {"role": "assistant", "content": texts[i + 1]}]
             for i in range(0, len(texts) - 1, 2)]
    path = d / "chats.parquet"
    pq.write_table(pa.table({"messages": chats}), path, row_group_size=256)
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{% if m['role'] == 'assistant' %}"
                         "{% generation %}{{ m['content'] }}{% endgeneration %}{% else %}{{ m['content'] }}"
                         "{% endif %}{% endfor %}")
    ds = YoumuDataset(path, shuffle="page", seed=0, output="numpy", transform=ChatTemplate(tok))
    return measure(DataLoader(ds, batch_size=8, num_workers=2, collate_fn=lm_collate, pin_memory=True), dev, step,
                   steps)


if __name__ == "__main__":
    main()
