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

``--ranks 2``: each pipeline on 2 CPU ranks over Gloo (the demo's launcher, with the
workers started the platform's way, as under torchrun), as a
``datasets`` user runs it there: ``hf-map`` maps on rank 0 first
(``main_process_first``; rank 1 reads its cache), the ``Trainer``'s
``DistributedSampler`` deals the rows; ``hf-stream``'s one file is read by both ranks,
each keeping its batches (Accelerate's ``IterableDatasetShard``); youmu shards by
itself. Figures: the slower rank's first step and run time, both ranks' samples.
``--repeat N`` runs the pipelines N times, alternated, and reports medians;
``--trace`` adds each run's timeline to its first step (data set-up, DataLoader worker
start, tokenizer load, first rows read, first batch templated, first batch in the
trainer, its optimizer step); ``--max-steps`` stops each run early (for first-step
runs; the every-chat-once check is then skipped).

    python benches/bench_sft.py [--rows 1000] [--pipelines youmu,youmu-odb,hf-map,hf-stream]
    python benches/bench_sft.py --pipelines youmu,hf-stream --repeat 3 --trace --max-steps 5
    python benches/bench_sft.py --ranks 2 --rows 320 --pipelines youmu-odb,hf-map,hf-stream
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
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


class ChatFeatures:
    """What a ``datasets`` user maps over the chats: the tokenizer's chat template with
    the assistant mask, labels ``-100`` off the assistant's tokens, cut at
    ``cutoff_len`` (the demo's chats are all shorter). A class, not a closure: a
    streaming dataset reaches DataLoader workers pickled where they are spawned (the
    ranks of ``--ranks 2``)."""

    def __init__(self, tok: Any, cutoff_len: int) -> None:
        self.tok, self.cutoff_len = tok, cutoff_len

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        out = self.tok.apply_chat_template(batch["messages"], tokenize=True, return_dict=True,
                                           return_assistant_tokens_mask=True)
        labels = [[t if m else -100 for t, m in zip(ids, mask)] for ids, mask in
                  zip(out["input_ids"], out["assistant_masks"])]
        return {"input_ids": [ids[:self.cutoff_len] for ids in out["input_ids"]],
                "labels": [x[:self.cutoff_len] for x in labels]}


def hf_data(kind: str, args: argparse.Namespace, tok: Any, targs: Any, trace: Trace | None = None) -> Any:
    import datasets

    datasets.disable_progress_bars()
    template: Any = ChatFeatures(tok, args.cutoff_len)
    if trace is not None:
        template = TracedTemplate(trace, template)
    if kind == "hf-map":
        # on several ranks: rank 0 maps first, the others find its result in the cache
        with targs.main_process_first(desc="template the chats"):
            ds = datasets.load_dataset("parquet", data_files=args.path, split="train", cache_dir=args.cache)
            return ds.map(template, batched=True, num_proc=args.num_proc, remove_columns=["messages"])
    ds = datasets.load_dataset("parquet", data_files=args.path, split="train", streaming=True)
    return ds.map(template, batched=True, remove_columns=["messages"]).shuffle(seed=args.seed,
                                                                               buffer_size=args.buffer)


def phase(kind: str, args: argparse.Namespace) -> None:
    """One pipeline's epoch from this process (on ``--ranks`` ranks it starts): its
    figures as a JSON line."""
    if args.ranks == 1:
        res = train_rank(0, 1, (kind, args))
    else:
        from trainer_data import launch

        launch(train_rank, args.ranks, (kind, args))
        res = merge_ranks([json.loads((Path(args.work) / f"rank{r}.json").read_text()) for r in range(args.ranks)])
    res["cpu_s"] = round(tree_cpu_s(), 2)
    emit(res)


def train_rank(rank: int, world: int, job: tuple[str, argparse.Namespace]) -> dict[str, Any]:
    """One rank's epoch: its figures (written to ``rank<r>.json`` on several ranks)."""
    kind, args = job
    if world > 1:
        import multiprocessing

        # The launcher's torch.multiprocessing.spawn leaves "spawn" as each rank's start
        # method, so every DataLoader worker would be a fresh interpreter (importing torch
        # and transformers again); ranks started by torchrun fork theirs, the platform's
        # default. Measure what a torchrun job does, for every pipeline alike.
        multiprocessing.set_start_method(None, force=True)
    import torch
    import transformers
    from sft_demo import build_loader, recording_trainer, tiny_model, training_args

    from youmu.torch import lm_collate

    torch.set_num_threads(1)
    trace = Trace(Path(args.work) / f"trace{rank}.txt", kind) if args.trace else None
    tok, model = tiny_model(args)
    overrides: dict[str, Any] = {"remove_unused_columns": False}  # the recording trainer reads each chat's id
    if kind == "hf-stream":
        # an iterable has no length: an epoch's steps; each rank reads its own batches
        overrides.update(max_steps=math.ceil(args.rows / (args.batch_size * world)),
                         dataloader_num_workers=DEMO["workers"], accelerator_config={"dispatch_batches": False})
    if args.max_steps:
        overrides["max_steps"] = args.max_steps
    targs = training_args(args, Path(args.work) / "trainer", per_device_train_batch_size=args.batch_size,
                          **overrides)
    first: dict[str, float] = {}

    class FirstStep(transformers.TrainerCallback):
        def on_step_end(self, *a: Any, **kw: Any) -> None:
            first.setdefault("t", time.perf_counter())
            if trace is not None:
                trace.mark("optimizer step done")

    t0 = time.perf_counter()
    if trace is not None:
        trace.start()
    if kind.startswith("youmu"):
        args.mode = "odb" if kind == "youmu-odb" else "fixed"
        loader = build_loader(args.mode, args, world)
        if trace is not None:
            trace.mark("index and loader built")
        trainer = recording_trainer()(model=model, args=targs, train_loader=loader, pad_id=args.pad_id,
                                      eos_id=args.eos_id, callbacks=[FirstStep()])
    else:
        data = hf_data(kind, args, tok, targs, trace)
        if trace is not None:
            trace.mark("dataset built")
        trainer = recording_trainer()(model=model, args=targs, train_dataset=data, data_collator=lm_collate,
                                      pad_id=args.pad_id, eos_id=args.eos_id, callbacks=[FirstStep()])
    if trace is not None:
        trace.mark("Trainer built; train() starts")
    t_train = time.perf_counter()
    trainer.train()
    t_end = time.perf_counter()
    rows = trainer.rows
    ids = [i for r in rows for i in r["ids"]]
    samples = sum(r["samples"] for r in rows)
    res = {
        "pipeline": kind, "ranks": world, "steps": trainer.state.global_step, "samples": samples,
        "unique_samples": len(set(ids)), "ids": ids,
        "real_tokens": sum(r["real"] for r in rows), "padded_tokens": sum(r["padded"] for r in rows),
        "setup_s": round(t_train - t0, 3), "first_step_s": round(first["t"] - t0, 3), "run_s": round(t_end - t0, 3),
        "samples_per_s": round(samples / (t_end - t0), 2), "train_samples_per_s": round(samples / (t_end - t_train), 2),
        "final_loss": round(sum(r["loss"] for r in rows[-10:]) / len(rows[-10:]), 4),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "datasets": _version("datasets")},
    }
    if trace is not None:
        res["trace"] = trace.read()
    if world > 1:
        (Path(args.work) / f"rank{rank}.json").write_text(json.dumps(res))
        torch.distributed.barrier()
    res.pop("ids")
    return res


def merge_ranks(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' figures as one run's: the slower rank's times, every rank's samples."""
    ids = [i for r in per_rank for i in r.pop("ids")]
    out = dict(per_rank[0])
    for key in ("samples", "real_tokens", "padded_tokens"):
        out[key] = sum(r[key] for r in per_rank)
    for key in ("steps", "setup_s", "first_step_s", "run_s"):
        out[key] = max(r[key] for r in per_rank)
    out["unique_samples"] = len(set(ids))
    out["samples_per_s"] = round(out["samples"] / out["run_s"], 2)
    out["train_samples_per_s"] = round(out["samples"] / (out["run_s"] - out["setup_s"]), 2)
    out["final_loss"] = round(statistics.fmean(r["final_loss"] for r in per_rank), 4)
    out["first_step_s_per_rank"] = [r["first_step_s"] for r in per_rank]
    if "trace" in out:
        out["trace"] = [f"rank{k} {line}" for k, r in enumerate(per_rank) for line in r["trace"]]
    return out


#: Whether this process wrapped the functions a trace notes (a forked DataLoader worker
#: inherits the wrappers; a spawned one installs them when its loop starts).
_HOOKED = False


class Trace:
    """Timestamps of the events before the first optimizer step, from the trainer and
    its DataLoader workers (and ``map`` processes), appended to ``path`` by whichever
    process reaches them: the bench wraps the functions where they happen (nothing in
    youmu or ``datasets`` changes). Each event is noted once per process."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = path, kind
        self.t0 = time.time()
        self.main = os.getpid()
        self.seen: set[tuple[str, int]] = set()

    def mark(self, event: str, once: bool = True) -> None:
        key = (event, os.getpid())
        if once and key in self.seen:
            return
        self.seen.add(key)
        who = "trainer" if os.getpid() == self.main else f"pid {os.getpid()}"
        with open(self.path, "a") as f:
            f.write(f"{time.time() - self.t0:8.3f} s  {who:>10}  {event}\n")

    def start(self) -> None:
        """Wrap the functions whose first calls are the events; the clock starts now."""
        import torch.utils.data._utils.worker as worker
        import transformers

        self.t0 = time.time()
        self.mark("data set-up starts")
        worker._worker_loop = TracedLoop(self, worker._worker_loop)
        try:  # youmu's TrainerLoader runs torchdata's StatefulDataLoader, which has a worker loop of its own
            import torchdata.stateful_dataloader.stateful_dataloader as stateful
        except ImportError:
            pass
        else:
            stateful._worker_loop = TracedLoop(self, stateful._worker_loop)
        _wrap(self, transformers.Trainer, "training_step", "first batch in the trainer", "forward + backward done")
        self.hook()

    def hook(self) -> None:
        """Wrap the functions a DataLoader worker reaches (once per process)."""
        global _HOOKED
        if _HOOKED or not self.kind.startswith("youmu"):
            return
        _HOOKED = True
        import youmu.stream
        import youmu.text.chat
        import youmu.text.tokenizer

        _wrap(self, youmu.text.tokenizer, "_load", "tokenizer load starts", "tokenizer loaded")
        _wrap(self, youmu.text.chat.ChatTemplate, "__call__", "first rows templating", "first rows templated",
              rows=lambda a: a[1].num_rows)
        tables = youmu.stream.RowStream.iter_tables

        def iter_tables(*a: Any, **kw: Any) -> Any:
            self.mark("first window being read")
            for k, t in enumerate(tables(*a, **kw)):
                if k == 0:
                    self.mark(f"first window read ({t.num_rows} rows)")
                yield t

        youmu.stream.RowStream.iter_tables = iter_tables  # type: ignore[method-assign]

    def read(self) -> list[str]:
        """The events in the order they happened."""
        if not self.path.exists():
            return []
        return sorted(self.path.read_text().splitlines(), key=lambda line: float(line.split()[0]))


def _wrap(trace: Trace, owner: Any, name: str, before: str, after: str, rows: Any = None) -> None:
    """``owner.name`` noting ``before`` and ``after`` its first call in each process."""
    fn = getattr(owner, name)

    def wrapped(*a: Any, **kw: Any) -> Any:
        trace.mark(before if rows is None else f"{before} ({rows(a)} rows)")
        out = fn(*a, **kw)
        trace.mark(after)
        return out

    setattr(owner, name, wrapped)


class TracedLoop:
    """A DataLoader worker loop noting when the worker starts (pickled into spawned
    workers by its module and name, where it wraps the worker's functions first)."""

    def __init__(self, trace: Trace, loop: Any) -> None:
        self.trace, self.loop = trace, loop
        self.where = (loop.__module__, loop.__name__)

    def __getstate__(self) -> dict[str, Any]:
        return {"trace": self.trace, "where": self.where}

    def __call__(self, *a: Any, **kw: Any) -> Any:
        self.trace.mark("DataLoader worker starts")
        loop = getattr(self, "loop", None)
        if loop is None:  # spawned: this interpreter's own loop, and the wrappers it lacks
            import importlib

            loop = getattr(importlib.import_module(self.where[0]), self.where[1])
            self.trace.hook()
        return loop(*a, **kw)


class TracedTemplate:
    """A ``datasets`` map function noting its first call in each process."""

    def __init__(self, trace: Trace, fn: Any) -> None:
        self.trace, self.fn = trace, fn

    def __call__(self, batch: dict[str, list[Any]]) -> Any:
        self.trace.mark(f"first rows templating ({len(batch['messages'])} rows)")
        out = self.fn(batch)
        self.trace.mark("first rows templated")
        return out


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
    ap.add_argument("--ranks", type=int, choices=(1, 2), default=1, help="CPU ranks over Gloo per pipeline")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each pipeline, alternated; medians reported")
    ap.add_argument("--trace", action="store_true", help="note each run's timeline to its first step")
    ap.add_argument("--max-steps", type=int, default=0, help="stop each run after this many steps (0: an epoch)")
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
    if args.rows % (args.batch_size * args.ranks):
        # every rank the same full batches: no pipeline pads an epoch with repeated chats
        ap.error(f"--rows must be a multiple of --batch-size × --ranks ({args.batch_size * args.ranks}), got {args.rows}")
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    from sft_demo import make_dataset

    work = Path(tempfile.mkdtemp(prefix="youmu-bench-sft-"))
    try:
        path, tok_dir, data = make_dataset(work, args)
        s = data["lengths"]
        print(f"{args.rows} chats ({data['profile']}-shaped, scale {args.scale:g}, {data['parquet_mb']} MB Parquet): "
              f"tokens mean {s['mean']}, median {s['median']}, P99 {s['p99']}, max {s['max']}, CV {s['cv']}; "
              f"{args.ranks} rank(s); load average {os.getloadavg()[0]:.1f}", flush=True)
        py = peers_python(args.peers_python, "HF datasets pipelines") if any(k.startswith("hf-") for k in kinds) else None
        results = []
        for run in range(args.repeat):
            for kind in kinds:
                if kind.startswith("hf-") and py is None:
                    continue
                res = run_pipeline(kind, f"{kind}-{run}", work, path, tok_dir, data, args, py)
                results.append(res)
                print(json.dumps({k: v for k, v in res.items() if k != "trace"}), flush=True)
                for line in res.get("trace", []):
                    print(f"    {line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args)


def run_pipeline(kind: str, name: str, work: Path, path: Path, tok_dir: Path, data: dict[str, Any],
                 args: argparse.Namespace, py: str | None) -> dict[str, Any]:
    """One run of ``kind`` in a fresh interpreter, with fresh cache folders: its figures."""
    pdir = work / name
    dirs = {key: pdir / key for key in ("cache", "hf-home", "tmp")}
    for d in dirs.values():
        d.mkdir(parents=True)
    env = {"HF_DATASETS_CACHE": str(dirs["cache"]), "HF_HOME": str(dirs["hf-home"]), "TMPDIR": str(dirs["tmp"]),
           "HF_HUB_OFFLINE": "1", "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    phase_args = ["--rows", str(args.rows), "--batch-size", str(args.batch_size), "--token-budget",
                  str(args.token_budget), "--pool", str(args.pool), "--num-proc", str(args.num_proc),
                  "--buffer", str(args.buffer), "--seed", str(args.seed), "--ranks", str(args.ranks),
                  "--max-steps", str(args.max_steps), "--path", str(path), "--tokenizer", str(tok_dir),
                  "--work", str(pdir), "--cache", str(dirs["cache"]), "--cutoff-len", str(data["cutoff_len"]),
                  *(["--trace"] if args.trace else [])]
    load = os.getloadavg()[0]
    res = run_phase(__file__, kind, *phase_args, python=py if kind.startswith("hf-") else None, tree_rss=True,
                    env=env)
    res["extra_disk_mb"] = round(sum(disk_mb(d) for d in dirs.values()), 2)
    res["load_before"] = round(load, 1)
    return res


def medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pipeline: the median of each figure over its runs (the runs' first
    steps, CPU seconds and loads kept as lists)."""
    out = []
    for kind in dict.fromkeys(r["pipeline"] for r in results):
        runs = [r for r in results if r["pipeline"] == kind]
        row = dict(runs[0])
        for key, value in runs[0].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = statistics.median(r[key] for r in runs)
        row["runs"] = len(runs)
        for key in ("first_step_s", "cpu_s", "load_before"):
            row[f"{key}_runs"] = [r[key] for r in runs]
        out.append(row)
    return out


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The table (medians over ``--repeat`` runs), ratios against ``youmu`` (or the first
    pipeline), and the sanity check."""
    if not results:
        return
    rows = medians(results)
    base = next((r for r in rows if r["pipeline"] == "youmu"), rows[0])
    print(f"\n{args.ranks} rank(s); medians of {args.repeat} run(s) each")
    print(f"| pipeline | first step (s) | vs {base['pipeline']} | samples/s (run) | vs {base['pipeline']} "
          "| samples/s (train() only) | CPU s | peak RSS tree (MB) | peak PSS tree (MB) | extra disk (MB) | steps "
          "| first steps (s), each run | loads at start |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pipeline']} | {r['first_step_s']:.2f} | {r['first_step_s'] / base['first_step_s']:.2f}× "
              f"| {r['samples_per_s']:.1f} | {r['samples_per_s'] / base['samples_per_s']:.2f}× "
              f"| {r['train_samples_per_s']:.1f} | {r['cpu_s']:.0f} | {r['tree_peak_rss_mb']:.0f} "
              f"| {r['tree_peak_pss_mb']:.0f} | {r['extra_disk_mb']:.2f} | {r['steps']:g} "
              f"| {', '.join(f'{x:.1f}' for x in r['first_step_s_runs'])} "
              f"| {', '.join(f'{x:.1f}' for x in r['load_before_runs'])} |")
    if args.max_steps:
        print(f"\nevery chat once: not checked (--max-steps {args.max_steps} stops before the epoch ends)")
    else:
        bad = sorted({r["pipeline"] for r in results if r["samples"] != args.rows or r["unique_samples"] != args.rows})
        tokens = {r["real_tokens"] for r in results}
        print(f"\nevery chat once: {'yes' if not bad else f'NO ({bad})'}; the same real tokens in every run: "
              f"{'yes' if len(tokens) == 1 else f'NO ({sorted(tokens)})'}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": args.rows, "batch_size": args.batch_size, "ranks": args.ranks,
                                              "repeat": args.repeat, "results": results}, indent=1))


if __name__ == "__main__":
    main()
