"""Image-text loading with preprocessing in DataLoader workers: youmu page-shuffled vs a
pyarrow row-group baseline, the same decode/resize/tokenize function on both sides.

    PYTHONPATH=python .venv/bin/python benches/bench_vision.py [--small] [--gb 2.0] \\
        [--data bench-data/vision] [--workers 2] [--budget-mb 1024] [--out benches/vision.json]

Data: Parquet as Hugging Face ``datasets`` writes image datasets (files of up to 512 MB
in the full run) — an ``image`` column
``struct<bytes: binary, path: string>`` of JPEG bytes beside a LLaVA ``conversations``
column, 100 rows per row group (``datasets``' row-group size for image data) and
pyarrow's default page size, so a row group is one page of 100 images. Image files
are 50 KB–5 MB (log-uniform; ``--small``: 50 KB–1 MB and ~150 MB in all), drawn from
a pool of distinct encoded photos-like images (gradients plus noise); the image column
is written without dictionary encoding so repeated pool entries are stored in full.

Loaders (each in a fresh interpreter; ``workers`` DataLoader workers; every row
decoded, converted to RGB, resized by Qwen2-VL's rule (``youmu.vision.load_image``,
JPEG draft decoding on) and chat-templated/tokenized with a byte-level tokenizer):

* ``youmu`` — ``YoumuDataset(shuffle="page", memory_budget=budget, transform=VisionTransform)``.
* ``pyarrow`` — a map-style torch dataset over (file, row group) pairs, shuffled by the
  DataLoader, each item read with ``ParquetFile.iter_batches(row_groups=[rg])`` and
  transformed row by row in the worker.
* ``hf-map`` — HF ``datasets`` map-style: ``load_dataset("parquet")`` (its Arrow
  conversion, timed apart, cache deleted after) and a torch dataset whose item i is
  ``transform(ds[i])``, shuffled by the DataLoader.
* ``hf-stream`` — HF ``datasets`` streaming, ``.shuffle(buffer_size=200)`` (the rows of
  youmu's 2-page window), transformed in the workers (``datasets`` splits the files
  between them).

The HF loaders run in the peers' interpreter (``make peers-venv``: ``datasets`` is kept
out of the project venv); without it they are skipped with a line saying so. The
generated data is deleted after the run unless ``--keep``.

Reported: images/s over the whole pass (start-up included), the training loop's
wait for each sample (p50/p99/max, no simulated compute: the loader is the bottleneck),
time to the first sample, and the peak memory of the process tree (the loop process
plus its workers, sampled every 50 ms): RSS summed, and PSS summed (pages the forked
workers share with the parent, torch's libraries above all, counted once).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import PEERS_PYTHON, TreePeak, peers_python, run_phase  # noqa: E402

ROWS_PER_GROUP = 100
POOL = 48


def _photo(rng: np.random.Generator, target: int) -> bytes:
    """A JPEG of about ``target`` bytes: smooth gradients plus noise, sized by trial."""
    from PIL import Image

    bpp = 0.6  # first guess of bytes per pixel at this noise and quality
    for _ in range(4):
        pixels = max(64 * 64, int(target / bpp))
        aspect = rng.uniform(0.6, 1.8)
        w, h = max(64, int((pixels * aspect) ** 0.5)), max(64, int((pixels / aspect) ** 0.5))
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        base = np.stack([128 + 100 * np.sin(x / rng.uniform(20, 200) + c) * np.cos(y / rng.uniform(20, 200))
                         for c in range(3)], -1)
        img = np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=90)
        data = buf.getvalue()
        if abs(len(data) - target) < 0.25 * target:
            return data
        bpp = len(data) / (w * h)
    return data


def generate(out: Path, total_bytes: int, lo: int, hi: int, seed: int = 0) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    # files of up to 512 MB, as `datasets` shards a dataset it uploads
    per_file = 512 << 20 if total_bytes > (1 << 30) else 64 << 20
    stamp = out / f"done-{total_bytes}-{lo}-{hi}-{seed}-{per_file}"
    files = sorted(out.glob("part-*.parquet"))
    if stamp.exists() and files:
        return files
    for f in files:
        f.unlink()
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(lo), np.log(hi), POOL)).astype(int)
    pool = [_photo(rng, int(s)) for s in sizes]
    image_t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    turn_t = pa.struct([("from", pa.string()), ("value", pa.string())])
    written, row, part = 0, 0, 0
    while written < total_bytes:
        images, convs, ids, fbytes = [], [], [], 0
        while fbytes < per_file and written + fbytes < total_bytes:
            data = pool[int(rng.integers(0, POOL))]
            images.append({"bytes": data, "path": f"img/{row:08d}.jpg"})
            convs.append([{"from": "human", "value": f"<image>\nDescribe picture {row}."},
                          {"from": "gpt", "value": "A smooth pattern of colours with fine noise. " * 3}])
            ids.append(row)
            fbytes += len(data)
            row += 1
        t = pa.table({"image": pa.array(images, image_t), "conversations": pa.array(convs, pa.list_(turn_t)),
                      "id": pa.array(ids, pa.int64())})
        pq.write_table(t, out / f"part-{part:03d}.parquet", row_group_size=ROWS_PER_GROUP, compression="snappy",
                       use_dictionary=["conversations", "id"])
        written += fbytes
        part += 1
    stamp.write_text("ok")
    return sorted(out.glob("part-*.parquet"))


class RowGroups:
    """Map-style dataset: item i = the transformed rows of one (file, row group)."""

    def __init__(self, paths: list[str], transform: Any) -> None:
        import pyarrow.parquet as pq

        self.paths = paths
        self.units = [(i, rg) for i, p in enumerate(paths) for rg in range(pq.ParquetFile(p).num_row_groups)]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, i: int) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        f, rg = self.units[i]
        out = []
        for batch in pq.ParquetFile(self.paths[f]).iter_batches(batch_size=16, row_groups=[rg],
                                                                columns=["image", "conversations", "id"]):
            out.extend(self.transform(r) for r in batch.to_pylist())
        return out


HF_BUFFER = 200  # rows in HF streaming's shuffle buffer: youmu's 2-page window at a 1 GiB budget


class HFItems:
    """Map-style: item i = the transformed row i of an HF ``datasets.Dataset``."""

    def __init__(self, ds: Any, transform: Any) -> None:
        self.ds, self.transform = ds, transform

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.transform(self.ds[i])


def _hf_stream(paths: list[str], transform: Any) -> Any:
    """HF streaming with a shuffle buffer, rows transformed in the DataLoader workers
    (``datasets`` hands each worker its own files)."""
    import datasets
    import torch

    datasets.disable_progress_bars()
    ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
    ds = ds.shuffle(seed=0, buffer_size=HF_BUFFER)

    class Rows(torch.utils.data.IterableDataset):
        def __iter__(self):
            for row in ds:
                yield transform(row)

    return Rows()


def phase_loader(impl: str, paths: list[str], workers: int, budget: int) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    from youmu.vision import ByteTokenizer, VisionTransform

    torch.manual_seed(0)
    transform = VisionTransform(ByteTokenizer())
    peak = TreePeak()
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    if impl == "youmu":
        from youmu.torch import YoumuDataset

        ds = YoumuDataset(paths, columns=["image", "conversations", "id"], shuffle="page", output="python",
                          memory_budget=budget, transform=transform, seed=0)
        info = {"window_pages": ds.window_pages, "read_ahead": ds.read_ahead,
                "largest_page_mb": round(int(ds.index.page_decoded_bytes().max()) / 2**20, 1)}
        source = iter(DataLoader(ds, batch_size=None, num_workers=workers))

        def samples():
            yield from source
    elif impl == "hf-map":
        import datasets

        datasets.disable_progress_bars()
        cache = str(Path(paths[0]).parent / "hf-cache")
        ds = datasets.load_dataset("parquet", data_files=paths, split="train", cache_dir=cache)
        info = {"arrow_conversion_s": round(time.perf_counter() - t0, 1),
                "extra_disk_gib": round(sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file()) / 2**30, 2)}
        source = iter(DataLoader(HFItems(ds, transform), batch_size=None, shuffle=True, num_workers=workers))

        def samples():
            yield from source
    elif impl == "hf-stream":
        source = iter(DataLoader(_hf_stream(paths, transform), batch_size=None, num_workers=workers))

        def samples():
            yield from source
    else:
        loader = DataLoader(RowGroups(paths, transform), batch_size=None, shuffle=True, num_workers=workers)

        def samples():
            for group in loader:
                yield from group
    waits, images, tokens, first = [], 0, 0, None
    it = samples()
    while True:
        t = time.perf_counter()
        try:
            s = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t)
        if first is None:
            first = time.perf_counter() - t0
        images += len(s["image_grid_thw"])
        tokens += int(s["num_tokens"])
    wall = time.perf_counter() - t0
    rss, pss = peak.close()
    w = np.array(waits[1:]) * 1e3
    return {"impl": impl, "images": images, "tokens": tokens, "seconds": round(wall, 2),
            "images_per_s": round(images / wall, 1), "first_sample_s": round(first or 0.0, 2),
            "wait_p50_ms": round(float(np.percentile(w, 50)), 2), "wait_p99_ms": round(float(np.percentile(w, 99)), 1),
            "wait_max_ms": round(float(w.max()), 1), "peak_tree_rss_mb": round(rss), "peak_tree_pss_mb": round(pss),
            **info}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase")
    ap.add_argument("--impl")
    ap.add_argument("--paths", nargs="*")
    ap.add_argument("--small", action="store_true", help="~150 MB of 50 KB–1 MB images")
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--data", default="bench-data/vision")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-mb", type=int, default=1024, help="youmu's memory_budget per process")
    ap.add_argument("--out")
    ap.add_argument("--peers-python", default=PEERS_PYTHON, help="runs the HF datasets loaders (make peers-venv)")
    ap.add_argument("--keep", action="store_true", help="keep the generated data (default: deleted after the run)")
    a = ap.parse_args()
    if a.phase == "loader":
        print(json.dumps(phase_loader(a.impl, a.paths, a.workers, a.budget_mb << 20)))
        return
    if a.small:
        data, total, lo, hi = Path(a.data) / "small", 150 << 20, 50 << 10, 1 << 20
    else:
        data, total, lo, hi = Path(a.data) / "full", int(a.gb * (1 << 30)), 50 << 10, 5 << 20
    t = time.perf_counter()
    paths = [str(p) for p in generate(data, total, lo, hi)]
    size = sum(os.path.getsize(p) for p in paths)
    print(f"data: {len(paths)} files, {size / 2**30:.2f} GiB ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    results = []
    py = peers_python(a.peers_python)
    impls = [("youmu", None), ("pyarrow", None)] + ([("hf-map", py), ("hf-stream", py)] if py else [])
    for impl, python in impls:
        try:
            r = run_phase(__file__, "loader", "--impl", impl, "--workers", str(a.workers), "--budget-mb",
                          str(a.budget_mb), "--paths", *paths, timeout=3600, python=python)
        except RuntimeError as e:  # a baseline that fails is reported; the others stand
            print(f"{impl} failed: {str(e)[-1500:]}", file=sys.stderr)
            continue
        finally:
            shutil.rmtree(data / "hf-cache", ignore_errors=True)
        print(json.dumps(r), file=sys.stderr)
        results.append(r)
    if not a.keep:
        shutil.rmtree(data, ignore_errors=True)
    report = {"data_gib": round(size / 2**30, 2), "files": len(paths), "workers": a.workers,
              "budget_mb": a.budget_mb, "cpus": os.cpu_count(), "results": results}
    print(json.dumps(report, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
