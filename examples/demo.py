"""youmu demo: train a tiny GPT with 2 DDP ranks on CPU (Gloo), fed straight from
Parquet by youmu.

1. builds a real multi-source corpus from the Python sources on this machine
   (``examples/corpus.py``; no download), one Parquet source per package;
2. indexes every source (progress bar) and forms a weighted mixture of them;
3. streams with page-level shuffling, exact sharding over the two ranks, packing;
4. trains for a fixed number of steps, showing tokens/s, loss and padding;
5. writes ``demo-out/summary.json`` and ``demo-out/training.png``.

    python examples/demo.py [--steps 200] [--out demo-out]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import build as build_corpus  # noqa: E402
from model import GPTConfig, TinyGPT, lm_loss  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_index(corpus: Path, manifest: dict, progress: bool = True):
    """One page space over all sources (files shared, nothing copied)."""
    import youmu
    from tqdm import tqdm

    names = sorted(manifest["sources"])
    parts = []
    for name in tqdm(names, desc="indexing sources", unit="source", disable=not progress):
        parts.append(youmu.PageIndex(corpus / name, columns=["input_ids", "source"]))
    return names, youmu.PageIndex.concat(parts)


def train(rank: int, world: int, port: int, args: argparse.Namespace, manifest: dict, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=120))
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    from youmu.torch import YoumuDataset, collate_packed, pack

    corpus = Path(args.out) / "corpus"
    names, index = make_index(corpus, manifest, progress=rank == 0)
    tally: dict[str, int] = {n: 0 for n in names}

    def count_source(row):  # realised mixture: tokens delivered per source
        tally[row["source"]] += len(row["input_ids"])
        return {"input_ids": row["input_ids"]}

    ds = YoumuDataset(index, shuffle="page", buffer_size=512, seed=args.seed, rank=rank, world_size=world,
                      transform=count_source)
    packed = pack(ds, seq_len=args.seq_len, eos_id=manifest["eos_id"])
    # loading runs in this process (it is cheap next to the model step) so the tally is ours
    loader = DataLoader(packed, batch_size=args.batch_size, collate_fn=collate_packed, num_workers=0)

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=manifest["vocab_size"], seq_len=args.seq_len)
    model = DDP(TinyGPT(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    bar = None
    if rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=args.steps, desc="training", unit="step")
    history = []
    tokens = 0
    t0 = time.perf_counter()
    it = iter(loader)
    for step in range(args.steps):
        try:
            batch = next(it)
        except StopIteration:  # next epoch
            packed.set_epoch(packed.dataset.epoch + 1)
            it = iter(loader)
            batch = next(it)
        logits = model(batch["input_ids"], batch["position_ids"])
        loss = lm_loss(logits, batch["input_ids"], batch["position_ids"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        tokens += batch["input_ids"].numel()
        stats = torch.tensor([loss.item(), float(tokens)])
        dist.all_reduce(stats)
        elapsed = time.perf_counter() - t0
        rec = {"step": step, "loss": stats[0].item() / world, "tokens": stats[1].item(), "seconds": elapsed,
               "tokens_per_s": stats[1].item() / elapsed, "padding": 0.0}
        history.append(rec)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}", pad="0.0%")
    if bar is not None:
        bar.close()
    results[rank] = {"history": history, "steps": args.steps, "source_tokens": dict(tally)}
    dist.destroy_process_group()


def summarize(out: Path, results: dict, manifest: dict, args: argparse.Namespace) -> dict:
    h = results[0]["history"]
    seen: dict[str, int] = {}
    for r in results.values():
        for k, v in r["source_tokens"].items():
            seen[k] = seen.get(k, 0) + v
    total_seen = max(sum(seen.values()), 1)
    total_corpus = sum(s["tokens"] for s in manifest["sources"].values())
    shares = {
        k: {"target": round(manifest["sources"][k]["tokens"] / total_corpus, 4), "realised": round(v / total_seen, 4)}
        for k, v in sorted(seen.items(), key=lambda kv: -manifest["sources"][kv[0]]["tokens"])
    }
    summary = {
        "steps_per_rank": {r: results[r]["steps"] for r in sorted(results)},
        "final_loss": h[-1]["loss"],
        "first_loss": h[0]["loss"],
        "tokens": h[-1]["tokens"],
        "tokens_per_s": h[-1]["tokens_per_s"],
        "seconds": h[-1]["seconds"],
        "sources": len(manifest["sources"]),
        "mixture_shares": shares,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
        ax[0].plot([r["step"] for r in h], [r["loss"] for r in h])
        ax[0].set(xlabel="step", ylabel="loss", title="training loss (mean over ranks)")
        ax[1].plot([r["step"] for r in h], [r["tokens_per_s"] for r in h])
        ax[1].set(xlabel="step", ylabel="tokens/s", title="throughput (all ranks)")
        fig.tight_layout()
        fig.savefig(out / "training.png", dpi=100)
    except ImportError:
        pass
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="demo-out")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.time()
    manifest = build_corpus(out / "corpus")
    print(f"corpus: {len(manifest['sources'])} sources, "
          f"{sum(s['tokens'] for s in manifest['sources'].values()):,} tokens ({time.time() - t0:.0f}s)")
    results = mp.Manager().dict()
    mp.spawn(train, args=(args.world_size, free_port(), args, manifest, results), nprocs=args.world_size, join=True)
    summary = summarize(out, dict(results), manifest, args)
    print(json.dumps(summary, indent=1))
    print(f"wrote {out / 'summary.json'} and {out / 'training.png'}")


if __name__ == "__main__":
    main()
