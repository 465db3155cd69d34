"""Vision-language balancing on a virtual clock: encoder + backbone step time under
four plans (MegaScale-Data §7.3's scenarios plus youmu's colocated balancer).

Per step, ``W`` ranks × ``m`` micro-batches; a micro-batch's encoder phase, the
feature all-to-all and its backbone phase synchronise the ranks, so the step takes
``Σ_j max_r encoder(r, j) + Σ_j max_r backbone(r, j)`` (costs in modelled FLOPs:
``vit-2b`` over each image's patches, ``llama-12b`` over merged image tokens + text).

* vanilla — each rank takes a contiguous run of the step's samples, cut into
  equal-count micro-batches (a sharded per-rank loader);
* backbone — balance the samples by backbone cost only; images encoded where their
  sample is;
* hybrid — MegaScale-Data's hybrid balance: the backbone balance plus interleaved
  encoder balancing of each slot's images over every rank
  (:func:`youmu.planning.engine.hybrid.balance_hybrid`);
* colocated — both costs balanced together, images encoded on their sample's rank
  (:func:`youmu.planning.engine.hybrid.balance_colocated`).

The ODB-vs-fixed-batch training comparison on a real model is ``examples/vlm_demo.py``.

    python benches/bench_vlm.py [--steps 20] [--batch 256] [--ranks 8] [--microbatches 4] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # workloads shared with the tests
from workloads import arrival_assignment, coyo_like, navit_like  # noqa: E402

from youmu.planning import CostModel, balance_detailed  # noqa: E402
from youmu.planning.engine.hybrid import balance_colocated, balance_hybrid, module_imbalance  # noqa: E402

VIT = CostModel.from_config("vit-2b")
LLM = CostModel.from_config("llama-12b")
PLANS = ("vanilla", "backbone", "hybrid", "colocated")


def one_step(bb: np.ndarray, enc: np.ndarray, n: int, m: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in PLANS:
        t = time.perf_counter()
        if name in ("vanilla", "backbone"):
            a = arrival_assignment(bb.size, n, m) if name == "vanilla" else balance_detailed(bb, n, m).assignment
            b, e = module_imbalance(bb, enc, a, n, m)
            res = {"step": b.step_time + e.step_time, "bb_max_mean": b.bucket_max_over_mean,
                   "enc_max_mean": e.bucket_max_over_mean}
        elif name == "hybrid":
            h = balance_hybrid(bb, enc, n, m)
            res = {"step": h.step_time, "bb_max_mean": h.backbone.stats.bucket_max_over_mean,
                   "enc_max_mean": h.encoder.bucket_max_over_mean}
        else:
            c = balance_colocated(bb, enc, n, m)
            res = {"step": c.step_time, "bb_max_mean": c.backbone.bucket_max_over_mean,
                   "enc_max_mean": c.encoder.bucket_max_over_mean}
        res["plan_ms"] = 1000 * (time.perf_counter() - t)
        out[name] = res
    return out


def run(workload: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    make = navit_like if workload == "navit" else coyo_like
    w = make(args.steps * args.batch, seed=args.seed, patch_merge=4)
    bb_all, enc_all = LLM.of_lengths(w.backbone), VIT.of_lengths(w.patches)
    rows = []
    for s in range(args.steps):
        sl = slice(s * args.batch, (s + 1) * args.batch)
        rows.append(one_step(bb_all[sl], enc_all[sl], args.ranks, args.microbatches))
    base = sum(r["vanilla"]["step"] for r in rows)
    summary = {}
    for name in PLANS:
        total = sum(r[name]["step"] for r in rows)
        summary[name] = {
            "speedup_vs_vanilla": round(base / total, 3),
            "backbone_max_over_mean": round(float(np.mean([r[name]["bb_max_mean"] for r in rows])), 3),
            "encoder_max_over_mean": round(float(np.mean([r[name]["enc_max_mean"] for r in rows])), 3),
            "plan_ms": round(float(np.mean([r[name]["plan_ms"] for r in rows])), 2),
        }
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256, help="samples per global step")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    result = {"settings": vars(args), "workloads": {}}
    for wl in ("coyo", "navit"):
        res = run(wl, args)
        result["workloads"][wl] = res
        print(f"{wl} ({args.batch} samples/step, {args.ranks} ranks x {args.microbatches} micro-batches)")
        print("| plan | step speed-up vs vanilla | backbone max/mean | encoder max/mean | plan ms |")
        print("|---|---|---|---|---|")
        for name, r in res.items():
            print(f"| {name} | {r['speedup_vs_vanilla']:.2f}x | {r['backbone_max_over_mean']:.3f} | "
                  f"{r['encoder_max_over_mean']:.3f} | {r['plan_ms']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
