"""Online dynamic batching (ODB): batch shape, alignment cost, exchanged bytes.

One run, three phases:

1. **Batch shape** (W=4, real DynamicBatchLoader over Gloo in spawned ranks, buffer
   1024): the ShareGPT4o length proxy (log-normal(ln 977, 0.934) truncated to
   [16, 12110], N=54,424, fitted to ODB, Table 10) at L_max 12288 and 4096, against fixed random batches
   ("Standard") of 1, 2, 4, 8 samples per rank. The W=8 figure (ODB's setting) comes
   from the pure simulation, which the test suite shows to equal the real loader batch for
   batch.
2. **Alignment cost**: per-round exchange + alignment time in the same W=4 runs, and its
   share of a simulated 100 ms training step (the trainer sleeps 100 ms per step for the
   first ``--sleep-steps`` steps; the time the trainer waits for data is measured too).
3. **Exchanged bytes** at W=8, buffer 1024: bytes of the primary all_gather per round,
   against ``(2 + 2*buffer) * W * 8``.

    python benches/bench_odb.py               # ~2 minutes on 2 cores
    python benches/bench_odb.py --quick       # 8,192 samples, 20 timed steps, no W=8 run (~30 s)
    python benches/bench_odb.py --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # workloads shared with the tests

from synthetic import proxy_lengths  # noqa: E402

from youmu.batching.algo.alignment import message_bytes  # noqa: E402
from youmu.batching.algo.simulation import fixed_batch_padding, simulate  # noqa: E402

PAPER = {  # ShareGPT4o, ODB rows of ODB, Tables 13/14 (W=8): samples/update, padding %
    12288: (52.82, 0.9),
    4096: (20.01, 0.4),
}
INDEPENDENT = {12288: (53.6, 1.22), 4096: (19.1, 0.31)}  # an independent simulation of the same proxy


class Lengths:
    """Map-style dataset of light samples: the benchmark measures batching, not collate."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> tuple[int, int]:
        return i, self.lengths[i]


def _len(s: tuple[int, int]) -> int:
    return s[1]


def _collate(samples: list[tuple[int, int]]) -> int:
    return len(samples)


def _rank_main(rank: int, world: int, port: int, q: Any, cfg: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from youmu.batching import DynamicBatchLoader

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    try:
        lengths = proxy_lengths("sharegpt4o", cfg.get("n"))
        out: dict[str, Any] = {}
        for budget in cfg["budgets"]:
            loader = DynamicBatchLoader(
                Lengths(lengths), token_budget=budget, length_fn=_len, collate_fn=_collate,
                pool_size=cfg["buffer"], num_workers=0, timeout=300,
            )
            t0 = time.perf_counter()
            waits = []
            steps = 0
            it = iter(loader)
            while True:
                w0 = time.perf_counter()
                try:
                    next(it)
                except StopIteration:
                    break
                waits.append(time.perf_counter() - w0)
                steps += 1
                if steps <= cfg["sleep_steps"]:
                    time.sleep(cfg["step_s"])  # a simulated training step
            it.wait_finished(300)
            s = loader.metrics.summary()
            out[budget] = {
                "summary": s,
                "wall_s": time.perf_counter() - t0,
                # steady state: skip the first step (it waits for the first buffer to fill)
                "wait_during_sleep_s": sum(waits[1 : cfg["sleep_steps"]]),
                "sleep_steps": min(cfg["sleep_steps"], steps) - 1,
                "exchange_per_round_ms": [1000 * s["exchange_s"] / max(s["rounds"], 1)],
                "rounds": s["rounds"],
            }
        # raw all_gather latency of one round's message, all ranks ready (no waiting for fills)
        from youmu.batching.algo.alignment import message_length
        from youmu.distributed import GlooChannel

        ch = GlooChannel.from_default_group(timeout=300)
        row = [0] * message_length(cfg["buffer"])
        lat = []
        for _ in range(cfg.get("latency_reps", 50)):
            ch.barrier()
            t = time.perf_counter()
            ch.all_gather_rows(row)
            lat.append(time.perf_counter() - t)
        out["allgather_ms"] = 1000 * statistics.median(lat)
        q.put((rank, out))
    finally:
        dist.destroy_process_group()


def _world(world: int, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, q, cfg)) for r in range(world)]
    for p in procs:
        p.start()
    res = dict(q.get(timeout=1800) for _ in procs)
    for p in procs:
        p.join(60)
    return [res[r] for r in range(world)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--buffer", type=int, default=1024)
    ap.add_argument("--sleep-steps", type=int, default=60, help="steps with a simulated 100 ms training step")
    ap.add_argument("--quick", action="store_true",
                    help="8,192 samples of the proxy, 20 simulated training steps, no W=8 real-loader run")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.quick:
        args.sleep_steps = min(args.sleep_steps, 20)
    n = 8192 if args.quick else None
    report: dict[str, Any] = {"buffer": args.buffer, "cpus": os.cpu_count(), "quick": args.quick}
    lengths = proxy_lengths("sharegpt4o", n)
    N = len(lengths)
    print(f"ShareGPT4o proxy: N={N}, mean {statistics.mean(lengths):.0f}, median {statistics.median(lengths):.0f}, "
          f"max {max(lengths)}, CV {statistics.pstdev(lengths) / statistics.mean(lengths):.2f}")

    # -- 1+2: real loader, W=4 -----------------------------------------------------------------
    W = 4
    budgets = [12288, 4096]
    t0 = time.perf_counter()
    per_rank = _world(W, {"budgets": budgets, "buffer": args.buffer, "sleep_steps": args.sleep_steps, "step_s": 0.1,
                          "n": n})
    print(f"\n[W=4 real loader, buffer {args.buffer}] ({time.perf_counter() - t0:.0f}s)")
    print("| method | L_max / bs | samples/update (global) | samples/step/rank | padding | rounds | steps/round | "
          "grouping+alignment ms/round | all_gather ms | share of a 100 ms step | trainer data wait during 100 ms steps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    report["odb_w4"] = {}
    gather_ms = statistics.median(r["allgather_ms"] for r in per_rank)
    for budget in budgets:
        sums = [r[budget]["summary"] for r in per_rank]
        steps = sums[0]["steps"]
        samples = sum(s["samples"] for s in sums)
        real = sum(s["real_tokens"] for s in sums)
        padded = sum(s["padded_tokens"] for s in sums)
        spu = samples / steps
        pad = 1 - real / padded
        compute_ms = max(s["compute_ms_per_round"] for s in sums)  # the slowest rank
        steps_per_round = steps / max(sums[0]["emit_rounds"], 1)
        share = (compute_ms + gather_ms) / (steps_per_round * 100.0)
        wait = sum(r[budget]["wait_during_sleep_s"] for r in per_rank) / W
        slept = per_rank[0][budget]["sleep_steps"] * 0.1
        assert samples == N, (samples, N)  # join mode: every sample exactly once
        report["odb_w4"][budget] = dict(samples_per_update=spu, padding=pad, compute_ms_per_round=compute_ms,
                                        allgather_ms=gather_ms, steps_per_round=steps_per_round,
                                        share_of_100ms_step=share, data_wait_share=wait / slept, steps=steps,
                                        rounds=sums[0]["rounds"], bytes_per_round=sums[0]["bytes_per_round"],
                                        exchange_ms_incl_wait=statistics.mean(s["exchange_ms_per_round"] for s in sums))
        print(f"| ODB | {budget} | {spu:.2f} | {spu / W:.2f} | {100 * pad:.2f}% | {sums[0]['rounds']} | "
              f"{steps_per_round:.0f} | {compute_ms:.2f} | {gather_ms:.2f} | {100 * share:.3f}% | "
              f"{100 * wait / slept:.2f}% of {slept:.1f}s |")
    for bs in (1, 2, 4, 8):
        pad = fixed_batch_padding(lengths, bs, seed=2)
        report.setdefault("standard", {})[bs] = dict(samples_per_update=bs * W, padding=pad)
        print(f"| Standard | bs={bs} | {bs * W} | {bs} | {100 * pad:.2f}% | | | | | | |")

    # -- W=8, ODB's setting, via the simulation (batch-for-batch equal to the loader) --------
    print(f"\n[W=8 simulation, buffer {args.buffer}] vs ODB, Tables 13/14 and an independent model of the proxy")
    print("| L_max | samples/update | ODB | diff | independent | padding | ODB | independent |")
    print("|---|---|---|---|---|---|---|---|")
    report["odb_w8_sim"] = {}
    for budget in budgets:
        res = simulate(lengths, 8, budget, args.buffer)
        spu, pad = res.samples_per_step, res.padding_ratio
        p_spu, p_pad = PAPER[budget]
        n_spu, n_pad = INDEPENDENT[budget]
        report["odb_w8_sim"][budget] = dict(samples_per_update=spu, padding=pad)
        print(f"| {budget} | {spu:.2f} | {p_spu} | {100 * (spu - p_spu) / p_spu:+.1f}% | {n_spu} | {100 * pad:.2f}% | "
              f"{p_pad}% | {n_pad}% |")

    # -- 3: exchanged bytes at W=8 -------------------------------------------------------------------
    if args.quick:
        if args.json:
            args.json.write_text(json.dumps(report, indent=1, default=str))
        return
    t0 = time.perf_counter()
    per_rank8 = _world(8, {"budgets": [12288], "buffer": args.buffer, "sleep_steps": 0, "step_s": 0.0,
                           "n": 8 * 3 * args.buffer})
    s8 = [r[12288]["summary"] for r in per_rank8]
    expected = message_bytes(8, args.buffer)
    primary = s8[0]["rounds"] * expected
    second = s8[0]["exchange_bytes"] - primary
    print(f"\n[W=8 real loader, buffer {args.buffer}, {8 * 3 * args.buffer} samples] ({time.perf_counter() - t0:.0f}s)")
    print(f"primary all_gather per round: {expected:,} B = (2 + 2*{args.buffer}) * 8 * 8 "
          f"({expected / 1024:.1f} KiB); rounds {s8[0]['rounds']}, total {s8[0]['exchange_bytes']:,} B "
          f"(of which {second:,} B in {s8[0]['second_gathers']} exact-mode second gathers of T_grp*W*8 B); "
          f"all_gather latency {statistics.median(r['allgather_ms'] for r in per_rank8):.2f} ms, "
          f"grouping+alignment {max(s['compute_ms_per_round'] for s in s8):.2f} ms/round")
    report["w8_bytes"] = dict(per_round_primary=expected, rounds=s8[0]["rounds"], total=s8[0]["exchange_bytes"],
                              second_gathers=s8[0]["second_gathers"],
                              allgather_ms=statistics.median(r["allgather_ms"] for r in per_rank8))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
