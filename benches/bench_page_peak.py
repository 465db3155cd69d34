"""Peak memory of reading one Parquet page that is larger than the memory budget.

    PYTHONPATH=python .venv/bin/python benches/bench_page_peak.py [--images 25] [--image-mb 1] \\
        [--pages 2] [--out benches/page_peak.json]

A writer's default can put a whole row group of images in one page (25 images of 1 MB
is common). youmu reads such a page alone, without read-ahead
(:func:`youmu.stream.window_layout`), so a budget smaller than the page still works;
what it costs is then about the page itself. This measures how much: files of
``--pages`` row groups, each one page of ``--images`` random (incompressible) images
of ``--image-mb`` MB, uncompressed and snappy, read in full by ``YoumuDataset``
(``shuffle="page"``, a 4 MB ``memory_budget``, ``output="python"``) in a fresh
interpreter. The process's peak resident memory during the pass (``VmHWM`` after
resetting it through ``/proc/self/clear_refs``, so imports and set-up — a small file
read first — do not count) minus its resident memory before the pass, divided by the page's decoded size, is the
ratio reported: 1.0 would be one copy of the page and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def write(path: Path, images: int, image_bytes: int, pages: int, compression: str) -> int:
    """A file of ``pages`` row groups, each a single page of ``images`` random images;
    returns the page's decoded size in bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n = images * pages
    blobs = [rng.integers(0, 256, size=image_bytes, dtype=np.uint8).tobytes() for _ in range(n)]
    table = pa.table({"id": pa.array(range(n), pa.int64()), "image": pa.array(blobs, pa.binary())})
    pq.write_table(table, path, row_group_size=images, data_page_size=1 << 40, use_dictionary=False,
                   compression=compression, write_page_index=True)
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups == pages
    return images * (image_bytes + 4)


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(path: str, warm: str, budget: int) -> dict[str, Any]:
    """In this (fresh) process: read every row of ``path``; peak RSS above the start.
    A small file is read first (``warm``) so that youmu's thread pools and torch's
    import are in place; the big file's pages were never in this process's heap."""
    import gc

    from youmu.torch import YoumuDataset

    for _ in YoumuDataset([warm], shuffle="page", memory_budget=budget, output="python", seed=0):
        pass
    ds = YoumuDataset([path], shuffle="page", memory_budget=budget, output="python", seed=0)
    gc.collect()
    before = _rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    rows = 0
    for row in ds:
        rows += 1
        del row
    peak = _rss_kb("VmHWM")
    return {"rows": rows, "rss_before_mb": before / 1024, "peak_mb": peak / 1024,
            "added_mb": (peak - before) / 1024}


def run_case(path: Path, warm: Path, page_bytes: int, budget: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--phase", str(path), "--warm", str(warm),
                          "--budget", str(budget)],
                         capture_output=True, text=True, check=True, env=os.environ.copy())
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["page_mb"] = page_bytes / 2**20
    res["peak_over_page"] = round(res["added_mb"] * 2**20 / page_bytes, 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase")
    ap.add_argument("--warm")
    ap.add_argument("--budget", type=int, default=4 << 20)
    ap.add_argument("--images", type=int, default=25)
    ap.add_argument("--image-mb", type=float, default=1.0)
    ap.add_argument("--pages", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.phase:
        print(json.dumps(measure(a.phase, a.warm, a.budget)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for codec in ("none", "snappy"):
            p, warm = Path(tmp) / f"{codec}.parquet", Path(tmp) / f"warm-{codec}.parquet"
            page = write(p, a.images, int(a.image_mb * 2**20), a.pages, codec)
            write(warm, 2, 1000, 1, codec)
            results[codec] = r = run_case(p, warm, page, a.budget)
            print(f"{codec:7s} page {r['page_mb']:.1f} MB  peak +{r['added_mb']:.1f} MB  "
                  f"peak/page {r['peak_over_page']:.2f}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
