"""Planning figures: API time at MegaScale-Data's Table 2 sizes, virtual-clock
step time of vanilla vs balanced batches at 4k/8k/16k context, cost-model fidelity.

    PYTHONPATH=python .venv/bin/python benches/bench_planning.py [--out benches/planning.json] [--quick]

Sections (each prints a markdown table; all numbers go to the JSON file; ``--only``
runs some and updates them in an existing file):

0. ``skew`` — MegaScale-Data's skew setting (Fig. 3: 8 GPUs, EDP=8 for images, DP=4 for
   sequences): coyo-like steps of 128 samples, max/min and max/mean micro-batch cost
   in arrival order vs balanced (greedy, KK).
1. ``api`` — time of ``cost()`` (one vectorised CostModel call over every sample's
   documents: backbone + encoder) and of ``balance()`` on the step's samples, at the
   sizes of Table 2 (Llama-12B + ViT-2B, TP=4, PP=8 → DP=9 at 288 GPUs and 36 at
   1152; BS=72; 8k context). "BS" is ambiguous in MegaScale-Data, so both readings run:
   72 sequences per step (m=8 per rank) and 72 per DP rank. Median of 5 runs.
   Columns: full repack (sample-level, capacity = context), reorder-only placement
   of the packed sequences, and MegaScale-Data's evaluated pipeline: backbone micro-batches
   placed whole + every image balanced over all GPUs (its encoder is data-parallel
   over the world) — the like-for-like comparison with Table 2's ``API:balance``.
2. ``steps`` — the virtual clock: a step costs ``Σ_j max_r cost(r, j)`` (ranks meet on
   every micro-batch, as under PP/CP). DP=9, 8 micro-batches, Llama-12B FLOPs.
   *Unpacked*: each micro-batch holds a fixed number of samples (4), lengths
   log-normal (median 1000, σ=1.5) truncated at the context length — a longer context
   lets the tail through, as in MegaScale-Data's "longer contexts amplify heterogeneity".
   *Packed*: navit-like image–text samples packed next-fit into context-length
   sequences, encoder (ViT-2B) + backbone cost per micro-batch.
   Vanilla: arrival order. Reorder-only: the vanilla micro-batches placed by
   ``balance(reorder_only=True, method="interleave")`` (MegaScale-Data's backbone balance).
   Full: samples re-packed by ``balance(method="greedy")`` (same global batch).
3. ``fidelity`` — fit ``a·Σl² + b·Σl + c`` to measured forward+backward times of one
   small transformer layer on this CPU (per-document causal attention), R² / MAPE,
   and the FLOPs model's shape (one scale factor + intercept) on the same points.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # workloads shared with the tests

from workloads import arrival_assignment, lognormal_lengths, navit_like, next_fit_pack  # noqa: E402

from youmu.planning import CostModel, ModelConfig, balance, balance_detailed, imbalance  # noqa: E402

LLM = CostModel.from_config("llama-12b")
VIT = CostModel.from_config("vit-2b")


def _median_time(fn, reps: int = 5) -> float:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


# --------------------------------------------------------------------------------------
# 1. API time at Table 2 sizes
# --------------------------------------------------------------------------------------
TABLE2 = [  # (case, DP ranks, BS, context, group_size, MegaScale-Data's cost s and balance s)
    ("baseline", 9, 72, 8192, None, 0.004, 0.016),
    ("BS 72->144", 9, 144, 8192, None, 0.006, 0.027),
    ("Seq 8K->16K", 9, 144, 16384, None, 0.012, 0.173),
    ("GPUs 288->1152", 36, 144, 16384, None, 0.107, 0.357),
    ("group 1->2", 36, 144, 16384, 2, 0.106, 0.195),
]


def _step_samples(seqs: int, ctx: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """navit-like samples packed next-fit into `seqs` sequences of `ctx` tokens."""
    w = navit_like(seqs * ctx // 200 + 1000, seed=seed, max_text=ctx, patch_merge=4)
    tok = np.minimum(w.backbone, ctx)
    packs = next_fit_pack(tok, ctx)
    while len(packs) < seqs:  # not enough samples drawn: draw more
        w = navit_like(2 * len(tok), seed=seed, max_text=ctx, patch_merge=4)
        tok = np.minimum(w.backbone, ctx)
        packs = next_fit_pack(tok, ctx)
    packs = packs[:seqs]
    items = np.concatenate(packs)
    return tok[items], w.patches[items], packs


def bench_api(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for reading, per_rank in (("BS = sequences per step", False), ("BS = sequences per DP rank", True)):
        for case, dp, bs, ctx, group, p_cost, p_bal in TABLE2:
            seqs = bs * dp if per_rank else bs
            m = seqs // dp
            if m < 1:
                continue
            tok, patches, packs = _step_samples(seqs, ctx, seed=1)
            # the cost API: backbone (samples as single documents) + encoder (images)
            offsets = np.arange(tok.size + 1)

            def cost() -> np.ndarray:
                return LLM((tok, offsets)) + VIT((patches, offsets))

            c = cost()
            r: dict[str, Any] = {
                "reading": reading, "case": case, "dp": dp, "microbatches": m, "context": ctx,
                "samples": int(tok.size), "group_size": group, "paper_cost_s": p_cost, "paper_balance_s": p_bal,
                "cost_s": _median_time(cost),
            }
            for method in ("greedy", "kk"):
                if quick and method == "kk" and tok.size > 20000:
                    continue
                r[f"balance_{method}_s"] = _median_time(
                    lambda: balance(c, dp, m, method, ctx, sizes=tok, group_size=group, on_overflow="defer"),
                    reps=3 if method == "kk" else 5,
                )
            # reorder-only (MegaScale-Data's backbone balance: micro-batches kept)
            units = np.array([c[k:k + len(p)].sum() for k, p in zip(np.cumsum([0] + [len(p) for p in packs[:-1]]), packs)])
            r["reorder_interleave_s"] = _median_time(lambda: balance(units, dp, m, "interleave", reorder_only=True))
            r["reorder_kk_s"] = _median_time(lambda: balance(units, dp, m, "kk", reorder_only=True, group_size=group))
            # MegaScale-Data's evaluated pipeline ("hybrid"): backbone micro-batches placed
            # whole (no intra-micro-batch balancing) + images balanced over every GPU
            # (the encoder is data-parallel over the world: TP=4 x PP=8 x DP ranks)
            world = dp * 32
            img = VIT((patches, offsets))

            def hybrid() -> None:
                balance(units, dp, m, "interleave", reorder_only=True)
                balance(img, world, m, "greedy", group_size=None if group is None else group * 32)

            r["gpus"] = world
            r["hybrid_s"] = _median_time(hybrid)
            rows.append(r)
            print(f"  api {reading} / {case}: {r['samples']} samples, cost {r['cost_s'] * 1e3:.2f} ms, "
                  f"greedy {r['balance_greedy_s'] * 1e3:.1f} ms", file=sys.stderr)
    return rows


# --------------------------------------------------------------------------------------
# 2. virtual-clock step time
# --------------------------------------------------------------------------------------
def _speedups(vanilla: list[float], other: list[float]) -> float:
    return float(np.mean(vanilla) / np.mean(other))


def bench_steps(quick: bool) -> list[dict[str, Any]]:
    n, m = 9, 8
    steps = 10 if quick else 40
    out = []
    for ctx in (4096, 8192, 16384):
        # unpacked: 4 samples per micro-batch, log-normal lengths truncated at ctx
        per_mb = 4
        per = n * m * per_mb
        tok = lognormal_lengths(per * steps, 1000, 1.5, ctx, seed=7)
        van, reo, full, kk = [], [], [], []
        imb_before, imb_after = [], []
        for s in range(steps):
            t = tok[s * per:(s + 1) * per]
            c = LLM.of_lengths(t)
            v = imbalance(c, arrival_assignment(per, n, m), n, m)
            units = c.reshape(n * m, per_mb).sum(axis=1)  # the vanilla micro-batches, arrival order
            van.append(v.step_time)
            reo.append(imbalance(units, balance(units, n, m, "interleave", reorder_only=True), n, m).step_time)
            g = balance_detailed(c, n, m, "greedy").stats
            full.append(g.step_time)
            kk.append(balance_detailed(c, n, m, "kk").stats.step_time)
            imb_before.append(v.bin_max_over_min)
            imb_after.append(g.bin_max_over_min)
        out.append({
            "setting": "unpacked (4 samples/micro-batch)", "context": ctx, "steps": steps,
            "reorder_only": _speedups(van, reo), "full_greedy": _speedups(van, full), "full_kk": _speedups(van, kk),
            "vanilla_bin_max/min": float(np.mean(imb_before)), "balanced_bin_max/min": float(np.mean(imb_after)),
        })
        # packed: navit-like image-text samples, next-fit into ctx-token sequences
        w = navit_like(n * m * steps * ctx // 150, seed=3, max_text=ctx, patch_merge=4)
        tk = np.minimum(w.backbone, ctx)
        packs = next_fit_pack(tk, ctx)
        van, reo, full = [], [], []
        for s in range(min(steps, len(packs) // (n * m))):
            ps = packs[s * n * m:(s + 1) * n * m]
            units = np.array([LLM.of_lengths(tk[p]).sum() + VIT.of_lengths(w.patches[p]).sum() for p in ps])
            van.append(imbalance(units, arrival_assignment(n * m, n, m), n, m).step_time)
            reo.append(imbalance(units, balance(units, n, m, "interleave", reorder_only=True), n, m).step_time)
            items = np.concatenate(ps)
            ci = LLM.of_lengths(tk[items]) + VIT.of_lengths(w.patches[items])
            res = balance_detailed(ci, n, m, "greedy", ctx, sizes=tk[items], on_overflow="defer")
            full.append(res.stats.step_time if res.deferred.size == 0 else np.nan)
        out.append({
            "setting": "packed VLM (navit-like, ViT-2B + Llama-12B)", "context": ctx, "steps": len(van),
            "reorder_only": _speedups(van, reo), "full_greedy": float(np.mean(van) / np.nanmean(full)),
            "full_kk": None, "vanilla_bin_max/min": None, "balanced_bin_max/min": None,
        })
        print(f"  steps ctx={ctx}: {out[-2]['full_greedy']:.2f}x unpacked, {out[-1]['full_greedy']:.2f}x packed",
              file=sys.stderr)
    return out


# --------------------------------------------------------------------------------------
# 0. MegaScale-Data's skew setting (Fig. 3)
# --------------------------------------------------------------------------------------
def bench_skew(quick: bool) -> list[dict[str, Any]]:
    """coyo-like steps of 128 image-text samples: sequences over DP=4 x 4 micro-batches
    (Llama-12B), images over EDP=8 x 2 (ViT-2B); arrival order vs balanced."""
    from workloads import coyo_like

    seeds = range(5 if quick else 50)
    out = []
    for what, n, m in (("sequences (DP=4 x 4)", 4, 4), ("images (EDP=8 x 2)", 8, 2)):
        acc: dict[str, list[float]] = {}
        for seed in seeds:
            w = coyo_like(128, seed=seed)
            c = LLM.of_lengths(w.backbone) if what.startswith("seq") else VIT.of_lengths(w.patches)
            stats = {"random": imbalance(c, arrival_assignment(c.size, n, m), n, m),
                     "greedy": balance_detailed(c, n, m, "greedy").stats,
                     "kk": balance_detailed(c, n, m, "kk").stats}
            for k, st in stats.items():
                acc.setdefault(f"{k} bin max/min", []).append(st.bin_max_over_min)
                acc.setdefault(f"{k} bin max/mean", []).append(st.bin_max_over_mean)
                acc.setdefault(f"{k} rank max/min", []).append(st.bucket_max_over_min)
        out.append({"what": what, "seeds": len(seeds)} | {k: [float(np.mean(v)), float(np.max(v))] for k, v in acc.items()})
    return out


# --------------------------------------------------------------------------------------
# 3. cost-model fidelity on this CPU
# --------------------------------------------------------------------------------------
def bench_fidelity(quick: bool) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    torch.set_num_threads(1)  # steadier timings on a shared machine
    h, heads, ffn = 128, 4, 512
    layer = torch.nn.ModuleDict({
        "qkv": torch.nn.Linear(h, 3 * h), "o": torch.nn.Linear(h, h),
        "up": torch.nn.Linear(h, ffn), "down": torch.nn.Linear(ffn, h),
    })

    def step(docs: list[int]) -> None:
        s = sum(docs)
        x = torch.randn(s, h, requires_grad=True)
        q, k, v = layer["qkv"](x).view(s, 3, heads, h // heads).unbind(1)
        outs, start = [], 0
        for d in docs:  # per-document causal attention, as a varlen kernel computes it
            sl = slice(start, start + d)
            outs.append(F.scaled_dot_product_attention(q[sl].transpose(0, 1), k[sl].transpose(0, 1),
                                                       v[sl].transpose(0, 1), is_causal=True).transpose(0, 1))
            start += d
        a = layer["o"](torch.cat(outs).reshape(s, h)) + x
        y = layer["down"](F.gelu(layer["up"](a))) + a
        y.sum().backward()

    rng = np.random.default_rng(0)
    shapes = []
    for _ in range(16 if quick else 40):
        k = int(rng.integers(1, 5))
        shapes.append([int(x) for x in rng.integers(64, 1536 if quick else 2048, size=k)])
    step([128])  # warm-up
    # the minimum of 7 runs: on a shared machine other processes only ever add time
    times = []
    for d in shapes:
        best = np.inf
        for _ in range(7):
            t = time.perf_counter()
            step(d)
            best = min(best, time.perf_counter() - t)
        times.append(best)
    fit = CostModel.fit(shapes, times)
    # the FLOPs model's shape: time = k·flops + c
    flops = CostModel.from_config(ModelConfig(hidden=h, num_layers=1, num_heads=heads, ffn_hidden=ffn, gated=False,
                                              vocab_size=0))(shapes)
    x = np.stack([flops, np.ones_like(flops)], axis=1)
    coef, *_ = np.linalg.lstsq(x, np.asarray(times), rcond=None)
    pred = x @ coef
    y = np.asarray(times)
    r2_flops = 1 - float(((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    mape_flops = float(np.mean(np.abs((y - pred) / y)))
    return {"points": len(shapes), "fit": fit.describe(), "flops_model_r2": r2_flops, "flops_model_mape": mape_flops,
            "layer": {"hidden": h, "heads": heads, "ffn": ffn}, "time_range_s": [float(min(y)), float(max(y))]}


# --------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benches/planning.json")
    ap.add_argument("--quick", action="store_true", help="fewer steps and points")
    ap.add_argument("--only", choices=["skew", "api", "steps", "fidelity"], action="append")
    args = ap.parse_args()
    sections = args.only or ["skew", "api", "steps", "fidelity"]
    out = Path(args.out)
    # --only updates its sections in an existing result file
    result: dict[str, Any] = json.loads(out.read_text()) if args.only and out.exists() else {}
    result.update({"machine": platform.processor() or platform.machine(), "python": platform.python_version()})
    if "skew" in sections:
        result["skew"] = bench_skew(args.quick)
        print("\n### MegaScale-Data's skew setting (Fig. 3): mean (max) over steps\n")
        print("| what | arrival max/min | greedy max/min | kk max/min | arrival max/mean | greedy max/mean | "
              "kk max/mean |")
        print("|---|---|---|---|---|---|---|")
        for r in result["skew"]:
            f = lambda k: f"{r[k][0]:.2f} ({r[k][1]:.2f})"  # noqa: E731
            print(f"| {r['what']} | {f('random bin max/min')} | {f('greedy bin max/min')} | {f('kk bin max/min')} | "
                  f"{f('random bin max/mean')} | {f('greedy bin max/mean')} | {f('kk bin max/mean')} |")
    if "api" in sections:
        result["api"] = bench_api(args.quick)
        print("\n### API time at Table 2 sizes (ms; MegaScale-Data's in parentheses)\n")
        print("| BS reading | case | DP x m | samples | cost | full repack greedy | full repack kk | "
              "reorder interleave | reorder kk | MegaScale-Data pipeline |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in result["api"]:
            kk = f"{r['balance_kk_s'] * 1e3:.1f}" if "balance_kk_s" in r else "-"
            print(f"| {r['reading']} | {r['case']} | {r['dp']} x {r['microbatches']} | {r['samples']} | "
                  f"{r['cost_s'] * 1e3:.2f} ({r['paper_cost_s'] * 1e3:g}) | "
                  f"{r['balance_greedy_s'] * 1e3:.1f} ({r['paper_balance_s'] * 1e3:g}) | {kk} | "
                  f"{r['reorder_interleave_s'] * 1e3:.2f} | {r['reorder_kk_s'] * 1e3:.2f} | "
                  f"{r['hybrid_s'] * 1e3:.1f} ({r['paper_balance_s'] * 1e3:g}) |")
    if "steps" in sections:
        result["steps"] = bench_steps(args.quick)
        print("\n### Simulated step time, speed-up over vanilla (MegaScale-Data: 1.71x / 2.63x / 3.09x at 4k / 8k / 16k)\n")
        print("| setting | context | reorder-only | full (greedy) | full (kk) | vanilla bin max/min | balanced bin max/min |")
        print("|---|---|---|---|---|---|---|")
        for r in result["steps"]:
            f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            print(f"| {r['setting']} | {r['context']} | {f(r['reorder_only'])}x | {f(r['full_greedy'])}x | "
                  f"{f(r['full_kk'])}x | {f(r['vanilla_bin_max/min'])} | {f(r['balanced_bin_max/min'])} |")
    if "fidelity" in sections:
        fid = result["fidelity"] = bench_fidelity(args.quick)
        print("\n### Cost-model fidelity (one layer, fwd+bwd on this CPU)\n")
        print(f"fitted a·Σl²+b·Σl+c on {fid['points']} packed shapes: R² = {fid['fit']['r2']:.4f}, "
              f"MAPE = {fid['fit']['mape'] * 100:.1f}%; FLOPs model (scale + intercept): "
              f"R² = {fid['flops_model_r2']:.4f}, MAPE = {fid['flops_model_mape'] * 100:.1f}%")
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
