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
``--repeat N`` runs the pipelines N times, alternated (each repeat runs every pipeline
once, starting one further along), and reports each figure's median and min–max, and
youmu's figures as ratios against each peer's from the same repeat. A run whose process
tree fails (a rank or worker killed by a signal: ``PYTHONFAULTHANDLER`` is set, so a
fault prints the Python stacks) is reported as crashed, with the end of its stderr, and
the others go on; crashed runs, and chats not trained exactly once on the same tokens,
make the bench exit with status 1 after its report;
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
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
from _util import PEERS_PYTHON, PhaseFailed, emit, peers_python, run_phase  # noqa: E402

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

    worker_fault_stacks()

    from youmu.torch import lm_collate

    torch.set_num_threads(1)
    trace = Trace(Path(args.work) / f"trace{rank}.txt", kind) if args.trace else None
    tok, model = tiny_model(args)
    overrides: dict[str, Any] = {"remove_unused_columns": False}  # the recording trainer reads each chat's id
    if kind == "hf-stream":
        # an iterable has no length: an epoch's steps; each rank reads its own batches
        overrides.update(max_steps=math.ceil(args.rows / (args.batch_size * world)),
                         dataloader_num_workers=args.workers, accelerator_config={"dispatch_batches": False})
    if args.max_steps:
        overrides["max_steps"] = args.max_steps
    if args.save_steps:
        # checkpoints as a real job takes them: the model, the optimizer and (youmu) every
        # rank's loader state, every N optimizer steps
        overrides.update(save_strategy="steps", save_steps=args.save_steps)
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
    if args.save_steps:
        res["checkpoints"] = len(list(Path(targs.output_dir).glob("checkpoint-*")))
        res["loader_state_bytes"] = max((f.stat().st_size for f in Path(targs.output_dir).glob("checkpoint-*/youmu_loader_rank*")),
                                        default=0)
    if trace is not None:
        res["trace"] = trace.read()
    if world > 1:
        (Path(args.work) / f"rank{rank}.json").write_text(json.dumps(res))
        torch.distributed.barrier()
    res.pop("ids")
    return res


def worker_fault_stacks() -> None:
    """Make a DataLoader worker that faults print its Python stacks. torch's workers
    install a SIGSEGV/SIGBUS handler of their own (one line, no stack) over the one
    ``faulthandler`` (``PYTHONFAULTHANDLER``) set up; re-armed after it, ``faulthandler``
    dumps every thread's stack and then hands the signal on to torch's handler, so the
    loader still reports the worker killed. Workers forked from this process inherit it."""
    import faulthandler

    from torch.utils.data._utils import signal_handling

    install = signal_handling._set_worker_signal_handlers
    if not faulthandler.is_enabled() or getattr(install, "stacks", False):
        return

    def install_then_stacks(*a: Any) -> None:
        faulthandler.disable()  # enable() is a no-op while enabled: re-arm it over torch's handler
        install(*a)
        faulthandler.enable(all_threads=True)

    install_then_stacks.stacks = True  # type: ignore[attr-defined]
    signal_handling._set_worker_signal_handlers = install_then_stacks


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
        import youmu.streams.rowstream
        import youmu.text.chat
        import youmu.text.tokenizer

        _wrap(self, youmu.text.tokenizer, "_load", "tokenizer load starts", "tokenizer loaded")
        _wrap(self, youmu.text.chat.ChatTemplate, "__call__", "first rows templating", "first rows templated",
              rows=lambda a: a[1].num_rows)
        tables = youmu.streams.rowstream.RowStream.iter_tables

        def iter_tables(*a: Any, **kw: Any) -> Any:
            self.mark("first window being read")
            for k, t in enumerate(tables(*a, **kw)):
                if k == 0:
                    self.mark(f"first window read ({t.num_rows} rows)")
                yield t

        youmu.streams.rowstream.RowStream.iter_tables = iter_tables  # type: ignore[method-assign]

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
    ap.add_argument("--repeat", type=int, default=1, help="runs of each pipeline, alternated; median and min–max reported")
    ap.add_argument("--trace", action="store_true", help="note each run's timeline to its first step")
    ap.add_argument("--max-steps", type=int, default=0, help="stop each run after this many steps (0: an epoch)")
    ap.add_argument("--batch-size", type=int, default=8, help="chats per step (fixed batches, hf-*)")
    ap.add_argument("--token-budget", type=int, default=2048, help="youmu-odb: padded tokens per step")
    ap.add_argument("--pool", type=int, default=256, help="youmu-odb: samples in the grouping pool")
    ap.add_argument("--num-proc", type=int, default=2, help="hf-map: map processes")
    ap.add_argument("--buffer", type=int, default=1000, help="hf-stream: shuffle buffer size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=DEMO["workers"],
                    help="DataLoader workers templating the chats (youmu, youmu-odb, hf-stream)")
    ap.add_argument("--save-steps", type=int, default=0,
                    help="checkpoint every N optimizer steps (0: none); reports the loader state's bytes per rank")
    ap.add_argument("--out", help="write the figures here as JSON")
    ap.add_argument("--peers-python", default=PEERS_PYTHON, help="runs the hf-* pipelines (make peers-venv)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    for name in ("path", "tokenizer", "work", "cache"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    ap.add_argument("--cutoff-len", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for k, v in DEMO.items():
        if not hasattr(args, k):  # --workers is a flag of its own
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
            for kind in run_order(kinds, run):
                if kind.startswith("hf-") and py is None:
                    continue
                res = run_pipeline(kind, f"{kind}-{run}", work, path, tok_dir, data, args, py)
                res["repeat"] = run
                results.append(res)
                if "crashed" in res:
                    print(f"CRASHED: {kind}, repeat {run}: {res['crashed']}; its stderr ends:", flush=True)
                    print(textwrap.indent(res["stderr_tail"], "    "), flush=True)
                else:
                    print(json.dumps({k: v for k, v in res.items() if k != "trace"}), flush=True)
                for line in res.get("trace", []):
                    print(f"    {line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failures = report(results, args)
    if failures:
        sys.exit(f"bench_sft: {len(failures)} failure(s), listed above")


def run_order(kinds: list[str], run: int) -> list[str]:
    """The pipelines in repeat ``run``: every one once, starting one further along each
    repeat, so that none always runs first (just after the data is generated) or always
    after the same neighbour."""
    k = run % len(kinds)
    return kinds[k:] + kinds[:k]


def run_pipeline(kind: str, name: str, work: Path, path: Path, tok_dir: Path, data: dict[str, Any],
                 args: argparse.Namespace, py: str | None) -> dict[str, Any]:
    """One run of ``kind`` in a fresh interpreter, with fresh cache folders: its figures
    (or, if its process tree failed, ``crashed``: what killed it, and its stderr's end)."""
    pdir = work / name
    dirs = {key: pdir / key for key in ("cache", "hf-home", "tmp")}
    for d in dirs.values():
        d.mkdir(parents=True)
    env = {"HF_DATASETS_CACHE": str(dirs["cache"]), "HF_HOME": str(dirs["hf-home"]), "TMPDIR": str(dirs["tmp"]),
           "HF_HUB_OFFLINE": "1", "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           # a process of the tree that faults prints its threads' Python stacks into the crash report
           "PYTHONFAULTHANDLER": "1"}
    phase_args = ["--rows", str(args.rows), "--batch-size", str(args.batch_size), "--token-budget",
                  str(args.token_budget), "--pool", str(args.pool), "--num-proc", str(args.num_proc),
                  "--buffer", str(args.buffer), "--seed", str(args.seed), "--ranks", str(args.ranks),
                  "--max-steps", str(args.max_steps), "--workers", str(args.workers), "--save-steps",
                  str(args.save_steps), "--path", str(path), "--tokenizer", str(tok_dir),
                  "--work", str(pdir), "--cache", str(dirs["cache"]), "--cutoff-len", str(data["cutoff_len"]),
                  *(["--trace"] if args.trace else [])]
    load = os.getloadavg()[0]
    try:
        res = run_phase(__file__, kind, *phase_args, python=py if kind.startswith("hf-") else None, tree_rss=True,
                        env=env)
    except PhaseFailed as e:  # kept as a crashed run, with what killed it: the other runs go on
        res = {"pipeline": kind, "crashed": e.cause, "stderr_tail": e.stderr[-6000:]}
    res["extra_disk_mb"] = round(sum(disk_mb(d) for d in dirs.values()), 2)
    res["load_before"] = round(load, 1)
    return res


#: The figures the table gives as median (min–max) over a pipeline's runs: key, column, format.
FIGURES = (
    ("first_step_s", "first step (s), slower rank", "{:.2f}"),
    ("samples_per_s", "samples/s (run)", "{:.1f}"),
    ("train_samples_per_s", "samples/s (`train()` only)", "{:.1f}"),
    ("cpu_s", "CPU s (tree)", "{:.0f}"),
    ("tree_peak_rss_mb", "peak RSS, tree (MB)", "{:,.0f}"),
    ("tree_peak_pss_mb", "peak PSS, tree (MB)", "{:,.0f}"),
    ("padding_pct", "padding (%)", "{:.1f}"),
    ("extra_disk_mb", "extra disk (MB)", "{:.2f}"),
)
#: The figures youmu's runs are divided by a peer's from the same repeat.
RATIOS = (("first_step_s", "first step"), ("samples_per_s", "samples/s (run)"), ("cpu_s", "CPU s"),
          ("tree_peak_rss_mb", "peak RSS, tree"))


def padding_pct(run: dict[str, Any]) -> float:
    """The share of the tokens computed that were padding, in percent."""
    return 100 * (1 - run["real_tokens"] / run["padded_tokens"]) if run["padded_tokens"] else 0.0


def spread(values: list[float], fmt: str) -> str:
    """``median (min–max)``, or the one value."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pipeline, in the order they first ran: each figure's values over its
    completed runs, the loads at their starts, and how many runs crashed."""
    out = []
    for kind in dict.fromkeys(r["pipeline"] for r in results):
        runs = [r for r in results if r["pipeline"] == kind]
        done = [dict(r, padding_pct=padding_pct(r)) for r in runs if "crashed" not in r]
        row: dict[str, Any] = {"pipeline": kind, "runs": len(runs), "crashed": len(runs) - len(done),
                               "loads": [r["load_before"] for r in runs]}
        for key, _, _ in FIGURES:
            row[key] = [r[key] for r in done]
        row["steps"] = sorted({r["steps"] for r in done})
        out.append(row)
    return out


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each youmu pipeline against each peer: per figure, youmu's value over the peer's
    from the same repeat, for every repeat where both completed."""
    done = {(r["pipeline"], r["repeat"]): r for r in results if "crashed" not in r}
    kinds = list(dict.fromkeys(r["pipeline"] for r in results))
    out = []
    for ours in (k for k in kinds if k.startswith("youmu")):
        for peer in (k for k in kinds if not k.startswith("youmu")):
            pairs = [(done[ours, n], done[peer, n]) for n in sorted({r["repeat"] for r in results})
                     if (ours, n) in done and (peer, n) in done]
            if pairs:
                out.append({"ours": ours, "peer": peer, "repeats": len(pairs),
                            **{key: [a[key] / b[key] for a, b in pairs] for key, _ in RATIOS}})
    return out


def epoch_problems(results: list[dict[str, Any]], rows: int, max_steps: int) -> list[str]:
    """What makes the comparison void: runs that crashed, and (over a whole epoch) a
    pipeline that did not train every chat exactly once, or runs that trained different
    real token counts (their templates or labels disagree)."""
    problems = [f"{r['pipeline']} crashed in repeat {r['repeat']} ({r['crashed']})" for r in results if "crashed" in r]
    done = [r for r in results if "crashed" not in r]
    if max_steps:
        return problems
    for r in done:
        if r["samples"] != rows or r["unique_samples"] != rows:
            problems.append(f"{r['pipeline']} (repeat {r['repeat']}) trained {r['samples']} chats, "
                            f"{r['unique_samples']} distinct, not each of the {rows} once")
    tokens = {r["real_tokens"] for r in done}
    if len(tokens) > 1:
        problems.append("the runs trained different real token counts: " + ", ".join(
            f"{r['pipeline']} (repeat {r['repeat']}) {r['real_tokens']}" for r in done))
    return problems


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Print the table (median and min–max over ``--repeat`` runs, alternated), youmu's
    figures as ratios against each peer's from the same repeat, and the sanity check;
    return what failed (crashed runs, a chat not trained exactly once, token counts that
    differ)."""
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": args.rows, "batch_size": args.batch_size, "ranks": args.ranks,
                                              "repeat": args.repeat, "results": results}, indent=1))
    if not results:
        return []
    print(f"\n{args.ranks} rank(s); median (min–max) of {args.repeat} run(s) each, the pipelines alternated")
    print("| pipeline | " + " | ".join(head for _, head, _ in FIGURES) + " | steps | runs (crashed) | load avg at starts |")
    print("|---|" + "---|" * (len(FIGURES) + 3))
    for row in summary(results):
        cells = [spread(row[key], fmt) if row[key] else "—" for key, _, fmt in FIGURES]
        print(f"| {row['pipeline']} | " + " | ".join(cells) + f" | {', '.join(map(str, row['steps'])) or '—'} "
              f"| {row['runs']} ({row['crashed']}) | {', '.join(f'{x:.1f}' for x in row['loads'])} |")
    pairs = ratios(results)
    if pairs:
        print("\nyoumu over each peer, the same repeat's runs: median (min–max) of the per-repeat ratios")
        print("| youmu | peer | repeats | " + " | ".join(head for _, head in RATIOS) + " |")
        print("|---|---|---|" + "---|" * len(RATIOS))
        for p in pairs:
            print(f"| {p['ours']} | {p['peer']} | {p['repeats']} | "
                  + " | ".join(spread(p[key], "{:.2f}") + "×" for key, _ in RATIOS) + " |")
    problems = epoch_problems(results, args.rows, args.max_steps)
    if args.max_steps:
        print(f"\nevery chat once: not checked (--max-steps {args.max_steps} stops before the epoch ends)")
    else:
        tokens = sorted({r["real_tokens"] for r in results if "crashed" not in r})
        print(f"\nevery chat once, on the same real tokens ({', '.join(map(str, tokens))}): "
              f"{'yes' if not problems else 'NO'}")
    for line in problems:
        print(f"FAILED: {line}")
    return problems


if __name__ == "__main__":
    main()
