"""youmu demo: train a tiny GPT with 2 DDP ranks on CPU (Gloo), fed straight from
Parquet by youmu.

1. builds a real multi-source corpus from the Python sources on this machine
   (``examples/corpus.py``; no download), one Parquet source per package;
2. indexes every source (progress bar) and forms a weighted mixture of them;
3. streams the mixture with exact sharding over the two ranks and batches it with
   online dynamic batching (``youmu.batching.DynamicBatchLoader``: token-budget
   batches of length-grouped document chunks, the same number of steps on every
   rank, exact per-token loss scaling), or with ``--batching packing`` packs
   documents into fixed-length sequences instead;
4. trains for a fixed number of steps, showing tokens/s, loss and padding;
5. writes ``demo-out/summary.json`` and ``demo-out/training.png``.

    python examples/demo.py [--steps 200] [--batching odb|packing] [--out demo-out] [--corpus-mb 24]
    python examples/demo.py --vlm [--out vlm-out]    # the vision-language demo (examples/vlm_demo.py)
    python examples/demo.py --sft [--out sft-out]    # the chat SFT demo with the HF Trainer (examples/sft_demo.py)
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


TINY = "stdlib.tomllib"  # a few KB of source: upweighted so it is visibly sampled


def stage_weights(manifest: dict) -> list:
    """Two weight stages over the sources: token-proportional to start with, then a
    curriculum switch that favours the standard library 3:1; the tiny source (a few KB)
    gets 5% throughout, far above its natural 0.04%, so it is visibly sampled (and
    restarted with a fresh permutation each pass)."""
    tokens = {n: s["tokens"] for n, s in manifest["sources"].items()}
    total = sum(tokens.values())
    first = {n: t / total for n, t in tokens.items()}
    second = {n: (3.0 if n.startswith("stdlib") else 1.0) * t / total for n, t in tokens.items()}
    out = []
    for w in (first, second):
        w = {n: v * 0.95 / (sum(w.values()) - w.get(TINY, 0)) for n, v in w.items() if n != TINY}
        w[TINY] = 0.05
        out.append(w)
    return out


def make_mixture(corpus: Path, manifest: dict, args: argparse.Namespace, progress: bool = True):
    """A MixtureDataset over one map-style Parquet source per package (nothing copied)."""
    from tqdm import tqdm

    import youmu

    names = sorted(manifest["sources"])
    children = {}
    for name in tqdm(names, desc="indexing sources", unit="source", disable=not progress):
        children[name] = youmu.RowDataset(corpus / name, columns=["input_ids", "source"], output="torch")
    return mixture_of(children, manifest, args), names


def mixture_plan(manifest: dict, args: argparse.Namespace) -> tuple[list, int]:
    """Stages and length: the switch lands halfway through the documents the run needs
    (documents are whole source files, ~7k tokens on average)."""
    mean_doc = sum(s["tokens"] for s in manifest["sources"].values()) / sum(s["rows"] for s in manifest["sources"].values())
    docs = int(args.steps * args.batch_size * args.world_size * args.seq_len / mean_doc) + 1
    first, second = stage_weights(manifest)
    return [(0, first), (max(docs // 2, 1), second)], 4 * docs + 64


def mixture_of(children: dict, manifest: dict, args: argparse.Namespace):
    import youmu

    stages, length = mixture_plan(manifest, args)
    return youmu.MixtureDataset(children, stages, seed=args.seed, block_size=64, length=length)


def train(rank: int, world: int, port: int, args: argparse.Namespace, manifest: dict, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=120))
    from torch.nn.parallel import DistributedDataParallel as DDP

    from youmu.torch import MapStream

    corpus = Path(args.out) / "corpus"
    mix, names = make_mixture(corpus, manifest, args, progress=rank == 0)
    tally: dict[str, int] = {n: 0 for n in names}
    docs = [0]

    def count_source(row):  # realised mixture: tokens delivered per source, documents consumed
        tally[row["source"]] += len(row["input_ids"])
        docs[0] += 1
        return {"input_ids": row["input_ids"]}

    # indices dealt round-robin over ranks, so the weight stage switches at the same step everywhere
    stream = MapStream(mix, rank=rank, world_size=world, transform=count_source)
    batches = odb_batches(stream, args) if args.batching == "odb" else packed_batches(stream, args, manifest)

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=manifest["vocab_size"], seq_len=args.seq_len)
    model = DDP(TinyGPT(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    bar = None
    if rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=args.steps, desc=f"training ({args.batching})", unit="step")
    history = []
    totals = torch.zeros(3, dtype=torch.float64)  # real tokens, padded tokens, samples (all ranks)
    t0 = time.perf_counter()
    for step, (batch, info) in enumerate(batches):
        if step == args.steps:
            break
        logits = model(batch["input_ids"], batch.get("position_ids"))
        # sum of next-token losses over this rank's tokens; padding and document starts ignored
        loss_sum = lm_loss(logits, batch["input_ids"], batch.get("position_ids"), ignore=batch.get("pad"),
                           reduction="sum")
        # ODB: this rank's per-token mean times W·t_r/T_tok, so DDP's average of the
        # gradients is the exact per-token mean over all ranks' tokens (Eq. 2)
        loss = loss_sum / max(info["loss_tokens"], 1) * info["loss_scale"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        stats = torch.tensor([float(loss_sum.detach()), info["loss_tokens"], info["real"], info["padded"],
                              info["samples"]], dtype=torch.float64)
        dist.all_reduce(stats)
        totals += stats[2:]
        elapsed = time.perf_counter() - t0
        rec = {"step": step, "loss": stats[0].item() / max(stats[1].item(), 1), "tokens": totals[0].item(),
               "seconds": elapsed, "tokens_per_s": totals[0].item() / elapsed,
               "padding": 1.0 - totals[0].item() / max(totals[1].item(), 1), "samples": stats[4].item()}
        history.append(rec)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}",
                            pad=f"{100 * rec['padding']:.1f}%", bs=int(rec["samples"]))
    if bar is not None:
        bar.close()
    odb = getattr(batches, "loader", None)
    if odb is not None:
        odb.close()  # every rank stops at the same step; the aligner winds down with its peers
        odb.wait_finished()
    results[rank] = {"history": history, "steps": len(history), "source_tokens": dict(tally), "docs": docs[0],
                     "batching": odb.metrics.summary() if odb is not None else None}
    dist.destroy_process_group()


class Chunks(torch.utils.data.IterableDataset):
    """Documents cut into chunks of at most ``max_len`` tokens (the model's context):
    whole source files run from a few tokens to tens of thousands, so samples have the
    varied lengths online dynamic batching is for. Sharding is the inner stream's."""

    def __init__(self, stream, max_len: int) -> None:
        super().__init__()
        self.stream, self.max_len = stream, max_len

    def __iter__(self):
        for doc in self.stream:
            ids = doc["input_ids"]
            for i in range(0, len(ids), self.max_len):
                if len(ids) - i >= 2:  # a 1-token chunk has no next-token target
                    yield {"input_ids": ids[i:i + self.max_len]}


class _Batches:
    """(batch, info) pairs with one info layout for both batching paths."""

    def __init__(self, it, loader=None) -> None:
        self.it, self.loader = it, loader

    def __iter__(self):
        return iter(self.it)


def odb_batches(stream, args: argparse.Namespace) -> _Batches:
    from youmu.batching import DynamicBatchLoader
    from youmu.torch import lm_collate

    def collate(samples):
        batch = lm_collate(samples)
        batch["input_ids"] = batch["input_ids"].long()  # the corpus stores int32 token ids
        batch["pad"] = batch.pop("attention_mask") == 0  # targets at padding are ignored
        return batch

    loader = DynamicBatchLoader(
        Chunks(stream, args.seq_len),
        token_budget=args.batch_size * args.seq_len,  # the packing path's tokens per step
        length_fn=lambda s: len(s["input_ids"]),
        token_count_fn=lambda s: len(s["input_ids"]) - 1,  # next-token targets
        collate_fn=collate,
        pool_size=args.odb_pool,
        num_workers=0,
        timeout=120,
        seed=args.seed,
    )

    def gen():
        for batch, info in loader:
            yield batch, {"loss_tokens": info.num_tokens, "loss_scale": info.loss_scale, "real": info.real_tokens,
                          "padded": info.padded_tokens, "samples": info.num_samples}

    return _Batches(gen(), loader)


def packed_batches(stream, args: argparse.Namespace, manifest: dict) -> _Batches:
    from torch.utils.data import DataLoader

    from youmu.torch import collate_packed, pack

    packed = pack(stream, seq_len=args.seq_len, eos_id=manifest["eos_id"])
    loader = DataLoader(packed, batch_size=args.batch_size, collate_fn=collate_packed, num_workers=0)

    def gen():
        while True:  # the mixture is long enough for the run; restart defensively
            for batch in loader:
                n = batch["input_ids"].numel()
                targets = n - int((batch["position_ids"] == 0).sum())  # each document's first token has no target
                yield batch, {"loss_tokens": targets, "loss_scale": 1.0, "real": n, "padded": n,
                              "samples": batch["input_ids"].shape[0]}

    return _Batches(gen())


def summarize(out: Path, results: dict, manifest: dict, args: argparse.Namespace) -> dict:
    h = results[0]["history"]
    # Realised shares per stage, from the mixture's pure index map: ranks take indices
    # round-robin, so together they consumed indices [0, D).
    consumed = sum(r["docs"] for r in results.values())
    mix = mixture_of({n: range(s["rows"]) for n, s in manifest["sources"].items()}, manifest, args)
    switch = mix.stages[1].start
    ranges = {"stage 1": (0, min(switch, consumed)), "stage 2": (switch, max(consumed, switch))}
    shares = {}
    for label, (lo, hi) in ranges.items():
        weights = mix.stages[0 if label == "stage 1" else 1]
        before, after = mix.counts(lo), mix.counts(hi)
        n = max(hi - lo, 1)
        top = sorted(manifest["sources"], key=lambda k: -manifest["sources"][k]["tokens"])[:5] + [TINY]
        shares[label] = {
            "documents": hi - lo,
            "sources": {k: {"target": round(float(weights.weights[list(weights.children).index(mix.names.index(k))]), 4),
                            "realised": round((after[k] - before[k]) / n, 4)} for k in top},
        }
    shares["tiny_source_passes"] = mix.passes(consumed).get(TINY, 0)
    summary = {
        "steps_per_rank": {r: results[r]["steps"] for r in sorted(results)},
        "final_loss": h[-1]["loss"],
        "first_loss": h[0]["loss"],
        "tokens": h[-1]["tokens"],
        "tokens_per_s": h[-1]["tokens_per_s"],
        "padding_ratio": h[-1]["padding"],
        "mean_samples_per_step": sum(r["samples"] for r in h) / len(h),
        "seconds": h[-1]["seconds"],
        "batching": args.batching,
        "odb_metrics_rank0": results[0].get("batching"),
        "sources": len(manifest["sources"]),
        "documents": consumed,
        "stage_switch_at_document": switch,
        "mixture": shares,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
        ax[0].plot([r["step"] for r in h], [r["loss"] for r in h])
        ax[0].set(xlabel="step", ylabel="loss", title="training loss (mean over ranks)")
        w = 10  # steps per window
        ax[1].plot([r["step"] for r in h], [r["tokens_per_s"] for r in h], label="cumulative")
        ax[1].plot([r["step"] for r in h[w:]],
                   [(r["tokens"] - q["tokens"]) / max(r["seconds"] - q["seconds"], 1e-9) for q, r in zip(h, h[w:])],
                   label=f"last {w} steps", alpha=0.6)
        ax[1].set(xlabel="step", ylabel="tokens/s", title="throughput (all ranks)")
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(out / "training.png", dpi=100)
    except ImportError:
        pass
    return summary


def format_summary(s: dict) -> str:
    """The summary's headline figures, for the terminal (summary.json has them all)."""
    lines = [
        f"{s['batching']}: steps per rank {s['steps_per_rank']} in {s['seconds']:.0f} s, "
        f"{s['tokens']:,.0f} tokens, {s['tokens_per_s']:,.0f} tokens/s, padding {100 * s['padding_ratio']:.2f}%, "
        f"{s['mean_samples_per_step']:.1f} samples/step",
        f"loss {s['first_loss']:.3f} -> {s['final_loss']:.3f}",
        f"mixture ({s['documents']} documents, weight switch at document {s['stage_switch_at_document']}; "
        f"tiny source restarted {s['mixture']['tiny_source_passes']}x): realised share / target",
    ]
    for stage in ("stage 1", "stage 2"):
        st = s["mixture"][stage]
        cells = ", ".join(f"{k} {v['realised']:.3f}/{v['target']:.3f}" for k, v in st["sources"].items())
        lines.append(f"  {stage} ({st['documents']} docs): {cells}")
    return "\n".join(lines)


def main() -> None:
    if "--vlm" in sys.argv[1:]:
        # the vision-language demo (examples/vlm_demo.py): the other arguments are its own
        from vlm_demo import main as vlm_main

        vlm_main([a for a in sys.argv[1:] if a != "--vlm"])
        return
    if "--sft" in sys.argv[1:]:
        # the chat fine-tuning demo (examples/sft_demo.py): the other arguments are its own
        from sft_demo import main as sft_main

        sft_main([a for a in sys.argv[1:] if a != "--sft"])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="demo-out")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--batching", choices=["odb", "packing"], default="odb",
                    help="online dynamic batching of document chunks (default) or fixed-length packing")
    ap.add_argument("--odb-pool", type=int, default=256, help="samples grouped per ODB round")
    ap.add_argument("--corpus-mb", type=float, default=24.0,
                    help="cap on each site-packages source, MB of .py files (smaller builds faster)")
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.time()
    manifest = build_corpus(out / "corpus", max_site_mb=args.corpus_mb)
    print(f"corpus: {len(manifest['sources'])} sources, "
          f"{sum(s['tokens'] for s in manifest['sources'].values()):,} tokens ({time.time() - t0:.0f}s)")
    results = mp.Manager().dict()
    mp.spawn(train, args=(args.world_size, free_port(), args, manifest, results), nprocs=args.world_size, join=True)
    summary = summarize(out, dict(results), manifest, args)
    print(format_summary(summary))
    print(f"wrote {out / 'summary.json'} and {out / 'training.png'}")


if __name__ == "__main__":
    main()
