"""The small data the documentation's pages read, under the names they use.

    python examples/sample_data.py            # into the current directory
    python examples/sample_data.py --into work --only data,fineweb

Writes (each part skipped, with a line saying which package it needs, where that
package is missing):

* ``data/`` — 2,400 rows of ``input_ids`` (``list<int32>``, lognormal lengths, vocabulary
  256) in two files: the quickstart's and most guides' corpus (numpy and pyarrow only);
* ``web/``, ``code/``, ``math/``, ``pubs/{pes2o,pubmed,peps}/`` — token sets of uneven
  sizes: the mixtures guide's sources;
* ``fineweb/`` — a ``text`` column (the pretraining guide's raw text);
* ``ultrachat/`` — chats in UltraChat's layout (``messages``: role/content);
* ``tokenizer.json`` — a byte-level BPE trained here (``tokenizers``);
* ``my-model/`` — that BPE with ChatML as Qwen publishes it and a one-layer GPT-2, saved as
  a local "published" model (``transformers``, ``torch``): what ``--model my-model`` and
  ``AutoTokenizer.from_pretrained("my-model")`` read without a download;
* ``llava/`` — image-text rows: an HF ``image`` struct of PNG bytes and ShareGPT-layout
  ``conversations`` (``Pillow``).

The documentation's tests build their workspace with this same script, so the data a
reader makes is the data CI ran the pages on.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_tokenizer import CHATML_PUBLISHED, chat_tokenizer, train_bpe  # noqa: E402

__all__ = ["CORPUS", "VOCAB", "ultrachat", "write_workspace", "PARTS"]

#: the token sets' vocabulary
VOCAB = 256

#: a small text corpus with non-ASCII text, tabs and newlines (the BPE's training text)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Parquet pages are the unit youmu shuffles and reads.",
    "Tokenizers split text into pieces; BPE merges frequent pairs.",
    "Ünïcödé text, 中文文本, emoji 🙂 and tabs\tand newlines\n.",
    "User: how do I train a model? Assistant: start with the data.",
] * 40


def ultrachat(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` conversations in UltraChat's layout: some with a system turn, 1–4 exchanges."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        conv = [{"role": "system", "content": f"You are assistant {i}."}] if i % 3 == 0 else []
        for t in range(rnd.randint(1, 4)):
            conv.append({"role": "user", "content": " ".join(rnd.choices(CORPUS[:5], k=rnd.randint(1, 3))) + f" {t}"})
            conv.append({"role": "assistant", "content": " ".join(rnd.choices(CORPUS[:5], k=rnd.randint(1, 5)))})
        out.append(conv)
    return out


def _tokens(path: Path, rows: int, seed: int, files: int = 1) -> None:
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for f in range(files):
        lengths = np.clip(rng.lognormal(3.6, 0.8, rows // files).astype(int), 4, 400)
        ids = [rng.integers(1, VOCAB, n, dtype=np.int32) for n in lengths]
        # small pages and a page index: even this small corpus has pages to shuffle
        pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), path / f"part-{f}.parquet",
                       data_page_size=4 << 10, row_group_size=256, write_page_index=True)


def _data(root: Path) -> None:
    _tokens(root / "data", 2400, seed=0, files=2)


def _sources(root: Path) -> None:
    for k, (name, rows) in enumerate({"web": 1200, "code": 500, "math": 200,
                                      "pes2o": 300, "pubmed": 300, "peps": 100}.items()):
        _tokens(root / (f"pubs/{name}" if name in ("pes2o", "pubmed", "peps") else name), rows, seed=k + 1)


def _fineweb(root: Path) -> None:
    (root / "fineweb").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": pa.array(CORPUS[:200], pa.string())}), root / "fineweb" / "part-0.parquet",
                   row_group_size=16)


def _ultrachat(root: Path) -> None:
    (root / "ultrachat").mkdir(parents=True, exist_ok=True)
    chats = ultrachat(240)
    pq.write_table(pa.table({"id": list(range(len(chats))), "messages": chats}),
                   root / "ultrachat" / "part-0.parquet", row_group_size=8)


def _tokenizer(root: Path) -> None:
    train_bpe(CORPUS, vocab_size=600).save(str(root / "tokenizer.json"))


def _model(root: Path) -> None:
    import transformers

    tok = chat_tokenizer(train_bpe(CORPUS, vocab_size=600), CHATML_PUBLISHED)  # ChatML as Qwen publishes it
    tok.save_pretrained(root / "my-model")
    config = transformers.GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=1, n_head=2,
                                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    transformers.GPT2LMHeadModel(config).save_pretrained(root / "my-model")


def _llava(root: Path, rows: int = 48) -> None:
    from PIL import Image

    path = root / "llava"
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images, convs = [], []
    for i in range(rows):
        w, h = int(rng.integers(28, 120)), int(rng.integers(28, 120))
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
        images.append({"bytes": buf.getvalue(), "path": f"img{i}.png"})
        convs.append([{"from": "human", "value": "<image>\nWhat is in the picture?"},
                      {"from": "gpt", "value": "Noise, " * int(rng.integers(1, 8))}])
    pq.write_table(pa.table({"image": images, "conversations": convs}), path / "part-0.parquet",
                   row_group_size=16, data_page_size=64 << 10, write_page_index=True)


#: each part: (what writes it, the packages it needs beyond numpy and pyarrow)
PARTS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "data": (_data, ()),
    "sources": (_sources, ()),
    "fineweb": (_fineweb, ()),
    "ultrachat": (_ultrachat, ()),
    "tokenizer": (_tokenizer, ("tokenizers",)),
    "model": (_model, ("tokenizers", "transformers", "torch")),
    "llava": (_llava, ("PIL",)),
}


def _missing(modules: tuple[str, ...]) -> list[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


def write_workspace(root: Path, only: list[str] | None = None, *, strict: bool = False) -> Path:
    """Write the parts named in ``only`` (default: all of :data:`PARTS`) under ``root``.
    A part whose packages are missing is skipped with a line on stderr, or, with
    ``strict``, raises ``ImportError`` naming them.

    >>> import tempfile
    >>> root = write_workspace(Path(tempfile.mkdtemp()), ["data"])
    >>> sorted(p.name for p in (root / "data").iterdir())
    ['part-0.parquet', 'part-1.parquet']
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = list(PARTS) if only is None else only
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}: the parts are {list(PARTS)}")
    for name in names:
        write, needs = PARTS[name]
        missing = _missing(needs)
        if missing:
            if strict:
                raise ImportError(f"sample part {name!r} needs {', '.join(missing)} (pip install it)")
            print(f"skipped {name}: needs {', '.join(missing)}", file=sys.stderr)
            continue
        write(root)
    return root


def main(argv: list[str] | None = None) -> Any:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--into", default=".", help="the directory to write into (default: the current one)")
    ap.add_argument("--only", default=None, help=f"comma-separated parts, of {','.join(PARTS)} (default: all)")
    args = ap.parse_args(argv)
    only = None if args.only is None else [p.strip() for p in args.only.split(",") if p.strip()]
    try:
        root = write_workspace(Path(args.into), only)
    except ValueError as e:
        ap.error(str(e))
    print(f"sample data written under {root.resolve()}")


if __name__ == "__main__":
    main()
