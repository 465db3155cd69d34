"""The chat SFT job of ``examples/sft_demo.py`` fed by youmu against Hugging Face
``datasets``, the ways its docs suggest: the same chats, tokenizer, model and
``Trainer``, one epoch on one CPU rank each.

The chats are the demo's (UltraChat's ``messages`` layout, lengths shaped like the
online-dynamic-batching paper's Table 10 at ``--scale``), in one Parquet file; the
tokenizer is its locally trained ChatML BPE; the model its 2-layer GPT-2 trained by
the demo's ``Trainer`` subclass (which records what each step trained on). Pipelines:

* ``youmu``: ``YoumuDataset(..., transform=ChatTemplate(tokenizer))`` — templating,
  tokenization and assistant-only labels online in one DataLoader worker — into
  ``TrainerLoader``, ``--batch-size`` chats per step (the demo's ``fixed`` mode);
* ``youmu-odb``: the same rows through ``DynamicBatchLoader`` (the demo's ``odb``
  mode, ``--token-budget`` padded tokens per step);
* ``hf-map``: ``load_dataset("parquet", ...)`` (Arrow conversion into the cache) then
  ``.map(template, batched=True, num_proc=--num-proc)`` (``apply_chat_template`` with
  the assistant mask, labels ``-100`` elsewhere), given to the ``Trainer`` as
  ``train_dataset`` (its ``RandomSampler``, collation in the training process);
* ``hf-stream``: ``load_dataset(..., streaming=True).map(template, batched=True)
  .shuffle(buffer_size=--buffer)``, given to the ``Trainer`` with ``max_steps`` of an
  epoch, templated in one DataLoader worker as youmu's.

``datasets``' pins conflict with the project venv's, so the ``hf-*`` pipelines run in
the peers' interpreter (``make peers-venv``); without it they are skipped with a line.
Each pipeline runs in a fresh interpreter. Figures: the time from the start of the
data set-up (the model is built before) to the end of the first optimizer step;
samples/s over the whole run (set-up included: a ``.map`` pass is part of an epoch's
cost) and over ``train()`` alone; the peak RSS and PSS of the pipeline's whole process
tree (the trainer, DataLoader workers, ``map`` processes; sampled every 50 ms); the
extra disk it wrote (the ``datasets`` cache, ``HF_HOME`` and ``TMPDIR``, each pointed at
a fresh folder). A sanity check: every pipeline trains every chat exactly once on the
same tokens.

    python benches/bench_sft.py [--rows 1000] [--pipelines youmu,youmu-odb,hf-map,hf-stream]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
from _util import PEERS_PYTHON, emit, peers_python, run_phase  # noqa: E402

PIPELINES = ("youmu", "youmu-odb", "hf-map", "hf-stream")
#: The demo's settings this bench keeps (examples/sft_demo.py: its modes need them).
DEMO = {"width": 64, "lr": 2e-3, "seq_len": 1024, "pack_rows": 2, "workers": 1}


def chat_features(tok: Any, cutoff_len: int) -> Any:
    """What a ``datasets`` user maps over the chats: the tokenizer's chat template with
    the assistant mask, labels ``-100`` off the assistant's tokens, cut at
    ``cutoff_len`` (the demo's chats are all shorter)."""
    def template(batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        out = tok.apply_chat_template(batch["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        labels = [[t if m else -100 for t, m in zip(ids, mask)] for ids, mask in
                  zip(out["input_ids"], out["assistant_masks"])]
        return {"input_ids": [ids[:cutoff_len] for ids in out["input_ids"]],
                "labels": [x[:cutoff_len] for x in labels]}

    return template


def hf_data(kind: str, args: argparse.Namespace, tok: Any) -> Any:
    import datasets

    datasets.disable_progress_bars()
    template = chat_features(tok, args.cutoff_len)
    if kind == "hf-map":
        ds = datasets.load_dataset("parquet", data_files=args.path, split="train", cache_dir=args.cache)
        return ds.map(template, batched=True, num_proc=args.num_proc, remove_columns=["messages"])
    ds = datasets.load_dataset("parquet", data_files=args.path, split="train", streaming=True)
    return ds.map(template, batched=True, remove_columns=["messages"]).shuffle(seed=args.seed,
                                                                               buffer_size=args.buffer)


def phase(kind: str, args: argparse.Namespace) -> None:
    """One pipeline's epoch in this process: its figures as a JSON line."""
    import torch
    import transformers
    from sft_demo import build_loader, recording_trainer, tiny_model, training_args

    from youmu.torch import lm_collate

    torch.set_num_threads(1)
    tok, model = tiny_model(args)
    overrides: dict[str, Any] = {"remove_unused_columns": False}  # the recording trainer reads each chat's id
    if kind == "hf-stream":
        # an iterable has no length: an epoch's steps; each rank reads its own batches
        overrides.update(max_steps=math.ceil(args.rows / args.batch_size), dataloader_num_workers=DEMO["workers"],
                         accelerator_config={"dispatch_batches": False})
    targs = training_args(args, Path(args.work) / "trainer", per_device_train_batch_size=args.batch_size,
                          **overrides)
    first: dict[str, float] = {}

    class FirstStep(transformers.TrainerCallback):
        def on_step_end(self, *a: Any, **kw: Any) -> None:
            first.setdefault("t", time.perf_counter())

    t0 = time.perf_counter()
    if kind.startswith("youmu"):
        args.mode = "odb" if kind == "youmu-odb" else "fixed"
        trainer = recording_trainer()(model=model, args=targs, train_loader=build_loader(args.mode, args, 1),
                                      pad_id=args.pad_id, eos_id=args.eos_id, callbacks=[FirstStep()])
    else:
        trainer = recording_trainer()(model=model, args=targs, train_dataset=hf_data(kind, args, tok),
                                      data_collator=lm_collate, pad_id=args.pad_id, eos_id=args.eos_id,
                                      callbacks=[FirstStep()])
    t_train = time.perf_counter()
    trainer.train()
    t_end = time.perf_counter()
    rows = trainer.rows
    ids = [i for r in rows for i in r["ids"]]
    samples = sum(r["samples"] for r in rows)
    emit({
        "pipeline": kind, "steps": trainer.state.global_step, "samples": samples, "unique_samples": len(set(ids)),
        "real_tokens": sum(r["real"] for r in rows), "padded_tokens": sum(r["padded"] for r in rows),
        "setup_s": round(t_train - t0, 3), "first_step_s": round(first["t"] - t0, 3), "run_s": round(t_end - t0, 3),
        "samples_per_s": round(samples / (t_end - t0), 2), "train_samples_per_s": round(samples / (t_end - t_train), 2),
        "final_loss": round(sum(r["loss"] for r in rows[-10:]) / len(rows[-10:]), 4),
        "cpu_s": round(tree_cpu_s(), 2),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "datasets": _version("datasets")},
    })


def tree_cpu_s() -> float:
    """CPU seconds of this process, its finished children (map processes, DataLoader
    workers) and those still running: steadier than wall time on a shared machine."""
    import psutil

    done = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
    live = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            live += t.user + t.system
        except psutil.Error:
            pass
    return done + live


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # not installed here
        return None


def disk_mb(root: Path) -> float:
    """Bytes of the files under ``root``, in MB."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000, help="chats to generate")
    ap.add_argument("--profile", default="ultrachat", help="the demo's length profile (ultrachat, sharegpt4o)")
    ap.add_argument("--scale", type=float, default=0.125, help="token lengths times this (the demo's)")
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--batch-size", type=int, default=8, help="chats per step (fixed batches, hf-*)")
    ap.add_argument("--token-budget", type=int, default=2048, help="youmu-odb: padded tokens per step")
    ap.add_argument("--pool", type=int, default=256, help="youmu-odb: samples in the grouping pool")
    ap.add_argument("--num-proc", type=int, default=2, help="hf-map: map processes")
    ap.add_argument("--buffer", type=int, default=1000, help="hf-stream: shuffle buffer size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the figures here as JSON")
    ap.add_argument("--peers-python", default=PEERS_PYTHON, help="runs the hf-* pipelines (make peers-venv)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    for name in ("path", "tokenizer", "work", "cache"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    ap.add_argument("--cutoff-len", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for k, v in DEMO.items():
        setattr(args, k, v)
    if args.phase:
        phase(args.phase, args)
        return
    kinds = args.pipelines.split(",")
    unknown = sorted(set(kinds) - set(PIPELINES))
    if unknown:
        ap.error(f"unknown pipelines {unknown}; choose from {PIPELINES}")
    from sft_demo import make_dataset

    work = Path(tempfile.mkdtemp(prefix="youmu-bench-sft-"))
    try:
        path, tok_dir, data = make_dataset(work, args)
        s = data["lengths"]
        print(f"{args.rows} chats ({data['profile']}-shaped, scale {args.scale:g}, {data['parquet_mb']} MB Parquet): "
              f"tokens mean {s['mean']}, median {s['median']}, P99 {s['p99']}, max {s['max']}, CV {s['cv']}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        py = peers_python(args.peers_python, "HF datasets pipelines") if any(k.startswith("hf-") for k in kinds) else None
        results = []
        for kind in kinds:
            if kind.startswith("hf-") and py is None:
                continue
            pdir = work / kind
            dirs = {key: pdir / key for key in ("cache", "hf-home", "tmp")}
            for d in dirs.values():
                d.mkdir(parents=True)
            env = {"HF_DATASETS_CACHE": str(dirs["cache"]), "HF_HOME": str(dirs["hf-home"]), "TMPDIR": str(dirs["tmp"]),
                   "HF_HUB_OFFLINE": "1", "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
            phase_args = ["--rows", str(args.rows), "--batch-size", str(args.batch_size), "--token-budget",
                          str(args.token_budget), "--pool", str(args.pool), "--num-proc", str(args.num_proc),
                          "--buffer", str(args.buffer), "--seed", str(args.seed), "--path", str(path),
                          "--tokenizer", str(tok_dir), "--work", str(pdir), "--cache", str(dirs["cache"]),
                          "--cutoff-len", str(data["cutoff_len"])]
            load = os.getloadavg()[0]
            res = run_phase(__file__, kind, *phase_args, python=py if kind.startswith("hf-") else None,
                            tree_rss=True, env=env)
            res["extra_disk_mb"] = round(sum(disk_mb(d) for d in dirs.values()), 2)
            res["load_before"] = round(load, 1)
            results.append(res)
            print(json.dumps(res), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args)


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The table, ratios against ``youmu`` (or the first pipeline), and the sanity check."""
    if not results:
        return
    base = next((r for r in results if r["pipeline"] == "youmu"), results[0])
    print(f"\n| pipeline | first step (s) | vs {base['pipeline']} | samples/s (run) | vs {base['pipeline']} "
          "| samples/s (train() only) | CPU s | peak RSS tree (MB) | peak PSS tree (MB) | extra disk (MB) | steps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['pipeline']} | {r['first_step_s']:.2f} | {r['first_step_s'] / base['first_step_s']:.2f}× "
              f"| {r['samples_per_s']:.1f} | {r['samples_per_s'] / base['samples_per_s']:.2f}× "
              f"| {r['train_samples_per_s']:.1f} | {r['cpu_s']:.0f} | {r['tree_peak_rss_mb']:.0f} | {r['tree_peak_pss_mb']:.0f} "
              f"| {r['extra_disk_mb']:.2f} | {r['steps']} |")
    bad = [r["pipeline"] for r in results if r["samples"] != args.rows or r["unique_samples"] != args.rows]
    tokens = {r["real_tokens"] for r in results}
    print(f"\nevery chat once: {'yes' if not bad else f'NO ({bad})'}; the same real tokens in every pipeline: "
          f"{'yes' if len(tokens) == 1 else f'NO ({sorted(tokens)})'}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": args.rows, "batch_size": args.batch_size, "results": results},
                                             indent=1))


if __name__ == "__main__":
    main()
