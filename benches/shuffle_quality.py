"""Shuffle quality (the Youmu paper's Table 3 at small scale): does page-level shuffling
train a model as well as a full row shuffle, and a streaming-buffer ("local") shuffle
not? Which page size and buffer does it need, and how diverse is the start of an epoch?

Design (why it can tell the modes apart):

* **Corpus clustered by source, as real dumps are.** Real text with no download: the
  Python sources installed on this machine, ``--sources`` packages (stdlib, numpy,
  sympy, torch, matplotlib, ...), ``--source-kb`` of each, cut into chunks of about
  ``--chunk-chars`` characters at top-level statements (one row per chunk, like the
  paper's line-level WikiText). Sources differ in vocabulary and style (codec tables,
  tkinter, symbolic algebra, compiler passes), which is what an unshuffled stream turns
  into a drifting training distribution. Files stay in path order within a source and
  sources are concatenated family by family (``numpy.*`` together, ``torch.*``
  together) in an order drawn from the seed: every seed is a different dump, so the
  spread of ``none``/``local`` includes *which* source happens to come last.
* **One full epoch** (``--epochs 1``): every mode trains on exactly the same rows
  and differs only in their order. Validation: held-out files of every source (equal
  tokens per source), never trained on.
* **Hundreds of pages**: each source is one Parquet file written with
  ``row_group_size = rows per page`` (one data page per row group and column, page
  index on, zstd, no dictionary), so rows per page is exact and the corpus has
  ~300 pages at 8 rows per page.
* **Seeds**: model init, shuffle key and dump order all come from the seed; the same
  seed gives every mode the same init and the same dump, so differences between modes
  are also reported paired by seed.
* **Sweep** (the user's question: what page size and buffer do I need?): page shuffle
  at rows per page x buffer rows, next to row and local shuffle, with the I/O each
  setting costs (pages read, bytes read per trained token, from ``youmu.io_stats()``).
* **Early-epoch diversity**: distinct pages and sources among the rows of the first N
  training steps and per step (``tests/support/diversity.py``, pure functions of the stream plan,
  checked against the rows the training stream actually delivered).
* **Page slices** (prototype of a diversity setting, not in the library): windows of
  ``W*k`` slices of ``R/k`` rows, each from a different page, so a window of the same
  rows draws from ``k`` times as many pages, at ``k`` times the pages read (a page is
  read and decoded whole for each slice it gives).

The model is the demo's tiny GPT (``examples/model.py``; 2 layers, d=128) on
sequences of 256 packed tokens, 8 per step, a byte-level BPE of ``--vocab`` tokens
trained on the corpus; AdamW, 5% warm-up then cosine to 10% of ``--lr``. One torch
thread per run, ``--jobs`` runs in parallel (2 on the 2-core machine).

    python benches/shuffle_quality.py                  # everything: 47 runs, ~35 min on 2 idle cores
    python benches/shuffle_quality.py --part main      # none/local/page/row only
    python benches/shuffle_quality.py --part sweep     # rows per page x buffer
    python benches/shuffle_quality.py --part slices    # the page-slices prototype
    python benches/shuffle_quality.py --part report    # tables + plot from cached runs
    python benches/shuffle_quality.py --quick          # small smoke run (~3 min)
    python benches/shuffle_quality.py --dry-run        # list the runs and the time estimate

Runs are cached under ``--work`` (one JSON per run, keyed by its configuration), so
parts can be run separately and re-reported; ``--force`` reruns them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # diversity measures shared with the tests

CORPUS_FORMAT = 2
# Sources, most-preferred first: several families with distinct styles. Missing ones
# (another machine, another venv) are replaced by whatever else is installed.
PREFERRED = [
    "stdlib.asyncio", "stdlib.email", "stdlib.encodings", "stdlib.tkinter", "stdlib.unittest", "stdlib.xml",
    "numpy._core", "numpy.ma", "numpy.f2py", "sympy.core", "sympy.physics", "sympy.polys", "sympy.printing",
    "torch.nn", "torch.distributed", "torch._inductor", "torch.fx", "matplotlib.axes", "matplotlib.backends",
    "networkx.algorithms", "fontTools.ttLib", "pygments.lexers", "pip._internal", "stdlib.distutils",
    "stdlib.multiprocessing", "numpy.polynomial", "sympy.solvers", "torch.optim",
]
MIN_FILES = 8
EVAL_FRACTIONS = (0.05, 0.1, 0.25, 1.0)
DIVERSITY_STEPS = (1, 10, 50, 100)
# measured with one torch thread on the 2-core machine (tiny GPT, vocab 2048, 8 x 256 tokens)
SECONDS_PER_STEP = 0.16
SECONDS_PER_RUN = 12


# ----------------------------------------------------------------------------- corpus
def _candidates() -> dict[str, list[Path]]:
    """Source name -> .py files (sorted): stdlib packages and the sub-packages of the
    installed site-packages."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    purelib = Path(sysconfig.get_paths()["purelib"])
    out: dict[str, list[Path]] = {}
    for d in sorted(p for p in stdlib.iterdir() if p.is_dir()):
        if d.name in {"site-packages", "test", "idlelib", "lib2to3", "__pycache__"} or d.name.startswith("config-"):
            continue
        out[f"stdlib.{d.name}"] = sorted(d.rglob("*.py"))
    for pkg in sorted(p for p in purelib.iterdir() if p.is_dir() and not p.name.endswith("-info")):
        if pkg.name.startswith(("_", ".")):
            continue
        for d in sorted(p for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__"):
            out[f"{pkg.name}.{d.name}"] = sorted(d.rglob("*.py"))
    return out


def choose_sources(n: int, source_bytes: int) -> dict[str, list[Path]]:
    cands = _candidates()

    def size(files: list[Path]) -> int:
        return sum(f.stat().st_size for f in files)

    ok = {k: v for k, v in cands.items() if len(v) >= MIN_FILES and size(v) >= 1.3 * source_bytes}
    names = [k for k in PREFERRED if k in ok]
    names += [k for k in sorted(ok) if k not in names]
    if len(names) < n:
        raise SystemExit(f"only {len(names)} sources of >= {1.3 * source_bytes / 1e3:.0f} KB found, need {n}")
    return {k: ok[k] for k in sorted(names[:n])}


def chunk_text(text: str, target: int) -> list[str]:
    """Cut a file into rows of about ``target`` characters, at lines that start a
    top-level statement or, after a blank line, a (nested) definition; a hard cut at
    4x target (lines longer than 2x target are cut first)."""
    chunks: list[str] = []
    cur: list[str] = []
    size = 0
    prev_blank = False
    lines = []
    for line in text.splitlines(keepends=True):
        # a data line of thousands of characters (tables, blobs) is cut into pieces
        lines += [line[i : i + 2 * target] for i in range(0, len(line), 2 * target)] if len(line) > 2 * target else [line]
    for line in lines:
        top = line[:1] not in ("", " ", "\t", "\n", "\r", ")", "]", "}")
        nested = prev_blank and line.lstrip().startswith(("def ", "async def ", "class ", "@"))
        prev_blank = not line.strip()
        if size >= target and (top or nested or size >= 4 * target):
            chunks.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line)
    if cur:
        if chunks and size < target // 4:
            chunks[-1] += "".join(cur)
        else:
            chunks.append("".join(cur))
    return [c for c in chunks if c.strip()]


def corpus_config(a: argparse.Namespace) -> dict:
    return {"format": CORPUS_FORMAT, "sources": a.sources, "source_kb": a.source_kb, "vocab": a.vocab,
            "chunk_chars": a.chunk_chars, "val_tokens": a.val_tokens}


def corpus_dir(a: argparse.Namespace) -> Path:
    cfg = corpus_config(a)
    h = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:10]
    return Path(a.work) / f"corpus-{h}"


def build_corpus(a: argparse.Namespace) -> Path:
    """Rows (chunks) of every source, tokenized; train and validation arrays in
    ``train.npz`` / ``val.npz``; per-layout Parquet files are written by
    :func:`write_layout`."""
    out = corpus_dir(a)
    if (out / "manifest.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    target = a.source_kb * 1000
    sources = choose_sources(a.sources, target)
    train_texts: list[str] = []
    train_src: list[int] = []
    val_texts: dict[int, list[str]] = {}
    for s, (name, files) in enumerate(sources.items()):
        # validation: whole files, chosen by path hash, about 1/8 of a source's first files
        ranked = sorted(files, key=lambda f: zlib.crc32(str(f).encode()))
        val_files = set(ranked[: max(1, len(files) // 8)])
        have = 0
        for f in files:
            if f in val_files:
                continue
            text = f.read_text(errors="replace")
            for c in chunk_text(text, a.chunk_chars):
                if have >= target:
                    break
                train_texts.append(c)
                train_src.append(s)
                have += len(c)
            if have >= target:
                break
        val_texts[s] = [c for f in sorted(val_files) for c in chunk_text(f.read_text(errors="replace"), a.chunk_chars)]
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(train_texts, vocab_size=a.vocab, min_frequency=2, special_tokens=["<|eos|>"])
    tok.save(str(out / "tokenizer.json"))
    eos = tok.token_to_id("<|eos|>")

    def encode(texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int32) for e in tok.encode_batch(texts)]

    ids = encode(train_texts)
    lens = np.array([len(x) for x in ids], dtype=np.int64)
    np.savez(out / "train.npz", tokens=np.concatenate(ids), offsets=np.concatenate([[0], np.cumsum(lens)]),
             source=np.array(train_src, dtype=np.int32))
    vtok, vsrc = [], []
    for s, texts in val_texts.items():
        have = 0
        for x in encode(texts):
            if have >= a.val_tokens:
                break
            x = x[: a.val_tokens - have]
            vtok.append(x)
            vsrc.append(s)
            have += len(x)
    vl = np.array([len(x) for x in vtok], dtype=np.int64)
    np.savez(out / "val.npz", tokens=np.concatenate(vtok), offsets=np.concatenate([[0], np.cumsum(vl)]),
             source=np.array(vsrc, dtype=np.int32))
    src = np.array(train_src)
    manifest = {
        **corpus_config(a),
        "source_names": list(sources),
        "families": [n.split(".")[0] for n in sources],
        "vocab_size": tok.get_vocab_size(),
        "eos_id": eos,
        "train_rows": len(ids),
        "train_tokens": int(lens.sum()),
        "train_tokens_with_eos": int(lens.sum() + len(ids)),
        "train_bytes": sum(len(t.encode()) for t in train_texts),
        "val_tokens": int(vl.sum()),
        "rows_per_source": [int((src == s).sum()) for s in range(len(sources))],
        "tokens_per_source": [int(lens[src == s].sum()) for s in range(len(sources))],
        "build_seconds": round(time.time() - t0, 1),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def load_corpus(cdir: Path) -> tuple[dict, dict, dict]:
    m = json.loads((cdir / "manifest.json").read_text())
    tr = dict(np.load(cdir / "train.npz"))
    va = dict(np.load(cdir / "val.npz"))
    return m, tr, va


def write_layout(cdir: Path, rows_per_page: int) -> Path:
    """One Parquet file per source (canonical row ids), ``rows_per_page`` rows per page."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = cdir / f"rpp{rows_per_page}"
    if (d / "done").exists():
        return d
    d.mkdir(exist_ok=True)
    m, tr, _ = load_corpus(cdir)
    off, toks, src = tr["offsets"], tr["tokens"], tr["source"]
    for s in range(len(m["source_names"])):
        rows = np.flatnonzero(src == s)
        lo, hi = int(off[rows[0]]), int(off[rows[-1] + 1])
        values = pa.array(toks[lo:hi], pa.int32())
        lists = pa.ListArray.from_arrays(pa.array(off[rows[0] : rows[-1] + 2] - lo, pa.int32()), values)
        t = pa.table({"input_ids": lists, "row_id": pa.array(rows.astype(np.int64))})
        pq.write_table(t, d / f"{s:03d}.parquet", row_group_size=rows_per_page, data_page_size=4 << 20,
                       compression="zstd", write_page_index=True, use_dictionary=False)
    (d / "done").write_text("")
    return d


def dump_order(families: list[str], seed: int, mode: str) -> list[int]:
    """Source order of the dump: families in a seed-drawn order, the sources of a family
    together (``fixed``: name order)."""
    n = len(families)
    if mode == "fixed":
        return list(range(n))
    rng = np.random.default_rng(10_000 + seed)
    fams = sorted(set(families))
    order: list[int] = []
    for f in rng.permutation(fams):
        members = [i for i in range(n) if families[i] == f]
        order += [members[j] for j in rng.permutation(len(members))]
    return order


def open_index(layout: Path, order: list[int]):
    import youmu

    parts = [youmu.PageIndex(layout / f"{s:03d}.parquet", columns=["input_ids", "row_id"]) for s in order]
    return youmu.PageIndex.concat(parts)


# ----------------------------------------------------------------------------- streams
def slices_plan_window(page_rows: np.ndarray, window_pages: int, k: int, seed: int, epoch: int, w: int,
                       perm=None) -> tuple[np.ndarray, np.ndarray]:
    """Page-slices prototype: window ``w`` = ``window_pages * k`` units of a keyed
    permutation of (page, slice) units, slice ``s`` of page ``p`` being its rows
    ``[R_p*s//k, R_p*(s+1)//k)``. Returns the distinct pages to read and ``take``, the
    window's rows as indices into those pages' concatenated rows, in stream order."""
    import youmu

    n_units = len(page_rows) * k
    per = window_pages * k
    if perm is None:
        perm = youmu.Permutation(n_units, seed=seed, epoch=epoch, purpose="page-slices")
    units = perm.range(w * per, min((w + 1) * per, n_units))
    p, s = units // k, units % k
    lo, hi = page_rows[p] * s // k, page_rows[p] * (s + 1) // k
    pages, inv = np.unique(p, return_inverse=True)
    base = np.concatenate([[0], np.cumsum(page_rows[pages])[:-1]])
    take = np.concatenate([np.arange(base[inv[j]] + lo[j], base[inv[j]] + hi[j]) for j in range(len(units))])
    order = youmu.Permutation(len(take), seed=seed, epoch=epoch, purpose=f"window-slices-{w}").range(0, len(take))
    return pages, take[order].astype(np.int64)


def slices_num_windows(n_pages: int, window_pages: int, k: int) -> int:
    return -(-n_pages * k // (window_pages * k))


def slices_rows(page_rows: np.ndarray, window_pages: int, k: int, seed: int, epoch: int, n: int) -> np.ndarray:
    """Global row ids of the first ``n`` rows of the page-slices stream (pure)."""
    import youmu

    first = np.concatenate([[0], np.cumsum(page_rows)[:-1]])
    perm = youmu.Permutation(len(page_rows) * k, seed=seed, epoch=epoch, purpose="page-slices")
    out, have, w = [], 0, 0
    while have < n and w < slices_num_windows(len(page_rows), window_pages, k):
        pages, take = slices_plan_window(page_rows, window_pages, k, seed, epoch, w, perm)
        rows = np.concatenate([np.arange(first[p], first[p] + page_rows[p]) for p in pages])[take]
        out.append(rows[: n - have])
        have += len(out[-1])
        w += 1
    return np.concatenate(out)


class Stream:
    """Rows of one epoch of a setting, as (tokens, canonical row id), with the pages
    it asked to read counted."""

    def __init__(self, index, cfg: dict, epoch: int) -> None:
        self.index, self.cfg, self.epoch = index, cfg, epoch
        self._pages = 0
        self.row_stream = None

    @property
    def pages_read(self) -> int:
        """Pages requested so far (page modes: every page of the windows read, the one
        read ahead included; row mode: the stream's page-cache misses)."""
        return self.row_stream.pages_read if self.cfg["mode"] == "row" and self.row_stream else self._pages

    def tables(self):
        import youmu
        from youmu.streams.rowstream import RowStream

        cfg, index = self.cfg, self.index
        mode, wp, seed = cfg["mode"], cfg["window_pages"], cfg["seed"]
        if mode == "slices":
            page_rows = index.page_num_rows()
            k = cfg["slices"]
            perm = youmu.Permutation(len(page_rows) * k, seed=seed, epoch=self.epoch, purpose="page-slices")
            n = slices_num_windows(len(page_rows), wp, k)

            def start(w):
                pages, take = slices_plan_window(page_rows, wp, k, seed, self.epoch, w, perm)
                self._pages += len(pages)
                return index.prefetch_window(pages, take)

            pending = start(0)
            for w in range(n):
                batches = pending.result()
                if w + 1 < n:
                    pending = start(w + 1)
                yield batches[0]
            return
        s = RowStream(index, shuffle=mode, window_pages=wp, seed=seed, epoch=self.epoch)
        self.row_stream = s
        n = len(s.plan.window_ids)
        for i, t in enumerate(s.iter_tables()):
            if mode != "row":
                # iter_tables reads window i + 1 ahead while window i is consumed
                if i == 0:
                    self._pages += len(s.plan.pages_of(0))
                if i + 1 < n:
                    self._pages += len(s.plan.pages_of(i + 1))
            yield t

    def rows(self):
        for t in self.tables():
            col = t.column("input_ids")
            col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
            off = col.offsets.to_numpy()
            val = col.values.to_numpy()
            rid = t.column("row_id").to_numpy()
            for j in range(len(rid)):
                yield val[off[j] : off[j + 1]], int(rid[j])


def packed(rows, seq_len: int, eos: int):
    """Sequences of ``seq_len`` tokens packed back to back from rows (+ EOS), as
    (input_ids, position_ids, row ids present); position ids restart at every piece,
    as ``youmu.torch.pack`` does."""
    ids = np.empty(seq_len, np.int64)
    pos = np.empty(seq_len, np.int64)
    have = 0
    present: list[int] = []
    for toks, rid in rows:
        toks = np.concatenate([toks, [eos]])
        off = 0
        while off < len(toks):
            take = min(seq_len - have, len(toks) - off)
            ids[have : have + take] = toks[off : off + take]
            pos[have : have + take] = np.arange(take)
            present.append(rid)
            have += take
            off += take
            if have == seq_len:
                yield ids.copy(), pos.copy(), present
                have, present = 0, []


def val_batches(va: dict, seq_len: int, eos: int, batch: int = 16):
    """Validation sequences, packed per source (padding ignored), in batches of
    (ids, position_ids, ignore, source of each sequence)."""
    off, toks, src = va["offsets"], va["tokens"], va["source"]
    seqs = []
    for s in np.unique(src):
        rows = ((toks[off[i] : off[i + 1]], s) for i in np.flatnonzero(src == s))
        for ids, pos, _ in packed(rows, seq_len, eos):
            seqs.append((ids, pos, np.zeros(seq_len, bool), s))
        # the partial tail: repack it padded (ignored)
        n_tok = sum(off[i + 1] - off[i] + 1 for i in np.flatnonzero(src == s))
        rest = n_tok % seq_len
        if rest:
            flat = np.concatenate([np.concatenate([toks[off[i] : off[i + 1]], [eos]]) for i in np.flatnonzero(src == s)])
            tail = flat[-rest:]
            ids = np.zeros(seq_len, np.int64)
            ids[:rest] = tail
            # positions: restart after every eos of the tail (the first piece may be a continuation)
            p = np.zeros(seq_len, np.int64)
            c = 0
            for j in range(rest):
                p[j] = c
                c = 0 if tail[j] == eos else c + 1
            ign = np.zeros(seq_len, bool)
            ign[rest:] = True
            seqs.append((ids, p, ign, s))
    import torch

    for i in range(0, len(seqs), batch):
        part = seqs[i : i + batch]
        yield (torch.from_numpy(np.stack([x[0] for x in part])), torch.from_numpy(np.stack([x[1] for x in part])),
               torch.from_numpy(np.stack([x[2] for x in part])), np.array([x[3] for x in part]))


# ----------------------------------------------------------------------------- one run
def run_key(cfg: dict) -> str:
    return hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def setting_name(cfg: dict) -> str:
    m = cfg["mode"]
    if m == "none":
        return "none"
    if m == "row":
        return "row"
    if m == "local":
        return f"local B={cfg['rows_per_page'] * cfg['window_pages']}"
    if m == "slices":
        return f"page R={cfg['rows_per_page']} W={cfg['window_pages']} k={cfg['slices']}"
    return f"page R={cfg['rows_per_page']} W={cfg['window_pages']}"


def train_run(cfg: dict, cdir: str, out_path: str) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import diversity as div
    import torch
    from model import GPTConfig, TinyGPT, lm_loss

    import youmu

    torch.set_num_threads(1)
    youmu.set_num_threads(1)
    cdir_p = Path(cdir)
    m, tr, va = load_corpus(cdir_p)
    seed, T, B = cfg["seed"], cfg["seq_len"], cfg["batch"]
    order = dump_order(m["families"], seed, cfg["dump_order"])
    layout = write_layout(cdir_p, cfg["rows_per_page"])
    index = open_index(layout, order)
    page_rows = index.page_num_rows()
    # canonical row id -> index row id (the dump order) and -> source
    canon_of_index = np.concatenate([np.flatnonzero(tr["source"] == s) for s in order])
    index_of_canon = np.empty_like(canon_of_index)
    index_of_canon[canon_of_index] = np.arange(len(canon_of_index))
    row_source = tr["source"]
    steps = cfg["steps"]

    torch.manual_seed(seed)
    model = TinyGPT(GPTConfig(vocab_size=m["vocab_size"], seq_len=T))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.01)
    warm = max(1, int(0.05 * steps))

    def lr_at(step: int) -> float:
        if step < warm:
            return cfg["lr"] * (step + 1) / warm
        t = (step - warm) / max(1, steps - warm)
        return cfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    streams: list[Stream] = []

    def all_rows():
        epoch = 0
        while True:
            st = Stream(index, cfg, epoch)
            streams.append(st)
            yield from st.rows()
            epoch += 1

    vb = list(val_batches(va, T, m["eos_id"]))

    def evaluate() -> tuple[float, dict]:
        model.eval()
        tot, cnt = 0.0, 0
        per: dict[int, list[float]] = {}
        with torch.no_grad():
            for ids, pos, ign, src in vb:
                logits = model(ids, pos)
                target = ids[:, 1:].clone()
                target[pos[:, 1:] == 0] = -100
                target[ign[:, 1:]] = -100
                lo = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                       ignore_index=-100, reduction="none").view(ids.shape[0], -1)
                valid = target != -100
                for j in range(ids.shape[0]):
                    a = per.setdefault(int(src[j]), [0.0, 0])
                    a[0] += float(lo[j][valid[j]].sum())
                    a[1] += int(valid[j].sum())
        model.train()
        tot = sum(v[0] for v in per.values())
        cnt = sum(v[1] for v in per.values())
        return tot / cnt, {m["source_names"][s]: v[0] / v[1] for s, v in sorted(per.items())}

    eval_steps = sorted({max(1, round(f * steps)) for f in EVAL_FRACTIONS})
    curve: dict[int, float] = {}
    io0 = youmu.io_stats()
    seqs = packed(all_rows(), T, m["eos_id"])
    consumed: list[int] = []  # canonical row ids in stream order (first appearance)
    step_rows: list[np.ndarray] = []
    last = -1
    t0 = time.time()
    t_eval = 0.0
    per_source = {}
    for step in range(steps):
        batch = [next(seqs) for _ in range(B)]
        present = []
        for _, _, rows in batch:
            for r in rows:
                present.append(r)
                if r != last:
                    consumed.append(r)
                    last = r
        step_rows.append(np.unique(present))
        ids = torch.from_numpy(np.stack([b[0] for b in batch]))
        pos = torch.from_numpy(np.stack([b[1] for b in batch]))
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = lm_loss(model(ids, pos), ids, pos)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step + 1 in eval_steps:
            te = time.time()
            v, per_source = evaluate()
            curve[step + 1] = v
            t_eval += time.time() - te
    seconds = time.time() - t0
    io1 = youmu.io_stats()
    tokens = steps * B * T
    pages_read = sum(s.pages_read for s in streams)
    # diversity over the first steps, from the rows the stream delivered
    idx_rows = index_of_canon[np.array(consumed)]
    pages_of = div.rows_to_pages(idx_rows, page_rows)
    page_of_canon = np.full(len(canon_of_index), -1)
    page_of_canon[np.array(consumed)] = pages_of
    dsteps = [s for s in DIVERSITY_STEPS if s <= steps]
    upto = {s: np.unique(np.concatenate(step_rows[:s])) for s in dsteps}
    diversity = {
        "steps": dsteps,
        "distinct_pages": [int(len(np.unique(page_of_canon[upto[s]]))) for s in dsteps],
        "distinct_sources": [int(len(np.unique(row_source[upto[s]]))) for s in dsteps],
        "rows": [int(len(upto[s])) for s in dsteps],
        "sources_per_step_first50": float(np.mean([len(np.unique(row_source[r])) for r in step_rows[:50]])),
        "pages_per_step_first50": float(np.mean([len(np.unique(page_of_canon[r])) for r in step_rows[:50]])),
        "sources_per_step_all": float(np.mean([len(np.unique(row_source[r])) for r in step_rows])),
        "pages_per_step_all": float(np.mean([len(np.unique(page_of_canon[r])) for r in step_rows])),
    }
    res = {
        "key": run_key(cfg), "setting": setting_name(cfg), **cfg,
        "val_loss": curve[steps], "val_ppl": math.exp(curve[steps]), "curve": curve, "val_per_source": per_source,
        "train_loss_last": float(loss.item()), "seconds": round(seconds, 1), "eval_seconds": round(t_eval, 1),
        "tokens": tokens, "epochs_covered": tokens / m["train_tokens_with_eos"],
        "num_pages": int(len(page_rows)), "pages_read": int(pages_read),
        "bytes_read": int(io1["bytes_read"] - io0["bytes_read"]), "reads": int(io1["reads"] - io0["reads"]),
        "bytes_per_token": (io1["bytes_read"] - io0["bytes_read"]) / tokens,
        "first_rows": [int(x) for x in consumed[:64]],
        "diversity": diversity,
    }
    Path(out_path).write_text(json.dumps(res, indent=1))
    return res


# ----------------------------------------------------------------------------- plans
def run_configs(a: argparse.Namespace, m: dict) -> list[dict]:
    steps = a.steps or int(a.epochs * m["train_tokens_with_eos"] // (a.batch * a.seq_len))
    base = {"steps": steps, "seq_len": a.seq_len, "batch": a.batch, "lr": a.lr, "dump_order": a.dump_order,
            "corpus": corpus_dir(a).name, "slices": 1}
    R0, B0 = a.rows_per_page, a.buffer
    W0 = max(1, round(B0 / R0))
    parts = set(a.part.split(","))
    if "all" in parts:
        parts |= {"main", "sweep", "slices"}
    settings: list[dict] = []
    if "main" in parts:
        settings += [dict(mode=md, rows_per_page=R0, window_pages=W0) for md in ("none", "local", "page", "row")]
    if "sweep" in parts:
        settings += [dict(mode="none", rows_per_page=R0, window_pages=W0), dict(mode="row", rows_per_page=R0, window_pages=W0)]
        for R in a.sweep_rows:
            for Bf in a.sweep_buffers:
                settings.append(dict(mode="page", rows_per_page=R, window_pages=max(1, round(Bf / R)) if Bf else 1))
        for Bf in a.sweep_buffers:
            if Bf:
                settings.append(dict(mode="local", rows_per_page=R0, window_pages=max(1, round(Bf / R0))))
    if "slices" in parts:
        R = a.slices_rows
        W = max(1, round(B0 / R))
        settings += [dict(mode="page", rows_per_page=R, window_pages=W),
                     dict(mode="slices", rows_per_page=R, window_pages=W, slices=a.slices),
                     dict(mode="page", rows_per_page=R0, window_pages=W0), dict(mode="row", rows_per_page=R0, window_pages=W0)]
    main = [dict(mode=md, rows_per_page=R0, window_pages=W0) for md in ("none", "local", "page", "row")]
    out, seen = [], set()
    for seed in range(a.main_seeds):
        for s in settings:
            if seed >= a.seeds and not ("main" in parts and s in main):
                continue
            cfg = {**base, **s, "seed": seed}
            if cfg["mode"] in ("none", "row"):  # order does not depend on the page layout
                cfg["rows_per_page"], cfg["window_pages"] = R0, W0
            k = run_key(cfg)
            if k not in seen:
                seen.add(k)
                out.append(cfg)
    return out


def plan_diversity(a: argparse.Namespace, cdir: Path, configs: list[dict]) -> dict:
    """Early-epoch diversity of every setting from its stream plan alone (no training):
    distinct pages / sources in the rows of the first N steps, per seed."""
    import diversity as div

    from youmu.order.shuffle import ShardPlan, row_chunk_rows

    m, tr, _ = load_corpus(cdir)
    row_tokens_canon = np.diff(tr["offsets"]) + 1
    out: dict[str, dict] = {}
    for cfg in configs:
        name = setting_name(cfg)
        order = dump_order(m["families"], cfg["seed"], cfg["dump_order"])
        layout = write_layout(cdir, cfg["rows_per_page"])
        index = open_index(layout, order)
        page_rows = index.page_num_rows()
        canon_of_index = np.concatenate([np.flatnonzero(tr["source"] == s) for s in order])
        src_of_index = tr["source"][canon_of_index]
        tok_of_index = row_tokens_canon[canon_of_index]
        n_steps = max(DIVERSITY_STEPS)
        want = int(n_steps * cfg["batch"] * cfg["seq_len"] / np.mean(tok_of_index) * 2) + 64
        if cfg["mode"] == "slices":
            rows = slices_rows(page_rows, cfg["window_pages"], cfg["slices"], cfg["seed"], 0, want)
        else:
            plan = ShardPlan.build(page_rows, cfg["mode"], window_pages=cfg["window_pages"], seed=cfg["seed"], epoch=0,
                                   window_rows=row_chunk_rows(cfg["window_pages"]) if cfg["mode"] == "row" else None)
            rows = div.plan_rows(plan, page_rows, want)
        bounds = div.batch_bounds(tok_of_index, rows, cfg["batch"] * cfg["seq_len"], n_steps)
        pages = div.rows_to_pages(rows, page_rows)
        src = src_of_index[rows]
        steps = [s for s in DIVERSITY_STEPS if s <= min(len(bounds), cfg["steps"])]
        rec = {
            "steps": steps,
            "distinct_pages": [int(len(np.unique(pages[: bounds[s - 1][1]]))) for s in steps],
            "distinct_sources": [int(len(np.unique(src[: bounds[s - 1][1]]))) for s in steps],
            "pages_per_step_first50": float(div.per_batch_distinct(pages, bounds[:50]).mean()),
            "sources_per_step_first50": float(div.per_batch_distinct(src, bounds[:50]).mean()),
            "first_rows": [int(x) for x in canon_of_index[rows[:64]]],
            "num_pages": int(len(page_rows)),
        }
        out.setdefault(name, {})[str(cfg["seed"])] = rec
    return out


# ----------------------------------------------------------------------------- report
def summarize(runs: list[dict]) -> dict:
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["setting"], []).append(r)
    row = {r["seed"]: r["val_loss"] for r in by.get("row", [])}
    none = {r["seed"]: r["val_loss"] for r in by.get("none", [])}
    out = {}
    for name, rs in by.items():
        v = np.array([r["val_loss"] for r in rs])
        paired = [r["val_loss"] - row[r["seed"]] for r in rs if r["seed"] in row]
        share = [(r["val_loss"] - row[r["seed"]]) / (none[r["seed"]] - row[r["seed"]])
                 for r in rs if r["seed"] in row and r["seed"] in none and none[r["seed"]] != row[r["seed"]]]
        curves = {}
        for r in rs:
            for st, val in r["curve"].items():
                curves.setdefault(int(st), []).append(val)
        d = [r["diversity"] for r in rs]
        out[name] = {
            "mode": rs[0]["mode"], "rows_per_page": rs[0]["rows_per_page"], "window_pages": rs[0]["window_pages"],
            "slices": rs[0].get("slices", 1), "buffer_rows": rs[0]["rows_per_page"] * rs[0]["window_pages"],
            "n": len(rs), "seeds": sorted(r["seed"] for r in rs),
            "val_loss_mean": float(v.mean()), "val_loss_std": float(v.std(ddof=1)) if len(v) > 1 else float("nan"),
            "minus_row_mean": float(np.mean(paired)) if paired else float("nan"),
            "minus_row_std": float(np.std(paired, ddof=1)) if len(paired) > 1 else float("nan"),
            "share_of_none_gap": float(np.mean(share)) if share else float("nan"),
            "curve_mean": {st: float(np.mean(x)) for st, x in sorted(curves.items())},
            "curve_std": {st: float(np.std(x, ddof=1)) if len(x) > 1 else float("nan") for st, x in sorted(curves.items())},
            "num_pages": rs[0]["num_pages"],
            "pages_read_per_epoch": float(np.mean([r["pages_read"] / r["epochs_covered"] for r in rs])),
            "bytes_per_token": float(np.mean([r["bytes_per_token"] for r in rs])),
            "reads": float(np.mean([r["reads"] for r in rs])),
            "seconds_mean": float(np.mean([r["seconds"] for r in rs])),
            "pages_per_step_all": float(np.mean([r["diversity"]["pages_per_step_all"] for r in rs])),
            "sources_per_step_all": float(np.mean([r["diversity"]["sources_per_step_all"] for r in rs])),
            "distinct_sources_at": {str(s): float(np.mean([x["distinct_sources"][i] for x in d])) for i, s in enumerate(d[0]["steps"])},
            "distinct_pages_at": {str(s): float(np.mean([x["distinct_pages"][i] for x in d])) for i, s in enumerate(d[0]["steps"])},
            "sources_per_step_first50": float(np.mean([x["sources_per_step_first50"] for x in d])),
            "pages_per_step_first50": float(np.mean([x["pages_per_step_first50"] for x in d])),
        }
    return out


def print_report(summary: dict, meta: dict) -> None:
    def key(item):
        s = item[1]
        rank = {"none": 0, "local": 1, "page": 2, "slices": 3, "row": 4}[s["mode"]]
        return (rank, s["rows_per_page"], s["buffer_rows"], s["slices"])

    items = sorted(summary.items(), key=key)
    print(f"\n## Shuffle quality: {meta['describe']}\n")
    print("| setting | pages | val loss (mean ± std) | minus row, paired (mean ± std) | share of none's gap | "
          "paired t | pages read / epoch | bytes read / token | s / run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, s in items:
        print(f"| {name} | {s['num_pages']} | {s['val_loss_mean']:.3f} ± {s['val_loss_std']:.3f} (n={s['n']}) | "
              f"{s['minus_row_mean']:+.3f} ± {s['minus_row_std']:.3f} | {s['share_of_none_gap']:.0%} | "
              f"{s['minus_row_mean'] / (s['minus_row_std'] / math.sqrt(s['n'])) if s['minus_row_std'] > 0 else float('nan'):+.1f} | "
              f"{s['pages_read_per_epoch']:.0f} | {s['bytes_per_token']:.2f} | {s['seconds_mean']:.0f} |")
    steps = list(next(iter(summary.values()))["distinct_sources_at"])
    print(f"\n### Early-epoch diversity (measured on the training stream, mean over seeds; {meta['n_sources']} sources)\n")
    print("| setting | " + " | ".join(f"sources / pages in first {s} steps" for s in steps)
          + " | sources / pages per step (first 50) |")
    print("|---|" + "---|" * (len(steps) + 1))
    for name, s in items:
        cells = [f"{s['distinct_sources_at'][st]:.1f} / {s['distinct_pages_at'][st]:.1f}" for st in steps]
        print(f"| {name} | " + " | ".join(cells) + f" | {s['sources_per_step_first50']:.2f} / {s['pages_per_step_first50']:.2f} |")
    cs = next(iter(summary.values()))["curve_mean"]
    print("\n### Validation loss during the epoch (mean over seeds)\n")
    print("| setting | " + " | ".join(f"step {st}" for st in cs) + " |")
    print("|---|" + "---|" * len(cs))
    for name, s in items:
        print(f"| {name} | " + " | ".join(f"{s['curve_mean'].get(st, float('nan')):.3f} ± {s['curve_std'].get(st, float('nan')):.3f}"
                                          for st in cs) + " |")


def plot(summary: dict, path: Path, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.4))
    ax = axes[0]
    page = {n: s for n, s in summary.items() if s["mode"] == "page"}
    # one line per requested buffer (rows per window): W = round(buffer / R), at least 1
    groups = {"1 page per window": [s for s in page.values() if s["window_pages"] == 1]}
    for bf in meta.get("sweep_buffers", []):
        if bf:
            groups[f"buffer {bf} rows"] = [s for s in page.values()
                                           if s["window_pages"] == max(1, round(bf / s["rows_per_page"]))]
    for lab, ss in groups.items():
        ss = sorted(ss, key=lambda s: s["rows_per_page"])
        if ss:
            ax.errorbar([s["rows_per_page"] for s in ss], [s["val_loss_mean"] for s in ss],
                        yerr=[s["val_loss_std"] for s in ss], marker="o", capsize=3, label=f"page, {lab}")
    for name, color in (("row", "green"), ("none", "red")):
        if name in summary:
            s = summary[name]
            ax.axhspan(s["val_loss_mean"] - s["val_loss_std"], s["val_loss_mean"] + s["val_loss_std"], color=color, alpha=0.15)
            ax.axhline(s["val_loss_mean"], color=color, lw=1, label=f"{name} shuffle")
    for n, s in summary.items():
        if s["mode"] == "local":
            ax.axhline(s["val_loss_mean"], color="orange", lw=1, ls="--", label=f"local, {n.split()[-1]}")
        if s["mode"] == "slices":
            ax.errorbar([s["rows_per_page"]], [s["val_loss_mean"]], yerr=[s["val_loss_std"]], marker="*", ms=12,
                        color="purple", capsize=3, label=f"page slices k={s['slices']}, W={s['window_pages']}")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="rows per page (pages in corpus ∝ 1/rows)", ylabel="validation loss (1 epoch)",
           title="page shuffle vs page size and buffer")
    ax.legend(fontsize=7)
    ax = axes[1]
    for n, s in sorted(summary.items(), key=lambda kv: kv[1]["bytes_per_token"]):
        mk = {"none": "x", "local": "s", "page": "o", "slices": "*", "row": "D"}[s["mode"]]
        col = {"none": "red", "local": "orange", "page": "tab:blue", "slices": "purple", "row": "green"}[s["mode"]]
        ax.scatter(s["bytes_per_token"], s["val_loss_mean"], marker=mk, s=40, color=col)
        ax.annotate(n, (s["bytes_per_token"], s["val_loss_mean"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set(xlabel="bytes read per trained token (log)", ylabel="validation loss", title="quality vs I/O cost")
    ax = axes[2]
    for n, s in summary.items():
        if s["mode"] in ("none", "local", "row", "slices") or (s["rows_per_page"] == meta["rows_per_page"] and s["mode"] == "page"):
            st = [int(x) for x in s["distinct_sources_at"]]
            ax.plot(st, list(s["distinct_sources_at"].values()), marker="o", label=n)
    ax.set_xscale("log")
    ax.set(xlabel="training steps", ylabel="distinct sources drawn so far", title="early-epoch diversity")
    ax.legend(fontsize=7)
    ax = axes[3]
    for n, s in summary.items():
        mk = {"none": "x", "local": "s", "page": "o", "slices": "*", "row": "D"}[s["mode"]]
        col = {"none": "red", "local": "orange", "page": "tab:blue", "slices": "purple", "row": "green"}[s["mode"]]
        ax.errorbar([s["pages_per_step_all"]], [s["val_loss_mean"]], yerr=[s["val_loss_std"]], marker=mk, color=col, capsize=3)
        ax.annotate(n, (s["pages_per_step_all"], s["val_loss_mean"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set(xlabel="distinct pages per optimizer step (mean over the epoch)", ylabel="validation loss",
           title="what matters: pages per step")
    fig.suptitle(meta["describe"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", help="comma list of: all, main, sweep, slices, diversity, report, corpus")
    ap.add_argument("--quick", action="store_true", help="small smoke run: 8 sources x 40 KB, 2 seeds, reduced sweep")
    ap.add_argument("--work", default="bench-data/shuffle_quality", help="corpus and per-run cache")
    ap.add_argument("--out", default=str(ROOT / "benches" / "shuffle_quality.json"))
    ap.add_argument("--plot", default=str(ROOT / "benches" / "shuffle_quality.png"))
    ap.add_argument("--sources", type=int, default=24)
    ap.add_argument("--source-kb", type=int, default=120, help="characters of text per source (thousands)")
    ap.add_argument("--chunk-chars", type=int, default=600, help="target characters per row")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--val-tokens", type=int, default=2500, help="validation tokens per source")
    ap.add_argument("--seeds", type=int, default=None, help="seeds of the sweep and slices runs (default 3)")
    ap.add_argument("--main-seeds", type=int, default=None, help="seeds of the main comparison (default 5)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--epochs", type=float, default=1.0, help="training length in epochs of the training rows")
    ap.add_argument("--steps", type=int, default=0, help="override the number of steps")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dump-order", choices=["seed", "fixed"], default="seed")
    ap.add_argument("--rows-per-page", type=int, default=8, help="page layout of the main comparison")
    ap.add_argument("--buffer", type=int, default=64, help="rows per window (buffer_size) of the main comparison")
    ap.add_argument("--sweep-rows", default="2,8,32,128", help="rows per page swept")
    ap.add_argument("--sweep-buffers", default="64,512", help="buffer rows swept (0: one page per window)")
    ap.add_argument("--slices", type=int, default=4, help="page slices k of the prototype")
    ap.add_argument("--slices-rows", type=int, default=0, help="rows per page of the slices comparison (default: --rows-per-page)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="list the runs and the estimated time, run nothing")
    a = ap.parse_args()
    if a.quick:
        a.sources, a.source_kb = 8, 40
        a.seeds = a.seeds or 2
        a.main_seeds = a.main_seeds or 2
        a.sweep_rows, a.sweep_buffers = "2,8,64", "16,64"
    a.seeds = a.seeds or 3
    a.main_seeds = max(a.main_seeds or 5, a.seeds)
    a.slices_rows = a.slices_rows or a.rows_per_page
    a.sweep_rows = [int(x) for x in str(a.sweep_rows).split(",") if x]
    a.sweep_buffers = [int(x) for x in str(a.sweep_buffers).split(",") if x]
    os.environ.setdefault("RAYON_NUM_THREADS", "2")
    t_start = time.time()
    cdir = build_corpus(a)
    m, _, _ = load_corpus(cdir)
    print(f"corpus {cdir}: {len(m['source_names'])} sources, {m['train_rows']} rows, {m['train_tokens']:,} tokens "
          f"({m['train_bytes'] / 1e6:.1f} MB of text), val {m['val_tokens']:,} tokens", flush=True)
    if a.part == "corpus":
        for R in a.sweep_rows:
            idx = open_index(write_layout(cdir, R), list(range(len(m["source_names"]))))
            sizes = idx.page_byte_sizes()
            print(f"  {R:4d} rows/page: {len(idx)} pages, {np.mean(sizes) / 1e3:.1f} KB per page (compressed)")
        print("  tokens per source:", m["tokens_per_source"])
        return
    parts = set(a.part.split(","))
    train = bool(parts & {"all", "main", "sweep", "slices"})
    # report / diversity alone: every configuration of the full plan, nothing trained
    configs = run_configs(a if train else argparse.Namespace(**{**vars(a), "part": "all"}), m)
    for R in sorted({c["rows_per_page"] for c in configs}):
        write_layout(cdir, R)
    runs_dir = Path(a.work) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [c for c in configs if a.force or not (runs_dir / f"{run_key(c)}.json").exists()]
    if train:
        print(f"{len(configs)} runs ({len(todo)} to do) of {configs[0]['steps'] if configs else 0} steps "
              f"x {a.batch} x {a.seq_len} tokens", flush=True)
        est = len(todo) * (configs[0]["steps"] * SECONDS_PER_STEP + SECONDS_PER_RUN) / max(1, min(a.jobs, 2)) / 60
        print(f"estimated wall time on an idle 2-core machine: ~{est:.0f} min ({SECONDS_PER_STEP} s/step/run + "
              f"{SECONDS_PER_RUN} s evaluation and start-up per run, {min(a.jobs, 2)} runs at a time)", flush=True)
        if a.dry_run:
            for c in todo:
                print(" ", setting_name(c), "seed", c["seed"])
            return
        if todo:
            ctx = get_context("spawn")
            with ProcessPoolExecutor(a.jobs, mp_context=ctx) as ex:
                futs = {ex.submit(train_run, c, str(cdir), str(runs_dir / f"{run_key(c)}.json")): c for c in todo}
                for f in futs:
                    r = f.result()
                    print(f"  {r['setting']:24s} seed {r['seed']}: val {r['val_loss']:.4f}  {r['seconds']:.0f} s "
                          f"(eval {r['eval_seconds']:.0f} s)  pages read {r['pages_read']}  "
                          f"{r['bytes_per_token']:.2f} B/token", flush=True)
    runs = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))]
    runs = [r for r in runs if r.get("corpus") == cdir.name and r["steps"] == (configs[0]["steps"] if configs else r["steps"])]
    keys = {run_key(c) for c in configs}
    runs = [r for r in runs if r["key"] in keys]
    meta = {
        "describe": f"tiny GPT, 1 epoch = {configs[0]['steps'] if configs else '?'} steps x {a.batch} x {a.seq_len} tokens, "
                    f"{len(m['source_names'])} sources x {a.source_kb} KB of Python, {m['train_tokens']:,} tokens, "
                    f"{a.main_seeds} seeds (main) / {a.seeds} (sweep)",
        "n_sources": len(m["source_names"]), "rows_per_page": a.rows_per_page, "sweep_buffers": a.sweep_buffers,
    }
    result = {"config": {k: v for k, v in vars(a).items()}, "corpus": m, "meta": meta, "runs": runs}
    if runs:
        summary = summarize(runs)
        result["summary"] = summary
        print_report(summary, meta)
        plot(summary, Path(a.plot), meta)
    if parts & {"diversity", "all"}:
        pd = plan_diversity(a, cdir, configs)
        result["plan_diversity"] = pd
        print("\n### Early-epoch diversity from the plans (seed 0)\n")
        steps = next(iter(next(iter(pd.values())).values()))["steps"]
        print("| setting | pages | " + " | ".join(f"sources / pages, first {s} steps" for s in steps)
              + " | sources / pages per step (first 50) |")
        print("|---|---|" + "---|" * (len(steps) + 1))
        for name, seeds in pd.items():
            p = seeds.get("0") or next(iter(seeds.values()))
            print(f"| {name} | {p['num_pages']} | " + " | ".join(
                f"{p['distinct_sources'][i]} / {p['distinct_pages'][i]}" for i in range(len(steps)))
                + f" | {p['sources_per_step_first50']:.2f} / {p['pages_per_step_first50']:.2f} |")
        def same(r: dict) -> bool:
            p = pd.get(r["setting"], {}).get(str(r["seed"]))
            n = min(len(r["first_rows"]), 64)
            return p is None or p["first_rows"][:n] == r["first_rows"][:n]

        bad = [(r["setting"], r["seed"]) for r in runs if not same(r)]
        print(f"\nplan vs training stream: first rows identical in {len(runs) - len(bad)} of {len(runs)} runs"
              + (f"; DIFFERENT: {bad}" if bad else ""))
    Path(a.out).write_text(json.dumps(result, indent=1, default=float))
    print(f"\nwrote {a.out} and {a.plot}; wall {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
