"""Every stage against its own limit, as a picture for the documentation
(docs/benchmarks.md): one bar per stage measured by ``limits.py``, its ratio to its limit in
CPU seconds (the steady figure on a shared machine; wall as a dot beside it), a line at
1.0 and each stage's target; given several runs' JSON, the bar is their median and a
whisker their range. Stages whose limit is a ceiling (the memory cap, the paper's
padding) are better below their target; the others above it.

    python benches/limits.py --quick --json benches/limits.json     # ~2.5 min on 2 shared cores
    python benches/limits.py --quick --json benches/limits-2.json   # a second run: its spread
    python benches/plot_limits.py --json benches/limits.json benches/limits-2.json --out docs/img/limits.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
#: What the ratio of a stage whose limit is not a rate is taken against.
OF = {"memory budget": "memory: RSS / 1.5× budget", "memory, a page over the budget": "a page over it: RSS / 2× page", "ODB padding": "ODB padding / paper's 1 %"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, nargs="+", default=[HERE / "limits.json"],
                    help="written by limits.py --json; several runs: the bar is their median, the whisker their range")
    ap.add_argument("--out", type=Path, default=Path("docs/img/limits.png"))
    a = ap.parse_args()
    runs = [json.loads(p.read_text()) for p in a.json]
    by_key: dict[str, list[dict]] = {}
    for run in runs:
        for s in run["stages"]:
            by_key.setdefault(s["key"], []).append(s)
    if not by_key:
        raise SystemExit(f"{', '.join(map(str, a.json))}: no measured stage to draw")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 0.55 * len(by_key) + 1.4))
    ys = list(range(len(by_key)))[::-1]
    top = 1.4
    for y, (key, seen) in zip(ys, by_key.items()):
        cpu = [s["ratio_cpu"] for s in seen]
        walls = [s["ratio_wall"] for s in seen if s.get("ratio_wall") is not None]
        ratio, target, ceiling = statistics.median(cpu), seen[0]["target"], seen[0]["target_is"] == "max"
        met = ratio <= target if ceiling else ratio >= target
        ax.barh(y, ratio, height=0.6, color="tab:green" if met else "tab:orange")
        if len(cpu) > 1:
            ax.plot([min(cpu), max(cpu)], [y, y], color="black", lw=1)
        ax.plot([target, target], [y - 0.38, y + 0.38], color="black", lw=2)
        if walls:
            ax.plot(statistics.median(walls), y, "o", color="tab:gray", ms=4)
        right = max(max(cpu), target, *walls)
        top = max(top, right * 1.15)
        lo, hi = f"{min(cpu):.2f}", f"{max(cpu):.2f}"
        spread = f" ({lo}–{hi})" if lo != hi else ""
        ax.annotate(f"{ratio:.2f}{spread}", (right, y), textcoords="offset points", xytext=(4, -3), fontsize=8)
    ax.axvline(1.0, color="tab:red", lw=1, ls="--")
    first = [seen[0] for seen in by_key.values()]
    labels = [f"{OF.get(s['key'], s['key'])} ({'≤' if s['target_is'] == 'max' else '≥'} {s['target']:g})"
              for s in first]
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlim(0, top)
    ax.set_xlabel("youmu / its limit (rates per CPU second; grey dot: wall); black tick: target", fontsize=9)
    kind = "limits.py --quick" if all(r.get("quick") for r in runs) else "limits.py"
    loads = sorted(r["load_average"] for r in runs)
    load = f"{loads[0]:.0f}" if len(runs) == 1 else f"{loads[0]:.0f}–{loads[-1]:.0f}"
    what = kind if len(runs) == 1 else f"{kind}, median of {len(runs)} runs (whisker: range)"
    ax.set_title(f"Each stage against its own limit\n{what}, load average {load}", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
