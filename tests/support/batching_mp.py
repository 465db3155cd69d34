"""Multi-process harness for the batching tests: spawn W ranks on 127.0.0.1 (Gloo),
run a scenario function in each, collect picklable results, with hard timeouts.

Scenario functions live here (module level) so that spawned children can import them.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from synthetic import synthetic_lengths

# Collective and data-stall timeouts of the test loaders and channels. Generous: CI runs
# every multi-process test on 2 shared cores, where a starved rank can stall for tens of
# seconds; still far below the harness and pytest timeouts, so a deadlock fails fast.
# (Failure tests that need a short data stall pass data_timeout instead.)
TIMEOUT = 120

# ------------------------------------------------------------------------------------------
# harness
# ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(
    fn: Callable[..., Any], rank: int, world: int, port: int, q: Any, args: tuple, pg_timeout: float, destroy: bool
) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    # the GPU cells of the seam matrix run their jobs over NCCL, as GPU jobs do (youmu's
    # own collectives then go over the Gloo groups it makes)
    backend = "nccl" if os.environ.get("YOUMU_SEAMS_DEVICE") == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    try:
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
            timeout=datetime.timedelta(seconds=pg_timeout),
        )
        res = fn(rank, world, *args)
        q.put((rank, "ok", res))
    except BaseException as e:  # noqa: BLE001
        q.put((rank, "err", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        try:
            if destroy and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run_world(
    fn: Callable[..., Any],
    world: int,
    *args: Any,
    timeout: float = 120.0,
    pg_timeout: float = TIMEOUT,
    allow_errors: bool = False,
    destroy: bool = True,
) -> list[Any]:
    """Run ``fn(rank, world, *args)`` on ``world`` spawned ranks; results in rank order.

    Raises on a timeout (every child is killed) or, unless ``allow_errors``, when a
    rank raised. With ``allow_errors`` an erroring rank's result is ``("err", text)``
    and a rank that died without reporting is ``("dead", exitcode)``.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, q, args, pg_timeout, destroy)) for r in range(world)]
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
                rank, status, payload = q.get(timeout=min(left, 1.0))
                results[rank] = (status, payload)
            except Exception:  # queue.Empty
                if all(not p.is_alive() for p in procs) and q.empty():
                    time.sleep(0.2)
                    if q.empty():
                        for r, p in enumerate(procs):
                            if r not in results:
                                results[r] = ("dead", p.exitcode)
                        break
        for p in procs:
            p.join(max(deadline - time.monotonic(), 1.0))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    out = []
    for r in range(world):
        status, payload = results[r]
        if status != "ok" and not allow_errors:
            raise AssertionError(f"rank {r} {status}: {payload}")
        out.append(payload if status == "ok" else (status, payload))
    return out


# ------------------------------------------------------------------------------------------
# datasets and helpers
# ------------------------------------------------------------------------------------------


def token_counts(lengths: list[int], base: int = 0) -> list[int]:
    """Loss tokens that differ from the lengths (so token-exactness is really tested)."""
    return [max(n - 7 * ((base + i) % 3), 0) for i, n in enumerate(lengths)]


def uneven_layout(lengths: list[int], world: int, empty_last: bool) -> list[list[int]]:
    """Split ``lengths`` over ranks with weights W, W-1, ..., 1 (the last rank empty if asked)."""
    ranks = world - 1 if empty_last else world
    weights = [ranks - r for r in range(ranks)]
    total = sum(weights)
    out, pos = [], 0
    for r in range(ranks):
        k = len(lengths) - pos if r == ranks - 1 else len(lengths) * weights[r] // total
        out.append(lengths[pos : pos + k])
        pos += k
    if empty_last:
        out.append([])
    return out


class LengthDataset(torch.utils.data.Dataset):
    """Map-style: item i is ``{"id": i, "len": lengths[i], "tok": tokens[i]}``."""

    def __init__(
        self,
        lengths: list[int],
        tokens: list[int] | None = None,
        fail_at: int | None = None,
        delay: float = 0.0,
        stall_at: int | None = None,
    ) -> None:
        self.lengths = lengths
        self.tokens = tokens if tokens is not None else lengths
        self.fail_at = fail_at
        self.delay = delay
        self.stall_at = stall_at

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, int]:
        if self.fail_at is not None and i == self.fail_at:
            raise RuntimeError(f"synthetic preprocessing failure at index {i}")
        if self.stall_at is not None and i == self.stall_at:
            time.sleep(3600)
        if self.delay:
            time.sleep(self.delay)
        return {"id": i, "len": self.lengths[i], "tok": self.tokens[i]}


class RankIterable(torch.utils.data.IterableDataset):
    """Iterable: this rank's own samples, ids unique across ranks; every pass starts over."""

    def __init__(self, per_rank: list[list[int]], rank: int) -> None:
        super().__init__()
        self.per_rank = per_rank
        self.rank = rank
        self.base = sum(len(x) for x in per_rank[:rank])
        self.tokens = token_counts(per_rank[rank], self.base)

    def _item(self, k: int) -> dict[str, int]:
        return {"id": self.base + k, "len": self.per_rank[self.rank][k], "tok": self.tokens[k]}

    def __iter__(self):
        for k in range(len(self.per_rank[self.rank])):
            yield self._item(k)


class StatefulRankIterable(RankIterable):
    """A resumable variant (``state_dict``/``load_state_dict``, like ``YoumuDataset``):
    a pass continues from the saved position."""

    def __init__(self, per_rank: list[list[int]], rank: int) -> None:
        super().__init__(per_rank, rank)
        self.pos = 0

    def __iter__(self):
        while self.pos < len(self.per_rank[self.rank]):
            k = self.pos
            self.pos += 1
            yield self._item(k)
        self.pos = 0

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = int(state["pos"])


def sample_len(s: dict[str, int]) -> int:
    return s["len"]


def sample_tok(s: dict[str, int]) -> int:
    return s["tok"]


def collate_ids(samples: list[dict[str, int]]) -> list[int]:
    return [s["id"] for s in samples]


def empty_batch() -> list[int]:
    """Filler batch for ``uneven="pad"`` on a rank that never had data."""
    return []


def info_row(info: Any) -> dict[str, Any]:
    d = info.as_dict()
    d["sample_indices"] = list(d["sample_indices"])
    return d


def drain(loader: Any, limit: int | None = None) -> tuple[list[tuple[list[int], dict[str, Any]]], Any]:
    """Iterate (at most ``limit`` steps); returns ([(batch ids, info dict)], the iterator)."""
    it = iter(loader)
    out = []
    for batch, info in it:
        out.append((batch, info_row(info)))
        if limit is not None and len(out) >= limit:
            break
    return out, it


def make_loader(rank: int, world: int, cfg: dict[str, Any], channel: Any = None) -> Any:
    from youmu.batching import DynamicBatchLoader

    lengths = synthetic_lengths(cfg["dist"], cfg.get("n", 1000), seed=cfg.get("seed", 0))
    if cfg.get("iterable"):
        cls = StatefulRankIterable if cfg.get("stateful") else RankIterable
        ds: Any = cls(uneven_layout(lengths, world, cfg.get("empty_last", False)), rank)
    else:
        slow = cfg.get("slow") or {}
        ds = LengthDataset(
            lengths,
            token_counts(lengths),
            fail_at=cfg.get("fail_at") if rank == cfg.get("fail_rank") else None,
            delay=slow.get("delay", 0.0) if rank == slow.get("rank") else 0.0,
            stall_at=cfg.get("stall_at") if rank == cfg.get("stall_rank") else None,
        )
    return DynamicBatchLoader(
        ds,
        token_budget=cfg.get("budget", 4096),
        length_fn=sample_len,
        token_count_fn=sample_tok,
        collate_fn=collate_ids,
        pool_size=cfg.get("buffer", 64),
        num_workers=cfg.get("workers", 0),
        join=cfg.get("join", True),
        loss_scaling=cfg.get("loss_scaling", "exact"),
        group=channel,
        timeout=cfg.get("timeout", TIMEOUT),
        data_timeout=cfg.get("data_timeout"),
        seed=cfg.get("seed", 0),
        quota=cfg.get("quota"),
        max_outstanding=cfg.get("max_outstanding"),
        uneven=cfg.get("uneven", "stop"),
        pad_batch=empty_batch if cfg.get("uneven") == "pad" else None,
        # spawned test ranks default to "spawn", which re-imports torch in every worker
        multiprocessing_context=cfg.get("mp_context", "fork") if cfg.get("workers", 0) > 0 else None,
        heartbeat=cfg.get("heartbeat", 0.2),
        # the loader's own default unless a case asks for DistributedSampler's padding
        **({"pad_sampler": cfg["pad_sampler"]} if "pad_sampler" in cfg else {}),
    )


# ------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------


def matrix_scenario(rank: int, world: int, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run several loader configurations in sequence on one channel; log everything."""
    from youmu.distributed import GlooChannel

    channel = GlooChannel.from_default_group(timeout=TIMEOUT)
    results = []
    for cfg in configs:
        loader = make_loader(rank, world, cfg, channel)
        t0 = time.perf_counter()
        steps, it = drain(loader)
        assert it.wait_finished(TIMEOUT), "aligner did not finish"
        results.append(
            {
                "steps": steps,
                "collectives": it.collectives,
                "second_gathers": it.second_gathers,
                "rounds_log": list(it.rounds_log),
                "undelivered_at_stop": it.undelivered_at_stop,
                "max_outstanding": it.metrics.max_outstanding,
                "credits": loader.max_outstanding,
                "summary": it.metrics.summary(),
                "seconds": time.perf_counter() - t0,
            }
        )
    return results


def failure_scenario(rank: int, world: int, cfgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Iterate each configuration until it ends or fails; report what happened."""
    return [_failure_run(rank, world, cfg) for cfg in cfgs]


def _failure_run(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    steps = 0
    try:
        if cfg.get("mismatch_rank") == rank:
            cfg = dict(cfg, budget=cfg.get("budget", 4096) + 1)
        loader = make_loader(rank, world, cfg)
        for _ in loader:
            steps += 1
            if cfg.get("crash_rank") == rank and steps == cfg.get("crash_after", 1):
                os._exit(17)  # a rank dies in the middle of training
            if cfg.get("close_rank") == rank and steps == cfg.get("close_after", 1):
                loader.close()
                return {"error": None, "steps": steps, "seconds": time.perf_counter() - t0, "closed": True}
        return {"error": None, "steps": steps, "seconds": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001
        return {"error": type(e).__name__, "message": str(e), "steps": steps, "seconds": time.perf_counter() - t0}


def early_exit_scenario(rank: int, world: int) -> dict[str, Any]:
    """Join mode, uneven data: rank 1 (less data) leaves as soon as its own data ends,
    without waiting; rank 0 consumes slowly, so rank 1's aligner must keep serving it
    while rank 1's interpreter exits (the loader's exit hook waits for that)."""
    cfg = dict(dist="uniform-wide", iterable=True, buffer=16, max_outstanding=16)
    lengths = synthetic_lengths("uniform-wide", N_EARLY, seed=0)
    layout = [lengths[: N_EARLY - 40], lengths[N_EARLY - 40 :]]
    loader = make_loader(rank, world, cfg)
    loader.dataset = RankIterable(layout, rank)  # rank 0: most of the data, rank 1: 40 samples
    steps = 0
    for _ in loader:
        steps += 1
        if rank == 0:
            time.sleep(0.01)
    if rank == 0:
        loader.wait_finished(TIMEOUT)
    return {"steps": steps}


N_EARLY = 400


# ------------------------------------------------------------------------------------------
# interpreter exit: a training script run as a plain process (see test_batching_shutdown)
# ------------------------------------------------------------------------------------------
EXIT_CASES = ("break", "break-workers", "tail", "stuck-peer")


def exit_case_main(argv: list[str]) -> None:
    """``rank world port case``: one rank of a training script that leaves its loader
    running and simply ends (no close(), no wait_finished(), no destroy):

    * ``break`` / ``break-workers``: both ranks break out of the loop after 4 steps
      (without / with DataLoader worker processes);
    * ``tail``: join mode, rank 1 has no data and exits at once while rank 0 still
      consumes slowly; the exit hook's wait for the tail (``timeout`` = 3 s) runs out;
    * ``stuck-peer``: rank 0's aligner hangs in ``collate_fn`` for 20 s, so rank 1, which
      broke out, exits while its last collective still waits for rank 0; rank 0 wants
      the whole epoch and fails at its next exchange.

    Prints ``STEPS <n>`` when the loop ends; errors propagate (non-zero exit code);
    ``UNSETTLED ...`` if the exit hook returned while a loader thread still ran.
    """
    rank, world, port, case = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    watch = _watch_exit()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT),
    )
    cfg: dict[str, Any] = dict(dist="uniform-wide")
    if case == "break-workers":
        cfg.update(workers=1)
    elif case == "tail":
        cfg.update(iterable=True, empty_last=True, timeout=3)
    elif case == "stuck-peer":
        cfg.update(timeout=60)
    loader = make_loader(rank, world, cfg)
    watch.channel = loader.channel
    if case == "stuck-peer" and rank == 0:
        calls = [0]

        def hanging_collate(samples: list[dict[str, int]]) -> list[int]:
            calls[0] += 1
            if calls[0] == 41:
                time.sleep(20)
            return collate_ids(samples)

        loader.collate_fn = hanging_collate
    steps = 0
    for _ in loader:
        steps += 1
        if case == "tail" and rank == 0:
            time.sleep(0.05)  # rank 0's tail outlasts rank 1's 3 s wait at exit
        # in stuck-peer, rank 0 wants the whole epoch: its next exchange after the hang
        # finds rank 1 gone
        if steps == 4 and (case.startswith("break") or (case == "stuck-peer" and rank == 1)):
            break
    print(f"STEPS {steps}", flush=True)


class _ExitWatch:
    """Reports, at interpreter exit, youmu threads that are still running (neither ended
    nor parked in a collective) once the loader's exit hook has returned.

    ``report`` runs as an ``atexit`` function registered before the loader's hook, so it
    runs after it. ``__del__`` runs during module teardown, when the interpreter is
    already finalising: it waits (releasing the GIL) while such a thread runs, the way
    a slow teardown or a loaded machine gives one time to return from native code into
    the finalising interpreter, which aborts the process.
    """

    def __init__(self) -> None:
        import threading

        self.channel: Any = None
        self._threads = threading.enumerate
        self._sleep = time.sleep
        self._monotonic = time.monotonic

    def running(self) -> list[str]:
        parked = self.channel is not None and self.channel.parked.is_set()
        return [
            t.name for t in self._threads()
            if t.is_alive() and (t.name.startswith("youmu-fetcher") or (t.name.startswith("youmu-aligner") and not parked))
        ]

    def report(self) -> None:
        left = self.running()
        if left:
            print(f"UNSETTLED at exit: {left}", flush=True)

    def __del__(self) -> None:
        deadline = self._monotonic() + 15
        while self.running() and self._monotonic() < deadline:
            self._sleep(0.05)


_EXIT_WATCH: Any = None


def _report_at_exit() -> None:
    # a module function, so that the watch itself is dropped with this module's globals
    # (during the interpreter's module teardown), not kept alive by the atexit registry
    if _EXIT_WATCH is not None:
        _EXIT_WATCH.report()


def _watch_exit() -> _ExitWatch:
    """Install the :class:`_ExitWatch` of this process (before any loader exists)."""
    import atexit

    global _EXIT_WATCH
    _EXIT_WATCH = _ExitWatch()
    atexit.register(_report_at_exit)  # before the loader registers its hook: runs after it
    return _EXIT_WATCH


def busy_exit_main(argv: list[str]) -> None:
    """``rank world port``: rank 1 breaks out after 4 steps while its aligner is inside an
    8 s native call (a ``collate_fn`` waiting in C++ with the GIL released, as a tokenizer
    or a torch op on a starved CPU may), and its interpreter exits without ``close()``.

    The exit hook must not return while that thread runs: it has to wait until the
    thread ends (or parks in a collective). Prints ``STEPS <n>``; ``UNSETTLED ...`` if
    the hook returned early (then module teardown usually aborts the process with
    "terminate called without an active exception").
    """
    import threading

    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    watch = _watch_exit()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT),
    )
    # rank 1 gives up on its peer after a 3 s close round at exit; rank 0 (which hosts the
    # store rank 1's collate waits on) waits for rank 1 as long as it needs
    loader = make_loader(rank, world, dict(dist="uniform-wide", timeout=3 if rank == 1 else 60))
    watch.channel = loader.channel
    started = threading.Event()
    if rank == 1:
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=datetime.timedelta(seconds=30),
                              wait_for_workers=False)
        calls = [0]

        def slow_collate(samples: list[dict[str, int]]) -> list[int]:
            calls[0] += 1
            if calls[0] == 6:
                started.set()
                try:
                    store.wait(["youmu-test-never-set"], datetime.timedelta(seconds=8))
                except Exception:  # noqa: BLE001 - the wait times out by design
                    pass
            return collate_ids(samples)

        loader.collate_fn = slow_collate
    steps = 0
    for _ in loader:
        steps += 1
        if rank == 1 and steps == 4:
            assert started.wait(60), "collate call 6 never started"
            break
    print(f"STEPS {steps}", flush=True)


def channel_scenario(rank: int, world: int, port: int) -> dict[str, Any]:
    """A GlooChannel with its own TCPStore rendezvous (no use of the default group)."""
    from youmu.distributed import GlooChannel

    ch = GlooChannel.from_tcp_store("127.0.0.1", port, rank, world, host_store=(rank == 0), timeout=TIMEOUT)
    rows = ch.all_gather_rows([rank, 10 * rank, -rank])
    tensors = ch.all_gather_int64(torch.arange(3) + rank)
    ch.barrier()
    stats = (ch.collectives, ch.bytes_gathered)
    ch.close()
    try:
        ch.all_gather_rows([1])
        closed_error = None
    except Exception as e:  # noqa: BLE001
        closed_error = type(e).__name__
    return {"rows": rows, "tensors": [t.tolist() for t in tensors], "stats": stats, "closed_error": closed_error}


def resume_scenario(rank: int, world: int, cfg: dict[str, Any], stop_after: int) -> dict[str, Any]:
    """Uninterrupted epoch vs (``stop_after`` steps, state_dict, new loader, rest)."""
    import pickle

    from youmu.distributed import GlooChannel

    channel = GlooChannel.from_default_group(timeout=TIMEOUT)
    full, it = drain(make_loader(rank, world, cfg, channel))
    assert it.wait_finished(TIMEOUT)
    first_loader = make_loader(rank, world, cfg, channel)
    first, it1 = drain(first_loader, limit=stop_after)
    state = pickle.loads(pickle.dumps(first_loader.state_dict()))  # as a checkpoint would
    first_loader.close()
    assert it1.wait_finished(TIMEOUT)
    second_loader = make_loader(rank, world, cfg, channel)
    second_loader.load_state_dict(state)
    rest, it2 = drain(second_loader)
    assert it2.wait_finished(TIMEOUT)
    return {"full": full, "first": first, "rest": rest, "done": state["done"], "replay": len(state["replay"])}


# ------------------------------------------------------------------------------------------
# a tiny float64 language model for the loss-scaling tests (B9, B14)
# ------------------------------------------------------------------------------------------
VOCAB = 23


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 6).double()
        self.out = torch.nn.Linear(6, VOCAB).double()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(ids)))


def lm_lengths(dist: str, n: int) -> list[int]:
    return [2 + x // 48 for x in synthetic_lengths(dist, n, seed=1)]


class LMDataset(torch.utils.data.Dataset):
    """Deterministic token sequences; the first ``i % 4`` labels are masked (prompt)."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(1000 + i)
        ids = torch.randint(0, VOCAB, (self.lengths[i],), generator=g)
        labels = ids.clone()
        labels[: i % 4] = -100
        return {"id": i, "input_ids": ids, "labels": labels}


class LMRankIterable(torch.utils.data.IterableDataset):
    def __init__(self, lengths: list[int], world: int, rank: int) -> None:
        super().__init__()
        self.inner = LMDataset(lengths)
        layout = uneven_layout(list(range(len(lengths))), world, empty_last=True)
        self.mine = layout[rank]

    def __iter__(self):
        for i in self.mine:
            yield self.inner[i]


def lm_len(s: dict[str, Any]) -> int:
    return int(s["input_ids"].shape[0])


def lm_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    n = max(lm_len(s) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.long)
    labels = torch.full((len(samples), n), -100, dtype=torch.long)
    for k, s in enumerate(samples):
        ids[k, : lm_len(s)] = s["input_ids"]
        labels[k, : lm_len(s)] = s["labels"]
    return {"ids": [s["id"] for s in samples], "input_ids": ids, "labels": labels}


def lm_pad_batch() -> dict[str, Any]:
    return lm_collate([LMDataset([3])[0]])


def token_loss_sum(model: torch.nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
    logits = model(batch["input_ids"])
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return loss, int((labels != -100).sum())


def reference_grad(dataset: LMDataset, ids: list[int]) -> torch.Tensor:
    """Single-process gradient of the per-token mean loss over ``ids``."""
    model = TinyLM()
    loss, t = token_loss_sum(model, lm_collate([dataset[i] for i in ids]))
    (loss / t).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def ddp_scenario(rank: int, world: int, cfgs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Train steps (no optimizer update) with DDP; record the averaged gradient per step."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from youmu.distributed import GlooChannel

    channel = GlooChannel.from_default_group(timeout=TIMEOUT)
    model = DDP(TinyLM())
    return [_ddp_run(rank, world, cfg, model, channel) for cfg in cfgs]


def _ddp_run(rank: int, world: int, cfg: dict[str, Any], model: Any, channel: Any) -> list[dict[str, Any]]:
    from youmu.batching import DynamicBatchLoader, join_uneven, label_token_count

    lengths = lm_lengths(cfg["dist"], cfg.get("n", 120))
    out = []
    for mode in cfg["modes"]:
        ds: Any = LMRankIterable(lengths, world, rank) if cfg.get("iterable") else LMDataset(lengths)
        loader = DynamicBatchLoader(
            ds, token_budget=cfg.get("budget", 96), length_fn=lm_len, collate_fn=lm_collate,
            token_count_fn=label_token_count(), pool_size=cfg.get("buffer", 16), num_workers=0,
            loss_scaling=mode, group=channel, timeout=TIMEOUT, heartbeat=0.2, uneven=cfg.get("uneven", "stop"),
            pad_batch=lm_pad_batch,
        )
        rows = []
        use_join = cfg.get("join_ctx", False)
        ctx = join_uneven([model]) if use_join else _null()
        with ctx:
            for batch, info in loader:
                model.zero_grad(set_to_none=False)
                loss_sum, t = token_loss_sum(model, batch)
                mean = loss_sum / t if t > 0 else loss_sum * 0.0
                (mean * info.loss_scale).backward()
                grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
                rows.append({
                    "mode": mode, "step": info.step, "ids": [] if info.is_padding else batch["ids"],
                    "grad": grad.tolist(), "exact": info.tokens_exact,
                    "padding": info.is_padding, "active": info.active_ranks, "t": t, "T": info.global_num_tokens,
                })
        out.extend(rows)
        assert loader._current.wait_finished(TIMEOUT)
    return out


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


# ------------------------------------------------------------------------------------------
# YoumuDataset under torch.distributed (tests/unit/streams/test_dataset_workers.py)
# ------------------------------------------------------------------------------------------
def youmu_dataset_scenario(rank: int, world: int, path: str) -> dict[str, Any]:
    """A YoumuDataset built without rank/world_size inside an initialised group."""
    from youmu.torch import YoumuDataset

    ds = YoumuDataset(path, buffer_size=150, seed=5, output="python")
    return {"rank": ds.rank, "world": ds.world_size, "ids": [r["id"] for r in ds]}
