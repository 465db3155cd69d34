"""The padding of online dynamic batching against fixed-size batches, as a plot for the
documentation (docs/guides/odb.md): the same ShareGPT4o length proxy as
``bench_odb.py``, ODB through ``youmu.batching.algo.simulation.simulate`` (which reproduces the
real ``DynamicBatchLoader`` batch for batch: tests/unit/batching/test_batching_distributed.py) at
several token budgets, fixed batches through ``fixed_batch_padding`` at several sizes,
both on W = 4 ranks. Pure Python, no process group: about a minute on 2 cores.

    python benches/plot_odb_padding.py --out docs/img/odb_padding.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # workloads shared with the tests

from synthetic import proxy_lengths  # noqa: E402

from youmu.batching.algo.simulation import fixed_batch_padding, simulate  # noqa: E402

BUDGETS = [2048, 4096, 8192, 12288, 16384]
BATCH_SIZES = [1, 2, 4, 8, 16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("docs/img/odb_padding.png"))
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--buffer", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=None, help="a prefix of the proxy (default: all 54,424)")
    args = ap.parse_args()
    lengths = proxy_lengths("sharegpt4o", args.samples)
    odb = {}
    for budget in BUDGETS:
        res = simulate(lengths, args.world_size, budget, args.buffer)
        odb[budget] = (res.samples_per_step, res.padding_ratio)
    fixed = {bs: fixed_batch_padding(lengths, bs, seed=2) for bs in BATCH_SIZES}
    figures = {"samples": len(lengths), "world_size": args.world_size, "buffer": args.buffer,
               "odb": {b: {"samples_per_update": s, "padding": p} for b, (s, p) in odb.items()},
               "fixed": {bs: {"samples_per_update": bs * args.world_size, "padding": p} for bs, p in fixed.items()}}
    print(json.dumps(figures, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot([s for s, _ in odb.values()], [100 * p for _, p in odb.values()], "o-",
            label="online dynamic batching (token budget)")
    for (s, p), budget in zip(odb.values(), BUDGETS):
        ax.annotate(f"{budget:,}", (s, 100 * p), textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.plot([bs * args.world_size for bs in BATCH_SIZES], [100 * p for p in fixed.values()], "s--",
            label="fixed batches (batch size per rank)")
    for bs, p in fixed.items():
        ax.annotate(f"bs {bs}", (bs * args.world_size, 100 * p), textcoords="offset points", xytext=(4, -12),
                    fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"samples per optimizer step ({args.world_size} ranks)")
    ax.set_ylabel("padding, % of the batch's tokens")
    ax.set_title(f"Padding: ShareGPT4o length proxy, {len(lengths):,} samples", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
