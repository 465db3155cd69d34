"""Mixture figures, one run; every phase in its own process (own peak RSS).

    python benches/bench_mixture.py [--data bench-data/tokens-52] [--seconds 10] [--reps 2]

* ``locate`` rates through one Python batch call of 10^6 random indices
  (``FlatMixture.locate_many``, ``MixtureDataset.locate_many``), wall clock and per
  core (process CPU time, which is what a loaded machine does not distort);
* streaming throughput of the same Parquet files as one source, as a ``FlatMixture``
  of per-file sources, and as a ``FlatMixture`` of 5 grouped sources (page shuffle
  through ``RowStream``; a FlatMixture of Parquet sources is one concatenated page
  space), best of ``--reps`` interleaved runs;
* memory vs number of sources: index bytes and RSS after building 1 / 5 / all-file
  sources over the same files, and the RSS of a 10,000-child ``MixtureDataset``;
* a weighted ``MixtureDataset`` over the per-file sources read as map-style rows:
  uniform child orders with single-row reads, and chunk-local orders with a small
  page cache per child (in process, and through ``MixtureStream`` with 2 workers).

The pure-Rust per-core rates come from
``cargo test --release --lib mixture_rates -- --ignored --nocapture``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import emit, peak_rss_mb, run_phase  # noqa: E402

COL = "input_ids"


def files_of(data: str) -> list[Path]:
    fs = sorted(Path(data).glob("*.parquet"))
    if not fs:
        raise SystemExit(f"no Parquet files in {data} (generate them with benches/datagen.py)")
    return fs


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sources(files: list[Path], how: str):
    """The same files as one source, per-file sources, or 5 grouped sources."""
    import youmu

    if how == "single":
        return youmu.PageIndex([str(f) for f in files], columns=[COL])
    if how == "flat":
        return youmu.FlatMixture({f.stem: youmu.RowDataset(f, columns=[COL]) for f in files}, seed=0)
    groups = np.array_split(np.arange(len(files)), 5)
    return youmu.FlatMixture({f"g{k}": youmu.RowDataset([str(files[i]) for i in g], columns=[COL])
                              for k, g in enumerate(groups)}, seed=0)


def timed(fn, n: int) -> tuple[float, float]:
    """(wall M/s, per-core M/s) of `fn()` handling n items, best of 3."""
    best = (0.0, 0.0)
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        fn()
        dt, dc = time.perf_counter() - t, time.process_time() - c
        best = max(best, (n / dt / 1e6, n / max(dc, 1e-9) / 1e6))
    return best


def phase_locate() -> None:
    import youmu
    from youmu.mixture import FlatMixture, MixtureDataset

    n = 1_000_000
    out: dict = {"threads": youmu.num_threads(), "loadavg": os.getloadavg()[0]}
    fm = FlatMixture({f"s{k}": range(1000 + 37 * k) for k in range(50)}, seed=1)
    idx = np.random.default_rng(0).integers(0, len(fm), n)
    out["flat_50"] = timed(lambda: fm.locate_many(idx), n)
    for c in (2, 50):
        mix = MixtureDataset({f"s{k}": range(1000) for k in range(c)}, {f"s{k}": 1.0 / (k + 1) for k in range(c)},
                             block_size=2048, length=10**9)
        idx = np.random.default_rng(0).integers(0, 10**9, n)
        out[f"mixture_{c}"] = timed(lambda: mix.locate_many(idx), n)
    staged = MixtureDataset({f"s{k}": range(1000) for k in range(50)},
                            [(s, {f"s{k}": float((k + s) % 7 + 1) for k in range(50)}) for s in range(0, 10**9, 10**8)],
                            block_size=2048, length=10**9)
    out["mixture_50_10stages"] = timed(lambda: staged.locate_many(idx), n)
    emit(out)


def phase_stream(data: str, seconds: float, how: str) -> None:
    from youmu.streams.convert import rows
    from youmu.streams.rowstream import RowStream

    files = files_of(data)
    t = time.perf_counter()
    src = sources(files, how)
    idx = src if how == "single" else src.page_index()
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
    emit({"how": how, "sources": 1 if how == "single" else len(src.names), "rows_per_s": n / dt,
          "tokens_per_s": toks / dt, "setup_s": setup, "loadavg": os.getloadavg()[0]})


def phase_memory(data: str, how: str) -> None:
    import pyarrow  # noqa: F401  - imports first, so the delta is what the sources cost

    import youmu.mixture  # noqa: F401
    import youmu.streams.rows  # noqa: F401

    files = files_of(data)
    base = rss_mb()
    src = sources(files, how)
    if how == "single":
        table = src.table_bytes
    else:
        table = sum(c.index.table_bytes for c in src.children.values())
        src.page_index()  # the concatenated page space YoumuDataset would build
    emit({"how": how, "sources": 1 if how == "single" else len(src.names), "index_bytes": table,
          "rss_delta_mb": rss_mb() - base})


def phase_many_children() -> None:
    from youmu.mixture import MixtureDataset

    kids = {f"c{k}": range(1000) for k in range(10_000)}
    base = rss_mb()
    mix = MixtureDataset(kids, {k: 1.0 + (i % 13) for i, k in enumerate(kids)}, block_size=2048, length=10**9)
    delta = rss_mb() - base
    t = time.perf_counter()
    mix.locate_many(np.random.default_rng(0).integers(0, 10**9, 1_000_000))
    emit({"children": len(kids), "rss_delta_mb": delta, "locate_mps": 1.0 / (time.perf_counter() - t)})


def _as_list(rows: list) -> list:
    return rows


def phase_weighted(data: str, seconds: float, how: str) -> None:
    """A weighted MixtureDataset over the per-file sources, read as map-style rows.

    uniform: uniform pass orders, no page cache (every row decodes its own page);
    chunked: page-sized chunk-local orders (the default for Parquet children) with a
    2-page cache per child, read by ``__getitems__`` one block (2048 consecutive indices) per call;
    stream2: the same through ``MixtureStream`` and a DataLoader with 2 workers (lists
    of 256 rows per message)."""
    import youmu

    files = files_of(data)
    cache = 0 if how == "uniform" else 2
    kids = {f.stem: youmu.RowDataset(f, columns=[COL], output="numpy", cache_pages=cache) for f in files}
    mix = youmu.MixtureDataset(kids, {k: 1.0 / (i + 1) for i, k in enumerate(kids)}, block_size=2048, length=10**7,
                               child_chunk=1 if how == "uniform" else "auto")
    n = toks = 0
    t0 = time.perf_counter()
    if how == "stream2":
        from torch.utils.data import DataLoader

        from youmu.torch import MixtureStream

        # batches of 256 rows per message: per-row IPC would measure the queue, not the reads
        loader = DataLoader(MixtureStream(mix, rank=0, world_size=1), batch_size=256, num_workers=2,
                            collate_fn=_as_list)
        for batch in loader:
            n += len(batch)
            toks += sum(len(row[COL]) for row in batch)
            if time.perf_counter() - t0 > seconds:
                break
    else:
        while time.perf_counter() - t0 < seconds:
            for row in mix.__getitems__(list(range(n, n + 2048))):  # one block per call
                toks += len(row[COL])
            n += 2048
    dt = time.perf_counter() - t0
    emit({"how": how, "rows_per_s": n / dt, "tokens_per_s": toks / dt, "loadavg": os.getloadavg()[0]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="bench-data/tokens-52")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--phase")
    ap.add_argument("--arg", default="")
    a = ap.parse_args()
    if a.phase == "locate":
        return phase_locate()
    if a.phase == "stream":
        return phase_stream(a.data, a.seconds, a.arg)
    if a.phase == "memory":
        return phase_memory(a.data, a.arg)
    if a.phase == "many":
        return phase_many_children()
    if a.phase == "weighted":
        return phase_weighted(a.data, a.seconds, a.arg)

    me, common = __file__, ["--data", a.data, "--seconds", str(a.seconds)]
    loc = run_phase(me, "locate")
    streams: dict[str, dict] = {}
    for _ in range(a.reps):  # interleaved, best of reps: the machine's load drifts
        for how in ("single", "flat", "grouped"):
            r = run_phase(me, "stream", *common, "--arg", how)
            if how not in streams or r["rows_per_s"] > streams[how]["rows_per_s"]:
                streams[how] = r
    mem = {how: run_phase(me, "memory", *common, "--arg", how) for how in ("single", "grouped", "flat")}
    many = run_phase(me, "many")
    weighted = {how: run_phase(me, "weighted", *common, "--arg", how) for how in ("uniform", "chunked", "stream2")}

    print("\n## Mixtures\n")
    print(f"locate, one Python batch call of 10^6 random indices ({loc['threads']} threads, "
          f"load average {loc['loadavg']:.1f}):\n")
    print("| map | children | wall M/s | per core M/s (CPU time) |")
    print("|---|---|---|---|")
    for key, label, kids in [("flat_50", "`FlatMixture.locate_many`", 50), ("mixture_2", "`MixtureDataset.locate_many`", 2),
                             ("mixture_50", "`MixtureDataset.locate_many`", 50),
                             ("mixture_50_10stages", "`MixtureDataset.locate_many`, 10 stages", 50)]:
        print(f"| {label} | {kids} | {loc[key][0]:.1f} | {loc[key][1]:.1f} |")
    print(f"\n| stream (page shuffle, buffer 8192 rows, best of {a.reps}) | sources | rows/s | tokens/s (M) | "
          "setup s | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for how, label in [("single", "one source (all files)"), ("flat", "FlatMixture of per-file sources"),
                       ("grouped", "FlatMixture of 5 grouped sources")]:
        r = streams[how]
        print(f"| {label} | {r['sources']} | {r['rows_per_s']:,.0f} | {r['tokens_per_s'] / 1e6:.1f} | "
              f"{r['setup_s']:.3f} | {r['peak_rss_mb']:.0f} |")
    ratio = streams["flat"]["rows_per_s"] / streams["single"]["rows_per_s"]
    print(f"\n{streams['flat']['sources']}-source FlatMixture / single source: {ratio:.2f}x rows/s (target >= 0.8x)\n")
    print("| same files as | sources | page-table bytes | RSS after building (MB) |")
    print("|---|---|---|---|")
    for how in ("single", "grouped", "flat"):
        r = mem[how]
        print(f"| {how} | {r['sources']} | {r['index_bytes']:,} | {r['rss_delta_mb']:.1f} |")
    print(f"\nMixtureDataset of {many['children']:,} children: {many['rss_delta_mb']:.1f} MB RSS to build "
          f"({many['rss_delta_mb'] * 2**20 / many['children']:.0f} B/child); locate 10^6 random: "
          f"{many['locate_mps']:.1f} M/s")
    print("\n| weighted MixtureDataset over the per-file sources (block 2048, weights 1/(k+1)) | rows/s | "
          "tokens/s (M) | peak RSS MB |")
    print("|---|---|---|---|")
    for how, label in [("uniform", "uniform child orders, single-row reads"),
                       ("chunked", "chunk-local orders (auto), 2-page cache per child, in process"),
                       ("stream2", "same through MixtureStream + DataLoader(num_workers=2, batches of 256)")]:
        r = weighted[how]
        print(f"| {label} | {r['rows_per_s']:,.0f} | {r['tokens_per_s'] / 1e6:.1f} | {r['peak_rss_mb']:.0f} |")
    print(f"(this process: peak RSS {peak_rss_mb():.0f} MB)")


if __name__ == "__main__":
    main()
