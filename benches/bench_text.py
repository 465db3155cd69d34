"""Online tokenization against its limit: a text Parquet column read by
``YoumuDataset`` and tokenized by ``youmu.text.Tokenize`` (a page's rows at a time)
against ``tokenizers``' ``encode_batch`` alone on the same texts, in the same
process, with the same number of tokenizer threads — the most a loader that
tokenizes online could deliver. Target: youmu ≥ 90% of the limit's tokens/s.

Three figures: the limit, the youmu stream in this process (what a DataLoader
worker does, without the hand-off), and one DataLoader worker (plus the hand-off of
every sample to the main process). Each is given in wall-clock tokens/s and in
tokens per CPU second of the process doing the work (this one, or the worker: its
CPU time as a finished child), which stays comparable on a machine shared with
other jobs. The tokenizer is a byte-level BPE trained here on
the generated corpus (no download); the texts are Zipf-distributed English-like words.

The DataLoader worker tokenizes on one thread whatever ``--threads`` says (see the
comment in ``main``): compare it with ``--threads 1``.

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

Usage: python benches/bench_text.py [--docs 4000] [--threads 1] [--repeat 3]
       python benches/bench_text.py --chat [--chats 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


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


def limit(tok, texts: list[str], batch: int) -> tuple[float, float, int]:
    """``encode_batch`` alone on the texts, ``batch`` at a time, ids taken out:
    ``(wall s, CPU s, tokens)``."""
    t, c = time.perf_counter(), _cpu(False)
    tokens = 0
    for i in range(0, len(texts), batch):
        tokens += sum(len(e.ids) for e in tok.encode_batch(texts[i:i + batch]))
    return time.perf_counter() - t, _cpu(False) - c, tokens


def youmu_stream(path: Path, transform, workers: int, column: str = "text",
                 batch_size: int | None = None) -> tuple[float, float, int]:
    """The stream's rows through ``transform`` (``Tokenize``, ``ChatTemplate``) in this
    process (0) or through a DataLoader worker (1), each sample handed over alone or
    ``batch_size`` at a time (padded by ``lm_collate`` in the worker, as a trainer's
    loader does): ``(wall s, CPU s of the process that tokenized, tokens)``."""
    from torch.utils.data import DataLoader

    from youmu.torch import YoumuDataset, lm_collate

    ds = YoumuDataset(path, columns=[column], shuffle="page", seed=0, output="numpy", transform=transform)
    if workers == 0:
        source: Any = ds
    elif batch_size is None:
        source = DataLoader(ds, batch_size=None, num_workers=workers)
    else:
        source = (
            {"input_ids": ids[mask.bool()]}
            for b in DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=lm_collate)
            for ids, mask in zip(b["input_ids"], b["attention_mask"])
        )
    t, c = time.perf_counter(), _cpu(workers > 0)
    tokens = sum(len(x["input_ids"]) for x in source)
    wall = time.perf_counter() - t
    del source  # the worker exits: its CPU time joins RUSAGE_CHILDREN
    return wall, _cpu(workers > 0) - c, tokens


def best_of(runs: list[tuple[str, Any]], repeat: int, unit: str = "tokens") -> tuple[dict[str, float], dict[str, float], int]:
    """``runs`` (name, ``() -> (wall s, CPU s, count)``) interleaved ``repeat`` times,
    best of each (the least disturbed run): ``(wall, cpu, count)``; every run must
    count the same."""
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    counts: dict[str, int] = {}
    for r in range(repeat):
        for name, run in runs:
            secs, cpu_secs, n = run()
            wall[name] = min(wall.get(name, float("inf")), secs)
            cpu[name] = min(cpu.get(name, float("inf")), cpu_secs)
            counts[name] = n
            print(f"  run {r}: {name}: {n / secs / 1e6:.3f} M {unit}/s wall, "
                  f"{n / cpu_secs / 1e6:.3f} M per CPU s ({secs:.2f} s)", flush=True)
    assert len(set(counts.values())) == 1, counts  # the same tokens everywhere
    return wall, cpu, next(iter(counts.values()))


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

    from youmu.batched import BATCH_ROWS
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
        wall, cpu, n = best_of(runs, args.repeat)
    rows = args.chats
    print("\n| measurement | chats/s (wall) | M tokens/s (wall) | vs limit | chats per CPU s | M tokens per CPU s "
          "| vs limit |\n|---|---|---|---|---|---|---|")
    for name in wall:
        print(f"| {name} | {rows / wall[name]:.0f} | {n / wall[name] / 1e6:.3f} | {wall[limit_name] / wall[name]:.2f}× "
              f"| {rows / cpu[name]:.0f} | {n / cpu[name] / 1e6:.3f} | {cpu[limit_name] / cpu[name]:.2f}× |")
    print(f"\n{n:,} tokens ({n / rows:.0f} per chat)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=4_000)
    ap.add_argument("--threads", type=int, default=1, help="tokenizer threads (RAYON_NUM_THREADS), both sides")
    ap.add_argument("--vocab", type=int, default=16_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chat", action="store_true", help="ChatTemplate against apply_chat_template instead")
    ap.add_argument("--chats", type=int, default=2048, help="--chat: chats generated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if os.environ.get("RAYON_NUM_THREADS") != str(args.threads):  # rayon reads it once, at its pool's start
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
        # not TOKENIZERS_PARALLELISM=true: a fork worker of a process whose tokenizer
        # threads ran would wait forever on threads it does not have (tokenizers turns
        # them off there unless told otherwise), so the worker tokenizes on 1 thread
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.chat:
        chat(args)
        return

    import pyarrow as pa
    import pyarrow.parquet as pq

    from youmu.batched import BATCH_ROWS

    texts = corpus(args.docs)
    tok = tokenizer(texts, args.vocab)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "text.parquet"
        pq.write_table(pa.table({"text": texts}), path, row_group_size=1024, compression="zstd")
        mb = sum(len(t.encode()) for t in texts) / 1e6
        print(f"{args.docs} docs, {mb:.1f} MB of text, {path.stat().st_size / 1e6:.1f} MB Parquet, "
              f"vocab {args.vocab}, {args.threads} tokenizer thread(s)", flush=True)
        from youmu.text import Tokenize

        wall, cpu, n = best_of([
            ("encode_batch alone (the limit)", lambda: limit(tok, texts, BATCH_ROWS)),
            ("youmu stream + Tokenize, in-process", lambda: youmu_stream(path, Tokenize(tok), 0)),
            ("youmu stream + Tokenize, 1 DataLoader worker", lambda: youmu_stream(path, Tokenize(tok), 1)),
        ], args.repeat)
        base_wall = n / wall["encode_batch alone (the limit)"]
        base_cpu = n / cpu["encode_batch alone (the limit)"]
        print("\n| measurement | M tokens/s (wall) | vs limit | M tokens per CPU s | vs limit |\n|---|---|---|---|---|")
        for name in wall:
            w, c = n / wall[name], n / cpu[name]
            print(f"| {name} | {w / 1e6:.3f} | {w / base_wall:.2f}× | {c / 1e6:.3f} | {c / base_cpu:.2f}× |")
        print(f"\n{n:,} tokens ({n / args.docs:.0f} per doc)")


if __name__ == "__main__":
    main()
