"""Per-source loader memory with many Parquet sources × workers × ranks (MegaScale-Data §2, Fig. 4).

    PYTHONPATH=python .venv/bin/python benches/bench_sources_memory.py \\
        [--sources 5 50 300] [--workers 2] [--ranks 2] [--data bench-data/sources] [--out benches/sources_memory.json]

Topology, for each implementation and source count: ``ranks`` trainer processes
(fresh interpreters), each forking ``workers`` DataLoader-style workers (``fork``, as
PyTorch does on Linux). Every worker reads all sources round-robin — one batch of
every source per round, as a mixture does — for a few rounds and then holds its
state while the rank process measures the **PSS** (proportional set size: shared
pages counted once across the processes sharing them) of itself and its workers.
Totals are summed over ranks.

* ``pyarrow`` — the colocated baseline (MegaScale-Data §2, Fig. 4): every worker opens
  every source (``pq.ParquetFile``: footer + schema) and keeps a streaming reader per
  source (``iter_batches``), which holds the source's current row group.
* ``youmu`` — one ``youmu.PageIndex`` over all sources built in the rank process
  before the fork (workers share it copy-on-write); workers read single pages by id
  (``read_page``) and keep nothing per source beyond the index's page table.
* ``pyarrow-footers`` — a leaner colocated variant: every worker keeps every source's
  ``ParquetFile`` open but reads each batch with a one-shot reader and drops it.
* ``idle`` — the same processes with the imports only: the floor all share.

Sources are generated with pyarrow: ``list<int32>`` token rows, 2 row groups per file,
64 KiB pages with the page index written. Row groups here are ~2 MB; production row
groups are 512 MB–1 GB (MegaScale-Data §2), so the baseline's per-source buffer — and the ratio
— grows with them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROWS_PER_FILE = 4000
ROW_GROUPS = 2
ROUNDS = 3
COLUMN = "input_ids"
NOISE_MB = 5.0  # spread of PSS between identical idle runs (measured: ~4 MB)


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def generate(out: Path, n: int, seed: int = 0) -> list[Path]:
    """``n`` small Parquet sources (reused when already there)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"source-{k:04d}.parquet" for k in range(n)]
    rng = np.random.default_rng(seed)
    for k, p in enumerate(paths):
        if p.exists():
            continue
        lens = np.clip(rng.lognormal(5.3, 0.7, ROWS_PER_FILE).astype(np.int64), 16, 2048)
        toks = rng.integers(0, 50_000, int(lens.sum()), dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        table = pa.table({COLUMN: pa.ListArray.from_arrays(pa.array(offsets), pa.array(toks)),
                          "doc_id": pa.array(np.arange(ROWS_PER_FILE) + k * ROWS_PER_FILE, pa.int64())})
        tmp = p.with_suffix(".tmp")
        pq.write_table(table, tmp, row_group_size=ROWS_PER_FILE // ROW_GROUPS, data_page_size=64 * 1024,
                       write_page_index=True, use_dictionary=False, compression="zstd")
        tmp.rename(p)
    return paths


# --------------------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------------------
def pss_mb(pid: int) -> float:
    """Proportional set size of ``pid`` in MB (``/proc/<pid>/smaps_rollup``)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss line for pid {pid}")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


# --------------------------------------------------------------------------------------
# the two implementations (worker bodies run in forked workers)
# --------------------------------------------------------------------------------------
def pyarrow_worker(paths: list[str], worker: int, state: dict[str, Any]) -> dict[str, Any]:
    """Colocated baseline: this worker opens every source and streams each."""
    import pyarrow.parquet as pq

    readers = [pq.ParquetFile(p).iter_batches(batch_size=256, columns=[COLUMN]) for p in paths]
    rows = 0
    for _ in range(ROUNDS):
        for r in readers:
            rows += next(r).num_rows
    state["keep"] = readers  # a mixture keeps every source's reader open
    return {"rows": rows}


def pyarrow_footers_worker(paths: list[str], worker: int, state: dict[str, Any]) -> dict[str, Any]:
    """A leaner colocated variant: every source's ParquetFile (footer, schema) stays
    open, but each batch is read with a one-shot reader and dropped — the per-source
    state without the streaming buffers (a lower bound for any colocated design)."""
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(p) for p in paths]
    rows = 0
    for rnd in range(ROUNDS):
        for f in files:
            rows += f.read_row_group(rnd % f.num_row_groups, columns=[COLUMN]).slice(0, 256).num_rows
    state["keep"] = files
    return {"rows": rows}


# ---- youmu side ----------------------------------------------------------------------
# Needs youmu's native core (youmu.PageIndex). The rank process builds one index over
# every source before forking its workers; a worker reads pages by id.
def youmu_prepare(paths: list[str]) -> Any:
    import youmu

    return youmu.PageIndex(paths, columns=[COLUMN])


def youmu_worker(index: Any, worker: int, state: dict[str, Any]) -> dict[str, Any]:
    starts = index.file_page_starts().tolist() + [len(index)]
    rows = 0
    for rnd in range(ROUNDS):
        for f in range(index.num_files):
            page = starts[f] + (worker + rnd) % max(starts[f + 1] - starts[f], 1)
            rows += index.read_page(page).num_rows
    return {"rows": rows, "index_table_bytes": int(index.table_bytes)}


def youmu_available() -> str | None:
    """None when youmu's native core imports, else why not."""
    try:
        import youmu._core  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        return f"youmu._core cannot be imported ({type(e).__name__}: {e}); build it with `maturin develop`"
    return None


# --------------------------------------------------------------------------------------
# one rank process
# --------------------------------------------------------------------------------------
def _worker_main(body: Callable[..., dict[str, Any]], arg: Any, worker: int, ready: Any, done: Any) -> None:
    state: dict[str, Any] = {}
    try:
        info = body(arg, worker, state)
        ready.send(("ok", info))
    except BaseException as e:  # noqa: BLE001
        ready.send(("err", f"{type(e).__name__}: {e}"))
    done.recv()  # hold the state until the rank has measured


def phase_rank(impl: str, paths: list[str], workers: int) -> dict[str, Any]:
    if impl == "pyarrow":
        import pyarrow.parquet  # noqa: F401

        body, arg = pyarrow_worker, paths
    elif impl == "pyarrow-footers":
        import pyarrow.parquet  # noqa: F401

        body, arg = pyarrow_footers_worker, paths
    elif impl == "youmu":
        import pyarrow  # noqa: F401

        arg = youmu_prepare(paths)
        body = youmu_worker
    elif impl == "idle":
        import pyarrow.parquet  # noqa: F401

        def body(_arg: Any, _w: int, _s: dict[str, Any]) -> dict[str, Any]:
            return {"rows": 0}

        arg = None
        try:
            import youmu._core  # noqa: F401 - the same imports as the youmu rank
        except Exception:  # noqa: BLE001
            pass
    else:
        raise ValueError(impl)
    ctx = mp.get_context("fork")
    procs, readies, dones = [], [], []
    for w in range(workers):
        r_recv, r_send = ctx.Pipe(duplex=False)
        d_recv, d_send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker_main, args=(body, arg, w, r_send, d_recv))
        p.start()
        procs.append(p)
        readies.append(r_recv)
        dones.append(d_send)
    infos = [r.recv() for r in readies]
    errors = [i for s, i in infos if s != "ok"]
    time.sleep(0.2)
    pids = [os.getpid()] + [p.pid for p in procs]
    pss = [pss_mb(pid) for pid in pids]
    rss = [rss_mb(pid) for pid in pids]
    for d in dones:
        d.send(None)
    for p in procs:
        p.join(30)
    if errors:
        raise RuntimeError(f"worker failed: {errors}")
    return {"pss_mb": sum(pss), "rss_mb": sum(rss), "per_process_pss_mb": pss,
            "workers": [i for _, i in infos]}


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def run_impl(impl: str, paths: list[Path], workers: int, ranks: int) -> dict[str, Any]:
    """``ranks`` rank processes at once (as on one node), their totals summed."""
    import subprocess

    arglist = [sys.executable, __file__, "--phase", impl, "--workers", str(workers), "--paths-file"]
    listing = Path(f"/tmp/youmu-bench-sources-{os.getpid()}-{len(paths)}.json")
    listing.write_text(json.dumps([str(p) for p in paths]))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent / "python"))
    procs = [subprocess.Popen(arglist + [str(listing)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(ranks)]
    outs = []
    for p in procs:
        so, se = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{impl} rank failed:\n{se[-3000:]}")
        outs.append(json.loads(so.strip().splitlines()[-1]))
    listing.unlink(missing_ok=True)
    return {"pss_mb": sum(o["pss_mb"] for o in outs), "rss_mb": sum(o["rss_mb"] for o in outs), "ranks": outs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", type=int, nargs="+", default=[5, 50, 300])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--data", default="bench-data/sources")
    ap.add_argument("--out", default="benches/sources_memory.json")
    ap.add_argument("--phase", choices=["pyarrow", "pyarrow-footers", "youmu", "idle"], help=argparse.SUPPRESS)
    ap.add_argument("--paths-file", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.phase:  # inside one rank process
        paths = json.loads(Path(args.paths_file).read_text())
        print(json.dumps(phase_rank(args.phase, paths, args.workers)))
        return

    why_not = youmu_available()
    if why_not:
        print(f"SKIP youmu side: {why_not}", file=sys.stderr)
    all_paths = generate(Path(args.data), max(args.sources))
    rows = []
    for n in args.sources:
        paths = all_paths[:n]
        disk = sum(p.stat().st_size for p in paths) / 1e6
        row: dict[str, Any] = {"sources": n, "disk_mb": disk, "workers": args.workers, "ranks": args.ranks}
        for impl in ("idle", "pyarrow", "pyarrow-footers") + (() if why_not else ("youmu",)):
            r = run_impl(impl, paths, args.workers, args.ranks)
            row[impl] = r
            print(f"  {n} sources, {impl}: PSS {r['pss_mb']:.0f} MB (RSS {r['rss_mb']:.0f} MB)", file=sys.stderr)
        rows.append(row)

    print(f"\n### Loader memory, {args.ranks} ranks x {args.workers} workers (PSS, MB, all loader processes)\n")
    print("| sources | data on disk | idle (imports) | pyarrow colocated | pyarrow footers only | youmu | "
          "pyarrow / youmu | above idle: pyarrow / youmu |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        idle, pa_ = r["idle"]["pss_mb"], r["pyarrow"]["pss_mb"]
        if "youmu" in r:
            yu = r["youmu"]["pss_mb"]
            ratio = f"{pa_ / yu:.2f}x"
            # PSS of identical idle runs varies by a few MB: below that, no ratio
            above = (f"{(pa_ - idle) / (yu - idle):.0f}x ({pa_ - idle:.0f} / {yu - idle:.0f} MB)"
                     if yu - idle >= NOISE_MB else f"youmu within {NOISE_MB:g} MB of idle ({pa_ - idle:.0f} / {yu - idle:.0f} MB)")
            yus = f"{yu:.0f}"
        else:
            ratio = above = yus = "skipped"
        foot = r["pyarrow-footers"]["pss_mb"]
        print(f"| {r['sources']} | {r['disk_mb']:.0f} MB | {idle:.0f} | {pa_:.0f} | {foot:.0f} | {yus} | {ratio} | "
              f"{above} |")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        ds = b["sources"] - a["sources"]
        per = args.ranks * args.workers
        slope_pa = (b["pyarrow"]["pss_mb"] - a["pyarrow"]["pss_mb"]) / ds
        slope_ft = (b["pyarrow-footers"]["pss_mb"] - a["pyarrow-footers"]["pss_mb"]) / ds
        line = (f"\nper added source: pyarrow {slope_pa:.2f} MB ({slope_pa / per:.2f} MB per worker), "
                f"pyarrow footers only {slope_ft:.3f} MB")
        if "youmu" in a:
            slope_yu = (b["youmu"]["pss_mb"] - a["youmu"]["pss_mb"]) / ds
            line += f", youmu {slope_yu:.3f} MB"
        print(line)
    Path(args.out).write_text(json.dumps({"rows": rows, "rows_per_file": ROWS_PER_FILE, "row_groups": ROW_GROUPS,
                                          "skipped_youmu": why_not}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
