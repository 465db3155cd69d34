"""Mixture figures (issue 4), one run.

    python benches/bench_mixture.py [--data bench-data/tokens-52] [--seconds 10]

* ``locate`` rates through one Python batch call (``FlatMixture``, ``MixtureDataset``);
* streaming throughput of a 50-source ``FlatMixture`` of Parquet sources vs one source
  holding the same files (both page-shuffled through ``YoumuDataset``);
* a weighted ``MixtureDataset`` over the same 50 sources read as map-style rows;
* peak RSS vs number of sources (5, 50), each in its own process.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import emit, run_phase  # noqa: E402

COL = "input_ids"


def files_of(data: str, n: int | None = None) -> list[Path]:
    fs = sorted(Path(data).glob("*.parquet"))
    return fs[:n] if n else fs


def phase_locate() -> None:
    from youmu.mixture import FlatMixture, MixtureDataset

    out = {}
    kids = {f"s{k}": range(1000 + 37 * k) for k in range(50)}
    fm = FlatMixture(kids, seed=1)
    idx = np.random.default_rng(0).integers(0, len(fm), 1_000_000)
    t = time.perf_counter()
    fm.locate_many(idx)
    out["flat_50_random_mps"] = 1.0 / (time.perf_counter() - t)
    for c in (2, 50):
        mix = MixtureDataset({f"s{k}": range(1000) for k in range(c)}, {f"s{k}": 1.0 / (k + 1) for k in range(c)},
                             block_size=2048, length=10**9)
        idx = np.random.default_rng(0).integers(0, 10**9, 1_000_000)
        t = time.perf_counter()
        mix.locate_many(idx)
        out[f"mixture_{c}_random_mps"] = 1.0 / (time.perf_counter() - t)
    emit(out)


def phase_stream(data: str, sources: int, seconds: float, how: str) -> None:
    import youmu
    from youmu.convert import rows
    from youmu.stream import RowStream

    files = files_of(data, sources)
    t = time.perf_counter()
    if how == "single":
        idx = youmu.PageIndex([str(f) for f in files], columns=[COL])
    else:
        fm = youmu.FlatMixture({f.stem: youmu.RowDataset(f, columns=[COL]) for f in files}, seed=0)
        idx = fm.page_index()
    setup = time.perf_counter() - t
    n = toks = 0
    t0 = time.perf_counter()
    for table in RowStream(idx, "page", 8192, seed=0).iter_tables():
        for r in rows(table, "numpy"):
            n += 1
            toks += len(r[COL])
        if time.perf_counter() - t0 > seconds:
            break
    dt = time.perf_counter() - t0
    emit({"how": how, "sources": len(files), "rows_per_s": n / dt, "tokens_per_s": toks / dt, "setup_s": setup})


def phase_weighted(data: str, seconds: float) -> None:
    import youmu

    files = files_of(data, 50)
    kids = {f.stem: youmu.RowDataset(f, columns=[COL]) for f in files}
    mix = youmu.MixtureDataset(kids, {k: 1.0 / (i + 1) for i, k in enumerate(kids)}, block_size=2048, length=10**7)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += len(mix.__getitems__(list(range(n, n + 256))))
    emit({"rows_per_s": n / (time.perf_counter() - t0)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="bench-data/tokens-52")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--phase")
    ap.add_argument("--arg", default="")
    a = ap.parse_args()
    if a.phase == "locate":
        return phase_locate()
    if a.phase == "stream":
        how, n = a.arg.split(",")
        return phase_stream(a.data, int(n), a.seconds, how)
    if a.phase == "weighted":
        return phase_weighted(a.data, a.seconds)
    me, common = __file__, ["--data", a.data, "--seconds", str(a.seconds)]
    loc = run_phase(me, "locate")
    single = run_phase(me, "stream", *common, "--arg", "single,50")
    flat50 = run_phase(me, "stream", *common, "--arg", "flat,50")
    flat5 = run_phase(me, "stream", *common, "--arg", "flat,5")
    weighted = run_phase(me, "weighted", *common)
    print("\n## Mixtures\n")
    print(f"locate, one Python batch call of 10^6 random indices: FlatMixture (50 children) "
          f"{loc['flat_50_random_mps']:.2f} M/s; MixtureDataset 2 children {loc['mixture_2_random_mps']:.2f} M/s, "
          f"50 children {loc['mixture_50_random_mps']:.2f} M/s\n")
    print("| stream (page shuffle, buffer 8192) | sources | rows/s | tokens/s (M) | setup s | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for label, r in [("one source (all files)", single), ("FlatMixture of per-file sources", flat50),
                     ("FlatMixture of per-file sources", flat5)]:
        print(f"| {label} | {r['sources']} | {r['rows_per_s']:,.0f} | {r['tokens_per_s'] / 1e6:.1f} | "
              f"{r['setup_s']:.3f} | {r['peak_rss_mb']:.0f} |")
    print(f"\n50-source FlatMixture / single source: {flat50['rows_per_s'] / single['rows_per_s']:.2f}x rows/s "
          f"(target >= 0.8x); RSS {flat5['peak_rss_mb']:.0f} MB at 5 sources vs {flat50['peak_rss_mb']:.0f} MB at 50")
    print(f"weighted MixtureDataset over the 50 sources as map-style rows (random single-row reads): "
          f"{weighted['rows_per_s']:,.0f} rows/s, peak RSS {weighted['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
