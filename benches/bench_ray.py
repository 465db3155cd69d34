"""youmu.ray against the colocated path: memory, the trainer's wait, failover stalls.

    PYTHONPATH=python .venv/bin/python benches/bench_ray.py [--what memory latency failover]
        [--sources 5 50 300] [--data bench-data/sources] [--out benches/ray.json]

**Memory** (MegaScale-Data, §7.2, Fig. 12: up to 13.5× less loader memory). Total
PSS (``/proc/<pid>/smaps_rollup``: shared pages counted once across the processes
sharing them) of *every* process of each path, measured while all of them hold
their state after every source has been read:

* colocated — 2 rank processes, each with a ``DataLoader(num_workers=2)`` whose
  dataset holds a ``YoumuDataset`` of every source (its rank's shard; each worker
  reads its own share) and draws from them round-robin, as a mixture inside one
  DataLoader does: every rank × worker opens every source;
* disaggregated — the Ray cluster's own processes (GCS, raylet, agents, idle
  workers), the source-loader actors (``--per-loader`` sources each), the planner,
  and 2 rank processes whose ``RayBalancedLoader`` clients run the balanced plan (no
  DataLoader workers: the loaders read).

Both read the same sources with the same stream settings (``STREAM``), in fresh
process trees (each measured phase is its own interpreter and children).

**Latency.** 2 rank processes over Gloo; the trainer's wait for each micro-batch
(``next()``) with a simulated ``--compute-ms`` per micro-batch, p50/p99, and throughput
without compute, for ``BalancedLoader`` in process (prefetch thread) and for the Ray
client (prefetch 2 steps), same sources, schedule, balancing.

**Failover.** The same ranks, compute on; rank 0 kills source loader 0 (``ray.kill``,
Ray restarts it) three times; the stall each rank sees is its longest wait for a
micro-batch after a kill, without and with a standby replica (``standby=True``,
``hedge_after=0.2``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sources_memory import generate, pss_mb  # noqa: E402


def generate_rows(out: Path, n: int, rows: int, mean_tokens: int, seed: int = 0) -> list[Path]:
    """``n`` sources of ``rows`` token rows of about ``mean_tokens`` tokens (log-normal),
    in the layout of ``bench_sources_memory.generate`` (2 row groups, 64 KiB pages)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"source-{k:04d}.parquet" for k in range(n)]
    for k, p in enumerate(paths):
        if p.exists():
            continue
        rng = np.random.default_rng(seed + k)
        lens = np.clip(rng.lognormal(np.log(mean_tokens) - 0.245, 0.7, rows).astype(np.int64), 16, 16 * mean_tokens)
        toks = rng.integers(0, 50_000, int(lens.sum()), dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(toks)),
                          "doc_id": pa.array(np.arange(rows) + k * rows, pa.int64())})
        tmp = p.with_suffix(".tmp")
        pq.write_table(table, tmp, row_group_size=rows // 2, data_page_size=64 * 1024, write_page_index=True,
                       use_dictionary=False, compression="zstd")
        tmp.rename(p)
    return paths

#: both paths' stream settings (``--buffer-size`` sets the shuffle window: youmu's default is 8192 rows)
STREAM: dict[str, Any] = dict(columns=["input_ids"], shuffle="page", buffer_size=8192, seed=0, output="numpy")
# training ranks (--ranks; spawned phases read it back from the environment) and DataLoader workers per rank
WORLD, WORKERS = int(os.environ.get("YOUMU_BENCH_RANKS", "2")), 2
NAMESPACE = "youmu-bench"


# ------------------------------------------------------------------------------------------
# processes
# ------------------------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(root: int) -> list[int]:
    """``root`` and all its descendants."""
    kids, out, todo = _children(), [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _cmd(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def classify(pid: int, ranks: set[int], driver: int) -> str:
    cmd = _cmd(pid)
    if pid == driver:
        return "driver (starts the path)"
    if pid in ranks:
        return "rank processes"
    for key, label in (("ray::SourceLoader", "source loaders"), ("ray::StepPlanner", "planner"),
                       ("ray::IDLE", "ray: idle workers"), ("gcs_server", "ray: gcs"), ("raylet", "ray: raylet"),
                       ("ray::", "ray: agents and other workers"), ("ray/", "ray: monitors")):
        if key in cmd:
            return label
    return "DataLoader workers" if "python" in cmd or cmd == "" else f"other: {cmd[:40]}"


def measure_tree(root: int, ranks: set[int]) -> dict[str, Any]:
    by: dict[str, float] = {}
    count: dict[str, int] = {}
    for pid in tree(root):
        try:
            v = pss_mb(pid)
        except (OSError, RuntimeError):
            continue
        k = classify(pid, ranks, root)
        by[k] = by.get(k, 0.0) + v
        count[k] = count.get(k, 0) + 1
    return {"pss_mb": round(sum(by.values()), 1), "by_kind_mb": {k: round(v, 1) for k, v in sorted(by.items())},
            "processes": count}


def check_ranks(got: list[Any], gos: list[Any], procs: list[Any]) -> None:
    """Raise a rank's error, after releasing the ranks that did not fail (they wait for
    the driver's go, and interpreter exit would wait for them forever)."""
    errors = [err for _, pid, err in got if pid is None]
    if errors:
        for g in gos:
            g.put(None)
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
        raise RuntimeError(f"a rank failed: {errors}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_settings(names: list[str], global_batch_size: int = 64, num_microbatches: int = 2) -> dict[str, Any]:
    return dict(num_microbatches=num_microbatches, global_batch_size=global_batch_size,
                schedule={n: 1.0 for n in names}, cost="llama-12b", method="kk", seed=0)


# ------------------------------------------------------------------------------------------
# memory: the colocated path
# ------------------------------------------------------------------------------------------
def _mix_dataset(paths: dict[str, str], rank: int) -> Any:
    from torch.utils.data import IterableDataset

    import youmu
    from youmu.torch import YoumuDataset

    stream = {k: v for k, v in STREAM.items() if k != "columns"}

    class Mix(IterableDataset):  # type: ignore[misc]
        """Every source's YoumuDataset (this rank's shard), drawn round-robin."""

        def __init__(self) -> None:
            self.sources = [YoumuDataset(youmu.PageIndex(p, columns=STREAM["columns"]), rank=rank,
                                         world_size=WORLD, **stream) for p in paths.values()]

        def __iter__(self) -> Any:
            its = [iter(s) for s in self.sources]
            while its:
                for it in list(its):
                    x = next(it, None)
                    if x is None:
                        its.remove(it)  # this worker's share of the source is read
                    else:
                        yield x

    return Mix()


def colocated_rank(rank: int, paths: dict[str, str], q: Any, go: Any) -> None:
    try:
        _colocated_rank(rank, paths, q, go)
    except BaseException as e:  # noqa: BLE001 - the driver raises it
        q.put((rank, None, f"{type(e).__name__}: {e}"))


def _colocated_rank(rank: int, paths: dict[str, str], q: Any, go: Any) -> None:
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    loader = DataLoader(_mix_dataset(paths, rank), batch_size=None, num_workers=WORKERS, prefetch_factor=2,
                        multiprocessing_context="fork")
    it = iter(loader)
    rows = 0
    for _ in range(2 * len(paths) * WORKERS):  # every worker reads every source twice
        if next(it, None) is None:
            break
        rows += 1
    q.put((rank, os.getpid(), rows))
    go.get()  # hold every worker's state while the driver measures
    del it


def phase_memory_colocated(paths: dict[str, str]) -> dict[str, Any]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, gos = ctx.Queue(), [ctx.Queue() for _ in range(WORLD)]
    procs = [ctx.Process(target=colocated_rank, args=(r, paths, q, gos[r])) for r in range(WORLD)]
    t0 = time.time()
    for p in procs:
        p.start()
    got = [q.get(timeout=1800) for _ in procs]
    check_ranks(got, gos, procs)
    ready_s = time.time() - t0
    time.sleep(1.0)
    m = measure_tree(os.getpid(), {pid for _, pid, _ in got})
    for g in gos:
        g.put(None)
    for p in procs:
        p.join(120)
    m.update(ready_s=round(ready_s, 1), samples_per_rank=got[0][2])
    return m


def idle_rank(rank: int, q: Any, go: Any) -> None:
    """A trainer process that imports what the colocated trainer imports, and loads nothing."""
    import torch

    import youmu.torch  # noqa: F401

    torch.set_num_threads(1)
    q.put((rank, os.getpid(), 0))
    go.get()


def phase_memory_idle() -> dict[str, Any]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, gos = ctx.Queue(), [ctx.Queue() for _ in range(WORLD)]
    procs = [ctx.Process(target=idle_rank, args=(r, q, gos[r])) for r in range(WORLD)]
    for p in procs:
        p.start()
    got = [q.get(timeout=600) for _ in procs]
    time.sleep(1.0)
    m = measure_tree(os.getpid(), {pid for _, pid, _ in got})
    for g in gos:
        g.put(None)
    for p in procs:
        p.join(60)
    return m


# ------------------------------------------------------------------------------------------
# memory: the disaggregated path
# ------------------------------------------------------------------------------------------
def ray_rank(rank: int, address: str, name: str, steps: int, q: Any, go: Any) -> None:
    try:
        _ray_rank(rank, address, name, steps, q, go)
    except BaseException as e:  # noqa: BLE001 - the driver raises it
        q.put((rank, None, f"{type(e).__name__}: {e}"))


def _ray_rank(rank: int, address: str, name: str, steps: int, q: Any, go: Any) -> None:
    import ray
    import torch

    from youmu.ray import RayBalancedLoader, RayLoaders

    torch.set_num_threads(1)
    ray.init(address=address, log_to_driver=False)
    # a loaded machine (8 ranks, other jobs) can keep the planner busy past connect's default 60 s
    client = RayBalancedLoader(RayLoaders.connect(name, NAMESPACE, timeout=600), rank, prefetch=2)
    n = 0
    for k, step in enumerate(client.iter_steps()):
        n += sum(info.num_samples for _, info in step)
        if k + 1 == steps:
            break
    q.put((rank, os.getpid(), n))
    go.get()
    client.close()


def start_ray(**kw: Any) -> None:
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 << 20,
             log_to_driver=False, **kw)


def phase_memory_ray(paths: dict[str, str], per_loader: int) -> dict[str, Any]:
    import multiprocessing as mp

    import ray

    from youmu.ray import RayLoaders, Source

    t0 = time.time()
    start_ray()
    names = list(paths)
    loaders = RayLoaders({n: Source(p, **STREAM) for n, p in paths.items()}, world_size=WORLD, name="mem",
                         namespace=NAMESPACE, sources_per_loader=per_loader, timeout=600, **plan_settings(names))
    gbs = 64
    steps = max(8, math.ceil(2 * len(names) / gbs) + 4)  # every source drawn at least twice
    ctx = mp.get_context("spawn")
    q, gos = ctx.Queue(), [ctx.Queue() for _ in range(WORLD)]
    address = ray.get_runtime_context().gcs_address
    procs = [ctx.Process(target=ray_rank, args=(r, address, "mem", steps, q, gos[r])) for r in range(WORLD)]
    for p in procs:
        p.start()
    got = [q.get(timeout=1800) for _ in procs]
    check_ranks(got, gos, procs)
    ready_s = time.time() - t0
    time.sleep(1.0)
    m = measure_tree(os.getpid(), {pid for _, pid, _ in got})
    stats = loaders.stats()
    for g in gos:
        g.put(None)
    for p in procs:
        p.join(120)
    loaders.shutdown()
    ray.shutdown()
    rows = {k: v["rows_read"] for k, v in stats.items() if "rows_read" in v}
    m.update(ready_s=round(ready_s, 1), steps=steps, samples_per_rank=got[0][2], loader_actors=len(loaders.loaders),
             loader_rows_read={"records": sum(r["records"] for r in rows.values()),
                               "payload_misses": sum(r["payload_misses"] for r in rows.values())})
    return m


# ------------------------------------------------------------------------------------------
# latency and failover: 2 Gloo ranks, in process and on Ray
# ------------------------------------------------------------------------------------------
def _waits(loader: Any, compute_s: float, on_item: Any = None, limit: int | None = None) -> dict[str, Any]:
    waits, n, samples = [], 0, 0
    it = iter(loader)
    t_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        item = next(it, None)
        w = time.perf_counter() - t0
        if item is None:
            break
        waits.append(w)
        samples += len(item[0])
        n += 1
        if compute_s:
            time.sleep(compute_s)
        if on_item is not None:
            on_item(n)
        if limit is not None and n >= limit:
            break
    total = time.perf_counter() - t_start
    return {"waits": waits, "microbatches": n, "samples": samples, "seconds": total}


def _summary(r: dict[str, Any], skip_first: int) -> dict[str, Any]:
    w = np.array(r["waits"][skip_first:]) * 1e3
    return {"p50_ms": round(float(np.percentile(w, 50)), 3), "p99_ms": round(float(np.percentile(w, 99)), 3),
            "max_ms": round(float(w.max()), 1), "first_ms": round(1e3 * r["waits"][0], 1),
            "microbatches": r["microbatches"], "samples_per_s": round(r["samples"] / r["seconds"], 1)}


def timing_rank(rank: int, port: int, address: str, paths: dict[str, str], cfg: dict[str, Any], q: Any) -> None:
    try:
        os.environ["OMP_NUM_THREADS"] = "1"
        import ray
        import torch
        import torch.distributed as dist

        import youmu
        from youmu.planning import BalancedLoader
        from youmu.ray import RayBalancedLoader, RayLoaders
        from youmu.torch import YoumuDataset

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                                timeout=timedelta(seconds=300))
        names = list(paths)
        settings = plan_settings(names, cfg["gbs"], cfg["m"])
        stream = {k: v for k, v in STREAM.items() if k != "columns"}

        def in_process() -> Any:
            srcs = {n: YoumuDataset(youmu.PageIndex(p, columns=STREAM["columns"]), rank=rank, world_size=WORLD,
                                    **stream) for n, p in paths.items()}
            return BalancedLoader(srcs, prefetch=2, **settings)

        limit = cfg["steps"] * cfg["m"]
        out: dict[str, Any] = {}
        compute = cfg["compute_ms"] / 1e3
        if "latency" in cfg["what"]:
            out["in_process"] = _summary(_waits(in_process(), compute, limit=limit), 1)
            out["in_process_no_compute"] = _summary(_waits(in_process(), 0.0, limit=limit), 1)
            ray.init(address=address, log_to_driver=False)
            d = RayLoaders.connect("lat", NAMESPACE)
            out["ray"] = _summary(_waits(RayBalancedLoader(d, rank, prefetch=2), compute, limit=limit), 1)
            out["ray_no_compute"] = _summary(_waits(RayBalancedLoader(d, rank, prefetch=2), 0.0, limit=limit), 1)
        if "failover" in cfg["what"]:
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False)
            for name in ("fo", "fosb"):
                d = RayLoaders.connect(name, NAMESPACE)
                kills = cfg["kills"]
                killed: list[int] = []

                def kill(n: int, name: str = name, killed: list[int] = killed, kills: list[int] = kills) -> None:
                    if rank == 0 and n in kills:
                        ray.kill(ray.get_actor(f"{name}.loader0", namespace=NAMESPACE), no_restart=False)
                    if n in kills:
                        killed.append(n)
                    dist.barrier()  # both ranks at the same micro-batch, as DDP keeps them

                r = _waits(RayBalancedLoader(d, rank, prefetch=2), compute, on_item=kill, limit=limit)
                stalls = []
                for k in kills:
                    window = r["waits"][k: k + 4 * cfg["m"]]  # the micro-batches after the kill
                    stalls.append(round(1e3 * max(window), 1) if window else None)
                out[name] = {"stalls_ms": stalls, **_summary(r, 1)}
        q.put((rank, out))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001
        import traceback

        q.put((rank, {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}))


def phase_timing(paths: dict[str, str], cfg: dict[str, Any]) -> dict[str, Any]:
    import multiprocessing as mp

    import ray

    from youmu.ray import RayLoaders, Source

    start_ray()
    specs = {n: Source(p, **STREAM) for n, p in paths.items()}
    settings = plan_settings(list(paths), cfg["gbs"], cfg["m"])
    deployments = []
    if "latency" in cfg["what"]:
        deployments.append(RayLoaders(specs, world_size=WORLD, name="lat", namespace=NAMESPACE, timeout=120,
                                      **settings))
    if "failover" in cfg["what"]:
        deployments.append(RayLoaders(specs, world_size=WORLD, name="fo", namespace=NAMESPACE, timeout=120,
                                      **settings))
        deployments.append(RayLoaders(specs, world_size=WORLD, name="fosb", namespace=NAMESPACE, timeout=120,
                                      standby=True, hedge_after=0.2, **settings))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    address = ray.get_runtime_context().gcs_address
    procs = [ctx.Process(target=timing_rank, args=(r, port, address, paths, cfg, q)) for r in range(WORLD)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=3000) for _ in procs)
    for p in procs:
        p.join(120)
    for dep in deployments:
        dep.shutdown()
    ray.shutdown()
    errors = {r: v["error"] for r, v in got.items() if "error" in v}
    if errors:
        raise RuntimeError(f"ranks failed: {errors}")
    return {"per_rank": got, **cfg}


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def run_phase(args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent / "python"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"phase {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", nargs="+", default=["memory", "latency", "failover"],
                    choices=["memory", "latency", "failover"])
    ap.add_argument("--sources", type=int, nargs="+", default=[5, 50, 300])
    ap.add_argument("--ranks", type=int, default=WORLD, help="training ranks (memory: how the ratio grows with them)")
    ap.add_argument("--per-loader", type=int, default=50, help="sources per loader actor (memory)")
    ap.add_argument("--buffer-size", type=int, default=STREAM["buffer_size"], help="rows per shuffle window")
    ap.add_argument("--colocated-max", type=int, default=10**9,
                    help="measure the colocated path up to this many sources; extrapolate beyond (linear in sources)")
    ap.add_argument("--timing-sources", type=int, default=8)
    ap.add_argument("--compute-ms", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--data", default="bench-data/sources")
    ap.add_argument("--row-tokens", type=int, default=0,
                    help="write sources of 8192 rows of about this many tokens instead of the shared "
                         "bench_sources_memory data (0: 4000 rows of ~250 tokens)")
    ap.add_argument("--out", default="benches/ray.json")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cfg", help=argparse.SUPPRESS)
    args = ap.parse_args()
    globals()["WORLD"] = args.ranks
    os.environ["YOUMU_BENCH_RANKS"] = str(args.ranks)

    many = max(args.sources + [args.timing_sources])
    if args.row_tokens:
        all_paths = generate_rows(Path(args.data), many, 8192, args.row_tokens)
    else:
        all_paths = generate(Path(args.data), many)
    STREAM["buffer_size"] = args.buffer_size
    if args.phase:
        paths = {f"s{k:03d}": str(p) for k, p in enumerate(all_paths[: args.n])}
        if args.phase == "colocated":
            res = phase_memory_colocated(paths)
        elif args.phase == "idle":
            res = phase_memory_idle()
        elif args.phase == "ray":
            res = phase_memory_ray(paths, min(args.per_loader, max(1, math.ceil(args.n / 6))))
        else:
            res = phase_timing(paths, json.loads(args.cfg))
        print(json.dumps(res))
        return

    old = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    result: dict[str, Any] = {**old, "stream": STREAM, "ranks": WORLD, "workers": WORKERS}
    if "memory" in args.what:
        common = ["--data", args.data, "--per-loader", str(args.per_loader), "--buffer-size", str(args.buffer_size),
                  "--row-tokens", str(args.row_tokens)]
        idle = run_phase(["--phase", "idle", "--n", "1", *common])
        rows = []
        for n in args.sources:
            row: dict[str, Any] = {"sources": n}
            for impl in ("colocated", "ray"):
                if impl == "colocated" and n > args.colocated_max:
                    continue
                row[impl] = run_phase(["--phase", impl, "--n", str(n), *common])
                print(f"  {n} sources, {impl}: PSS {row[impl]['pss_mb']:.0f} MB {row[impl]['by_kind_mb']}",
                      file=sys.stderr)
            rows.append(row)
        measured = [r for r in rows if "colocated" in r]
        for r in rows:
            if "colocated" not in r and len(measured) >= 2:
                # the colocated path is linear in sources (every worker holds every source's
                # windows): extend the line through the two largest measured points
                a, b = measured[-2], measured[-1]
                slope = (b["colocated"]["pss_mb"] - a["colocated"]["pss_mb"]) / (b["sources"] - a["sources"])
                r["colocated"] = {"pss_mb": round(b["colocated"]["pss_mb"] + slope * (r["sources"] - b["sources"]), 1),
                                  "extrapolated_from": [a["sources"], b["sources"]]}
            if "colocated" in r:
                r["ratio"] = round(r["colocated"]["pss_mb"] / r["ray"]["pss_mb"], 2)
                above = idle["pss_mb"]
                r["ratio_above_idle_trainers"] = round((r["colocated"]["pss_mb"] - above) /
                                                       (r["ray"]["pss_mb"] - above), 2)
        result[f"memory@{args.buffer_size}x{args.row_tokens}"] = {
            "buffer_size": args.buffer_size, "row_tokens": args.row_tokens or "~250", "idle_trainers": idle,
            "rows": rows, "sources_per_loader": args.per_loader}
    timing = [w for w in args.what if w in ("latency", "failover")]
    if timing:
        m = 4
        cfg = {"what": timing, "gbs": 32, "m": m, "steps": args.steps, "compute_ms": args.compute_ms,
               "kills": [m * args.steps // 4, m * args.steps // 2, 3 * m * args.steps // 4]}
        result["timing"] = run_phase(["--phase", "timing", "--n", str(args.timing_sources), "--data", args.data,
                                      "--cfg", json.dumps(cfg)])
    Path(args.out).write_text(json.dumps(result, indent=1))
    report(result)


def report(result: dict[str, Any]) -> None:
    for key in sorted(k for k in result if k.startswith("memory@")):
        mem = result[key]
        idle = mem["idle_trainers"]["pss_mb"]
        print(f"\n### Memory: total PSS, {result['ranks']} ranks (colocated: x {result['workers']} DataLoader workers "
              f"each opening every source), windows of {mem['buffer_size']} rows of {mem.get('row_tokens')} "
              "tokens\n")
        print(f"Idle trainers (2 processes importing torch and youmu, loading nothing): {idle:.0f} MB.\n")
        print("| sources | colocated MB | disaggregated MB (Ray included) | colocated / disaggregated | "
              "above the idle trainers | disaggregated breakdown (MB) |")
        print("|---|---|---|---|---|---|")
        for r in mem["rows"]:
            parts = ", ".join(f"{k} {v:.0f}" for k, v in r["ray"]["by_kind_mb"].items() if v >= 1)
            c = r.get("colocated")
            cs = "—" if c is None else (f"{c['pss_mb']:.0f}" + (" (extrapolated)" if "extrapolated_from" in c else ""))
            ratio = f"**{r['ratio']:.2f}×**" if "ratio" in r else "—"
            above = f"{r['ratio_above_idle_trainers']:.2f}×" if "ratio" in r else "—"
            print(f"| {r['sources']} | {cs} | {r['ray']['pss_mb']:.0f} | {ratio} | {above} | {parts} |")
    t = result.get("timing")
    if t:
        print("\n### The trainer's wait for its next micro-batch (ms) and throughput\n")
        print("| path | rank | p50 | p99 | max | samples/s with compute | samples/s without |")
        print("|---|---|---|---|---|---|---|")
        for r, v in sorted(t["per_rank"].items()):
            for name, a, b in (("in process", "in_process", "in_process_no_compute"), ("Ray", "ray", "ray_no_compute")):
                if a in v:
                    print(f"| {name} | {r} | {v[a]['p50_ms']} | {v[a]['p99_ms']} | {v[a]['max_ms']} | "
                          f"{v[a]['samples_per_s']} | {v[b]['samples_per_s']} |")
        if any("fo" in v for v in t["per_rank"].values()):
            print("\n### Failover: stall seen by each rank after a loader is killed (ms)\n")
            print("| rank | no standby: stalls | with standby: stalls |")
            print("|---|---|---|")
            for r, v in sorted(t["per_rank"].items()):
                print(f"| {r} | {v['fo']['stalls_ms']} | {v['fosb']['stalls_ms']} |")


if __name__ == "__main__":
    main()
