"""A page-shuffled epoch over a dataset on the (local test) Hugging Face Hub,
``hf://datasets/...``, against the same files read locally.

    python benches/bench_hub.py [--rounds 3] [--delay-ms 20] [--files 6] [--rows 6000]

The Hub is ``tests/support/hubserver.py`` in a process of its own on 127.0.0.1: the Hub's API
for listing and revisions, resolve URLs answered with a 302 to its CDN on another
port, which serves the ranged GETs; ``--delay-ms`` delays the first byte of every
answer (the redirect and the CDN's answer alike, so one page read waits twice). Both
servers are Python's ``ThreadingHTTPServer``: their CPU shares the machine's cores
with the reader, so the figure is a floor of what a real CDN allows.

Timings alternate (local, hub, local, hub...) over ``--rounds`` rounds; the median
rows/s of each and their ratio, per round and overall, are printed, with the index
build time over the Hub (listing through ``huggingface_hub``, footers through the
native core).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
REPO = "bench/corpus"


def write_data(out: Path, files: int, rows: int, seed: int = 0) -> int:
    """``files`` shards of ``rows`` documents of token ids (lengths 32–2048, zstd,
    1 MiB pages with a page index, as published corpora are written); total bytes."""
    rng = np.random.default_rng(seed)
    total = 0
    for f in range(files):
        lengths = rng.integers(32, 2048, rows)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = rng.zipf(1.3, int(offsets[-1])).clip(0, 50_000).astype(np.int32)
        col = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        path = out / "data" / f"train-{f:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"input_ids": col}), path, compression="zstd", data_page_size=1 << 20,
                       write_page_index=True, use_dictionary=False, row_group_size=rows)
        total += path.stat().st_size
    return total


def epoch_rows_per_s(index, seed: int) -> float:
    from youmu.streams.rowstream import RowStream

    t0 = time.perf_counter()
    rows = 0
    for t in RowStream(index, shuffle="page", seed=seed).iter_tables():
        rows += t.num_rows
    return rows / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--rows", type=int, default=6000)
    args = ap.parse_args()

    import youmu

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        size = write_data(data, args.files, args.rows)
        server = subprocess.Popen([sys.executable, str(HERE.parent / "tests" / "support" / "hubserver.py"), "--repo", REPO,
                                   "--dir", str(data), "--delay", str(args.delay_ms / 1000)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            os.environ["HF_ENDPOINT"] = server.stdout.readline().strip()
            local = youmu.PageIndex(data / "data")
            t0 = time.perf_counter()
            hub = youmu.PageIndex(f"hf://datasets/{REPO}/data")
            build_s = time.perf_counter() - t0
            assert hub.num_rows == local.num_rows and len(hub) == len(local)
            runs: dict[str, list[float]] = {"local": [], "hub": []}
            for r in range(args.rounds):
                for name, index in (("local", local), ("hub", hub)):
                    runs[name].append(epoch_rows_per_s(index, seed=100 + r))
                    print(f"round {r} {name}: {runs[name][-1]:,.0f} rows/s", file=sys.stderr, flush=True)
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=30)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({
        "mb": round(size / 1e6, 1), "files": args.files, "pages": len(local), "rows": local.num_rows,
        "delay_ms": args.delay_ms, "rounds": args.rounds, "hub_index_build_s": round(build_s, 2),
        "local_rows_per_s": round(med["local"]), "hub_rows_per_s": round(med["hub"]),
        "ratio_hub_to_local": round(med["hub"] / med["local"], 3),
        "ratio_per_round": [round(h / loc, 3) for h, loc in zip(runs["hub"], runs["local"])],
        "max_inflight": youmu.io_options()["max_inflight"],
    }, indent=1))


if __name__ == "__main__":
    main()
