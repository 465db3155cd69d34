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

Usage: python benches/bench_text.py [--docs 4000] [--threads 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


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


def youmu_stream(path: Path, tok, workers: int) -> tuple[float, float, int]:
    """The tokenized stream's rows in this process (0) or through a DataLoader worker
    (1): ``(wall s, CPU s of the process that tokenized, tokens)``."""
    from torch.utils.data import DataLoader

    from youmu.text import Tokenize
    from youmu.torch import YoumuDataset

    ds = YoumuDataset(path, columns=["text"], shuffle="page", seed=0, output="numpy", transform=Tokenize(tok))
    source = ds if workers == 0 else DataLoader(ds, batch_size=None, num_workers=workers)
    t, c = time.perf_counter(), _cpu(workers > 0)
    tokens = sum(len(x["input_ids"]) for x in source)
    wall = time.perf_counter() - t
    del source  # the worker exits: its CPU time joins RUSAGE_CHILDREN
    return wall, _cpu(workers > 0) - c, tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=4_000)
    ap.add_argument("--threads", type=int, default=1, help="tokenizer threads (RAYON_NUM_THREADS), both sides")
    ap.add_argument("--vocab", type=int, default=16_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.environ.get("RAYON_NUM_THREADS") != str(args.threads):  # rayon reads it once, at its pool's start
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
        # not TOKENIZERS_PARALLELISM=true: a fork worker of a process whose tokenizer
        # threads ran would wait forever on threads it does not have (tokenizers turns
        # them off there unless told otherwise), so the worker tokenizes on 1 thread
        os.execv(sys.executable, [sys.executable, *sys.argv])

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
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        counts: dict[str, int] = {}
        for r in range(args.repeat):  # interleaved, best of each: the least disturbed run
            for name, run in (("encode_batch alone (the limit)", lambda: limit(tok, texts, BATCH_ROWS)),
                              ("youmu stream + Tokenize, in-process", lambda: youmu_stream(path, tok, 0)),
                              ("youmu stream + Tokenize, 1 DataLoader worker", lambda: youmu_stream(path, tok, 1))):
                secs, cpu_secs, tokens = run()
                wall[name] = min(wall.get(name, float("inf")), secs)
                cpu[name] = min(cpu.get(name, float("inf")), cpu_secs)
                counts[name] = tokens
                print(f"  run {r}: {name}: {tokens / secs / 1e6:.3f} M tokens/s wall, "
                      f"{tokens / cpu_secs / 1e6:.3f} M per CPU s ({secs:.2f} s)", flush=True)
        assert len(set(counts.values())) == 1, counts  # the same tokens everywhere
        n = next(iter(counts.values()))
        base_wall = n / wall["encode_batch alone (the limit)"]
        base_cpu = n / cpu["encode_batch alone (the limit)"]
        print("\n| measurement | M tokens/s (wall) | vs limit | M tokens per CPU s | vs limit |\n|---|---|---|---|---|")
        for name in wall:
            w, c = n / wall[name], n / cpu[name]
            print(f"| {name} | {w / 1e6:.3f} | {w / base_wall:.2f}× | {c / 1e6:.3f} | {c / base_cpu:.2f}× |")
        print(f"\n{n:,} tokens ({n / args.docs:.0f} per doc)")


if __name__ == "__main__":
    main()
