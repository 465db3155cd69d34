"""Peer comparison: one table, one run, one ≥ 1 GB Parquet token dataset, a shuffled
epoch delivered to a consumer, at two granularities.

    python benches/compare_peers.py [--data bench-data/tokens] [--seconds 30]

Granularities (same data, same seed, same 8,192-row shuffle buffer where a loader has one):

* **per row** — the consumer gets one row at a time in Python (what a
  ``Dataset.__getitem__`` / ``for row in ds`` training pipeline does): it takes the row's
  token array and doc id.
* **per batch** — the consumer gets Arrow batches of about 1,024 rows and touches each
  batch's token buffer once (one pass summing its int32 values) and its doc-id column;
  no per-row Python.

Loaders, per batch:

* youmu ``RowStream.iter_tables()`` (page shuffle; row shuffle), each table cut into
  zero-copy batches of at most 1,024 rows;
* pyarrow ``ParquetFile.iter_batches(batch_size=1024)`` over the files in order, through a
  batch-level shuffle buffer: 8 batches (8,192 rows) are held, each new batch replaces a
  uniformly drawn held batch, which is emitted whole (rows inside a batch stay in file
  order; what is left is emitted in random order at the end);
* Hugging Face ``datasets`` map-style: Arrow conversion (``load_dataset``), then
  ``.shuffle(seed).with_format("arrow")`` iterated by ``.iter(batch_size=1024)``: each
  batch is gathered through the shuffled indices mapping (a ``take`` on the memory-mapped
  Arrow files);
* HF ``datasets`` streaming: ``.shuffle(seed, buffer_size=8192).with_format("arrow")
  .iter(batch_size=1024)`` — its Arrow path: file order shuffled, then a buffer of
  ≥ 8,192 rows is permuted with one ``take``, half of it emitted, half kept;
* Lance (after conversion): ``take`` of 1,024 indices of one global permutation per call;
* MosaicML ``streaming`` (after MDS conversion): per row only — ``StreamingDataset``
  decodes and yields one sample at a time; it has no batched Arrow/numpy path.

Peers run in ``.venv-peers`` and ``.venv-mosaic`` (made by ``make peers-venv``) so their
pins never touch the project's environment (MosaicML streaming pins huggingface-hub < 1,
which the current HF ``datasets`` cannot use, hence its own venv). Every (loader,
granularity) runs in its own process; a loader that converts the data does it once, in
its per-row process (timed: "setup"), and its per-batch process reopens the converted copy.
An epoch longer than ``--seconds`` is extrapolated from the measured rate (marked ~).

Columns: extra disk written, setup (conversion) time, time to first batch, rows/s,
tokens/s, epoch time, epoch including setup (setup + one shuffled epoch), peak RSS, and
shuffle quality: distinct source files per 1,000 consecutive rows and the Spearman
correlation between stream position and original order (0 = no trace of it).
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
BATCH = 1024
ROWS_PER_FILE = 60_000  # datagen.py
GRANULARITIES = ("row", "batch")


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if Path(path).exists() else 0


def quality(ids: np.ndarray) -> tuple[float, float]:
    files = ids // ROWS_PER_FILE
    per1000 = [len(np.unique(files[i : i + 1000])) for i in range(0, len(ids) - 999, 1000)] or [0]
    ranks = np.argsort(np.argsort(ids))
    rho = float(np.corrcoef(np.arange(len(ids)), ranks)[0, 1]) if len(ids) > 2 else float("nan")
    return float(np.mean(per1000)), rho


class Consumer:
    """Per row: one token array and one doc id at a time."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.ids, self.tokens, self.first = seconds, [], 0, None
        self.t0 = time.perf_counter()

    def take(self, tokens, doc_id) -> bool:
        if self.first is None:
            self.first = time.perf_counter() - self.t0
        self.tokens += len(tokens)
        self.ids.append(int(doc_id))
        return len(self.ids) % 256 != 0 or time.perf_counter() - self.t0 < self.seconds

    def _ids(self) -> np.ndarray:
        return np.asarray(self.ids, dtype=np.int64)

    def result(self, total_rows: int, **extra) -> dict:
        dt = time.perf_counter() - self.t0
        ids = self._ids()
        files_per_1000, rho = quality(ids)
        rate = len(ids) / dt
        return dict(rows=len(ids), seconds=dt, rows_per_s=rate, tokens_per_s=self.tokens / dt,
                    first_batch_s=self.first, files_per_1000=files_per_1000, spearman=rho,
                    epoch_s=total_rows / rate, full_epoch=len(ids) >= total_rows, **extra)


class BatchConsumer(Consumer):
    """Per batch: an Arrow ``list<int32>`` token column (Array or ChunkedArray) and the
    batch's doc ids; one pass over the token values, no per-row Python."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.rows, self.batches, self.checksum = 0, 0, 0

    def take_batch(self, tokens, doc_ids) -> bool:
        if self.first is None:
            self.first = time.perf_counter() - self.t0
        for chunk in getattr(tokens, "chunks", [tokens]):
            vals = chunk.flatten().to_numpy()  # flatten honours slices; int32, zero-copy
            self.tokens += len(vals)
            self.checksum += int(vals.sum(dtype=np.int64))
        # a copy: a zero-copy view would keep the batch's (or its whole window's) buffers alive
        ids = np.array(doc_ids, dtype=np.int64, copy=True)
        self.ids.append(ids)
        self.rows += len(ids)
        self.batches += 1
        return time.perf_counter() - self.t0 < self.seconds

    def _ids(self) -> np.ndarray:
        return np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)

    def result(self, total_rows: int, **extra) -> dict:
        return super().result(total_rows, mean_batch_rows=self.rows / max(self.batches, 1), **extra)


def table_batches(table):
    """Zero-copy batches of at most ``BATCH`` rows of a table (or record batch)."""
    import pyarrow as pa

    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    return table.to_batches(max_chunksize=BATCH)


def parquet_files(data: str) -> list[Path]:
    return sorted(Path(data).glob("*.parquet"))


def parquet_rows(data: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(data))


# -- conversions: done (and timed) by a loader's first process, reopened by its second ---
def converted(work: Path, convert, reopen) -> tuple[object, dict]:
    """``convert()`` once per loader; later processes ``reopen()`` what it wrote."""
    marker = work / "converted.json"
    t = time.perf_counter()
    if marker.exists():
        obj = reopen()
        info = json.loads(marker.read_text())
        return obj, dict(setup_s=info["setup_s"], converted_here=False, reopen_s=time.perf_counter() - t)
    obj = convert()
    setup = time.perf_counter() - t
    marker.write_text(json.dumps(dict(setup_s=setup)))
    return obj, dict(setup_s=setup, converted_here=True)


# -- loaders (each (loader, granularity) runs in its own process) --------------------------
def youmu_loader(data: str, mode: str, gran: str, seconds: float) -> dict:
    # torch-free path (RowStream + numpy rows) so RSS compares loaders, not `import torch`
    import youmu
    from youmu.streams.convert import rows
    from youmu.streams.rowstream import RowStream

    t = time.perf_counter()
    idx = youmu.PageIndex(data, columns=[COL, ID])
    setup = time.perf_counter() - t
    stream = RowStream(idx, mode, BUFFER, seed=0)
    if gran == "batch":
        c = BatchConsumer(seconds)
        for table in stream.iter_tables():
            if not all(c.take_batch(b.column(0), b.column(1)) for b in table_batches(table)):
                break
        return c.result(idx.num_rows, setup_s=setup, extra_disk_gb=0.0)
    c = Consumer(seconds)
    stop = False
    for table in stream.iter_tables():
        for row in rows(table, "numpy"):
            if not c.take(row[COL], row[ID]):
                stop = True
                break
        if stop:
            break
    return c.result(idx.num_rows, setup_s=setup, extra_disk_gb=0.0)


def pyarrow_loader(data: str, gran: str, seconds: float) -> dict:
    import pyarrow.parquet as pq

    total = parquet_rows(data)
    rng = np.random.default_rng(0)

    def batches():
        for f in parquet_files(data):
            yield from pq.ParquetFile(f).iter_batches(columns=[COL, ID], batch_size=BATCH)

    if gran == "batch":
        c, buf, held = BatchConsumer(seconds), [], BUFFER // BATCH
        for b in batches():
            if len(buf) < held:
                buf.append(b)
                continue
            j = rng.integers(held)  # batch-level buffer: emit a random held batch whole
            out, buf[j] = buf[j], b
            if not c.take_batch(out.column(0), out.column(1)):
                break
        else:
            rng.shuffle(buf)
            for out in buf:
                if not c.take_batch(out.column(0), out.column(1)):
                    break
        return c.result(total, setup_s=0.0, extra_disk_gb=0.0)

    c, buf, stop = Consumer(seconds), [], False
    for b in batches():
        toks, ids = b.column(0), b.column(1).to_numpy()
        for i in range(b.num_rows):
            item = (toks[i].values.to_numpy(), ids[i])
            if len(buf) < BUFFER:
                buf.append(item)
                continue
            j = rng.integers(BUFFER)  # reservoir-style row buffer, as streaming loaders do
            out, buf[j] = buf[j], item
            if not c.take(*out):
                stop = True
                break
        if stop:
            break
    else:
        rng.shuffle(buf)
        for out in buf:
            if not c.take(*out):
                break
    return c.result(total, setup_s=0.0, extra_disk_gb=0.0)


def hf_map_loader(data: str, gran: str, seconds: float, work: Path) -> dict:
    import datasets

    datasets.disable_progress_bars()
    files = [str(p) for p in parquet_files(data)]

    def load():
        return datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(work / "hf"),
                                     columns=[COL, ID])

    ds, info = converted(work, load, load)
    t = time.perf_counter()
    ds = ds.shuffle(seed=0)  # writes an indices mapping (one int64 per row) next to the cache
    info["shuffle_s"] = time.perf_counter() - t
    n = len(ds)
    if gran == "batch":
        ds = ds.with_format("arrow")
        c = BatchConsumer(seconds)
        for tb in ds.iter(batch_size=BATCH):
            if not c.take_batch(tb.column(COL), tb.column(ID)):
                break
    else:
        ds = ds.with_format("numpy")
        c = Consumer(seconds)
        for row in ds:
            if not c.take(row[COL], row[ID]):
                break
    return c.result(n, extra_disk_gb=du(work / "hf") / 1e9, **info)


def hf_stream_loader(data: str, gran: str, seconds: float) -> dict:
    import datasets

    datasets.disable_progress_bars()
    files = [str(p) for p in parquet_files(data)]
    total = parquet_rows(data)
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True, columns=[COL, ID])
    ds = ds.shuffle(seed=0, buffer_size=BUFFER)
    if gran == "batch":
        c = BatchConsumer(seconds)
        for tb in ds.with_format("arrow").iter(batch_size=BATCH):
            if not c.take_batch(tb.column(COL), tb.column(ID)):
                break
    else:
        c = Consumer(seconds)
        for row in ds.with_format("numpy"):
            if not c.take(row[COL], row[ID]):
                break
    return c.result(total, setup_s=0.0, extra_disk_gb=0.0)


def lance_loader(data: str, gran: str, seconds: float, work: Path) -> dict:
    import lance
    import pyarrow.dataset as pads

    path = str(work / "tokens.lance")

    def convert():
        src = pads.dataset(data, format="parquet").scanner(columns=[COL, ID]).to_reader()
        return lance.write_dataset(src, path, mode="overwrite")

    ds, info = converted(work, convert, lambda: lance.dataset(path))
    n = ds.count_rows()
    order = np.random.default_rng(0).permutation(n)
    if gran == "batch":
        c = BatchConsumer(seconds)
        for i in range(0, n, BATCH):
            tb = ds.take(order[i : i + BATCH], columns=[COL, ID])
            if not c.take_batch(tb.column(0), tb.column(1)):
                break
        return c.result(n, extra_disk_gb=du(path) / 1e9, **info)
    c, stop = Consumer(seconds), False
    for i in range(0, n, BATCH):
        tb = ds.take(order[i : i + BATCH], columns=[COL, ID])
        toks, ids = tb.column(0), tb.column(1).to_numpy()
        for k in range(tb.num_rows):
            if not c.take(toks[k].values.to_numpy(), ids[k]):
                stop = True
                break
        if stop:
            break
    return c.result(n, extra_disk_gb=du(path) / 1e9, **info)


def mosaic_loader(data: str, seconds: float, work: Path) -> dict:
    import pyarrow.parquet as pq
    from streaming import MDSWriter, StreamingDataset

    out = work / "mds"

    def convert():
        with MDSWriter(out=str(out), columns={COL: "ndarray:int32", ID: "int64"}, compression=None,
                       size_limit=1 << 27) as w:
            for f in parquet_files(data):
                for b in pq.ParquetFile(f).iter_batches(columns=[COL, ID], batch_size=4096):
                    toks, ids = b.column(0), b.column(1).to_numpy()
                    for k in range(b.num_rows):
                        w.write({COL: toks[k].values.to_numpy(), ID: int(ids[k])})

    _, info = converted(work, convert, lambda: None)
    ds = StreamingDataset(local=str(out), shuffle=True, shuffle_seed=0, batch_size=64)
    c = Consumer(seconds)
    for row in ds:
        if not c.take(row[COL], row[ID]):
            break
    return c.result(len(ds), extra_disk_gb=du(out) / 1e9, **info)


# name -> (venv, {granularity: loader(args, work)}); a missing granularity has no such path
LOADERS = {
    "youmu page shuffle": ("main", {g: (lambda a, w, g=g: youmu_loader(a.data, "page", g, a.seconds))
                                    for g in GRANULARITIES}),
    "youmu row shuffle": ("main", {g: (lambda a, w, g=g: youmu_loader(a.data, "row", g, a.seconds))
                                   for g in GRANULARITIES}),
    "pyarrow iter_batches + shuffle buffer": ("peers", {g: (lambda a, w, g=g: pyarrow_loader(a.data, g, a.seconds))
                                                        for g in GRANULARITIES}),
    "HF datasets map-style .shuffle()": ("peers", {g: (lambda a, w, g=g: hf_map_loader(a.data, g, a.seconds, w))
                                                   for g in GRANULARITIES}),
    "HF datasets streaming .shuffle(buffer)": ("peers", {g: (lambda a, w, g=g: hf_stream_loader(a.data, g, a.seconds))
                                                         for g in GRANULARITIES}),
    "Lance (converted) random take": ("peers", {g: (lambda a, w, g=g: lance_loader(a.data, g, a.seconds, w))
                                                for g in GRANULARITIES}),
    "MosaicML streaming (MDS)": ("mosaic", {"row": lambda a, w: mosaic_loader(a.data, a.seconds, w)}),
}
NO_BATCH_PATH = {"MosaicML streaming (MDS)": "per-row only: StreamingDataset yields one decoded sample at a time"}


def slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


# -- reporting ------------------------------------------------------------------------------
def short(name: str) -> str:
    return (name.replace("HF datasets ", "HF ").replace(" iter_batches + shuffle buffer", " + buffer")
            .replace(" (converted) random take", " take").replace(" streaming (MDS)", " MDS"))


def epoch_incl_setup(res: dict) -> tuple[float, bool, str]:
    """Setup (conversion) + one shuffled epoch at the batched rate (per row where a loader has no batches)."""
    g = "batch" if res.get("batch") else "row"
    r = res[g]
    setup = res["row"]["setup_s"] if res.get("row") else r["setup_s"]
    return setup + r["epoch_s"], r["full_epoch"], g


def plot(results: dict, path: Path) -> None:
    """Rows/s per loader at both granularities (log), epoch time including setup, peak RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in results if results[n].get("row") or results[n].get("batch")]
    y = np.arange(len(names))
    grans = [("row", "tab:orange"), ("batch", "tab:blue")]
    fig, ax = plt.subplots(1, 3, figsize=(16, 5))
    lo = min(results[n][g]["rows_per_s"] for n in names for g, _ in grans if results[n].get(g)) / 2
    for k, (g, color) in enumerate(grans):
        vals = [results[n][g]["rows_per_s"] if results[n].get(g) else 0 for n in names]
        ax[0].barh(y + (k - 0.5) * 0.4, vals, height=0.4, color=color, label=f"per {g} in Python" if g == "row"
                   else "per Arrow batch (~1,024 rows)")
        for yi, v in zip(y, vals):
            ax[0].text(v * 1.05 if v else lo * 1.1, yi + (k - 0.5) * 0.4, f"{v:,.0f}" if v else "per-row only",
                       va="center", fontsize=7)
    ax[0].set(xscale="log", xlim=(lo, None), xlabel="rows/s (log)", title="shuffled-epoch throughput", yticks=y,
              yticklabels=[short(n) for n in names])
    ax[0].set_xlim(right=ax[0].get_xlim()[1] * 3)
    setup = [results[n]["row"]["setup_s"] if results[n].get("row") else 0 for n in names]
    total = [epoch_incl_setup(results[n])[0] for n in names]
    cap = 1.25 * max(t for n, t in zip(names, total) if "row shuffle" not in n)
    epoch = [min(t, cap) - s for t, s in zip(total, setup)]
    ax[1].barh(y, setup, color="tab:red", label="setup / conversion")
    ax[1].barh(y, epoch, left=setup, color="tab:blue", label="one shuffled epoch (per batch; MosaicML per row)")
    for yi, t in zip(y, total):
        ax[1].text(min(t, cap) * 1.01, yi, f"{t:.0f} s" + (" →" if t > cap else ""), va="center", fontsize=7,
                   ha="right" if t > cap else "left")
    ax[1].set(xlim=(0, cap * 1.12), xlabel="seconds", title="epoch including conversion", yticks=y, yticklabels=[])
    for k, (g, color) in enumerate(grans):
        vals = [results[n][g]["peak_rss_mb"] if results[n].get(g) else 0 for n in names]
        ax[2].barh(y + (k - 0.5) * 0.4, vals, height=0.4, color=color)
    ax[2].set(xlabel="peak RSS (MB)", title="memory", yticks=y, yticklabels=[])
    for a in ax:
        a.invert_yaxis()
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(results: dict, errors: dict, gb: float) -> None:
    print(f"\n## Peer comparison ({gb:.2f} GB Parquet, list<int32> tokens, one shuffled epoch, "
          f"buffer {BUFFER} rows, batches of {BATCH})\n")
    print("| loader | granularity | extra disk GB | setup s | first batch s | rows/s | tokens/s (M) | epoch s "
          "| epoch incl. setup s | peak RSS MB | files per 1,000 rows | Spearman vs file order |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, res in results.items():
        for g in GRANULARITIES:
            r = res.get(g)
            if r is None:
                why = NO_BATCH_PATH.get(name) if g == "batch" else None
                why = why or errors.get((name, g), "not run")
                print(f"| {name} | per {g} | {why} | | | | | | | | | |")
                continue
            setup = res["row"]["setup_s"] if res.get("row") else r["setup_s"]
            mark = "" if r["full_epoch"] else "~"
            print(f"| {name} | per {g} | {r['extra_disk_gb']:.2f} | {setup:.1f} | {r['first_batch_s']:.3f} | "
                  f"{r['rows_per_s']:,.0f} | {r['tokens_per_s'] / 1e6:.1f} | {mark}{r['epoch_s']:.1f} | "
                  f"{mark}{setup + r['epoch_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['files_per_1000']:.1f} | "
                  f"{r['spearman']:+.3f} |")
    base = results.get("youmu page shuffle", {})
    if not base.get("row") or not base.get("batch"):
        return
    print("\nyoumu page shuffle vs each loader (×: youmu's rows/s over the loader's; epoch: the "
          "loader's epoch incl. setup over youmu's)\n")
    print("| loader | per row | per batch | epoch incl. setup |")
    print("|---|---|---|---|")
    e0 = epoch_incl_setup(base)[0]
    for name, res in results.items():
        if name == "youmu page shuffle":
            continue
        cells = [f"{base[g]['rows_per_s'] / res[g]['rows_per_s']:.2f}×" if res.get(g) else "—" for g in GRANULARITIES]
        ep = f"{epoch_incl_setup(res)[0] / e0:.2f}×" if res.get("row") or res.get("batch") else "—"
        print(f"| {name} | {cells[0]} | {cells[1]} | {ep} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="bench-data/tokens")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--work", default="bench-data/peers-work")
    ap.add_argument("--peers-python", default=".venv-peers/bin/python")
    ap.add_argument("--mosaic-python", default=".venv-mosaic/bin/python")
    ap.add_argument("--only", default=None, help="loaders whose name contains this")
    ap.add_argument("--granularity", choices=GRANULARITIES, default=None, help="only this granularity")
    ap.add_argument("--phase", default=None, help="internal: LOADER|GRANULARITY")
    ap.add_argument("--from-json", default=None, help="re-render table and chart from a previous peers.json")
    a = ap.parse_args()
    here = Path(__file__).parent
    gb = sum(f.stat().st_size for f in parquet_files(a.data)) / 1e9
    if a.from_json:
        saved = json.loads(Path(a.from_json).read_text())
        plot(saved["results"], here / "peers.png")
        report(saved["results"], {}, saved.get("dataset_gb", gb))
        return
    if a.phase:
        name, g = a.phase.rsplit("|", 1)
        work = Path(a.work) / slug(name)
        work.mkdir(parents=True, exist_ok=True)
        emit(LOADERS[name][1][g](a, work))
        return
    from datagen import generate

    generate(Path(a.data), 1.0)
    gb = sum(f.stat().st_size for f in parquet_files(a.data)) / 1e9
    results: dict = {}
    errors: dict = {}
    for name, (env, phases) in LOADERS.items():
        if a.only and a.only not in name:
            continue
        results[name] = {g: None for g in GRANULARITIES}
        py = {"main": sys.executable, "peers": a.peers_python, "mosaic": a.mosaic_python}[env]
        work = Path(a.work) / slug(name)
        shutil.rmtree(work, ignore_errors=True)
        try:
            for g in GRANULARITIES:  # per row first: it converts (timed); per batch reopens
                if g not in phases or (a.granularity and g != a.granularity):
                    continue
                if not Path(py).exists():
                    errors[(name, g)] = f"interpreter {py} missing (run `make peers-venv`)"
                    continue
                cmd = [py, __file__, "--phase", f"{name}|{g}", "--data", a.data, "--seconds", str(a.seconds),
                       "--work", a.work]
                env_vars = dict(os.environ, PYTHONPATH=str(here))
                load = os.getloadavg()[0]  # the machine is shared: record how busy it was
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, env=env_vars)
                if p.returncode != 0:
                    errors[(name, g)] = (p.stderr.strip().splitlines() or ["failed"])[-1][:200]
                else:
                    results[name][g] = json.loads(p.stdout.strip().splitlines()[-1])
                    results[name][g].update(load_before=load, load_after=os.getloadavg()[0])
                print(f"{name} | per {g}", results[name][g] or errors[(name, g)], flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    saved = dict(date=time.strftime("%Y-%m-%d"), seconds=a.seconds, dataset_gb=gb, buffer_rows=BUFFER,
                 batch_rows=BATCH, results=results,
                 errors={f"{n} | per {g}": e for (n, g), e in errors.items()})
    here.joinpath("peers.json").write_text(json.dumps(saved, indent=1))
    try:
        plot(results, here / "peers.png")
    except ImportError:
        pass
    report(results, errors, gb)


if __name__ == "__main__":
    main()
