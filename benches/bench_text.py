"""Online tokenization against its limit: a text Parquet column read by
``YoumuDataset`` and tokenized by ``youmu.text.Tokenize`` (a page's rows at a time)
against ``tokenizers``' ``encode_batch`` alone on the same texts, in the same
process, with the same number of tokenizer threads — the most a loader that
tokenizes online could deliver. Target: youmu ≥ 90% of the limit's tokens/s.

The runs: the limit; ``encode_batch`` inside a forked DataLoader worker that hands
over only a count per batch (the tokenizer's own cost in a worker: a second
baseline); the youmu stream in this process (a worker's work without the hand-off);
and the stream through DataLoader workers, handed over the ways youmu's loaders and
their users do it: each row alone by torch (``batch_size=None``: a shared-memory
segment per tensor), each row alone through youmu's ``SendCollate`` (what
``DynamicBatchLoader`` does with workers), batches of 8 padded by ``lm_collate`` in the
worker (torch's hand-off, and ``SendCollate``'s as ``TrainerLoader`` does it), over 1
and 2 fork workers and 1 spawn worker; then ``DynamicBatchLoader``'s hand-off (rows in
chunks of up to 8, 16 and 32 through ``SendCollate``, put back in one-row-per-item order)
and ``DynamicBatchLoader`` itself, in the process and over 1 and 2 fork workers. Each figure is tokens per wall second and
tokens per CPU second of the whole process tree (this process and its workers), the
median of ``--repeat`` interleaved runs, with the load average beside it (the
machine may be shared). The tokenizer is a byte-level BPE trained here on the
generated corpus (no download); the texts are Zipf-distributed English-like words.

Workers tokenize on one thread whatever ``--threads`` says (see the comment in
``main``): compare them with ``--threads 1``.

``--chat``: chat templating instead. ``youmu.text.ChatTemplate`` against the
tokenizer's own ``apply_chat_template`` (``transformers``) alone on the same chats,
``BATCH_ROWS`` chats per call, asking for what ``ChatTemplate`` needs (ids and the
assistant-token mask; and, for reference, ids only). The chats are the SFT demo's
(``examples/sft_demo.py``: UltraChat's layout and length shape, its locally trained
ChatML tokenizer). Rows/s and tokens/s, wall and per CPU second, of: the template
alone, ``ChatTemplate`` called on the same Arrow batches, the youmu stream through it
in the process, and through one DataLoader worker. A sanity check first: every row's
``input_ids`` must be the template's ids and its ``labels`` the ids the template marks
as the assistant's (``-100`` elsewhere).

``--chat --published``: what finding the answers of a template with no
``{% generation %}`` block costs (a published model's, :mod:`youmu.text.turns`):
``ChatTemplate`` with the demo's ChatML template as it is (tagged) against the same
template with its tags taken out (the same text and ids; answers found turn by turn),
on the same Arrow batches and through one DataLoader worker, interleaved.

Usage: python benches/bench_text.py [--docs 4000] [--threads 1] [--repeat 5]
       python benches/bench_text.py --chat [--chats 2048] [--repeat 3] [--published]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch.utils.data


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` documents of Zipf-distributed words (lengths 20–800 words)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(1, 10)))) for _ in range(30_000)]
    vocab[:20] = ["the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with", "be",
                  "by", "on", "not", "he", "this", "are"]
    docs = []
    for length in rng.integers(20, 800, size=n):
        words = rng.zipf(1.2, size=int(length)) % len(vocab)
        docs.append(" ".join(vocab[w] for w in words) + ".")
    return docs


def tokenizer(texts: list[str], vocab_size: int) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts[:5000], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])
    return tok


def _cpu(children: bool) -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tree_cpu() -> float:
    """CPU seconds of this process and its finished children (workers that exited)."""
    return _cpu(False) + _cpu(True)


def limit(tok, texts: list[str], batch: int) -> tuple[float, float, int]:
    """``encode_batch`` alone on the texts, ``batch`` at a time, ids taken out:
    ``(wall s, CPU s, tokens)``."""
    t, c = time.perf_counter(), _cpu(False)
    tokens = 0
    for i in range(0, len(texts), batch):
        tokens += sum(len(e.ids) for e in tok.encode_batch(texts[i:i + batch]))
    return time.perf_counter() - t, _cpu(False) - c, tokens


class EncodeInWorker(torch.utils.data.IterableDataset):
    """``encode_batch`` on the texts, ``batch`` at a time, in DataLoader workers (each its
    share of the batches) that hand over one count per batch: the tokenizer's cost in
    workers, hand-off aside."""

    def __init__(self, tok: Any, texts: list[str], batch: int) -> None:
        self.tok, self.texts, self.batch = tok, texts, batch

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(k * self.batch, len(self.texts), n * self.batch):
            yield sum(len(e.ids) for e in self.tok.encode_batch(self.texts[i:i + self.batch]))


def limit_in_worker(tok, texts: list[str], batch: int, workers: int = 1) -> tuple[float, float, int]:
    """:class:`EncodeInWorker` through ``workers`` fork workers: ``(wall s, tree CPU s, tokens)``
    (with 2, what two tokenizing processes make on this machine's shared cores)."""
    loader = torch.utils.data.DataLoader(EncodeInWorker(tok, texts, batch), batch_size=None, num_workers=workers,
                                         multiprocessing_context="fork")
    t, c = time.perf_counter(), _tree_cpu()
    tokens = sum(int(n) for n in loader)
    wall = time.perf_counter() - t
    del loader
    return wall, _tree_cpu() - c, tokens


class EncodeAndSend(EncodeInWorker):
    """:class:`EncodeInWorker` handing over what the youmu stream's workers hand over: the
    rows as samples, ``batch_size`` at a time (collated and pickled by the loader's
    ``collate_fn``): the tokenizer in workers with the same hand-off, youmu's stream aside."""

    def __init__(self, tok: Any, texts: list[str], batch: int, batch_size: int) -> None:
        super().__init__(tok, texts, batch)
        self.batch_size = batch_size

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(k * self.batch, len(self.texts), n * self.batch):
            rows = [{"input_ids": np.array(e.ids, dtype=np.int64)}
                    for e in self.tok.encode_batch(self.texts[i:i + self.batch])]
            for j in range(0, len(rows), self.batch_size):
                yield rows[j:j + self.batch_size]


def encode_and_send(tok, texts: list[str], batch: int, workers: int, batch_size: int) -> tuple[float, float, int]:
    """:class:`EncodeAndSend` through ``workers`` fork workers, batches padded by
    ``lm_collate`` and sent through ``SendCollate``: ``(wall s, tree CPU s, tokens)``."""
    from youmu.torch import lm_collate
    from youmu.torch.sendable import SendCollate

    loader = torch.utils.data.DataLoader(EncodeAndSend(tok, texts, batch, batch_size), batch_size=None,
                                         num_workers=workers, multiprocessing_context="fork",
                                         collate_fn=SendCollate(lm_collate))
    t, c = time.perf_counter(), _tree_cpu()
    tokens = sum(int(b["attention_mask"].sum()) for b in loader)
    wall = time.perf_counter() - t
    del loader
    return wall, _tree_cpu() - c, tokens


def _keep(x: Any) -> Any:
    return x


def youmu_stream(path: Path, transform, workers: int, column: str = "text", batch_size: int | None = None,
                 send: bool = False, context: str = "fork", buffer_size: int | None = None) -> tuple[float, float, int]:
    """The stream's rows through ``transform`` (``Tokenize``, ``ChatTemplate``) in this
    process (0) or through ``workers`` DataLoader workers started by ``context``, each
    row handed over alone or ``batch_size`` at a time (padded by ``lm_collate`` in the
    worker, as a trainer's loader does), by torch or through youmu's ``SendCollate``
    (``send``): ``(wall s, CPU s of the process tree, tokens)``. ``buffer_size``: rows
    per page window (the dataset's default when ``None``); workers are dealt whole
    windows, so a set smaller than two windows keeps all but one worker idle."""
    from torch.utils.data import DataLoader

    from youmu.torch import YoumuDataset, lm_collate
    from youmu.torch.sendable import SendCollate

    extra: dict[str, Any] = {} if buffer_size is None else {"buffer_size": buffer_size}
    ds = YoumuDataset(path, columns=[column], shuffle="page", seed=0, output="numpy", transform=transform, **extra)
    source: Any
    if workers == 0:
        source = ds
    else:
        collate = _keep if batch_size is None else lm_collate
        kw: dict[str, Any] = dict(batch_size=batch_size, num_workers=workers, multiprocessing_context=context)
        if send or batch_size is not None:
            kw["collate_fn"] = SendCollate(collate) if send else collate
        source = DataLoader(ds, **kw)
    t, c = time.perf_counter(), _tree_cpu()
    if batch_size is None:
        tokens = sum(len(x["input_ids"]) for x in source)
    else:
        tokens = sum(int(b["attention_mask"].sum()) for b in source)
    wall = time.perf_counter() - t
    del source  # the workers exit: their CPU time joins RUSAGE_CHILDREN
    return wall, _tree_cpu() - c, tokens


def _ids(sample: Any) -> int:
    return len(sample["input_ids"])


class Chunked(torch.utils.data.IterableDataset):
    """A worker's rows of ``ds`` in chunks of up to ``cap`` (``DynamicBatchLoader``'s
    hand-off, :mod:`youmu.batching.runtime.handoff`, without the loader around it)."""

    def __init__(self, ds: Any, cap: int) -> None:
        self.ds, self.cap = ds, cap

    def __iter__(self) -> Any:
        from youmu.batching.runtime.handoff import worker_chunks

        return worker_chunks(self.ds, cap=self.cap)


def chunked_stream(path: Path, transform, workers: int, cap: int) -> tuple[float, float, int]:
    """The stream's rows through ``workers`` fork workers, handed over in chunks of up to
    ``cap`` and put back in one-row-per-item order, as ``DynamicBatchLoader`` does."""
    from torch.utils.data import DataLoader

    from youmu.batching.runtime.handoff import ChunkCollate, round_robin
    from youmu.torch import YoumuDataset

    ds = YoumuDataset(path, columns=["text"], shuffle="page", seed=0, output="numpy", transform=transform)
    loader = DataLoader(Chunked(ds, cap), batch_size=None, num_workers=workers, collate_fn=ChunkCollate(),
                        multiprocessing_context="fork")
    t, c = time.perf_counter(), _tree_cpu()
    tokens = sum(len(x["input_ids"]) for x in round_robin(loader, workers))
    wall = time.perf_counter() - t
    del loader
    return wall, _tree_cpu() - c, tokens


def dbl_stream(path: Path, transform, workers: int, buffer_size: int | None = None) -> tuple[float, float, int]:
    """The stream through a ``DynamicBatchLoader`` (one process, no torch.distributed;
    ``collate_fn=None``) with ``workers`` fork workers: the samples of its batches
    (``buffer_size`` as in :func:`youmu_stream`)."""
    from youmu.batching import DynamicBatchLoader
    from youmu.torch import YoumuDataset

    extra: dict[str, Any] = {} if buffer_size is None else {"buffer_size": buffer_size}
    ds = YoumuDataset(path, columns=["text"], shuffle="page", seed=0, output="numpy", transform=transform, **extra)
    loader = DynamicBatchLoader(ds, token_budget=16384, length_fn=_ids, collate_fn=None, num_workers=workers,
                                multiprocessing_context="fork" if workers else None)
    t, c = time.perf_counter(), _tree_cpu()
    tokens = sum(len(s["input_ids"]) for batch, _ in loader for s in batch)
    wall = time.perf_counter() - t
    loader.close()
    del loader
    return wall, _tree_cpu() - c, tokens


def median_of(runs: list[tuple[str, Any]], repeat: int, unit: str = "tokens") -> tuple[dict[str, float], dict[str, float], int, list[float]]:
    """``runs`` (name, ``() -> (wall s, CPU s, count)``) interleaved ``repeat`` times
    (a shared machine's load moves: each run sees the same mix): the median of each,
    ``(wall, cpu, count, load averages seen)``; every run must count the same."""
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    loads = []
    for r in range(repeat):
        for name, run in runs:
            loads.append(os.getloadavg()[0])
            secs, cpu_secs, n = run()
            walls.setdefault(name, []).append(secs)
            cpus.setdefault(name, []).append(cpu_secs)
            counts[name] = n
            print(f"  run {r}: {name}: {n / secs / 1e6:.3f} M {unit}/s wall, "
                  f"{n / cpu_secs / 1e6:.3f} M per CPU s ({secs:.2f} s, load {loads[-1]:.1f})", flush=True)
    assert len(set(counts.values())) == 1, counts  # the same tokens everywhere
    wall = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    return wall, cpu, next(iter(counts.values())), loads


def chat_data(d: Path, chats: int, seed: int) -> tuple[Path, Any]:
    """The SFT demo's chats (UltraChat-shaped, 1/8 of Table 10's lengths) as Parquet under
    ``d``, and its locally trained ChatML tokenizer."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import sft_demo

    ns = argparse.Namespace(rows=chats, profile="ultrachat", scale=0.125, seed=seed)
    path, tok_dir, _ = sft_demo.make_dataset(d, ns)
    from transformers import PreTrainedTokenizerFast

    return path, PreTrainedTokenizerFast.from_pretrained(str(tok_dir))


def template_alone(tok, convs: list[Any], batch: int, mask: bool) -> tuple[float, float, int]:
    """``apply_chat_template`` alone, ``batch`` chats per call, ids (and the assistant
    mask) taken out: ``(wall s, CPU s, tokens)``."""
    t, c = time.perf_counter(), _cpu(False)
    tokens = 0
    for i in range(0, len(convs), batch):
        out = tok.apply_chat_template(convs[i:i + batch], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=mask)
        tokens += sum(len(x) for x in out["input_ids"])
    return time.perf_counter() - t, _cpu(False) - c, tokens


def transform_alone(transform, table, batch: int) -> tuple[float, float, int]:
    """``ChatTemplate`` called on the table's batches (no Parquet, no rows out)."""
    t, c = time.perf_counter(), _cpu(False)
    tokens = 0
    for lo in range(0, table.num_rows, batch):
        out, _ = transform(table.slice(lo, batch))
        tokens += len(out.column("input_ids").combine_chunks().values)
    return time.perf_counter() - t, _cpu(False) - c, tokens


def check_chat(tok, transform, table) -> int:
    """Every row's ids are the template's and its labels the assistant's ids: the rows
    checked."""
    import numpy as np

    out, keep = transform(table)
    ref = tok.apply_chat_template(table.column("messages").to_pylist(), tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    assert keep.all()
    for ids, labels, want, mask in zip(out.column("input_ids").to_pylist(), out.column("labels").to_pylist(),
                                       ref["input_ids"], ref["assistant_masks"]):
        assert ids == list(want), "ChatTemplate's ids differ from apply_chat_template's"
        assert labels == np.where(np.asarray(mask, bool), want, -100).tolist(), "labels differ from the mask"
    return table.num_rows


def chat(args: argparse.Namespace) -> None:
    import pyarrow.parquet as pq

    from youmu.streams.batched import BATCH_ROWS
    from youmu.text import ChatTemplate

    with tempfile.TemporaryDirectory() as d:
        path, tok = chat_data(Path(d), args.chats, args.seed)
        table = pq.read_table(path)
        convs = table.column("messages").to_pylist()
        transform = ChatTemplate(tok)
        checked = check_chat(tok, transform, table)
        print(f"{args.chats} chats ({path.stat().st_size / 1e6:.2f} MB Parquet), tokenizer vocab {len(tok)}, "
              f"{args.threads} tokenizer thread(s); ids and labels of all {checked} rows equal the template's",
              flush=True)
        limit_name = "apply_chat_template, ids + assistant mask (the limit)"
        runs = [
            (limit_name, lambda: template_alone(tok, convs, BATCH_ROWS, True)),
            ("apply_chat_template, ids only (no labels)", lambda: template_alone(tok, convs, BATCH_ROWS, False)),
            ("ChatTemplate on the same Arrow batches", lambda: transform_alone(transform, table, BATCH_ROWS)),
            ("youmu stream + ChatTemplate, in-process", lambda: youmu_stream(path, transform, 0, "messages")),
            ("youmu stream + ChatTemplate, 1 DataLoader worker", lambda: youmu_stream(path, transform, 1, "messages")),
            ("the same, batches of 8 collated in the worker",
             lambda: youmu_stream(path, transform, 1, "messages", batch_size=8)),
        ]
        wall, cpu, n, _ = median_of(runs, args.repeat)
    rows = args.chats
    print("\n| measurement | chats/s (wall) | M tokens/s (wall) | vs limit | chats per CPU s | M tokens per CPU s "
          "| vs limit |\n|---|---|---|---|---|---|---|")
    for name in wall:
        print(f"| {name} | {rows / wall[name]:.0f} | {n / wall[name] / 1e6:.3f} | {wall[limit_name] / wall[name]:.2f}× "
              f"| {rows / cpu[name]:.0f} | {n / cpu[name] / 1e6:.3f} | {cpu[limit_name] / cpu[name]:.2f}× |")
    print(f"\n{n:,} tokens ({n / rows:.0f} per chat)")


def published(args: argparse.Namespace) -> None:
    import pyarrow.parquet as pq

    from youmu.streams.batched import BATCH_ROWS
    from youmu.text import ChatTemplate

    with tempfile.TemporaryDirectory() as d:
        path, tok = chat_data(Path(d), args.chats, args.seed)
        table = pq.read_table(path)
        untagged = tok.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
        tagged, found = ChatTemplate(tok), ChatTemplate(tok, chat_template=untagged)
        assert tagged.tagged and not found.tagged
        a, b = tagged(table)[0], found(table)[0]
        assert a.column("input_ids").equals(b.column("input_ids")), "the two templates' ids differ"
        turns = sum(m["role"] == "assistant" for c in table.column("messages").to_pylist() for m in c)
        print(f"{args.chats} chats, {turns} answers ({turns / args.chats:.1f} per chat); ids equal on both paths; "
              f"label tokens {sum(v != -100 for r in a.column('labels').to_pylist() for v in r):,} (tagged) vs "
              f"{sum(v != -100 for r in b.column('labels').to_pylist() for v in r):,} (found: + the newline after "
              "each <|im_end|>, as TRL's ChatML training templates mark it)", flush=True)
        base = "tagged template (transformers' assistant mask), on Arrow batches"
        runs = [
            (base, lambda: transform_alone(tagged, table, BATCH_ROWS)),
            ("published template (answers found turn by turn), on Arrow batches",
             lambda: transform_alone(found, table, BATCH_ROWS)),
            ("tagged, youmu stream in 1 DataLoader worker", lambda: youmu_stream(path, tagged, 1, "messages")),
            ("published, youmu stream in 1 DataLoader worker", lambda: youmu_stream(path, found, 1, "messages")),
        ]
        wall, cpu, n, loads = median_of(runs, args.repeat)
    rows = args.chats
    print("\n| measurement | chats/s (wall) | vs tagged | chats per CPU s | vs tagged |\n|---|---|---|---|---|")
    for name in wall:
        ref = base if "Arrow" in name else "tagged, youmu stream in 1 DataLoader worker"
        print(f"| {name} | {rows / wall[name]:.0f} | {wall[ref] / wall[name]:.2f}× | {rows / cpu[name]:.0f} "
              f"| {cpu[ref] / cpu[name]:.2f}× |")
    print(f"\n{n:,} tokens ({n / rows:.0f} per chat); load average {min(loads):.1f}-{max(loads):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=4_000)
    ap.add_argument("--threads", type=int, default=1, help="tokenizer threads (RAYON_NUM_THREADS), both sides")
    ap.add_argument("--vocab", type=int, default=16_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--chat", action="store_true", help="ChatTemplate against apply_chat_template instead")
    ap.add_argument("--chats", type=int, default=2048, help="--chat: chats generated")
    ap.add_argument("--published", action="store_true",
                    help="--chat: a template without {% generation %} blocks against the tagged one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated run numbers (1-15) to run beside the limit")
    args = ap.parse_args()
    if os.environ.get("RAYON_NUM_THREADS") != str(args.threads):  # rayon reads it once, at its pool's start
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
        # not TOKENIZERS_PARALLELISM=true: a fork worker of a process whose tokenizer
        # threads ran would wait forever on threads it does not have (tokenizers turns
        # them off there unless told otherwise), so the worker tokenizes on 1 thread
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.chat:
        published(args) if args.published else chat(args)
        return

    import pyarrow as pa
    import pyarrow.parquet as pq

    from youmu.streams.batched import BATCH_ROWS

    texts = corpus(args.docs)
    tok = tokenizer(texts, args.vocab)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "text.parquet"
        pq.write_table(pa.table({"text": texts}), path, row_group_size=1024, compression="zstd")
        mb = sum(len(t.encode()) for t in texts) / 1e6
        print(f"{args.docs} docs, {mb:.1f} MB of text, {path.stat().st_size / 1e6:.1f} MB Parquet, "
              f"vocab {args.vocab}, {args.threads} tokenizer thread(s)", flush=True)
        from youmu.text import Tokenize

        limit_name = "encode_batch alone, in the process (the limit)"
        runs = [
            (limit_name, lambda: limit(tok, texts, BATCH_ROWS)),
            ("encode_batch in 1 fork worker, a count per batch handed over",
             lambda: limit_in_worker(tok, texts, BATCH_ROWS)),
            ("youmu stream + Tokenize, in the process", lambda: youmu_stream(path, Tokenize(tok), 0)),
            ("1 fork worker, each row alone by torch (batch_size=None)",
             lambda: youmu_stream(path, Tokenize(tok), 1)),
            ("1 fork worker, each row alone through SendCollate (DynamicBatchLoader's hand-off before chunks)",
             lambda: youmu_stream(path, Tokenize(tok), 1, send=True)),
            ("1 fork worker, batches of 8 by lm_collate, torch's hand-off",
             lambda: youmu_stream(path, Tokenize(tok), 1, batch_size=8)),
            ("1 fork worker, batches of 8 by lm_collate through SendCollate (TrainerLoader's)",
             lambda: youmu_stream(path, Tokenize(tok), 1, batch_size=8, send=True)),
            ("2 fork workers, batches of 8 through SendCollate",
             lambda: youmu_stream(path, Tokenize(tok), 2, batch_size=8, send=True)),
            ("1 spawn worker, batches of 8 through SendCollate",
             lambda: youmu_stream(path, Tokenize(tok), 1, batch_size=8, send=True, context="spawn")),
            ("1 fork worker, rows in chunks of up to 8 through SendCollate, one-row order rebuilt",
             lambda: chunked_stream(path, Tokenize(tok), 1, 8)),
            ("1 fork worker, rows in chunks of up to 16 (DynamicBatchLoader's hand-off)",
             lambda: chunked_stream(path, Tokenize(tok), 1, 16)),
            ("1 fork worker, rows in chunks of up to 32",
             lambda: chunked_stream(path, Tokenize(tok), 1, 32)),
            ("DynamicBatchLoader, in the process (num_workers=0)", lambda: dbl_stream(path, Tokenize(tok), 0)),
            ("DynamicBatchLoader, 1 fork worker", lambda: dbl_stream(path, Tokenize(tok), 1)),
            ("DynamicBatchLoader, 2 fork workers", lambda: dbl_stream(path, Tokenize(tok), 2)),
        ]
        if args.only:
            runs = [r for i, r in enumerate(runs) if i == 0 or str(i) in args.only.split(",")]
        wall, cpu, n, loads = median_of(runs, args.repeat)
        base_wall = n / wall[limit_name]
        base_cpu = n / cpu[limit_name]
        print(f"\nmedians of {args.repeat} runs; load average (1 min) {min(loads):.1f}–{max(loads):.1f}, "
              f"median {statistics.median(loads):.1f}")
        print("\n| measurement | M tokens/s (wall) | vs limit | M tokens per CPU s (process tree) | vs limit |\n"
              "|---|---|---|---|---|")
        for name in wall:
            w, c = n / wall[name], n / cpu[name]
            print(f"| {name} | {w / 1e6:.3f} | {w / base_wall:.2f}× | {c / 1e6:.3f} | {c / base_cpu:.2f}× |")
        print(f"\n{n:,} tokens ({n / args.docs:.0f} per doc)")


if __name__ == "__main__":
    main()
