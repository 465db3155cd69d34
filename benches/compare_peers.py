"""Peer comparison (issue 7 §2): one table, one run, one ≥ 1 GB Parquet token dataset,
a shuffled epoch delivered to a consumer that touches every row.

    python benches/compare_peers.py [--data bench-data/tokens] [--seconds 60]

Loaders: youmu (page shuffle; row shuffle) · pyarrow ``iter_batches`` + a local shuffle
buffer · Hugging Face ``datasets`` map-style (Arrow conversion, then ``.shuffle()``) and
streaming ``IterableDataset.shuffle(buffer_size)`` · Lance (after conversion; global
random ``take``) · MosaicML ``streaming`` (after MDS conversion; its default shuffle).
Peers run in ``.venv-peers`` and ``.venv-mosaic`` (made by ``make peers-venv``) so their
pins never touch the project's environment (MosaicML streaming pins huggingface-hub < 1,
which the current HF ``datasets`` cannot use, hence its own venv). Each loader runs in its own process; an epoch longer than
``--seconds`` is extrapolated from its measured rate (marked ~).

Columns: extra disk written, setup time, time to first batch, rows/s, tokens/s, peak
RSS, and shuffle quality: distinct source files per 1,000 consecutive rows and the
Spearman correlation between stream position and original order (0 = no trace of it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import emit  # noqa: E402

COL, ID = "input_ids", "doc_id"
BUFFER = 8192
ROWS_PER_FILE = 60_000  # datagen.py


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if Path(path).exists() else 0


class Consumer:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.ids, self.tokens, self.first = seconds, [], 0, None
        self.t0 = time.perf_counter()

    def take(self, tokens, doc_id) -> bool:
        if self.first is None:
            self.first = time.perf_counter() - self.t0
        self.tokens += len(tokens)
        self.ids.append(int(doc_id))
        return len(self.ids) % 256 != 0 or time.perf_counter() - self.t0 < self.seconds

    def result(self, total_rows: int, **extra) -> dict:
        dt = time.perf_counter() - self.t0
        ids = np.asarray(self.ids)
        files = ids // ROWS_PER_FILE
        per1000 = [len(np.unique(files[i : i + 1000])) for i in range(0, len(ids) - 999, 1000)] or [0]
        ranks = np.argsort(np.argsort(ids))
        rho = float(np.corrcoef(np.arange(len(ids)), ranks)[0, 1]) if len(ids) > 2 else float("nan")
        rate = len(ids) / dt
        return dict(rows=len(ids), seconds=dt, rows_per_s=rate, tokens_per_s=self.tokens / dt,
                    first_batch_s=self.first, files_per_1000=float(np.mean(per1000)), spearman=rho,
                    epoch_s=total_rows / rate, full_epoch=len(ids) >= total_rows, **extra)


# -- loaders (each runs in its own process) -----------------------------------------------
def youmu_loader(data: str, mode: str, seconds: float) -> dict:
    # torch-free path (RowStream + numpy rows) so RSS compares loaders, not `import torch`
    import youmu
    from youmu.convert import rows
    from youmu.stream import RowStream

    t = time.perf_counter()
    idx = youmu.PageIndex(data, columns=[COL, ID])
    setup = time.perf_counter() - t
    c = Consumer(seconds)
    stop = False
    for table in RowStream(idx, mode, BUFFER, seed=0).iter_tables():
        for row in rows(table, "numpy"):
            if not c.take(row[COL], row[ID]):
                stop = True
                break
        if stop:
            break
    return c.result(idx.num_rows, setup_s=setup, extra_disk_gb=0.0)


def pyarrow_loader(data: str, seconds: float) -> dict:
    import pyarrow.parquet as pq

    files = sorted(Path(data).glob("*.parquet"))
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    rng = np.random.default_rng(0)
    c, buf, stop = Consumer(seconds), [], False
    for f in files:
        for b in pq.ParquetFile(f).iter_batches(columns=[COL, ID], batch_size=1024):
            toks, ids = b.column(0), b.column(1).to_numpy()
            for i in range(b.num_rows):
                item = (toks[i].values.to_numpy(), ids[i])
                if len(buf) < BUFFER:
                    buf.append(item)
                    continue
                j = rng.integers(BUFFER)  # reservoir-style buffer shuffle, as streaming loaders do
                out, buf[j] = buf[j], item
                if not c.take(*out):
                    stop = True
                    break
            if stop:
                break
        if stop:
            break
    else:
        rng.shuffle(buf)
        for out in buf:
            if not c.take(*out):
                break
    return c.result(total, setup_s=0.0, extra_disk_gb=0.0)


def hf_map_loader(data: str, seconds: float, work: Path) -> dict:
    import datasets

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in Path(data).glob("*.parquet"))
    t = time.perf_counter()
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(work), columns=[COL, ID])
    setup = time.perf_counter() - t
    ds = ds.shuffle(seed=0).with_format("numpy")
    c = Consumer(seconds)
    for row in ds:
        if not c.take(row[COL], row[ID]):
            break
    return c.result(len(ds), setup_s=setup, extra_disk_gb=du(work) / 1e9)


def hf_stream_loader(data: str, seconds: float) -> dict:
    import datasets
    import pyarrow.parquet as pq

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in Path(data).glob("*.parquet"))
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True, columns=[COL, ID])
    ds = ds.shuffle(seed=0, buffer_size=BUFFER).with_format("numpy")
    c = Consumer(seconds)
    for row in ds:
        if not c.take(row[COL], row[ID]):
            break
    return c.result(total, setup_s=0.0, extra_disk_gb=0.0)


def lance_loader(data: str, seconds: float, work: Path) -> dict:
    import lance
    import pyarrow.dataset as pads

    t = time.perf_counter()
    src = pads.dataset(data, format="parquet").scanner(columns=[COL, ID]).to_reader()
    ds = lance.write_dataset(src, str(work / "tokens.lance"), mode="overwrite")
    setup = time.perf_counter() - t
    n = ds.count_rows()
    order = np.random.default_rng(0).permutation(n)
    c, stop = Consumer(seconds), False
    for i in range(0, n, 1024):
        tb = ds.take(order[i : i + 1024], columns=[COL, ID])
        toks, ids = tb.column(0), tb.column(1).to_numpy()
        for k in range(tb.num_rows):
            if not c.take(toks[k].values.to_numpy(), ids[k]):
                stop = True
                break
        if stop:
            break
    return c.result(n, setup_s=setup, extra_disk_gb=du(work) / 1e9)


def mosaic_loader(data: str, seconds: float, work: Path) -> dict:
    import pyarrow.parquet as pq
    from streaming import MDSWriter, StreamingDataset

    out = work / "mds"
    t = time.perf_counter()
    with MDSWriter(out=str(out), columns={COL: "ndarray:int32", ID: "int64"}, compression=None, size_limit=1 << 27) as w:
        for f in sorted(Path(data).glob("*.parquet")):
            for b in pq.ParquetFile(f).iter_batches(columns=[COL, ID], batch_size=4096):
                toks, ids = b.column(0), b.column(1).to_numpy()
                for k in range(b.num_rows):
                    w.write({COL: toks[k].values.to_numpy(), ID: int(ids[k])})
    setup = time.perf_counter() - t
    ds = StreamingDataset(local=str(out), shuffle=True, shuffle_seed=0, batch_size=64)
    c = Consumer(seconds)
    for row in ds:
        if not c.take(row[COL], row[ID]):
            break
    return c.result(len(ds), setup_s=setup, extra_disk_gb=du(out) / 1e9)


LOADERS = {
    "youmu page shuffle": ("main", lambda a, w: youmu_loader(a.data, "page", a.seconds)),
    "youmu row shuffle": ("main", lambda a, w: youmu_loader(a.data, "row", a.seconds)),
    "pyarrow iter_batches + shuffle buffer": ("peers", lambda a, w: pyarrow_loader(a.data, a.seconds)),
    "HF datasets map-style .shuffle()": ("peers", lambda a, w: hf_map_loader(a.data, a.seconds, w)),
    "HF datasets streaming .shuffle(buffer)": ("peers", lambda a, w: hf_stream_loader(a.data, a.seconds)),
    "Lance (converted) random take": ("peers", lambda a, w: lance_loader(a.data, a.seconds, w)),
    "MosaicML streaming (MDS)": ("mosaic", lambda a, w: mosaic_loader(a.data, a.seconds, w)),
}


def plot(rows: list, path: Path) -> None:
    """Bar charts of rows/s (log scale) and peak RSS per loader."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [(n, r) for n, r, _ in rows if r]
    names = [n.replace(" shuffle", "").replace("HF datasets ", "HF ") for n, _ in ok]
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    ax[0].barh(names, [r["rows_per_s"] for _, r in ok], color=["tab:green" if "youmu" in n else "tab:gray" for n in names])
    ax[0].set(xscale="log", xlabel="rows/s (log)", title="shuffled-epoch throughput")
    ax[1].barh(names, [r["peak_rss_mb"] for _, r in ok], color=["tab:green" if "youmu" in n else "tab:gray" for n in names])
    ax[1].set(xlabel="peak RSS (MB)", title="memory")
    ax[1].set_yticklabels([])
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="bench-data/tokens")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--work", default="bench-data/peers-work")
    ap.add_argument("--peers-python", default=".venv-peers/bin/python")
    ap.add_argument("--mosaic-python", default=".venv-mosaic/bin/python")
    ap.add_argument("--only", default=None)
    ap.add_argument("--phase", default=None)
    ap.add_argument("--from-log", default=None, help="re-render table and chart from a previous run's output")
    a = ap.parse_args()
    if a.from_log:
        import ast

        rows = []
        for line in Path(a.from_log).read_text().splitlines():
            for name in LOADERS:
                if line.startswith(name + " {"):
                    rows.append((name, ast.literal_eval(line[len(name) + 1:]), ""))
        plot(rows, Path(__file__).parent / "peers.png")
        Path(__file__).parent.joinpath("peers.json").write_text(json.dumps(rows, indent=1))
        return
    if a.phase:
        work = Path(a.work) / a.phase.replace(" ", "_").replace("/", "_")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            emit(LOADERS[a.phase][1](a, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    from datagen import generate

    generate(Path(a.data), 1.0)
    rows = []
    for name, (env, _) in LOADERS.items():
        if a.only and a.only not in name:
            continue
        py = {"main": sys.executable, "peers": a.peers_python, "mosaic": a.mosaic_python}[env]
        if not Path(py).exists():
            rows.append((name, None, f"interpreter {py} missing (run `make peers-venv`)"))
            continue
        cmd = [py, __file__, "--phase", name, "--data", a.data, "--seconds", str(a.seconds), "--work", a.work]
        env_vars = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, env=env_vars)
        if p.returncode != 0:
            rows.append((name, None, (p.stderr.strip().splitlines() or ["failed"])[-1][:200]))
        else:
            rows.append((name, json.loads(p.stdout.strip().splitlines()[-1]), ""))
        print(name, rows[-1][1] or rows[-1][2], flush=True)
    Path(__file__).parent.joinpath("peers.json").write_text(json.dumps(rows, indent=1))
    try:
        plot(rows, Path(__file__).parent / "peers.png")
    except ImportError:
        pass
    gb = sum(f.stat().st_size for f in Path(a.data).glob("*.parquet")) / 1e9
    print(f"\n## Peer comparison ({gb:.2f} GB Parquet, list<int32> tokens, one shuffled epoch, buffer {BUFFER} rows)\n")
    print("| loader | extra disk GB | setup s | first batch s | rows/s | tokens/s (M) | epoch s | peak RSS MB | files per 1,000 rows | Spearman vs file order |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r, why in rows:
        if r is None:
            print(f"| {name} | not run: {why} | | | | | | | | |")
            continue
        ep = f"{r['epoch_s']:.0f}" if r["full_epoch"] else f"~{r['epoch_s']:.0f}"
        print(f"| {name} | {r['extra_disk_gb']:.2f} | {r['setup_s']:.1f} | {r['first_batch_s']:.3f} | {r['rows_per_s']:,.0f} | "
              f"{r['tokens_per_s'] / 1e6:.1f} | {ep} | {r['peak_rss_mb']:.0f} | {r['files_per_1000']:.1f} | {r['spearman']:+.3f} |")


if __name__ == "__main__":
    main()
