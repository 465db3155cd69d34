"""Remote reads against a real-speed S3-compatible server: the page-shuffled epoch
(remote vs local rows/s and client CPU per GB) and random pages vs pyarrow's
``S3FileSystem`` as a function of the column-chunk size.

    python benches/bench_remote.py --what epoch [--rounds 5] [--latencies 0,20]
    python benches/bench_remote.py --what pages [--chunk-mb 0.5,2,8,32] [--rounds 3]
    python benches/bench_remote.py --report OUT.json [OUT.json ...]   # the RESULTS tables

The server is ``benches/s3fast/server.rs`` (``--server fast``, built with ``rustc`` on
first use into ``bench-data/tools/``): native, keep-alive, ``sendfile`` bodies, a
first-byte delay per request. ``--server py`` uses ``benches/s3_local.py`` (asyncio)
instead, to show what the server's own cost does to the figures. Both clients talk to
it over 127.0.0.1 on the same machine, so the server's CPU shares the cores with the
client: its CPU seconds are reported next to the client's.

Timings are taken in alternation (A B C A B C ...) over ``--rounds`` rounds and the
median is reported, so a load change on a shared machine hits every configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_storage import COL, Server  # noqa: E402

TOOLS = HERE.parent / "bench-data" / "tools"


def fast_server_binary() -> Path:
    """``bench-data/tools/s3fast``, rebuilt when its source is newer."""
    src, out = HERE / "s3fast" / "server.rs", TOOLS / "s3fast"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        TOOLS.mkdir(parents=True, exist_ok=True)
        subprocess.run(["rustc", "-O", "--edition", "2021", str(src), "-o", str(out)], check=True)
    return out


class S3sServer(Server):
    """``s3s-fs`` (the s3s project's file-system server, installed with ``cargo install
    s3s-fs --features binary --root bench-data/tools``): a third-party server to check the
    native one against. No delay and no counters; objects are uploaded through it once
    (so it stores their MD5 ETags instead of hashing the object on every GET)."""

    def __init__(self, root: Path, data: Path) -> None:
        import socket

        store = root.parent / "s3s-root"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        store.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([str(TOOLS / "bin" / "s3s-fs"), "--host", "127.0.0.1", "--port", str(self.port),
                                      "--access-key", "bench", "--secret-key", "bench", str(store)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="bench",
                          aws_secret_access_key="bench", region_name="us-east-1")
        if not (store / "bench").is_dir():
            s3.create_bucket(Bucket="bench")
        for f in sorted(data.glob("*.parquet")):
            key = f"{data.name}/{f.name}"
            if not (store / "bench" / key).exists():
                s3.put_object(Bucket="bench", Key=key, Body=f.read_bytes())

    def stats(self) -> dict[str, int]:
        return {"get": -1, "head": -1, "list": -1, "other": -1, "bytes": -1}

    def reset(self) -> None:
        pass

    def delay(self, ms: float) -> None:
        if ms:
            raise ValueError("s3s-fs has no delay option")


def start_server(kind: str, root: Path, data: Path) -> Server:
    if kind == "fast":
        return Server(root, cmd=[str(fast_server_binary()), "--root", str(root)])
    if kind == "s3s":
        return S3sServer(root, data)
    return Server(root)


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------------------------------
# the page-shuffled epoch
# ------------------------------------------------------------------------------------------
def phase_epoch(srv: Server, data: Path, latencies: list[int], rounds: int, read_aheads: list[int | None],
                epochs: int) -> dict[str, Any]:
    import youmu
    from youmu.streams.rowstream import RowStream

    local = youmu.PageIndex(data, columns=[COL])
    srv.delay(0)
    remote = youmu.PageIndex("s3://bench/" + data.name + "/", columns=[COL], storage_options=srv.options())
    gb = float(local.page_byte_sizes().sum()) / 1e9  # compressed bytes an epoch reads
    configs: list[tuple[str, Any, int, int | None]] = [("local", local, 0, None)]
    for ms in latencies:
        for ra in read_aheads:
            configs.append((f"remote {ms} ms" + ("" if ra is None else f", read_ahead={ra}"), remote, ms, ra))
    runs: dict[str, list[dict[str, float]]] = {c[0]: [] for c in configs}
    for r in range(rounds):
        for name, index, ms, ra in configs:
            srv.delay(ms)
            srv.reset()
            c0, s0, t0 = self_cpu_s(), proc_cpu_s(srv.proc.pid), time.perf_counter()
            rows = 0
            for e in range(epochs):
                s = RowStream(index, shuffle="page", seed=100 + r, epoch=e, read_ahead=ra)
                for t in s.iter_tables():
                    rows += t.num_rows
            dt = time.perf_counter() - t0
            client, server = self_cpu_s() - c0, proc_cpu_s(srv.proc.pid) - s0
            st = srv.stats()
            runs[name].append({"rows_per_s": rows / dt, "client_cpu_s_per_gb": client / (gb * epochs),
                               "server_cpu_s_per_gb": (server / (gb * epochs)) if index is remote else 0.0,
                               "gets": st["get"], "connections": st.get("connections", -1), "seconds": dt,
                               "read_ahead": s.read_ahead, "window_pages": s.window_pages})
            print(name, json.dumps(runs[name][-1]), file=sys.stderr, flush=True)
    med = {name: {k: statistics.median(x[k] for x in v) for k in v[0]} for name, v in runs.items()}
    for name, m in med.items():
        m["ratio_to_local"] = m["rows_per_s"] / med["local"]["rows_per_s"]
        # per round, against the local run of the same round
        m["ratio_per_round"] = [round(x["rows_per_s"] / loc["rows_per_s"], 3) for x, loc in zip(runs[name], runs["local"])]
    return {"gb_per_epoch": gb, "pages": len(local), "epochs_per_run": epochs, "rounds": rounds,
            "median": med, "runs": runs}


# ------------------------------------------------------------------------------------------
# random pages vs pyarrow, by column-chunk size
# ------------------------------------------------------------------------------------------
def make_variant(src: Path, out: Path, chunk_mb: float, files: int) -> Path:
    """The rows of ``src`` rewritten into ``files`` files whose ``input_ids`` column
    chunks are about ``chunk_mb`` MB (compressed), 1 MiB pages, OffsetIndex."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    if len(list(out.glob("*.parquet"))) == files:
        return out
    table = pq.read_table(src, columns=[COL])
    bytes_per_row = sum(pq.ParquetFile(f).metadata.row_group(i).column(0).total_compressed_size
                        for f in sorted(src.glob("*.parquet")) for i in range(pq.ParquetFile(f).num_row_groups))
    bytes_per_row /= table.num_rows
    rg_rows = max(1, int(chunk_mb * 1e6 / bytes_per_row))
    per = -(-table.num_rows // files)
    for k in range(files):
        pq.write_table(table.slice(k * per, per), out / f"part-{k:03d}.parquet", row_group_size=rg_rows,
                       compression="zstd", data_page_size=1 << 20, write_page_index=True, use_dictionary=False)
    return out


def phase_pages(srv: Server, root: Path, src: Path, chunk_mbs: list[float], latencies: list[int], rounds: int,
                pages: int, batch: int, threads: int, files: int) -> list[dict[str, Any]]:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    import youmu

    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{srv.port}", scheme="http", access_key="bench",
                           secret_key="bench", region="us-east-1")
    out = []
    for mb in chunk_mbs:
        name = f"chunks-{mb:g}mb"
        make_variant(src, root / "bench" / name, mb, files)
        srv.delay(0)
        idx = youmu.PageIndex(f"s3://bench/{name}/", columns=[COL], storage_options=srv.options())
        keys = [f.split("s3://", 1)[1] for f in idx.files]
        meta = [pq.ParquetFile(root / k).metadata for k in keys]
        chunk = [m.row_group(i).column(0).total_compressed_size for m in meta for i in range(m.num_row_groups)]
        # footers read once, before timing, for both pyarrow variants
        pfs = {pb: [pq.ParquetFile(fs.open_input_file(k), pre_buffer=pb) for k in keys] for pb in (False, True)}
        rng = np.random.default_rng(int(mb * 1000))
        info = [idx.page_info(i) for i in range(len(idx))]

        def pa_one(ids: np.ndarray, pb: bool) -> None:
            for i in ids:
                x = info[int(i)]
                t = pfs[pb][x["file_index"]].read_row_group(x["row_group"], columns=[COL], use_threads=True)
                assert t.slice(x["first_row"], x["num_rows"]).num_rows == x["num_rows"]

        # a ParquetFile is not safe to read from several threads at once (a shared one
        # crashed here): each pool thread gets its own, footers read before timing
        local = threading.local()

        def thread_files() -> None:
            local.pfs = {pb: [pq.ParquetFile(fs.open_input_file(k), pre_buffer=pb) for k in keys] for pb in (False, True)}

        def pa_batch(ids: np.ndarray, pb: bool, pool: ThreadPoolExecutor) -> None:
            need = sorted({(info[int(i)]["file_index"], info[int(i)]["row_group"]) for i in ids})
            list(pool.map(lambda fr: local.pfs[pb][fr[0]].read_row_group(fr[1], columns=[COL], use_threads=False),
                          need))

        def pa_batch_files(ids: np.ndarray, pb: bool) -> None:
            by: dict[int, set[int]] = {}
            for i in ids:
                by.setdefault(info[int(i)]["file_index"], set()).add(info[int(i)]["row_group"])
            for f, rgs in by.items():
                pfs[pb][f].read_row_groups(sorted(rgs), columns=[COL], use_threads=True)

        pool = ThreadPoolExecutor(threads, initializer=thread_files)
        list(pool.map(lambda _: time.sleep(0.2), range(threads)))  # start every thread (and read its footers)
        for ms in latencies:
            srv.delay(ms)
            res: dict[str, list[float]] = {}
            cpu_ms: dict[str, list[float]] = {}  # client CPU ms per page, all threads
            reqs: dict[str, tuple[float, float]] = {}
            one_ids = [rng.permutation(len(idx))[:pages] for _ in range(rounds)]
            bat_ids = [[rng.permutation(len(idx))[:batch] for _ in range(2)] for _ in range(rounds)]
            variants: dict[str, Any] = {
                "youmu one": lambda r: [idx.read_page(int(i)) for i in one_ids[r]],
                "pyarrow one": lambda r: pa_one(one_ids[r], False),
                "pyarrow one pre_buffer": lambda r: pa_one(one_ids[r], True),
                "youmu batch": lambda r: [idx.read_pages(b) for b in bat_ids[r]],
                f"pyarrow batch {threads} threads": lambda r: [pa_batch(b, False, pool) for b in bat_ids[r]],
                f"pyarrow batch {threads} threads pre_buffer": lambda r: [pa_batch(b, True, pool) for b in bat_ids[r]],
                "pyarrow batch read_row_groups pre_buffer": lambda r: [pa_batch_files(b, True) for b in bat_ids[r]],
            }
            for r in range(rounds):
                for v, f in variants.items():
                    n = pages if " one" in v else batch * 2
                    srv.reset()
                    c0, t0 = self_cpu_s(), time.perf_counter()
                    f(r)
                    dt, cpu = time.perf_counter() - t0, self_cpu_s() - c0
                    st = srv.stats()
                    res.setdefault(v, []).append(n / dt)
                    cpu_ms.setdefault(v, []).append(1e3 * cpu / n)
                    reqs[v] = ((st["get"] + st["head"]) / n, st["bytes"] / n)
            med = {v: statistics.median(x) for v, x in res.items()}
            best_one = max(v for k, v in med.items() if k.startswith("pyarrow one"))
            best_batch = max(v for k, v in med.items() if k.startswith("pyarrow batch"))
            row = {"batch": batch, "chunk_mb_target": mb, "chunk_mb_mean": float(np.mean(chunk)) / 1e6,
                   "page_mb_mean": float(idx.page_byte_sizes().mean()) / 1e6, "pages": len(idx),
                   "row_groups": len(chunk), "latency_ms": ms, "pages_per_s": med,
                   "requests_and_bytes_per_page": reqs, "runs": res,
                   "client_cpu_ms_per_page": {v: statistics.median(x) for v, x in cpu_ms.items()},
                   "one_at_a_time_vs_best_pyarrow": med["youmu one"] / best_one,
                   "batched_vs_best_pyarrow": med["youmu batch"] / best_batch}
            out.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), file=sys.stderr, flush=True)
        pool.shutdown()
    return out


def report(files: list[str]) -> None:
    """Print the tables of ``benches/RESULTS.md`` from ``--out`` files: epoch runs one by
    one; page runs pooled by (chunk size, latency, batch), each round's youmu figure over
    the best pyarrow variant of the same round."""
    pooled: dict[tuple[float, int, int], dict[str, Any]] = {}
    for f in files:
        doc = json.loads(Path(f).read_text())
        res = doc["result"]
        if doc["what"] == "epoch":
            print(f"\n{f} ({doc['server']}, load {[round(x) for x in doc['load_avg']]}, {res['rounds']} rounds)\n")
            print("| configuration | remote / local (median of rounds) | range | client CPU s/GB | server CPU s/GB | GETs |")
            print("|---|---|---|---|---|---|")
            for name, m in res["median"].items():
                r = sorted(m["ratio_per_round"])
                print(f"| {name} | {statistics.median(r):.2f} | {r[0]:.2f}–{r[-1]:.2f} | {m['client_cpu_s_per_gb']:.2f} "
                      f"| {m['server_cpu_s_per_gb']:.2f} | {m['gets']:.0f} |")
            continue
        for r in res:
            e = pooled.setdefault((round(r["chunk_mb_mean"], 2), r["latency_ms"], r.get("batch", 64)),
                                  {"one": [], "batch": [], "cpu": [], "meta": r})
            runs = r["runs"]
            for i in range(len(runs["youmu one"])):
                e["one"].append(runs["youmu one"][i] / max(runs[k][i] for k in runs if k.startswith("pyarrow one")))
                e["batch"].append(runs["youmu batch"][i] / max(runs[k][i] for k in runs if k.startswith("pyarrow batch")))
            c = r["client_cpu_ms_per_page"]
            e["cpu"].append((c["youmu one"], min(v for k, v in c.items() if k.startswith("pyarrow one")),
                             c["youmu batch"], min(v for k, v in c.items() if k.startswith("pyarrow batch"))))
    if not pooled:
        return
    print("\n| column chunk | row groups | page MB | batch (pages) | latency | youmu / pyarrow pages/s, one at a time: "
          "median (range) | same, batched | CPU ms/page one at a time, youmu / pyarrow | CPU ms/page batched, youmu / "
          "pyarrow | MB fetched per page: youmu / pyarrow one / pyarrow batched | rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (mb, ms, batch), e in sorted(pooled.items()):
        m, q = e["meta"], e["meta"]["requests_and_bytes_per_page"]
        pab = min(v[1] for k, v in q.items() if k.startswith("pyarrow batch"))
        cpu = [statistics.median(x) for x in zip(*e["cpu"])]

        def fmt(xs: list[float]) -> str:
            return f"{statistics.median(xs):.1f}× ({min(xs):.1f}–{max(xs):.1f})"

        print(f"| {mb:.1f} MB | {m['row_groups']} | {m['page_mb_mean']:.2f} | {batch} | {ms} ms | {fmt(e['one'])} "
              f"| {fmt(e['batch'])} | {cpu[0]:.1f} / {cpu[1]:.1f} | {cpu[2]:.1f} / {cpu[3]:.1f} "
              f"| {q['youmu one'][1] / 1e6:.2f} / {q['pyarrow one'][1] / 1e6:.2f} / {pab / 1e6:.2f} | {len(e['one'])} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", nargs="+", help="print the RESULTS tables from these --out files and exit")
    ap.add_argument("--what", default="epoch", choices=["epoch", "pages"])
    ap.add_argument("--server", default="fast", choices=["fast", "py", "s3s"])
    ap.add_argument("--root", default="bench-data/storage")
    ap.add_argument("--gb", type=float, default=0.3)
    ap.add_argument("--latencies", default="0,20")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per timed run")
    ap.add_argument("--read-ahead", default="default", help="comma list of stream read_ahead values ('default')")
    ap.add_argument("--chunk-mb", default="0.5,2,8,32")
    ap.add_argument("--pages", type=int, default=40, help="pages read one at a time per round")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.report:
        report(a.report)
        return
    from datagen import generate

    root = Path(a.root).resolve()
    data = root / "bench" / "tokens"
    generate(data, a.gb)
    lat = [int(x) for x in a.latencies.split(",")]
    srv = start_server(a.server, root, data)
    try:
        if a.what == "epoch":
            ras = [None if x == "default" else int(x) for x in a.read_ahead.split(",")]
            res: Any = phase_epoch(srv, data, lat, a.rounds, ras, a.epochs)
        else:
            res = phase_pages(srv, root, data, [float(x) for x in a.chunk_mb.split(",")], lat, a.rounds, a.pages,
                              a.batch, a.threads, a.files)
    finally:
        srv.stop()
    result = {"server": a.server, "what": a.what, "load_avg": os.getloadavg(), "result": res}
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result if a.what == "pages" else {**result, "result": {**res, "runs": "..."}}, indent=1))


if __name__ == "__main__":
    main()
