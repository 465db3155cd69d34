"""Multi-process harness for the planning tests: W spawned ranks on 127.0.0.1 that meet
on a TCPStore and open GlooChannels on it (no default process group), run a scenario,
and send picklable results back. Scenario functions are module-level so that spawned
children can import them.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
import traceback
from typing import Any, Callable

import numpy as np

N_SAMPLES = 203


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn: Callable[..., Any], rank: int, world: int, port: int, q: Any, args: tuple) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=datetime.timedelta(seconds=30),
                              wait_for_workers=False)
        q.put((rank, "ok", fn(rank, world, store, *args)))
    except BaseException as e:  # noqa: BLE001
        q.put((rank, "err", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_world(fn: Callable[..., Any], world: int, *args: Any, timeout: float = 90.0) -> list[tuple[str, Any]]:
    """``fn(rank, world, store, *args)`` on ``world`` spawned ranks; ``[(status, result)]``
    in rank order. Every child is killed on timeout."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, q, args)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in {timeout}s")
            try:
                rank, status, res = q.get(timeout=min(left, 1.0))
                results[rank] = (status, res)
            except Exception:  # noqa: BLE001 - queue.Empty: check for dead children
                for r, p in enumerate(procs):
                    if r not in results and not p.is_alive() and p.exitcode not in (0, None):
                        results[r] = ("dead", p.exitcode)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    return [results[r] for r in range(world)]


# ----------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------
def dataset(n: int = N_SAMPLES, seed: int = 0) -> list[dict[str, Any]]:
    """Samples with a global ``id`` and heavy-tailed lengths (a few long ones)."""
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < 0.1, rng.integers(600, 1500, size=n), rng.integers(5, 120, size=n))
    return [{"id": i, "input_ids": np.arange(int(k), dtype=np.int64), "source": "main"} for i, k in enumerate(lengths)]


def _sid(s: dict[str, Any]) -> int:
    return int(s["id"])


def _record(batch: Any, info: Any) -> dict[str, Any]:
    return {
        "step": info.step, "mb": info.microbatch, "ids": list(info.sample_ids), "tokens": info.num_tokens,
        "real_tokens": info.real_tokens, "scale": info.loss_scale, "pad": info.is_padding,
        "fp": info.fingerprint, "imbalance": info.imbalance, "T": info.global_num_tokens,
        "batch_ids": sorted(int(s["id"]) for s in batch) if isinstance(batch, list) else None,
        "sources": dict(info.source_counts), "deferred": info.deferred,
    }


# ----------------------------------------------------------------------------------------
# scenarios
# ----------------------------------------------------------------------------------------
def scenario_modes(rank: int, world: int, store: Any) -> dict[str, Any]:
    """Run the loader in each mode on a shard of the data; return every micro-batch."""
    from youmu.batching.channel import GlooChannel
    from youmu.planning import BalancedLoader, Planner, SampleMeta

    data = dataset()
    shard = data[rank::world]
    out: dict[str, Any] = {}

    def chan(name: str) -> GlooChannel:
        return GlooChannel.from_store(store, rank, world, prefix=f"youmu/test/{name}", timeout=30)

    # the declarative planner over all-gathered metadata, without the loader
    local = SampleMeta.build(ids=[s["id"] for s in shard], lengths=[len(s["input_ids"]) for s in shard])
    planner = Planner().distribute(world, num_microbatches=4, capacity=4096).cost("llama-12b").balance("kk")
    plan = planner.plan_distributed(0, local, chan("planner"))
    out["planner"] = {"fingerprint": plan.fingerprint, "ids": plan.ids(rank), "n": len(plan.meta)}

    # token budget + capacity: deferrals happen; prefetch thread on
    loader = BalancedLoader(iter(shard), num_microbatches=3, token_budget=6000, capacity=1600, cost="llama-12b",
                            method="kk", id_fn=_sid, channel=chan("tokens"), prefetch=1)
    out["tokens"] = [_record(b, i) for b, i in loader]

    # fixed sample count, synchronous
    loader = BalancedLoader(iter(shard), num_microbatches=2, global_batch_size=24, cost="llama-12b",
                            id_fn=_sid, channel=chan("samples"), prefetch=0)
    out["samples"] = [_record(b, i) for b, i in loader]

    # reorder-only over formed micro-batches (arrival-order groups of 4)
    units = [shard[k:k + 4] for k in range(0, len(shard), 4)]
    loader = BalancedLoader(iter(units), num_microbatches=3, reorder_only=True, method="interleave",
                            id_fn=_sid, channel=chan("reorder"))
    out["reorder"] = [_record(b, i) for b, i in loader]

    # two sources mixed by a schedule
    other = [{"id": 10_000 + s["id"], "input_ids": s["input_ids"][:20], "source": "aux"} for s in shard]
    loader = BalancedLoader({"main": iter(shard), "aux": iter(other)}, num_microbatches=2, global_batch_size=20,
                            schedule=[(0, {"main": 3, "aux": 1}), (4, {"main": 1, "aux": 1})],
                            id_fn=_sid, channel=chan("mix"))
    out["mix"] = [_record(b, i) for b, i in loader]
    return out


def _shard_iterable(shard: list[Any]) -> Any:
    from torch.utils.data import IterableDataset

    class Shard(IterableDataset):
        def __iter__(self):
            return iter(shard)

    return Shard()


def scenario_dbl(rank: int, world: int, store: Any) -> list[dict[str, Any]]:
    """DynamicBatchLoader (collate_fn=None) as the source: its steps are flattened
    into samples and re-balanced; each loader has its own Gloo channel.

    The DynamicBatchLoader reads an iterable shard: over a map-style dataset it shards
    like DistributedSampler(drop_last=False), which repeats a sample when the length
    does not divide by the world size (seen with 203 samples on 2 ranks)."""
    from youmu.batching.channel import GlooChannel
    from youmu.batching.loader import DynamicBatchLoader
    from youmu.planning import BalancedLoader

    data = _shard_iterable(dataset()[rank::world])
    dbl = DynamicBatchLoader(data, token_budget=2048, length_fn=lambda s: len(s["input_ids"]), collate_fn=None,
                             buffer_size=32, num_workers=0, seed=1,
                             group=GlooChannel.from_store(store, rank, world, prefix="youmu/test/dbl", timeout=30),
                             timeout=30)
    loader = BalancedLoader(dbl, num_microbatches=2, global_batch_size=32, id_fn=_sid,
                            channel=GlooChannel.from_store(store, rank, world, prefix="youmu/test/bal", timeout=30))
    out = [_record(b, i) for b, i in loader]
    dbl.close()
    return out


class _Boom(Exception):
    pass


def _failing(shard: list[Any], after: int):
    for k, s in enumerate(shard):
        if k == after:
            raise _Boom(f"source failed after {after} samples")
        yield s


def scenario_failure(rank: int, world: int, store: Any) -> str:
    """Rank 1's source raises: rank 1 sees its own error, the others RankFailedError
    at once (well before the 30 s collective timeout)."""
    from youmu.batching.channel import GlooChannel
    from youmu.planning import BalancedLoader

    shard = dataset()[rank::world]
    src = _failing(shard, 30) if rank == 1 else iter(shard)
    loader = BalancedLoader(src, num_microbatches=2, global_batch_size=16, id_fn=_sid,
                            channel=GlooChannel.from_store(store, rank, world, prefix="youmu/test/fail", timeout=30))
    start = time.monotonic()
    try:
        for _ in loader:
            pass
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__} after {time.monotonic() - start:.1f}s"
    return "no error"


def scenario_stop(rank: int, world: int, store: Any, stop_at: list[int | None]) -> str:
    """Ranks leave their loops at ``stop_at[rank]`` steps (None: iterate to the end)."""
    from youmu.batching.channel import GlooChannel
    from youmu.planning import BalancedLoader

    shard = dataset()[rank::world]
    loader = BalancedLoader(iter(shard), num_microbatches=2, global_batch_size=16, id_fn=_sid,
                            channel=GlooChannel.from_store(store, rank, world, prefix="youmu/test/stop", timeout=30))
    start = time.monotonic()
    steps = 0
    try:
        for step in loader.iter_steps():
            steps += 1
            if stop_at[rank] is not None and steps == stop_at[rank]:
                break
        loader.close()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__} after {steps} steps, {time.monotonic() - start:.1f}s"
    return f"ok {steps}"
