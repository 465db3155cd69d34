"""Shuffle quality at small scale (the paper's Table 3 experiment): train the same tiny
GPT for the same number of tokens with shuffle = none / local / page / row on a corpus
written in source order (clustered, as real dumps are), several seeds, and report
validation perplexity on held-out documents from every source.

    python benches/shuffle_quality.py --steps 300 --seeds 3

The corpus is the demo's (Python sources on this machine, one Parquet source per
package, concatenated in name order). Documents whose path hashes to 0 mod 200 are held
out for validation (filtered from training by a transform).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def held_out(path: str) -> bool:
    return zlib.crc32(path.encode()) % 200 == 0


def _train_filter(row):
    return None if held_out(row["path"]) else {"input_ids": row["input_ids"]}


def run(mode: str, seed: int, steps: int, corpus: str, seq_len: int = 256, batch: int = 8) -> dict:
    import torch

    import youmu
    from model import GPTConfig, TinyGPT, lm_loss
    from youmu.torch import YoumuDataset, collate_packed, pack

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    manifest = json.loads((Path(corpus) / "manifest.json").read_text())
    names = sorted(manifest["sources"])
    index = youmu.PageIndex.concat([youmu.PageIndex(Path(corpus) / n, columns=["input_ids", "path"]) for n in names])
    ds = YoumuDataset(index, shuffle=mode, buffer_size=256, seed=seed, transform=_train_filter, output="torch")
    packed = pack(ds, seq_len=seq_len, eos_id=manifest["eos_id"])
    model = TinyGPT(GPTConfig(vocab_size=manifest["vocab_size"], seq_len=seq_len))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    it = iter(packed)
    t0 = time.time()
    for _ in range(steps):
        b = collate_packed([next(it) for _ in range(batch)])
        loss = lm_loss(model(b["input_ids"], b["position_ids"]), b["input_ids"], b["position_ids"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    # validation: every held-out document, packed the same way, no shuffle
    val = YoumuDataset(index, shuffle="none", output="torch",
                       transform=lambda r: {"input_ids": r["input_ids"]} if held_out(r["path"]) else None)
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        seqs = list(pack(val, seq_len=seq_len, eos_id=manifest["eos_id"]))
        for i in range(0, len(seqs), 16):
            b = collate_packed(seqs[i : i + 16])
            total += lm_loss(model(b["input_ids"], b["position_ids"]), b["input_ids"], b["position_ids"],
                             reduction="sum").item()
            pos = b["position_ids"][:, 1:]
            count += int((pos != 0).sum())
    return {"mode": mode, "seed": seed, "val_loss": total / count, "val_ppl": math.exp(total / count),
            "train_loss": loss.item(), "seconds": time.time() - t0, "val_tokens": count}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="demo-out/corpus")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="benches/shuffle_quality.json")
    a = ap.parse_args()
    from corpus import build

    build(Path(a.corpus))
    modes = ["none", "local", "page", "row"]
    jobs = [(m, s) for s in range(a.seeds) for m in modes]
    with ProcessPoolExecutor(a.jobs) as ex:
        results = list(ex.map(run, *zip(*jobs), [a.steps] * len(jobs), [a.corpus] * len(jobs)))
    Path(a.out).write_text(json.dumps(results, indent=1))
    by = {m: [r["val_loss"] for r in results if r["mode"] == m] for m in modes}
    print(f"\n## Shuffle quality: tiny GPT, {a.steps} steps x 8 x 256 tokens, {a.seeds} seeds, clustered corpus\n")
    print("| shuffle | val loss (mean ± std) | val perplexity | share of the no-shuffle degradation |")
    print("|---|---|---|---|")
    row = np.mean(by["row"])
    gap = np.mean(by["none"]) - row
    for m in modes:
        v = np.array(by[m])
        share = (v.mean() - row) / gap if gap > 0 else float("nan")
        print(f"| {m} | {v.mean():.3f} ± {v.std():.3f} | {math.exp(v.mean()):.1f} | {share:.0%} |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.bar(modes, [np.mean(by[m]) for m in modes], yerr=[np.std(by[m]) for m in modes], capsize=4)
        ax.set(ylabel="validation loss", title="shuffle mode vs validation loss")
        lo = min(np.mean(by[m]) for m in modes)
        ax.set_ylim(lo * 0.95, None)
        fig.tight_layout()
        fig.savefig(ROOT / "benches" / "shuffle_quality.png", dpi=100)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
