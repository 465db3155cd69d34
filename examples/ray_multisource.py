"""Disaggregated multisource loading on Ray, with a loader killed halfway (CPU, Gloo, 2 ranks).

    python examples/ray_multisource.py [--out ray-out] [--sources 4] [--rows 600] [--standby]

What happens:

1. ``--sources`` Parquet sources are written (token rows of different lengths per source);
2. a local Ray cluster stands in for a head node and two CPU nodes
   (``ray.cluster_utils.Cluster``; the CPU nodes offer ``resources={"loader": ...}``);
3. ``youmu.ray.RayLoaders`` starts one source loader per source, pinned to the CPU
   nodes, and the step planner on the head node (MegaScale-Data's layout);
4. two training ranks (processes, DDP over Gloo) each train a tiny next-token model
   twice from the same initialisation, with the loss scaling of ``MicroBatchInfo``:
   first fed in process by ``youmu.planning.BalancedLoader`` over their own
   ``YoumuDataset`` of every source (the reference), then by their
   ``RayBalancedLoader`` client — and halfway through that run rank 0 kills a source
   loader (``ray.kill``; Ray restarts it, it rebuilds its index, and the interrupted
   calls are answered again by position).

The summary (``--out``/summary.json) compares the two runs on each rank: every
micro-batch (samples, order, ``MicroBatchInfo``) and the trained parameters — equal
bit for bit — and shows what the kill cost: the longest wait for a micro-batch (with
``--standby`` each loader has a hot replica that answers while it restarts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

NAME, NAMESPACE = "example", "youmu-example"
VOCAB = 512
SCHEDULE_SWITCH = 5  # the mixture changes at this step (a curriculum stage)


def write_sources(out: Path, n: int, rows: int) -> dict[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for k in range(n):
        rng = np.random.default_rng(k)
        mean = 20 + 40 * k  # sources differ in length: balancing has something to do
        lens = np.clip(rng.lognormal(np.log(mean), 0.6, rows).astype(int), 4, 400)
        table = pa.table({"id": np.arange(rows, dtype=np.int64) + k * 1_000_000,
                          "input_ids": pa.array([rng.integers(0, VOCAB, int(m)).astype(np.int32) for m in lens],
                                                pa.list_(pa.int32()))})
        path = out / f"source{k}.parquet"
        pq.write_table(table, path, row_group_size=100, data_page_size=4096, write_page_index=True)
        paths[f"source{k}"] = str(path)
    return paths


def schedule(names: list[str]) -> list[tuple[int, dict[str, float]]]:
    """Uniform at first; then the last source is upweighted and the first dropped."""
    later = {n: 1.0 for n in names[1:]}
    later[names[-1]] = 3.0
    return [(0, {n: 1.0 for n in names}), (SCHEDULE_SWITCH, later)]


def settings(names: list[str]) -> dict[str, Any]:
    return dict(num_microbatches=2, global_batch_size=24, schedule=schedule(names), capacity=800, cost="llama-12b",
                method="kk", seed=0, drop_last=True, collate_fn=collate)


STREAM = dict(columns=["id", "input_ids"], shuffle="page", buffer_size=200, seed=1, output="numpy")


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Pad a micro-batch's token rows; keep the ids (to compare runs)."""
    import torch

    n = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.long)
    mask = torch.zeros(len(samples), n, dtype=torch.bool)
    for i, s in enumerate(samples):
        row = torch.as_tensor(np.asarray(s["input_ids"], dtype=np.int64))
        ids[i, : len(row)], mask[i, : len(row)] = row, True
    return {"input_ids": ids, "mask": mask, "ids": [int(s["id"]) for s in samples]}


# ------------------------------------------------------------------------------------------
# one training rank
# ------------------------------------------------------------------------------------------
def train(loader: Any, rank: int, on_microbatch: Any = None) -> dict[str, Any]:
    """DDP training of a tiny model over ``loader``'s micro-batches; what was delivered,
    the parameters after training, and how long each micro-batch was waited for."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB)))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    record, waits = [], []
    it = iter(loader)
    k = 0
    while True:
        t0 = time.perf_counter()
        item = next(it, None)
        waits.append(time.perf_counter() - t0)
        if item is None:
            break
        batch, info = item
        ids, mask = batch["input_ids"], batch["mask"]
        logits = model(ids[:, :-1])
        target_mask = mask[:, 1:]
        per_token = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
        mean = (per_token * target_mask.flatten()).sum() / target_mask.sum().clamp(min=1)
        # the mean per-token loss × loss_scale: summed over micro-batches and averaged by
        # DDP over ranks, it is the per-token mean of the whole global batch
        (mean * info.loss_scale).backward()
        if info.is_last:
            opt.step()
            opt.zero_grad()
        record.append([info.step, info.microbatch, batch["ids"], info.fingerprint, info.loss_scale, info.is_padding])
        if on_microbatch is not None:
            on_microbatch(k)
        k += 1
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    return {"record": record, "params_sha256": hashlib.sha256(params.tobytes()).hexdigest(),
            "digest": hashlib.sha256(json.dumps(record).encode()).hexdigest(),
            "microbatches": len(record), "steps": len({r[0] for r in record}),
            # the first wait includes start-up; the longest of the others is the kill's stall
            "wait_ms": {"first": 1e3 * waits[0], "p50": 1e3 * float(np.percentile(waits[1:], 50)),
                        "max_after_first": 1e3 * float(max(waits[1:]))}}


def rank_main(rank: int, world: int, port: int, address: str, paths: dict[str, str], q: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        import ray
        import torch
        import torch.distributed as dist

        import youmu
        from youmu.planning import BalancedLoader
        from youmu.ray import RayBalancedLoader, RayLoaders
        from youmu.torch import YoumuDataset

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))
        names = list(paths)
        # 1. the reference: in process, every rank opening every source
        stream = {k: v for k, v in STREAM.items() if k != "columns"}
        sources = {n: YoumuDataset(youmu.PageIndex(p, columns=STREAM["columns"]), rank=rank, world_size=world,
                                   **stream) for n, p in paths.items()}
        reference = train(BalancedLoader(sources, **settings(names)), rank)

        # 2. on Ray: this rank's client of the running deployment; rank 0 kills a loader halfway
        ray.init(address=address, log_to_driver=False)
        client = RayBalancedLoader(RayLoaders.connect(NAME, NAMESPACE), rank, prefetch=2)
        half = reference["microbatches"] // 2
        killed: list[Any] = []

        def kill_halfway(k: int) -> None:
            if rank == 0 and k == half:
                victim = f"{NAME}.loader{len(names) - 1}"  # the source the schedule upweights
                ray.kill(ray.get_actor(victim, namespace=NAMESPACE), no_restart=False)
                killed.append([victim, k])

        on_ray = train(client, rank, kill_halfway)
        client.close()
        q.put((rank, {"reference": reference, "ray": on_ray, "killed": killed}))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported by the driver
        import traceback

        q.put((rank, {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}))


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="ray-out")
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--rows", type=int, default=600)
    ap.add_argument("--standby", action="store_true", help="a standby replica per loader")
    args = ap.parse_args()
    out = Path(args.out)
    paths = write_sources(out / "data", args.sources, args.rows)

    import ray
    import torch.multiprocessing as mp
    from ray.cluster_utils import Cluster

    from youmu.ray import RayLoaders, Source

    t0 = time.time()
    # a head node (the planner's) and two CPU nodes for the loaders
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": 100 << 20, "resources": {"head": 4}})
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=80 << 20, resources={"loader": 16})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    loaders = RayLoaders({n: Source(p, **STREAM) for n, p in paths.items()}, world_size=2, name=NAME,
                         namespace=NAMESPACE, loader_options={"resources": {"loader": 1}},
                         planner_options={"resources": {"head": 1}}, standby=args.standby, hedge_after=0.2,
                         **settings(list(paths)))
    print(f"cluster and {len(loaders.loader_names)} loaders + planner up in {time.time() - t0:.1f} s", file=sys.stderr)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, 2, port, cluster.address, paths, q)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=900) for _ in procs)
    for p in procs:
        p.join(60)
    loaders.shutdown()
    ray.shutdown()
    cluster.shutdown()

    errors = {r: res["error"] for r, res in results.items() if "error" in res}
    if errors:
        raise SystemExit(f"ranks failed: {errors}")
    summary: dict[str, Any] = {"sources": len(paths), "ranks": 2, "standby": args.standby,
                               "killed": results[0]["killed"], "per_rank": {}}
    for r in sorted(results):
        ref, on_ray = results[r]["reference"], results[r]["ray"]
        summary["per_rank"][r] = {
            "steps": on_ray["steps"], "microbatches": on_ray["microbatches"],
            "same_microbatches_as_in_process": ref["record"] == on_ray["record"],
            "same_parameters_after_training": ref["params_sha256"] == on_ray["params_sha256"],
            "stream_digest": on_ray["digest"],
            "wait_ms_in_process": ref["wait_ms"], "wait_ms_on_ray": on_ray["wait_ms"],
        }
    summary["nothing_changed"] = all(v["same_microbatches_as_in_process"] and v["same_parameters_after_training"]
                                     for v in summary["per_rank"].values())
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    if not summary["nothing_changed"]:
        raise SystemExit("the Ray run differs from the in-process run")


if __name__ == "__main__":
    main()
