"""Streaming figures, measured in one run on the same token dataset.

    python benches/bench_stream.py [--data bench-data/tokens] [--seconds 15]

For each youmu shuffle mode, with 0 and 2 DataLoader workers: rows/s and tokens/s
delivered to a consumer that touches every token tensor; I/O amplification (bytes read
from the files / compressed bytes of the pages whose rows were delivered); latency to
the next batch of 64 rows (p50 / p99, page mode); peak RSS for a 1 GB and a 4 GB
dataset (the 4 GB one is the same files hard-linked four times). Baselines over the
same Parquet files: Hugging Face ``datasets`` map-style ``.shuffle()`` (after its Arrow
conversion) and streaming ``IterableDataset.shuffle(buffer_size)``.
Each measurement runs in its own process; page cache warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import emit, run_phase  # noqa: E402

COL = "input_ids"
BUFFER = 8192


def _consume_rows(it, seconds: float, max_rows: int | None = None) -> tuple[int, int, float, list[float]]:
    """Iterate rows, touching each token tensor; returns rows, tokens, seconds, and the
    per-64-row batch latencies."""
    rows = toks = 0
    lat = []
    t0 = last = time.perf_counter()
    for row in it:
        x = row[COL]
        toks += len(x)
        rows += 1
        if rows % 64 == 0:
            now = time.perf_counter()
            lat.append(now - last)
            last = now
            if now - t0 > seconds or (max_rows and rows >= max_rows):
                break
    return rows, toks, time.perf_counter() - t0, lat


def phase_youmu(data: str, mode: str, workers: int, seconds: float) -> None:
    import torch
    from torch.utils.data import DataLoader

    import youmu
    from youmu.torch import YoumuDataset, collate_pad

    idx = youmu.PageIndex(data, columns=[COL])
    ds = YoumuDataset(idx, shuffle=mode, buffer_size=BUFFER, seed=0, output="torch")
    before = youmu.io_stats()["bytes_read"]
    c0 = time.process_time()  # this process's CPU (workers = 0: every read and decode)
    if workers:
        # what training does: batches padded in the workers, one tensor per batch
        loader = DataLoader(ds, batch_size=64, num_workers=workers, prefetch_factor=4, collate_fn=collate_pad)
        rows = toks = 0
        t0 = time.perf_counter()
        for b in loader:
            rows += len(b[f"{COL}_lengths"])
            toks += int(b[f"{COL}_lengths"].sum())
            if time.perf_counter() - t0 > seconds:
                break
        dt, lat = time.perf_counter() - t0, []
    else:
        rows, toks, dt, lat = _consume_rows(iter(ds), seconds)
    cpu = time.process_time() - c0
    result = {"mode": mode, "workers": workers, "rows_per_s": rows / dt, "tokens_per_s": toks / dt}
    if not workers:
        result["rows_per_cpu_s"] = rows / max(cpu, 1e-9)
    if not workers:
        # amplification: bytes read / compressed bytes of the delivered rows' share of pages
        read = youmu.io_stats()["bytes_read"] - before
        sizes, prow = idx.page_byte_sizes(), idx.page_num_rows()
        delivered = rows * float(sizes.sum()) / float(prow.sum())
        result["amplification"] = read / max(delivered, 1.0)
        lat_ms = np.array(lat[2:]) * 1e3 if len(lat) > 3 else np.array([np.nan])
        result["p50_ms"], result["p99_ms"] = float(np.percentile(lat_ms, 50)), float(np.percentile(lat_ms, 99))
    del torch
    emit(result)


def phase_overhead(data: str, seconds: float, rounds: int = 5) -> None:
    """The stream's own cost: tokens/s of a page-shuffled epoch through ``RowStream``
    (windows read ahead, reordered, handed over as tables) vs ``read_pages`` on the
    same pages in the same order, batched a window at a time with one batch read ahead
    (the raw page throughput the stream is built on). Both on youmu's 2 threads,
    alternated ``rounds`` times so machine noise hits both alike; medians reported."""
    import youmu
    from youmu.streams.rowstream import RowStream

    youmu.set_num_threads(2)
    idx = youmu.PageIndex(data, columns=[COL])
    plan = RowStream(idx, "page", BUFFER, seed=0).plan
    order = np.concatenate([plan.pages_of(i) for i in range(len(plan.window_ids))])
    wp = plan.window_pages

    def raw() -> float:
        t0, n, k = time.perf_counter(), 0, 0
        pend = idx.prefetch(order[0:wp])
        while time.perf_counter() - t0 < seconds and k < len(order):
            got = pend.result()
            k += wp
            pend = idx.prefetch(order[k : k + wp])
            n += sum(b.column(0).values.nbytes for b in got)
        pend.result()
        return n / (time.perf_counter() - t0)

    def stream() -> float:
        t0, n = time.perf_counter(), 0
        for t in RowStream(idx, "page", BUFFER, seed=0).iter_tables():
            n += sum(c.values.nbytes for c in t.column(0).chunks)
            if time.perf_counter() - t0 > seconds:
                break
        return n / (time.perf_counter() - t0)

    r, s = [], []
    for _ in range(rounds):
        r.append(raw())
        s.append(stream())
    ratios = [b / a for a, b in zip(r, s)]
    emit({"raw_mb_per_s": float(np.median(r)) / 1e6, "stream_mb_per_s": float(np.median(s)) / 1e6,
          "ratio_median": float(np.median(ratios)), "ratios": ratios})


def phase_latency(data: str, step_ms: float, batches: int, prefetch: bool = False) -> None:
    """Time a training loop waits for its next batch of 64 packed sequences × 2048
    tokens when each step takes ``step_ms`` (the loader prefetches while the step runs).
    ``prefetch``: batches are received from the workers by a ``youmu.torch.Prefetcher``
    thread during the step instead of by ``next()``."""
    import youmu
    from youmu.torch import YoumuDataset, pack

    idx = youmu.PageIndex(data, columns=[COL])
    import torch
    from torch.utils.data import DataLoader

    from youmu.torch import collate_packed

    # SHARING=file_system: torch's named-shm strategy instead of fd passing (measured:
    # p99 7.0 -> 5.8 ms per packed 64x2048 batch; the rest is IPC + Python packing)
    if os.environ.get("SHARING"):
        torch.multiprocessing.set_sharing_strategy(os.environ["SHARING"])
    ds = YoumuDataset(idx, shuffle="page", buffer_size=BUFFER, seed=0, output="torch")
    # packing and collation run in two DataLoader workers while the step runs
    loader = DataLoader(pack(ds, seq_len=2048, column=COL), batch_size=64, num_workers=2,
                        collate_fn=collate_packed, prefetch_factor=2)
    if prefetch:
        from youmu.torch import Prefetcher

        loader = Prefetcher(loader, depth=2)
    it = iter(loader)
    waits, tokens = [], []
    for _ in range(batches):
        t0 = time.perf_counter()
        batch = next(it)
        waits.append(time.perf_counter() - t0)
        tokens.append(batch[COL].numel())
        time.sleep(step_ms / 1e3)
    w = np.array(waits[5:]) * 1e3
    emit({"prefetch": prefetch, "step_ms": step_ms, "p50_ms": float(np.percentile(w, 50)), "p99_ms": float(np.percentile(w, 99)),
          "max_ms": float(w.max()), "tokens_per_batch": float(np.mean(tokens))})


def _keep(row):
    return row


def phase_pass(data: str, mode: str, transform: str, epochs: int = 3) -> None:
    """The stream's pass alone: CPU seconds of this process for a whole epoch of rows
    (``output="numpy"``, no consumer work), without a transform or with a plain one
    that keeps every row; the best of ``epochs`` epochs (the pages cached after the
    first). What a change to the per-row pass (``ParquetStream._pass``) costs."""
    import youmu
    from youmu.streams.parquet import ParquetStream

    idx = youmu.PageIndex(data, columns=[COL])
    s = ParquetStream(idx, shuffle=mode, buffer_size=BUFFER, seed=0, output="numpy", rank=0, world_size=1,
                      transform=_keep if transform == "plain" else None)
    best, rows = float("inf"), 0
    for _ in range(epochs):
        c0 = time.process_time()
        rows = sum(1 for _ in s)
        best = min(best, time.process_time() - c0)
    emit({"mode": mode, "transform": transform, "rows": rows, "cpu_s": best, "rows_per_cpu_s": rows / best})


def phase_rss(data: str, rows: int) -> None:
    import youmu
    from youmu.torch import YoumuDataset

    idx = youmu.PageIndex(data, columns=[COL])
    n, t, dt, _ = _consume_rows(iter(YoumuDataset(idx, shuffle="page", buffer_size=BUFFER, seed=0)), 1e9, rows)
    emit({"rows": n, "gb": sum(Path(f).stat().st_size for f in idx.files) / 1e9, "rows_per_s": n / dt})


def phase_hf_map(data: str, seconds: float, cache: str) -> None:
    import datasets

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in Path(data).glob("*.parquet"))
    t0 = time.perf_counter()
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache, columns=[COL])
    setup = time.perf_counter() - t0
    ds = ds.shuffle(seed=0).with_format("numpy")
    t1 = time.perf_counter()
    first = None
    rows = toks = 0
    for row in ds:
        if first is None:
            first = time.perf_counter() - t1
        toks += len(row[COL])
        rows += 1
        if rows % 64 == 0 and time.perf_counter() - t1 > seconds:
            break
    dt = time.perf_counter() - t1
    disk = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file())
    emit({"rows_per_s": rows / dt, "tokens_per_s": toks / dt, "setup_s": setup, "extra_disk_gb": disk / 1e9,
          "first_row_s": first})


def phase_hf_stream(data: str, seconds: float) -> None:
    import datasets

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in Path(data).glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True, columns=[COL])
    ds = ds.shuffle(seed=0, buffer_size=BUFFER).with_format("numpy")
    rows, toks, dt, _ = _consume_rows(iter(ds), seconds)
    emit({"rows_per_s": rows / dt, "tokens_per_s": toks / dt})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="bench-data/tokens")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--phase")
    ap.add_argument("--arg", default="")
    ap.add_argument("--skip-hf", action="store_true")
    a = ap.parse_args()
    if a.phase:
        if a.phase == "youmu":
            mode, workers = a.arg.split(",")
            phase_youmu(a.data, mode, int(workers), a.seconds)
        elif a.phase == "overhead":
            phase_overhead(a.data, a.seconds)
        elif a.phase == "latency":
            step, prefetch = (a.arg.split(",") + ["0"])[:2]
            phase_latency(a.data, float(step), 300, prefetch=prefetch == "1")
        elif a.phase == "rss":
            phase_rss(a.data, int(a.arg))
        elif a.phase == "pass":
            mode, transform = a.arg.split(",")
            phase_pass(a.data, mode, transform)
        elif a.phase == "hf_map":
            phase_hf_map(a.data, a.seconds, a.arg)
        elif a.phase == "hf_stream":
            phase_hf_stream(a.data, a.seconds)
        return
    from datagen import generate

    generate(Path(a.data), 1.0)
    me = __file__
    common = ["--data", a.data, "--seconds", str(a.seconds)]
    results = {}
    for mode in ["page", "row", "local", "none"]:
        for w in [0, 2]:
            results[mode, w] = run_phase(me, "youmu", *common, "--arg", f"{mode},{w}")
    # 4x dataset from hard links (no extra disk), for the memory-vs-size check
    big = Path(a.data + "-x4")
    if not big.exists():
        big.mkdir()
        for k in range(4):
            for f in sorted(Path(a.data).glob("*.parquet")):
                os.link(f, big / f"r{k}-{f.name}")
    overhead = run_phase(me, "overhead", "--data", a.data, "--seconds", "3")
    latency = run_phase(me, "latency", *common, "--arg", "100,0")
    latency_pf = run_phase(me, "latency", *common, "--arg", "100,1")
    # whole epochs: memory must not grow with what has been streamed either
    rss1 = run_phase(me, "rss", "--data", a.data, "--arg", str(10**12), timeout=3600)
    rss4 = run_phase(me, "rss", "--data", str(big), "--arg", str(10**12), timeout=3600)
    hf_map = hf_stream = None
    if not a.skip_hf:
        try:
            cache = Path("bench-data/hf-cache")
            shutil.rmtree(cache, ignore_errors=True)
            hf_map = run_phase(me, "hf_map", *common, "--arg", str(cache), timeout=3600)
            hf_stream = run_phase(me, "hf_stream", *common)
            shutil.rmtree(cache, ignore_errors=True)
        except Exception as e:  # the baseline is optional: report why it is missing
            print(f"HF datasets baseline failed: {e}")
    print("\n## Streaming a shuffled epoch (1 GB token dataset, buffer 8192 rows, consumer touches every row)\n")
    print("(workers = 0: rows consumed one by one in the main process; workers = 2: DataLoader batches of 64 rows padded in the workers)\n")
    print("| loader | workers | rows/s | tokens/s (M) | I/O amplification | p50 / p99 ms per 64 rows (unthrottled) | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for (mode, w), r in results.items():
        amp = f"{r['amplification']:.2f}" if "amplification" in r else ""
        lat = f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}" if "p50_ms" in r else ""
        print(f"| youmu shuffle={mode} | {w} | {r['rows_per_s']:.0f} | {r['tokens_per_s'] / 1e6:.2f} | {amp} | {lat} | {r['peak_rss_mb']:.0f} |")
    if hf_map:
        print(f"| HF datasets map-style .shuffle() (after {hf_map['setup_s']:.0f}s Arrow conversion, "
              f"+{hf_map['extra_disk_gb']:.2f} GB disk) | 0 | {hf_map['rows_per_s']:.0f} | {hf_map['tokens_per_s'] / 1e6:.2f} | | | {hf_map['peak_rss_mb']:.0f} |")
    if hf_stream:
        print(f"| HF datasets streaming .shuffle(buffer_size={BUFFER}) | 0 | {hf_stream['rows_per_s']:.0f} | "
              f"{hf_stream['tokens_per_s'] / 1e6:.2f} | | | {hf_stream['peak_rss_mb']:.0f} |")
    print(f"\nTraining-loop view (page mode, packing in 2 DataLoader workers, a {latency['step_ms']:.0f} ms step per batch of 64 x 2048-token sequences, "
          f"{latency['tokens_per_batch']:.0f} tokens/batch): wait for the next batch p50 {latency['p50_ms']:.2f} ms, "
          f"p99 {latency['p99_ms']:.2f} ms, max {latency['max_ms']:.2f} ms; "
          f"with youmu.torch.Prefetcher receiving batches during the step: p50 {latency_pf['p50_ms']:.2f} ms, "
          f"p99 {latency_pf['p99_ms']:.2f} ms, max {latency_pf['max_ms']:.2f} ms")
    print(f"\nStream overhead (page shuffle, 2 threads, medians of 5 alternated rounds): RowStream "
          f"{overhead['stream_mb_per_s']:.0f} MB/s of tokens vs read_pages on the same pages {overhead['raw_mb_per_s']:.0f} "
          f"MB/s: {overhead['ratio_median']:.2f}x (per round {', '.join(f'{x:.2f}' for x in overhead['ratios'])})")
    print(f"\nPeak RSS streaming a whole page-mode epoch: {rss1['gb']:.2f} GB dataset ({rss1['rows']:,} rows) "
          f"{rss1['peak_rss_mb']:.0f} MB; {rss4['gb']:.2f} GB dataset ({rss4['rows']:,} rows) {rss4['peak_rss_mb']:.0f} MB")
    if hf_map:
        page = results["page", 0]
        print(f"youmu page / HF map-style shuffled: {page['rows_per_s'] / hf_map['rows_per_s']:.1f}x rows/s")
    if hf_stream:
        page = results["page", 0]
        print(f"youmu page / HF streaming buffer shuffle: {page['rows_per_s'] / hf_stream['rows_per_s']:.2f}x rows/s")


if __name__ == "__main__":
    main()
