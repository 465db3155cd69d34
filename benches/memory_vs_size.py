"""Memory against dataset size: youmu's shuffled epoch against reading the whole set into
memory, at several dataset sizes, as a table, JSON and a plot for the documentation
(docs/concepts/memory.md).

    python benches/memory_vs_size.py                   # 0.1, 0.3, 1 GB: ~5 min on 2 loaded cores
    python benches/memory_vs_size.py --sizes 0.1,0.3,1,2 --plot docs/img/memory_vs_size.png   # ~15 min there

The data is ``datagen``'s token set (``list<int32>``, zstd, 1 MiB pages), written once at
0.1 GB in files of 15,000 rows, and larger sizes repeat those files under other names
(hard links: each is indexed and read as a file of its own, which is all any reader's
memory depends on); each size is the shortest prefix of that list that reaches it (the
size printed is what was read). Every measurement runs in a fresh
interpreter (:func:`_util.run_phase`), which imports what it needs, reads a few rows to
warm the allocator and the codec, then resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``) and records its RSS as the baseline; the figure is the peak
RSS (``VmHWM``) afterwards minus that baseline:

* **youmu** — one whole shuffled epoch, ``YoumuDataset(paths, shuffle="page",
  output="numpy")`` iterated in the process (0 DataLoader workers), with the default
  window and again with ``memory_budget``;
* **pyarrow** — ``pyarrow.parquet.read_table`` of the whole set, what a map-style loader
  that holds the data in memory does before its first sample (HF ``datasets`` map-style
  converts to an Arrow cache and memory-maps it instead: ``compare_peers.py`` measures it).

What this does not count: the page cache. Reading the files fills it for every reader
alike; it is the kernel's, shared and reclaimable, and not in any process's RSS.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _util import PhaseFailed, run_phase  # noqa: E402

HERE = Path(__file__).parent
ROWS_PER_FILE = 15_000


def _status(field: str) -> float:
    """A ``/proc/self/status`` field in MB."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _baseline() -> float:
    """Reset the peak-RSS mark to the current RSS (Linux: ``5`` to ``clear_refs``) and
    return that RSS in MB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _emit(base: float, t0: float, **extra: Any) -> None:
    print(json.dumps({"added_mb": round(_status("VmHWM") - base, 1), "baseline_mb": round(base, 1),
                      "seconds": round(time.perf_counter() - t0, 2), **extra}))


def phase_youmu(files: str, budget_mb: int) -> None:
    from youmu.torch import YoumuDataset

    paths = files.split(",")
    kw = {"memory_budget": budget_mb << 20} if budget_mb else {}
    warm = YoumuDataset(paths[:1], shuffle="page", seed=1, output="numpy", **kw)
    for n, _ in enumerate(warm):
        if n == 1000:
            break
    del warm
    base, t0 = _baseline(), time.perf_counter()
    rows = sum(1 for _ in YoumuDataset(paths, shuffle="page", seed=0, output="numpy", **kw))
    _emit(base, t0, rows=rows)


def phase_pyarrow(files: str) -> None:
    import pyarrow.parquet as pq

    paths = files.split(",")
    pq.ParquetFile(paths[0]).read_row_group(0)
    base, t0 = _baseline(), time.perf_counter()
    table = pq.read_table(paths)
    _emit(base, t0, rows=table.num_rows, table_mb=round(table.nbytes / 2**20, 1))


def prefixes(root: Path, sizes: list[float], unique_gb: float) -> list[tuple[float, list[Path]]]:
    """Each size's files: ``unique_gb`` of token data written once, then the same files again
    under other names (hard links) up to the largest size, so a 2 GB set costs 0.1 GB of
    generation; each size is the shortest prefix of that list that reaches it."""
    import os

    from datagen import generate

    unique = generate(root / "unique", min(unique_gb, max(sizes)), rows_per_file=ROWS_PER_FILE)
    files, total, rep = list(unique), sum(p.stat().st_size for p in unique), 1
    while total < max(sizes) * 1e9 * 0.98:
        for p in unique:
            link = root / f"copy-{rep:03d}" / p.name
            if not (link.exists() and os.path.samefile(link, p)):  # new, or left from other unique data
                link.parent.mkdir(parents=True, exist_ok=True)
                link.unlink(missing_ok=True)
                os.link(p, link)
            files.append(link)
            total += p.stat().st_size
        rep += 1
    out = []
    for gb in sizes:
        got, chosen = 0, []
        for p in files:
            if got >= gb * 1e9 * 0.98:
                break
            chosen.append(p)
            got += p.stat().st_size
        out.append((got / 1e9, chosen))
    return out


def plot(figures: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = figures["rows"]
    gb = [r["gb"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    lines = [("pyarrow", "pyarrow.parquet.read_table (the whole set in memory)", "s--"),
             ("youmu", "youmu shuffled epoch (shuffle=\"page\")", "o-"),
             ("youmu_budget", f"youmu, memory_budget={figures['budget_mb']} MB", "d-")]
    for key, label, style in lines:
        pts = [(g, r[key]) for g, r in zip(gb, rows) if r.get(key) is not None]
        if pts:
            ax.plot([g for g, _ in pts], [m for _, m in pts], style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(gb, [f"{g:.2g}" for g in gb])
    ax.set_xlabel("dataset size, GB of Parquet (zstd)")
    ax.set_ylabel("peak RSS growth, MB")
    ax.set_title("Memory against dataset size (token set, page cache not counted)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0.1,0.3,1", help="dataset sizes in GB, comma-separated")
    ap.add_argument("--data", type=Path, default=Path("bench-data/memory_vs_size"),
                    help="where the token set is written (reused when already there)")
    ap.add_argument("--budget-mb", type=int, default=64, help="the memory_budget of youmu's second run; 0: none")
    ap.add_argument("--unique-gb", type=float, default=0.1,
                    help="GB of distinct data generated; larger sizes repeat its files under other names")
    ap.add_argument("--json", type=Path, default=HERE / "memory_vs_size.json")
    ap.add_argument("--plot", type=Path, help="draw the figures here (PNG)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--arg", nargs="*", default=[], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phase:
        fn = {"youmu": phase_youmu, "pyarrow": phase_pyarrow}[a.phase]
        fn(*[int(x) if x.isdigit() else x for x in a.arg])
        return
    me = str(Path(__file__).resolve())
    sizes = sorted(float(s) for s in a.sizes.split(","))
    rows = []
    for gb, files in prefixes(a.data, sizes, a.unique_gb):
        arg = ",".join(str(p.resolve()) for p in files)

        def measure(phase: str, *args: Any) -> float | None:
            try:
                r = run_phase(me, phase, "--arg", arg, *map(str, args))
            except PhaseFailed as e:  # an out-of-memory kill is a result too: say so, go on
                print(f"{phase} at {gb:.2f} GB: {e.cause}", file=sys.stderr)
                return None
            print(f"  {phase}{args if args else ''}: {r}", flush=True)
            return float(r["added_mb"])

        print(f"{gb:.2f} GB, {len(files)} files", flush=True)
        row: dict[str, Any] = {"gb": round(gb, 3), "files": len(files)}
        row["youmu"] = measure("youmu", 0)
        row["youmu_budget"] = measure("youmu", a.budget_mb) if a.budget_mb else None
        row["pyarrow"] = measure("pyarrow")
        rows.append(row)
    figures = {"budget_mb": a.budget_mb, "rows": rows,
               "measure": "peak RSS growth (VmHWM after clear_refs) over the RSS after imports and warm-up, MB; "
                          "page cache not counted"}
    print("\n| dataset (GB) | youmu (MB) | youmu, memory_budget (MB) | pyarrow read_table (MB) |")
    print("|---|---|---|---|")

    def mb(v: float | None) -> str:
        return "failed" if v is None else f"{v:,.0f}"

    for r in rows:
        print(f"| {r['gb']:.2f} | {mb(r['youmu'])} | {mb(r['youmu_budget'])} | {mb(r['pyarrow'])} |")
    a.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {a.json}")
    if a.plot:
        plot(figures, a.plot)


if __name__ == "__main__":
    main()
