"""Every stage against its own limit, as a picture for the documentation
(docs/benchmarks.md): one bar per stage measured by ``limits.py``, its ratio to its limit in
CPU seconds (the steady figure on a shared machine; wall as a dot beside it), a line at
1.0 and each stage's target. Stages whose limit is a ceiling (the memory cap, the paper's
padding) are better below their target; the others above it.

    python benches/limits.py --quick --json benches/limits.json     # ~2.5 min on 2 shared cores
    python benches/plot_limits.py --json benches/limits.json --out docs/img/limits.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).parent
#: What the ratio of a stage whose limit is not a rate is taken against.
OF = {"memory budget": "memory: RSS / 1.5× budget", "ODB padding": "ODB padding / paper's 1 %"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, default=HERE / "limits.json", help="written by limits.py --json")
    ap.add_argument("--out", type=Path, default=Path("docs/img/limits.png"))
    a = ap.parse_args()
    figures = json.loads(a.json.read_text())
    stages = figures["stages"]
    if not stages:
        raise SystemExit(f"{a.json}: no measured stage to draw")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 0.55 * len(stages) + 1.4))
    ys = list(range(len(stages)))[::-1]
    for y, s in zip(ys, stages):
        ratio, target, ceiling = s["ratio_cpu"], s["target"], s["target_is"] == "max"
        met = ratio <= target if ceiling else ratio >= target
        ax.barh(y, ratio, height=0.6, color="tab:green" if met else "tab:orange")
        ax.plot([target, target], [y - 0.38, y + 0.38], color="black", lw=2)
        if s.get("ratio_wall") is not None:
            ax.plot(s["ratio_wall"], y, "o", color="tab:gray", ms=4)
        ax.annotate(f"{ratio:.2f}", (max(ratio, target, s.get("ratio_wall") or 0), y), textcoords="offset points", xytext=(4, -3), fontsize=8)
    ax.axvline(1.0, color="tab:red", lw=1, ls="--")
    labels = [f"{OF.get(s['key'], s['key'])} ({'≤' if s['target_is'] == 'max' else '≥'} {s['target']:g})"
              for s in stages]
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlim(0, max(1.4, max(s["ratio_cpu"] for s in stages) * 1.15))
    ax.set_xlabel("youmu / its limit (rates per CPU second; grey dot: wall); black tick: target", fontsize=9)
    run = "--quick run" if figures.get("quick") else "full run"
    ax.set_title(f"Each stage against its own limit (limits.py, {run}, load average {figures['load_average']:.0f})",
                 fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
