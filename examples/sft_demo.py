"""youmu SFT demo: supervised fine-tuning of a tiny GPT-2 on chat Parquet with the
Hugging Face ``Trainer`` on 2 ranks over Gloo (CPU), tokenized and chat-templated
online in the DataLoader workers — online dynamic batching vs fixed batches vs packing.

1. generates a chat dataset in UltraChat's layout (``messages`` =
   ``list<struct<role, content>>``, a system turn in some rows, 1–8 exchanges) from a
   small made-up vocabulary, each row's token length drawn so the dataset's length
   statistics have the shape of the online-dynamic-batching paper's Table 10
   (UltraChat-200K: CV 0.48, median/mean 0.92; or ``--profile sharegpt4o``: CV 1.00,
   a long tail to 8x the mean), scaled down by ``--scale`` (1/8: a mean of ~150
   tokens instead of 1,196) so a CPU run takes minutes;
2. trains a byte-level BPE on that vocabulary with ``tokenizers`` and wraps it as a
   ``transformers`` fast tokenizer with a ChatML template whose assistant answers are
   ``{% generation %}`` blocks (``chat_tokenizer.py``; nothing is downloaded);
3. reads the rows with :class:`youmu.torch.YoumuDataset` and
   :class:`youmu.text.ChatTemplate` (the tokenizer's chat template, assistant-only
   labels, the profile's ``cutoff_len``) in one DataLoader worker per rank, and trains
   with ``youmu.integrations.hf.make_trainer()`` (a real ``transformers.Trainer``), one
   epoch per mode:

   * ``odb``: ``DynamicBatchLoader`` — batches of as many samples as fit
     ``--token-budget`` padded tokens, exact per-token loss scaling across ranks;
   * ``fixed``: ``--batch-size`` samples per rank per step (the paper's Standard);
   * ``pack``: ``youmu.torch.pack`` — samples concatenated (``</s>`` between them,
     labels packed in step) into ``--seq-len`` rows, ``--pack-rows`` per step (the same
     tokens per step as ODB's budget). The tiny GPT-2 runs PyTorch's SDPA attention on
     CPU, which has no varlen kernel: packed samples see the ones before them in their
     row, as plain packing does (position ids restart per sample).

4. writes ``summary.json`` and ``sft.png`` into ``--out``: per mode, emitted samples/s,
   padding share, optimizer steps, per-token loss, peak RSS per rank (trainer process,
   and its DataLoader worker); the loss curves against samples seen (what the data
   buys), optimizer steps (an ODB or packed step holds as many samples as fit its
   tokens, a fixed one 8 per rank) and wall time (what the speed buys).

With ``--hub`` the Parquet is published to a local Hugging Face Hub first
(``tests/support/hubserver.py``: the Hub's API, resolve redirects to a CDN, ranged reads, on
127.0.0.1) and read where such data lives, as ``hf://datasets/youmu/sft-chats/...``,
the revision pinned to a commit when the index is built.

    python examples/sft_demo.py --out sft-out [--rows 3000] [--profile sharegpt4o] [--hub]
    python examples/demo.py --sft --out sft-out          # the same, from the main demo
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

#: Table 10 of the online-dynamic-batching paper (Li et al., 2026): post-template token
#: lengths of the SFT sets, and the cutoff_len each run used (above every sample).
PROFILES: dict[str, dict[str, Any]] = {
    "ultrachat": {"name": "UltraChat-200K", "mean": 1196, "median": 1104, "p95": 2239, "p99": 3065, "max": 4471,
                  "cv": 0.48, "cutoff_len": 8192},
    "sharegpt4o": {"name": "ShareGPT4o", "mean": 1511, "median": 977, "p95": 4584, "p99": 8937, "max": 12110,
                   "cv": 1.00, "cutoff_len": 16384},
}
ROLES_OVERHEAD = 5  # <|im_start|> role \n ... <|im_end|> \n: the template's tokens per message


# ------------------------------------------------------------------------------------------
# 1. the dataset and its tokenizer
# ------------------------------------------------------------------------------------------
def vocabulary(n: int = 600, seed: int = 1234) -> list[str]:
    """``n`` made-up words of 1–3 syllables (the BPE learns them as ~1 token each)."""
    rng = np.random.default_rng(seed)
    onsets = list("bdfgklmnprstvz") + ["ch", "sh", "th", "tr", "st"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ee"]
    words: set[str] = set()
    while len(words) < n:
        k = int(rng.choice([1, 2, 2, 3]))
        words.add("".join(str(rng.choice(onsets)) + str(rng.choice(vowels)) for _ in range(k)))
    return sorted(words)


def sentences(words: list[str], n_words: int, rng: np.random.Generator) -> str:
    """``n_words`` words as sentences (Zipf-like word frequencies, as text has)."""
    ranks = np.minimum(rng.zipf(1.3, n_words), len(words)) - 1
    out, start = [], True
    for k, r in enumerate(ranks):
        w = words[int(r)]
        out.append(w.capitalize() if start else w)
        start = rng.random() < 0.1 or k == n_words - 1
        if start:
            out[-1] += "." if rng.random() < 0.8 else "?"
    return " ".join(out)


def train_tokenizer(words: list[str], out: Path, seed: int) -> Any:
    """A BPE trained on text of ``words`` (``chat_tokenizer.py``), saved under ``out``."""
    from chat_tokenizer import chat_tokenizer, train_bpe

    rng = np.random.default_rng(seed)
    corpus = [sentences(words, int(rng.integers(5, 40)), rng) for _ in range(4000)]
    tok = chat_tokenizer(train_bpe(corpus, vocab_size=1024))
    tok.save_pretrained(str(out))
    return tok


def draw_lengths(profile: dict[str, Any], rows: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Target token lengths: UltraChat's shape is a gamma's (CV 0.48 gives its median/mean
    0.92, P95 1.9x and P99 2.4x the mean: Table 10's 0.92, 1.87x, 2.56x); ShareGPT4o's a
    lognormal's (σ 0.88 capped at 8x the mean: median 0.67x, P95 3.0x, P99 5.3x, CV 1.0
    against 0.65x, 3.0x, 5.9x, 1.00)."""
    mean, cv = profile["mean"] * scale, profile["cv"]
    if cv < 0.7:
        x = rng.gamma(1 / cv**2, mean * cv**2, rows)
    else:
        sigma = 0.88
        x = np.minimum(rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, rows), profile["max"] * scale)
    return np.maximum(np.round(x), 4 * ROLES_OVERHEAD).astype(int)


def conversation(length: int, words: list[str], per_word: float, rng: np.random.Generator) -> list[dict[str, str]]:
    """UltraChat-shaped messages of about ``length`` tokens: a system turn in a quarter of
    the rows, exchanges in proportion to the length, the assistant writing ~4/5 of it."""
    system = rng.random() < 0.25
    turns = int(np.clip(round(length / 60 * rng.uniform(0.5, 1.5)), 1, 8))
    overhead = ROLES_OVERHEAD * (2 * turns + system) + 1
    budget = max(length - overhead, 2 * turns + system) / per_word
    msgs = []
    if system:
        n = max(int(rng.integers(4, 12)), 1)
        msgs.append({"role": "system", "content": sentences(words, n, rng)})
        budget = max(budget - n, 2 * turns)
    shares = rng.dirichlet([2.0] * turns)
    for s in shares:
        user = max(int(round(budget * s * rng.uniform(0.1, 0.3))), 1)
        answer = max(int(round(budget * s)) - user, 1)
        msgs.append({"role": "user", "content": sentences(words, user, rng)})
        msgs.append({"role": "assistant", "content": sentences(words, answer, rng)})
    return msgs


def make_dataset(out: Path, args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
    """Parquet of chats, the tokenizer, and the dataset's measured token statistics."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from youmu.text import ChatTemplate

    profile = PROFILES[args.profile]
    rng = np.random.default_rng(args.seed)
    words = vocabulary()
    tok_dir = out / "tokenizer"
    tok = train_tokenizer(words, tok_dir, args.seed)
    probe = [sentences(words, 200, rng) for _ in range(20)]
    per_word = float(np.mean([len(tok(p, add_special_tokens=False)["input_ids"]) / 200 for p in probe]))
    cutoff = int(profile["cutoff_len"] * args.scale)
    message = pa.struct([("role", pa.string()), ("content", pa.string())])

    def chats(targets: np.ndarray, rng: np.random.Generator) -> tuple[pa.Table, np.ndarray, int]:
        convs = [conversation(int(n), words, per_word, rng) for n in targets]
        table = pa.table({"id": pa.array(range(args.rows), pa.int64()),
                          "messages": pa.array(convs, pa.list_(message))})
        # the lengths the trainer will see: the same template, in this process
        samples = ChatTemplate(tok, cutoff_len=cutoff)(table)[0]
        lengths = np.array([len(x) for x in samples.column("input_ids").to_pylist()])
        labels = sum(int((np.asarray(x)[1:] != -100).sum()) for x in samples.column("labels").to_pylist())
        return table, lengths, labels

    # the words per token and the template's tokens only approximate a target: fit the
    # tokenized lengths against the targets once (a line) and draw again through it
    targets = draw_lengths(profile, args.rows, args.scale, rng)
    _, first, _ = chats(targets, np.random.default_rng(args.seed + 1))
    slope, icept = np.polyfit(targets, first, 1)
    table, lengths, labels = chats(np.maximum((targets - icept) / slope, 1), np.random.default_rng(args.seed + 1))
    path = out / "data" / f"{args.profile}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=256, write_page_index=True)
    stats = length_stats(lengths)
    target = {k: round(profile[k] * args.scale, 1) for k in ("mean", "median", "p95", "p99", "max")}
    return path, tok_dir, {
        "profile": profile["name"], "rows": args.rows, "scale": args.scale, "cutoff_len": cutoff,
        "vocab_words": len(words), "tokenizer_vocab": len(tok), "tokens_per_word": round(per_word, 3),
        "parquet_mb": round(path.stat().st_size / 2**20, 2), "tokens": int(lengths.sum()), "label_tokens": labels,
        "lengths": stats, "table10_scaled": {**target, "cv": profile["cv"]},
        "truncated": int((lengths >= cutoff).sum()),
    }


def length_stats(lengths: np.ndarray) -> dict[str, float]:
    return {"mean": round(float(lengths.mean()), 1), "median": float(np.median(lengths)),
            "p95": round(float(np.percentile(lengths, 95)), 1), "p99": round(float(np.percentile(lengths, 99)), 1),
            "max": int(lengths.max()), "min": int(lengths.min()),
            "cv": round(float(lengths.std() / lengths.mean()), 3)}


# ------------------------------------------------------------------------------------------
# 2. the loaders, one per mode
# ------------------------------------------------------------------------------------------
def sample_len(s: dict[str, Any]) -> int:
    return len(s["input_ids"])


def build_loader(mode: str, args: argparse.Namespace, world: int) -> Any:
    from youmu.integrations import TrainerLoader
    from youmu.text import ChatTemplate
    from youmu.torch import YoumuDataset, collate_packed, lm_collate, pack

    # the tokenizer by path: each DataLoader worker loads it once
    # drop_last: each rank exactly half the rows (an even count: none is left out), so
    # fixed batches give both ranks the same steps without leaving a rank's tail out
    rows = YoumuDataset(args.path, columns=["id", "messages"], seed=args.seed, drop_last=True,
                        transform=ChatTemplate(args.tokenizer, cutoff_len=args.cutoff_len))
    # an upper bound of an epoch's steps (the Trainer wants one; the epoch ends when the
    # data does, and the learning rate is constant, so it changes nothing else)
    most = math.ceil(args.rows / world)
    if mode == "fixed":
        return TrainerLoader(rows, batch_size=args.batch_size, collate_fn=lm_collate, num_workers=args.workers)
    if mode == "pack":
        packed = pack(rows, seq_len=args.seq_len, eos_id=args.eos_id, pad_id=args.pad_id, label_column="labels")
        return TrainerLoader(packed, batch_size=args.pack_rows, collate_fn=collate_packed, num_workers=args.workers,
                             steps_per_epoch=most)
    from youmu.batching import DynamicBatchLoader, label_token_count

    dbl = DynamicBatchLoader(
        rows, token_budget=args.token_budget, length_fn=sample_len, token_count_fn=label_token_count(),
        collate_fn=lm_collate, pool_size=args.pool, num_workers=args.workers, seed=args.seed,
        uneven="pad",  # the Trainer has no DDP Join: every rank takes the same steps
        timeout=600,
    )
    return TrainerLoader(dbl, steps_per_epoch=most)


# ------------------------------------------------------------------------------------------
# 3. training on each rank
# ------------------------------------------------------------------------------------------
def recording_trainer() -> Any:
    """The youmu Trainer, noting per step what it trained on: samples, real and padded
    tokens, the per-token loss (unscaled) and its label tokens."""
    import torch
    import torch.nn.functional as F

    from youmu.integrations import INFO_KEY
    from youmu.integrations.hf import make_trainer

    class RecordingTrainer(make_trainer()):  # type: ignore[misc]
        def __init__(self, *a: Any, pad_id: int, eos_id: int, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.rows: list[dict[str, Any]] = []
            self.pad_id, self.eos_id = pad_id, eos_id
            self.t0 = time.perf_counter()

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            ids = inputs.pop("id", None)
            packed = inputs.pop("cu_seqlens", None) is not None
            inputs.pop("max_seqlen", None)
            info = inputs.get(INFO_KEY)
            x, labels = inputs["input_ids"], inputs["labels"]
            loss, outputs = super().compute_loss(model, inputs, return_outputs=True,
                                                 num_items_in_batch=num_items_in_batch)
            with torch.no_grad():
                target = labels[:, 1:]
                logits = outputs["logits"][:, :-1]
                summed = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                                         ignore_index=-100, reduction="sum")
                t = int((target != -100).sum())
            filler = info is not None and info.is_padding
            if packed:  # every sample ends with </s>; the last row's tail is <pad>
                real = int((x != self.pad_id).sum())
                samples, sample_ids = int((x == self.eos_id).sum()), []
            else:
                real = int(inputs["attention_mask"].sum()) if "attention_mask" in inputs else int(x.numel())
                sample_ids = [int(i) for i in ids]
                samples = len(sample_ids)
            self.rows.append({
                "samples": 0 if filler else samples, "ids": [] if filler else sample_ids,
                "real": 0 if filler else real, "padded": 0 if filler else int(x.numel()),
                "loss": float(summed) / max(t, 1), "t": 0 if filler else t,
                "at": round(time.perf_counter() - self.t0, 3),
            })
            return (loss, outputs) if return_outputs else loss

    return RecordingTrainer


def tiny_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(tokenizer, model)``: the tokenizer from ``args.tokenizer`` (its pad and EOS ids
    noted in ``args``) and the GPT-2 of 2 layers, width ``args.width``, from config
    with seed ``args.seed``."""
    import transformers

    tok = transformers.PreTrainedTokenizerFast.from_pretrained(args.tokenizer)
    args.pad_id, args.eos_id = tok.pad_token_id, tok.eos_token_id
    transformers.set_seed(args.seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=len(tok), n_positions=max(args.cutoff_len, args.seq_len), n_embd=args.width, n_layer=2,
        n_head=2, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    return tok, model


def training_args(args: argparse.Namespace, output_dir: Path, **overrides: Any) -> Any:
    """The demo's ``TrainingArguments`` (one epoch, constant learning rate, CPU, no
    checkpoints), with ``overrides``."""
    import transformers

    return transformers.TrainingArguments(**{
        "output_dir": str(output_dir), "num_train_epochs": 1, "learning_rate": args.lr,
        "lr_scheduler_type": "constant", "logging_steps": 50, "save_strategy": "no", "report_to": [],
        "use_cpu": True, "disable_tqdm": True, "dataloader_num_workers": 0, "ddp_find_unused_parameters": False,
        "seed": args.seed, **overrides,
    })


def run_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    import torch

    _, model = tiny_model(args)
    out = Path(args.out) / args.mode
    targs = training_args(args, out / "trainer")
    loader = build_loader(args.mode, args, world)
    trainer = recording_trainer()(model=model, args=targs, train_loader=loader, pad_id=args.pad_id,
                                  eos_id=args.eos_id)
    t0 = time.perf_counter()
    trainer.t0 = t0
    trainer.train()
    wall = time.perf_counter() - t0
    mb = 1024.0  # ru_maxrss is in KiB on Linux
    rec = {"rank": rank, "wall": wall, "rows": trainer.rows, "global_steps": trainer.state.global_step,
           "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / mb,
           "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / mb}
    (out / f"rank{rank}.json").write_text(json.dumps(rec))
    torch.distributed.barrier()


# ------------------------------------------------------------------------------------------
# 4. summary and plot
# ------------------------------------------------------------------------------------------
def summarize_mode(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [r for res in per_rank for r in res["rows"]]
    wall = max(res["wall"] for res in per_rank)
    samples = sum(r["samples"] for r in rows)
    real, padded = sum(r["real"] for r in rows), sum(r["padded"] for r in rows)
    steps = len(per_rank[0]["rows"])
    ids = [i for r in rows for i in r["ids"]]
    sizes = [r["samples"] for r in rows if r["samples"]]
    # the loss curve: each step's per-token mean over both ranks, against samples seen,
    # optimizer steps and wall time (the slower rank's clock at that step)
    curve, by_step, by_time, seen = [], [], [], 0
    for k in range(steps):
        step = [res["rows"][k] for res in per_rank if k < len(res["rows"])]
        seen += sum(r["samples"] for r in step)
        t = sum(r["t"] for r in step)
        if t:
            loss = sum(r["loss"] * r["t"] for r in step) / t
            curve.append((seen, round(loss, 4)))
            by_step.append((k + 1, round(loss, 4)))
            by_time.append((max(r["at"] for r in step), round(loss, 4)))
    tail = [c[1] for c in curve[-max(len(curve) // 10, 3):]]
    return {
        "steps": steps, "samples": samples, "unique_samples": len(set(ids)), "duplicate_samples": len(ids) - len(set(ids)),
        "wall_s": round(wall, 2), "samples_per_s": round(samples / wall, 2), "tokens_per_s": round(real / wall, 1),
        "real_tokens": real, "padded_tokens": padded,
        "padding_ratio": round(1 - real / padded, 4) if padded else 0.0,
        "batch_size_mean": round(float(np.mean(sizes)), 2) if sizes else 0.0,
        "batch_size_max": int(max(sizes)) if sizes else 0,
        "max_padded_tokens_per_batch": max(r["padded"] for r in rows),
        "final_loss": round(float(np.mean(tail)), 4), "loss_curve": curve, "loss_by_step": by_step,
        "loss_by_time": by_time,
        "peak_rss_mb": [round(res["rss_mb"], 1) for res in per_rank],
        "peak_worker_rss_mb": [round(res["worker_rss_mb"], 1) for res in per_rank],
    }


def plot(out: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = summary["modes"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    curves = [("loss_curve", "samples seen"), ("loss_by_step", "optimizer steps"), ("loss_by_time", "wall time (s)")]
    for a, (key, label) in zip(axes[0], curves):
        for name, m in modes.items():
            if m[key]:
                xs, ys = zip(*m[key])
                a.plot(xs, ys, label=name, lw=0.8)
        a.set_xlabel(label)
        a.set_ylabel("per-token loss (assistant tokens)")
        a.set_title(f"loss against {label}")
        a.legend()
    names = list(modes)
    colours = ["tab:blue", "tab:orange", "tab:green"][:len(names)]
    axes[1][0].bar(names, [modes[n]["samples_per_s"] for n in names], color=colours)
    axes[1][0].set_title("emitted samples/s (2 ranks, CPU)")
    axes[1][1].bar(names, [100 * modes[n]["padding_ratio"] for n in names], color=colours)
    axes[1][1].set_title("padding (% of tokens computed)")
    axes[1][2].bar(names, [modes[n]["steps"] for n in names], color=colours)
    axes[1][2].set_title("optimizer steps per epoch")
    d = summary["dataset"]
    s = d["lengths"]
    fig.suptitle(f"{d['rows']} chats shaped like {d['profile']} at scale {d['scale']:g}: tokens mean {s['mean']:.0f}, "
                 f"median {s['median']:.0f}, P99 {s['p99']:.0f}, max {s['max']}, CV {s['cv']}")
    fig.tight_layout()
    fig.savefig(out / "sft.png", dpi=110)


def publish(path: Path) -> tuple[Any, str]:
    """Commit ``path`` to a local Hub (started here, stopped by the caller) as dataset
    ``youmu/sft-chats`` and point ``huggingface_hub`` (and youmu's ``hf://``) at it:
    the Hub and its ``hf://`` URL of the file. The ranks spawned later inherit
    ``HF_ENDPOINT``."""
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
    from hubserver import HubServer

    hub = HubServer().start()
    hub.create("youmu/sft-chats")
    hub.commit("youmu/sft-chats", {f"data/{path.name}": path.read_bytes()})
    os.environ["HF_ENDPOINT"] = hub.endpoint
    return hub, f"hf://datasets/youmu/sft-chats/data/{path.name}"


def report(mode: str, out: Path) -> dict[str, Any]:
    """One mode's summary from its ranks' records, printed in a line."""
    per_rank = [json.loads((out / mode / f"rank{r}.json").read_text()) for r in range(2)]
    res = summarize_mode(per_rank)
    print(f"{mode:>5}: {res['samples_per_s']:.1f} samples/s, padding {100 * res['padding_ratio']:.1f}%, "
          f"{res['steps']} steps, mean batch {res['batch_size_mean']}, loss {res['final_loss']}, "
          f"peak RSS {max(res['peak_rss_mb']):.0f} MB (+ worker {max(res['peak_worker_rss_mb']):.0f} MB)",
          flush=True)
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--out", default="sft-out")
    ap.add_argument("--rows", type=int, default=3000, help="chats to generate")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="ultrachat",
                    help="Table 10 length statistics to imitate")
    ap.add_argument("--scale", type=float, default=0.125, help="token lengths (and cutoff_len) times this")
    ap.add_argument("--token-budget", type=int, default=2048, help="ODB: padded tokens per batch")
    ap.add_argument("--pool", type=int, default=256, help="ODB: samples in the grouping pool per round")
    ap.add_argument("--batch-size", type=int, default=8, help="fixed batches: samples per rank")
    ap.add_argument("--seq-len", type=int, default=1024, help="packing: tokens per packed row")
    ap.add_argument("--pack-rows", type=int, default=2, help="packing: packed rows per rank per step")
    ap.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank (tokenize, template)")
    ap.add_argument("--modes", default="odb,fixed,pack")
    ap.add_argument("--width", type=int, default=64, help="the GPT-2's hidden size")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hub", action="store_true",
                    help="publish the Parquet to a local Hugging Face Hub and read it as hf://datasets/...")
    args = ap.parse_args(argv)
    if args.rows < 2 or args.rows % 2:
        ap.error(f"--rows must be even (two ranks take half each), got {args.rows}")
    from trainer_data import launch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    path, tok_dir, dataset = make_dataset(out, args)
    dataset["make_s"] = round(time.perf_counter() - t0, 2)
    s = dataset["lengths"]
    print(f"{args.rows} chats ({dataset['profile']}-shaped, scale {args.scale:g}): tokens mean {s['mean']}, median "
          f"{s['median']}, P95 {s['p95']}, P99 {s['p99']}, max {s['max']}, CV {s['cv']}", flush=True)
    args.path, args.tokenizer, args.cutoff_len = str(path), str(tok_dir), dataset["cutoff_len"]
    hub = None
    if args.hub:
        hub, args.path = publish(path)
        dataset["source"] = args.path
    summary: dict[str, Any] = {
        "dataset": dataset,
        "settings": {k: getattr(args, k) for k in ("token_budget", "pool", "batch_size", "seq_len", "pack_rows",
                                                   "workers", "width", "lr", "seed")} | {"world_size": 2},
        "modes": {},
    }
    try:
        for mode in args.modes.split(","):
            args.mode = mode
            launch(run_rank, 2, args)
            summary["modes"][mode] = report(mode, out)
    finally:
        if hub is not None:
            hub.stop()
    m = summary["modes"]
    for other in ("fixed", "pack"):
        if "odb" in m and other in m:
            summary[f"odb_vs_{other}_samples_per_s"] = round(m["odb"]["samples_per_s"] / m[other]["samples_per_s"], 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(out, summary)
    print(f"wrote {out / 'summary.json'} and {out / 'sft.png'}")
    return summary


if __name__ == "__main__":
    main()
