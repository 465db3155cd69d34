"""Build a real multi-source text corpus without any download: the Python source
files installed on this machine, one source per top-level package, tokenized with a
small byte-level BPE trained on them, written as Parquet the way youmu likes it
(``input_ids``, ``text``, ``path``, ``source``; page index on, 1 MiB pages, zstd, no dictionary).

Sources range from a few KB (tiny stdlib packages) to tens of MB (torch), which is
what makes mixture weights matter.

    python examples/corpus.py --out demo-out/corpus
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SITE_PACKAGES = ["torch", "numpy", "pyarrow", "matplotlib", "sympy"]
# bump when the written layout changes, so an old corpus is rebuilt rather than misread
CORPUS_FORMAT = 2


def discover_sources(max_site_mb: float = 24.0) -> dict[str, list[Path]]:
    """Source name → list of .py files. Stdlib packages become one source each (the
    loose top-level modules form ``stdlib``); a few large site-packages are capped at
    ``max_site_mb`` each so the demo stays quick."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources: dict[str, list[Path]] = {"stdlib": sorted(stdlib.glob("*.py"))}
    for d in sorted(p for p in stdlib.iterdir() if p.is_dir()):
        if d.name in {"site-packages", "test", "idlelib", "lib2to3", "__pycache__"} or d.name.startswith("config-"):
            continue
        files = sorted(d.rglob("*.py"))
        if files:
            sources[f"stdlib.{d.name}"] = files
    purelib = Path(sysconfig.get_paths()["purelib"])
    for name in SITE_PACKAGES:
        d = purelib / name
        files, total = [], 0
        for f in sorted(d.rglob("*.py")) if d.is_dir() else []:
            total += f.stat().st_size
            if total > max_site_mb * 1e6:
                break
            files.append(f)
        if files:
            sources[name] = files
    return sources


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=["<|eos|>"])
    return tok


def build(out: Path, vocab_size: int = 4096, max_site_mb: float = 24.0) -> dict:
    """Write one directory of Parquet files per source; returns the manifest."""
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") == CORPUS_FORMAT and manifest.get("max_site_mb", 24.0) == max_site_mb:
            return manifest
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    sources = discover_sources(max_site_mb)
    texts = {name: [f.read_text(errors="replace") for f in files] for name, files in sources.items()}
    rng = np.random.default_rng(0)
    sample = [t for ts in texts.values() for t in ts]
    sample = [sample[i] for i in rng.permutation(len(sample))[:4000]]
    tok = train_tokenizer(sample, vocab_size)
    tok.save(str(out / "tokenizer.json"))
    manifest = {"format": CORPUS_FORMAT, "max_site_mb": max_site_mb, "vocab_size": tok.get_vocab_size(), "eos_id": tok.token_to_id("<|eos|>"), "sources": {}}
    for name, ts in texts.items():
        ids = [np.asarray(e.ids, dtype=np.int32) for e in tok.encode_batch(ts)]
        table = pa.table(
            {
                "input_ids": pa.array(ids, pa.list_(pa.int32())),
                "text": pa.array(ts, pa.string()),
                "path": pa.array([str(f) for f in sources[name]], pa.string()),
                "source": pa.array([name] * len(ts), pa.string()),
            }
        )
        d = out / name
        d.mkdir(exist_ok=True)
        pq.write_table(table, d / "part-0.parquet", compression="zstd", data_page_size=1 << 20,
                       write_page_index=True, use_dictionary=False)
        manifest["sources"][name] = {"rows": len(ts), "tokens": int(sum(len(i) for i in ids)),
                                     "bytes": sum(len(t.encode()) for t in ts)}
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="demo-out/corpus")
    ap.add_argument("--site-mb", type=float, default=24.0, help="cap on each site-packages source (MB of .py)")
    a = ap.parse_args()
    m = build(Path(a.out), max_site_mb=a.site_mb)
    for name, s in sorted(m["sources"].items(), key=lambda kv: kv[1]["tokens"]):
        print(f"{name:28s} {s['rows']:6d} files {s['tokens']:>12,d} tokens")
