"""Peak memory of reading one Parquet page larger than the memory budget: the file
writer and the measuring phase shared by ``tests/unit/vision/test_vision_page_peak.py``
and ``benches/bench_page_peak.py`` (which says what is measured and why).

Example::

    page = write(path, 25, 1 << 20, 3, "none")        # 3 row groups, each one 25 MB page
    res = run_case(path, warm, page, 4 << 20)          # measured in a fresh interpreter
    res["peak_over_page"]                              # 1.0: one copy of the page
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
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
    # written here: one page per row group and the codec are the layout whose peak is measured
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
    t0 = time.perf_counter()
    for row in ds:
        rows += 1
        del row
    wall = time.perf_counter() - t0
    peak = _rss_kb("VmHWM")
    return {"rows": rows, "rss_before_mb": before / 1024, "peak_mb": peak / 1024,
            "added_mb": (peak - before) / 1024, "wall_s": round(wall, 3)}


def run_case(path: Path, warm: Path, page_bytes: int, budget: int,
             extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    env = {**os.environ, **(extra_env or {})}
    out = subprocess.run([sys.executable, __file__, "--phase", str(path), "--warm", str(warm),
                          "--budget", str(budget)],
                         capture_output=True, text=True, check=True, env=env)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["page_mb"] = page_bytes / 2**20
    res["peak_over_page"] = round(res["added_mb"] * 2**20 / page_bytes, 2)
    return res


def main() -> None:
    """The measuring phase, in the fresh interpreter :func:`run_case` starts."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", required=True)
    ap.add_argument("--warm", required=True)
    ap.add_argument("--budget", type=int, required=True)
    a = ap.parse_args()
    print(json.dumps(measure(a.phase, a.warm, a.budget)))


if __name__ == "__main__":
    main()
