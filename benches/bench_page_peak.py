"""Peak memory of reading one Parquet page that is larger than the memory budget.

    PYTHONPATH=python .venv/bin/python benches/bench_page_peak.py [--images 25] [--image-mb 1] \\
        [--pages 2] [--budget-mb 4] [--allocators] [--out benches/page_peak.json]

A writer's default can put a whole row group of images in one page (25 images of 1 MB
is common). youmu reads such a page alone, without read-ahead
(:func:`youmu.streams.rowstream.window_layout`), so a budget smaller than the page still works;
what it costs is then about the page itself. This measures how much: files of
``--pages`` row groups, each one page of ``--images`` random (incompressible) images
of ``--image-mb`` MB, uncompressed and snappy, read in full by ``YoumuDataset``
(``shuffle="page"``, a 4 MB ``memory_budget``, ``output="python"``) in a fresh
interpreter. The process's peak resident memory during the pass (``VmHWM`` after
resetting it through ``/proc/self/clear_refs``, so imports and set-up — a small file
read first — do not count) minus its resident memory before the pass, divided by the page's decoded size, is the
ratio reported: 1.0 would be one copy of the page and nothing else.

``--allocators`` repeats every case under other allocator settings, to see how much of
the excess is glibc keeping freed page-sized buffers: ``YOUMU_MMAP_THRESHOLD=262144``
(youmu's knob: buffers above 256 KB are mmapped and returned when freed),
``MALLOC_ARENA_MAX=2`` (fewer per-thread heaps), and jemalloc and mimalloc (the
system's ``libjemalloc.so.2`` / ``libmimalloc.so.2``, where installed) through
``LD_PRELOAD`` — which replaces the allocator of the whole process, a fair stand-in
for linking one into the extension since the page buffers are the extension's
allocations. Each case also reports the pass's wall time (the allocators' speed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# the file writer and the measuring phase are shared with the tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from page_peak import run_case, write  # noqa: E402

LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
#: name -> environment additions
ALLOCATORS: dict[str, dict[str, str]] = {
    "glibc": {},
    "glibc YOUMU_MMAP_THRESHOLD=262144": {"YOUMU_MMAP_THRESHOLD": "262144"},
    "glibc MALLOC_ARENA_MAX=2": {"MALLOC_ARENA_MAX": "2"},
    "jemalloc": {"LD_PRELOAD": str(LIBDIR / "libjemalloc.so.2")},
    "mimalloc": {"LD_PRELOAD": str(LIBDIR / "libmimalloc.so.2")},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=4 << 20, help="bytes")
    ap.add_argument("--budget-mb", type=float, help="memory_budget in MiB (default 4)")
    ap.add_argument("--allocators", action="store_true", help="repeat under other allocator settings")
    ap.add_argument("--images", type=int, default=25)
    ap.add_argument("--image-mb", type=float, default=1.0)
    ap.add_argument("--pages", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    budget = int(a.budget_mb * 2**20) if a.budget_mb else a.budget
    variants = {k: v for k, v in ALLOCATORS.items()
                if "LD_PRELOAD" not in v or Path(v["LD_PRELOAD"]).exists()} if a.allocators else {"glibc": {}}
    results: dict[str, Any] = {"budget_mb": budget / 2**20}
    with tempfile.TemporaryDirectory() as tmp:
        for codec in ("none", "snappy"):
            p, warm = Path(tmp) / f"{codec}.parquet", Path(tmp) / f"warm-{codec}.parquet"
            page = write(p, a.images, int(a.image_mb * 2**20), a.pages, codec)
            write(warm, 2, 1000, 1, codec)
            for name, env in variants.items():
                results[f"{codec} / {name}"] = r = run_case(p, warm, page, budget, env)
                print(f"{codec:7s} {name:34s} page {r['page_mb']:.1f} MB  budget {budget / 2**20:.0f} MiB  "
                      f"peak +{r['added_mb']:.1f} MB  peak/page {r['peak_over_page']:.2f}  "
                      f"peak/budget {r['added_mb'] * 2**20 / budget:.2f}  pass {r['wall_s']:.2f} s", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
