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
from collections.abc import Callable
from typing import Any

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
    from youmu.distributed import GlooChannel
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

    # packing: each micro-batch becomes one varlen row of at most `capacity` tokens
    from youmu.planning import pack_microbatch

    loader = BalancedLoader(iter(shard), num_microbatches=3, token_budget=6000, capacity=1600, cost="llama-12b",
                            id_fn=_sid, collate_fn=pack_microbatch, channel=chan("packed"), prefetch=1)
    out["packed"] = []
    for b, i in loader:
        rec = _record(b, i)
        cu = b["cu_seqlens"].tolist()
        # the row holds exactly the planned samples' tokens, one document each (a
        # padding slot repeats another rank-local batch with loss_scale 0)
        rec["packed_ok"] = i.loss_scale == 0.0 if i.is_padding else (
            tuple(b["input_ids"].shape) == (1, i.real_tokens) and cu[-1] == i.real_tokens
            and len(cu) - 1 == i.num_samples and b["position_ids"].shape == b["input_ids"].shape)
        out["packed"].append(rec)

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
    from youmu.batching.dynamic_loader import DynamicBatchLoader
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader

    data = _shard_iterable(dataset()[rank::world])
    dbl = DynamicBatchLoader(data, token_budget=2048, length_fn=lambda s: len(s["input_ids"]), collate_fn=None,
                             pool_size=32, num_workers=0, seed=1,
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
    """Rank 1's source raises: rank 1 sees its own error (as the cause of the
    PrefetchError its planning thread raises), the others RankFailedError at once (well
    before the 30 s collective timeout)."""
    from youmu.distributed import GlooChannel
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
        cause = f" from {type(e.__cause__).__name__}" if e.__cause__ is not None else ""
        return f"{type(e).__name__}{cause} after {time.monotonic() - start:.1f}s"
    return "no error"


def scenario_stop(rank: int, world: int, store: Any, stop_at: list[int | None]) -> str:
    """Ranks leave their loops at ``stop_at[rank]`` steps (None: iterate to the end)."""
    from youmu.distributed import GlooChannel
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


def scenario_passes(rank: int, world: int, store: Any) -> dict[str, Any]:
    """The loader contract on W ranks: every rank starts a second pass after the first
    ran out, and a third after every rank left the second early (``close()``)."""
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader

    shard = dataset()[rank::world]  # a list: it can be read again
    loader = BalancedLoader(shard, num_microbatches=2, global_batch_size=16, capacity=1600, id_fn=_sid,
                            channel=GlooChannel.from_store(store, rank, world, prefix="youmu/test/passes", timeout=30))
    first = [_record(b, i) for b, i in loader]
    second = [_record(b, i) for b, i in loader]
    it = iter(loader)
    head = [_record(*next(it)) for _ in range(3)]
    loader.close()
    third = [_record(b, i) for b, i in loader]
    return {"first": first, "second": second, "head": head, "third": third}


# ----------------------------------------------------------------------------------------
# resume and exact gradients on W ranks
# ----------------------------------------------------------------------------------------
VOCAB = 23


def tiny_lm() -> Any:
    """A float64 embedding → tanh → linear LM with a fixed initialisation (the same on
    every rank and in the parent that computes the reference)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 6), torch.nn.Tanh(), torch.nn.Linear(6, VOCAB)).double()


def lm_tokens(sample: dict[str, Any]) -> tuple[Any, Any]:
    """Inputs and per-token targets of a sample (every token carries a loss)."""
    import torch

    ids = torch.as_tensor(np.asarray(sample["input_ids"]) % VOCAB)
    return ids, (ids * 7 + 3) % VOCAB


def microbatch_grad(model: Any, samples: list[dict[str, Any]], scale: float) -> None:
    """Accumulate ``scale ×`` the gradient of the micro-batch's mean per-token loss."""
    import torch

    pairs = [lm_tokens(s) for s in samples]
    logits = model(torch.cat([x for x, _ in pairs]))
    loss = torch.nn.functional.cross_entropy(logits, torch.cat([y for _, y in pairs]))
    (loss * scale).backward()


def flat_grad(model: Any) -> np.ndarray:
    return np.concatenate([p.grad.detach().reshape(-1).numpy() for p in model.parameters()])


def _train(loader: Any, m: int) -> list[dict[str, Any]]:
    """Gradient accumulation over each step's micro-batches, with the loader's exact
    ``loss_scale`` and, as a negative control, the common ``1/m`` weighting."""
    exact, naive = tiny_lm(), tiny_lm()
    out: list[dict[str, Any]] = []
    ids: list[int] = []
    for batch, info in loader:
        if not info.is_padding:
            microbatch_grad(exact, batch, info.loss_scale)
            microbatch_grad(naive, batch, 1.0 / m)
            ids.extend(int(s["id"]) for s in batch)
        if info.is_last:
            out.append({"step": info.step, "ids": ids, "exact": flat_grad(exact), "naive": flat_grad(naive)})
            exact.zero_grad()
            naive.zero_grad()
            ids = []
    return out


def scenario_gradients(rank: int, world: int, store: Any) -> dict[str, Any]:
    """Per-step, per-rank accumulated gradients under reorder-only placement (formed
    micro-batches kept) and under sample-level balancing (a token budget)."""
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader

    shard = dataset()[rank::world]

    def chan(name: str) -> GlooChannel:
        return GlooChannel.from_store(store, rank, world, prefix=f"youmu/test/grad-{name}", timeout=30)

    units = [shard[k:k + 4] for k in range(0, len(shard), 4)]  # arrival-order micro-batches
    reorder = BalancedLoader(iter(units), num_microbatches=3, reorder_only=True, method="kk", id_fn=_sid,
                             channel=chan("reorder"), prefetch=0)
    budget = BalancedLoader(iter(shard), num_microbatches=3, token_budget=6000, capacity=1600, cost="llama-12b",
                            id_fn=_sid, channel=chan("budget"), prefetch=0)
    return {"reorder": _train(reorder, 3), "budget": _train(budget, 3),
            "reorder_units": [sorted(int(s["id"]) for s in u) for u in units]}


def _resume_run(rank: int, world: int, store: Any, mode: str, stop_after: int, tag: str,
                demote: int | None = None) -> dict[str, Any]:
    import pickle

    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader
    from youmu.torch import MapStream

    data = dataset()

    def make(name: str, prefetch: int) -> BalancedLoader:
        # "state": a stateful youmu source (this rank's indices i % world == rank);
        # "replay": a fresh list shard
        src = MapStream(data, rank=rank, world_size=world) if mode == "state" else data[rank::world]
        return BalancedLoader(src, num_microbatches=3, token_budget=6000, capacity=1600, cost="llama-12b",
                              id_fn=_sid, prefetch=prefetch,
                              channel=GlooChannel.from_store(store, rank, world, prefix=f"youmu/test/rs-{tag}-{name}",
                                                             timeout=30))

    def key(info: Any) -> tuple:
        return (info.step, info.microbatch, info.sample_ids, info.is_padding, info.loss_scale, info.fingerprint)

    full = [key(i) for _, i in make("full", 0)]
    first = make("first", 1)
    head = []
    for _, info in first:
        head.append(key(info))
        if len(head) == stop_after:
            break
    state = pickle.loads(pickle.dumps(first.state_dict()))
    first.close()
    saved_mode = state["mode"]
    if rank == demote:
        # this rank's sources could not save their states (a replay-mode state): every
        # rank must then replay, the others' source states notwithstanding
        state = {k: v for k, v in state.items() if k not in ("streams", "carry", "next_index")}
        state["mode"] = "replay"
    second = make("second", 0)
    second.load_state_dict(state)
    tail = [key(i) for _, i in second]
    return {"full": full, "head": head, "tail": tail, "mode": saved_mode,
            "carry": len(state.get("carry", []))}


def scenario_resume(rank: int, world: int, store: Any) -> dict[str, Any]:
    """Interrupted + resumed runs against the uninterrupted one, in both resume modes,
    and a resume that only some ranks load (must fail on every rank, not hang)."""
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader

    out: dict[str, Any] = {"runs": []}
    for mode, stop_after, demote in (("state", 4, None), ("state", 9, None), ("replay", 7, None), ("state", 5, 1)):
        out["runs"].append(_resume_run(rank, world, store, mode, stop_after, f"{mode}{stop_after}", demote))
    shard = dataset()[rank::world]
    lone = BalancedLoader(shard, num_microbatches=2, global_batch_size=16, id_fn=_sid, prefetch=0,
                          channel=GlooChannel.from_store(store, rank, world, prefix="youmu/test/rs-lone", timeout=30))
    if rank == 0:
        lone.load_state_dict(dict(lone.state_dict(), step=2, microbatch=1))  # only rank 0 resumes
    start = time.monotonic()
    try:
        next(iter(lone))
        out["lone"] = "no error"
    except ValueError as e:
        out["lone"] = f"ValueError after {time.monotonic() - start:.1f}s: {e}"
    return out


def scenario_extra(rank: int, world: int, store: Any) -> dict[str, Any]:
    """Resume and gradient scenarios in one world (one spawn of the ranks)."""
    return {"resume": scenario_resume(rank, world, store), "gradients": scenario_gradients(rank, world, store)}


# ----------------------------------------------------------------------------------------
# resume on another topology (youmu.merge_states)
# ----------------------------------------------------------------------------------------
def scenario_resize(rank: int, world: int, store: Any, workers: int, merged: Any, stop_steps: int | None,
                    tag: str) -> dict[str, Any]:
    """One job of a chain: a BalancedLoader over a StatefulDataLoader (``workers``
    processes) over this rank's MapStream shard, resumed from ``merged`` (a merged
    state of the previous job), run ``stop_steps`` steps (None: to the end); returns
    each step's delivered sample ids and the state at the stop."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader
    from youmu.torch import MapStream

    ds = MapStream(dataset(), rank=rank, world_size=world, run=4)
    dl = StatefulDataLoader(ds, batch_size=None, num_workers=workers,
                            multiprocessing_context="fork" if workers else None)
    loader = BalancedLoader(dl, num_microbatches=2, global_batch_size=16, capacity=1500, id_fn=_sid, prefetch=0,
                            channel=GlooChannel.from_store(store, rank, world, prefix=f"youmu/test/rsz-{tag}",
                                                           timeout=30))
    if merged is not None:
        loader.load_state_dict(merged)
    steps: list[tuple[int, list[int]]] = []
    ids: list[int] = []
    for batch, info in loader:
        if not info.is_padding:
            ids.extend(int(s["id"]) for s in batch)
        if info.is_last:
            steps.append((info.step, ids))
            ids = []
            if stop_steps is not None and len(steps) == stop_steps:
                break
    state = loader.state_dict()
    loader.close()
    return {"steps": steps, "state": state}
