"""Every stage of youmu against its own physical limit, measured side by side in one run.

    python benches/limits.py            # a few minutes on 2 cores
    python benches/limits.py --quick    # about a minute: smaller data, fewer repeats
    python benches/limits.py --only pages,odb
    python benches/limits.py --quick --json benches/limits.json   # and the figures as JSON
    python benches/plot_limits.py --json benches/limits.json --out docs/img/limits.png

Each stage runs in a fresh interpreter (:func:`_util.run_phase`) and reports youmu and
its limit measured in that same process, alternated where both are loops, so the ratio
holds when the machine's speed drifts (it is shared: CPU seconds are the steadier
figure; wall is printed beside them). The stages reuse the benches that measure them in
detail (``bench_text``, ``bench_vision``, ``bench_page_peak``, ``bench_odb``,
``bench_trainers``, ``compare_peers``) rather than copying them:

* **pages** — random pages of the ``datagen`` token set (``list<int32>``, zstd, 1 MiB
  pages) read and decoded on one thread, against the least any reader must do for
  the same pages: one ``pread`` of each page, zstd decompression (pyarrow's codec) and
  one copy of the decompressed bytes.
* **tokenize** — ``YoumuDataset`` + ``Tokenize`` through 2 fork ``DataLoader`` workers
  (batches of 8 through ``SendCollate``) against ``tokenizers``' ``encode_batch`` alone,
  and, to say where the gap is, against ``encode_batch`` in 2 fork workers handing over
  one count per batch (the same parallelism: two processes tokenizing side by side make
  less per CPU second than one alone on shared cores) and handing over the same padded
  batches of 8 (``SendCollate``) as youmu's workers do.
* **dbl** — ``DynamicBatchLoader`` handing samples over from 2 workers against the
  batched hand-off (batches of 8 through ``SendCollate``) of the same stream.
* **vision** — image-text rows through ``YoumuDataset`` + ``VisionTransform`` in the
  process against a loop that only decodes and resizes the same images
  (``youmu.vision.load_image``: Pillow + the Qwen2-VL resize).
* **epoch** — a shuffled epoch, per batch, against HF ``datasets`` map-style
  (``compare_peers``'s phases, alternated twice; needs ``make peers-venv``, else the row
  says so; not in ``--quick``: HF's first run converts the set to Arrow, minutes).
* **budget** — RSS growth reading pages under a ``memory_budget`` against the cap
  (1.5× the budget for pages up to it, ~2× the page for one over it).
* **lightning** — Lightning fed by ``YoumuDataModule`` against a plain ``DataLoader``
  over the same rows in memory (``bench_trainers``, 4 runs alternating which goes first,
  medians; not in ``--quick``).
* **odb** — ODB padding at W=3 (the simulation, batch for batch the real loader's)
  against the paper's 0.6–1.0 %.
* **gpu** — the training loop's wait for data per step on a GPU (``gpu_wait.py``);
  "no CUDA" on a machine without one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # workloads shared with the tests
from _util import PEERS_PYTHON, PhaseFailed, emit, peers_python, run_phase  # noqa: E402

HERE = Path(__file__).parent
STAGES = ("pages", "tokenize", "vision", "epoch", "budget", "lightning", "odb", "gpu")
#: Each measured stage's target as a ratio to its limit, and which side of it is good: the
#: goals the stages are held to (a reader's share of the limit it cannot beat; the memory
#: cap and the paper's padding as ceilings).
TARGETS = {"page decode": (0.9, "min"), "tokenization": (0.9, "min"),
           "DBL hand-off": (0.95, "min"),
           "images": (0.95, "min"), "memory budget": (1.0, "max"),
           "memory, a page over the budget": (1.0, "max"), "ODB padding": (1.0, "max"),
           "Lightning": (0.98, "min")}


def _cpu() -> float:
    """CPU seconds of this process (every thread) and its reaped children."""
    r = os.times()
    return r.user + r.system + r.children_user + r.children_system


# -- pages: page decode against pread + zstd + one copy ----------------------------------
def _varint(b: bytes, p: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        x = b[p]
        p += 1
        out |= (x & 0x7F) << shift
        shift += 7
        if x < 0x80:
            return out, p


def _skip(b: bytes, p: int, t: int) -> int:
    """Skip one thrift compact value of type ``t``."""
    if t in (1, 2):
        return p
    if t == 3:
        return p + 1
    if t in (4, 5, 6):
        return _varint(b, p)[1]
    if t == 7:
        return p + 8
    if t == 8:
        n, p = _varint(b, p)
        return p + n
    if t in (9, 10):
        h = b[p]
        p += 1
        n = h >> 4
        if n == 15:
            n, p = _varint(b, p)
        for _ in range(n):
            p = _skip(b, p, h & 15)
        return p
    if t == 11:
        n, p = _varint(b, p)
        if n:
            kv = b[p]
            p += 1
            for _ in range(n):
                p = _skip(b, _skip(b, p, kv >> 4), kv & 15)
        return p
    if t == 12:
        return _struct(b, p)[1]
    raise ValueError(f"thrift type {t}")


def _struct(b: bytes, p: int) -> tuple[dict[int, Any], int]:
    """A thrift compact struct: its i32 fields and nested structs by field id."""
    fid, out = 0, {}
    while True:
        h = b[p]
        p += 1
        if h == 0:
            return out, p
        t, d = h & 15, h >> 4
        if d:
            fid += d
        else:
            v, p = _varint(b, p)
            fid = (v >> 1) ^ -(v & 1)
        if t == 5:
            v, p = _varint(b, p)
            out[fid] = (v >> 1) ^ -(v & 1)
        elif t in (1, 2):
            out[fid] = t == 1
        elif t == 12:
            out[fid], p = _struct(b, p)
        else:
            p = _skip(b, p, t)


def page_spans(path: str, column: str) -> list[tuple[int, int, int, int, int]]:
    """``(offset of the body, compressed, uncompressed, uncompressed level bytes, row group)``
    of every data page of ``column`` in ``path``, by walking the page headers."""
    import pyarrow.parquet as pq

    md = pq.ParquetFile(path).metadata
    leaf = [md.schema.column(i).path.split(".")[0] for i in range(md.num_columns)].index(column)
    out = []
    with open(path, "rb") as f:
        for rg in range(md.num_row_groups):
            c = md.row_group(rg).column(leaf)
            start = c.dictionary_page_offset or c.data_page_offset
            f.seek(start)
            chunk = f.read(c.total_compressed_size)
            p = 0
            while p < len(chunk):
                h, body = _struct(chunk, p)
                comp, unc = h[3], h[2]
                if h[1] in (0, 3):  # DATA_PAGE, DATA_PAGE_V2
                    v2 = h.get(8)
                    levels = (v2.get(5, 0) + v2.get(6, 0)) if isinstance(v2, dict) else 0
                    out.append((start + body, comp, unc, levels, rg))
                p = body + comp
    return out


def _zstd(largest: int) -> Any:
    """``decompress(frame, size) -> uint8 array``: zstd at its cheapest — one context,
    reused, decompressing into one buffer, reused (the system's libzstd through ctypes;
    pyarrow's codec, which allocates both per call, where there is none)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("zstd")
    if name is None:
        import pyarrow as pa

        codec = pa.Codec("zstd")
        return lambda frame, size: np.frombuffer(codec.decompress(frame, decompressed_size=size, asbytes=False),
                                                 np.uint8)
    lib = ctypes.CDLL(name)
    lib.ZSTD_createDCtx.restype = ctypes.c_void_p
    lib.ZSTD_decompressDCtx.restype = ctypes.c_size_t
    lib.ZSTD_decompressDCtx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                        ctypes.c_size_t]
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    dctx = lib.ZSTD_createDCtx()
    out = np.empty(largest, np.uint8)
    dst = out.ctypes.data

    def decompress(frame: bytes, size: int) -> np.ndarray:
        n = lib.ZSTD_decompressDCtx(dctx, dst, size, frame, len(frame))
        if lib.ZSTD_isError(n) or n != size:
            raise RuntimeError(f"zstd: {n} bytes, wanted {size}")
        return out[:size]

    return decompress


def phase_pages(data: str, pages: int, rounds: int) -> None:
    import youmu

    youmu.set_num_threads(1)
    idx = youmu.PageIndex(data, columns=["input_ids"])
    spans: list[tuple[str, int, int, int, int]] = []
    for path in idx.files:
        spans += [(path, *s[:4]) for s in page_spans(path, "input_ids")]
    if len(spans) != len(idx):
        raise SystemExit(f"{len(spans)} data pages walked, the index has {len(idx)}")
    ids = youmu.Permutation(len(idx), seed=1).range()[:pages]
    fds = {p: os.open(p, os.O_RDONLY) for p in idx.files}
    decompress = _zstd(max(s[3] for s in spans))

    def youmu_pass() -> int:
        n = 0
        for i in range(0, len(ids), 8):
            for b in idx.read_pages(ids[i:i + 8]):
                n += b.nbytes
        return n

    def limit_pass() -> int:
        n = 0
        for i in ids:
            path, off, comp, unc, levels = spans[i]
            raw = os.pread(fds[path], comp, off)
            out = decompress(raw[levels:], unc - levels)
            n += out.copy().nbytes + levels  # the one copy, into memory of its own as a page's must be
        return n

    youmu_pass(), limit_pass()  # warm: page cache, pool, codec
    res: dict[str, list[float]] = {"youmu_wall": [], "youmu_cpu": [], "limit_wall": [], "limit_cpu": []}
    for _ in range(rounds):
        for name, f in (("youmu", youmu_pass), ("limit", limit_pass)):
            t, c = time.perf_counter(), time.process_time()  # every thread of the process
            f()
            res[name + "_wall"].append(time.perf_counter() - t)
            res[name + "_cpu"].append(time.process_time() - c)
    n = len(ids)
    emit({"unit": "pages/s", "pages": n, **{k: n / statistics.median(v) for k, v in res.items()},
          "fast_decoded": youmu.io_stats().get("fast_decoded_pages")})


# -- lightning: bench_trainers's two Lightning contenders, both orders -------------------------
def lightning_pairs(pairs: int = 4) -> dict[str, Any] | None:
    """Lightning fed by ``YoumuDataModule`` and by a plain ``DataLoader`` (``bench_trainers``,
    DDP over 2 CPU ranks), ``pairs`` runs alternating which goes first: the median
    samples/s of each, their ratio and each pair's ratio. The training step dominates these
    runs, so single pairs scatter by ±8 % on this machine; the medians are the figure."""
    import json
    import subprocess

    youmu, plain, each = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for k in range(pairs):
            order = ("lightning-youmu", "lightning-map")[::1 if k % 2 == 0 else -1]
            out = Path(d) / f"trainers{k}.json"
            proc = subprocess.run([sys.executable, str(HERE / "bench_trainers.py"), "--contenders", ",".join(order),
                                   "--out", str(out)], capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                return None
            got = {r["contender"]: r["samples_per_s"] for r in json.loads(out.read_text())["results"]}
            youmu.append(got["lightning-youmu"])
            plain.append(got["lightning-map"])
            each.append(youmu[-1] / plain[-1])
            print(f"[lightning {k}] youmu {youmu[-1]:,.0f} vs plain {plain[-1]:,.0f} samples/s", flush=True)
    y, m = statistics.median(youmu), statistics.median(plain)
    return {"youmu": y, "map": m, "ratio": y / m, "each": each, "pairs": pairs}


# -- epoch: compare_peers's phases, alternated ------------------------------------------------
def epoch_pairs(peers: str, data: str, work: str, pairs: int = 2) -> dict[str, float] | None:
    """youmu's page-shuffled epoch and HF ``datasets`` map-style's (``compare_peers``, each phase
    in a fresh interpreter, HF in the peers' venv; its Arrow conversion cached in ``work``),
    ``pairs`` times alternated: the median rows/s per Arrow batch of each and their ratio."""
    script = str(HERE / "compare_peers.py")
    args = ("--data", data, "--seconds", "120", "--work", work)
    got: dict[str, list[dict[str, Any]]] = {"youmu": [], "hf": []}
    for _ in range(pairs):
        for name, phase, python in (("youmu", "youmu page shuffle|batch", None),
                                    ("hf", "HF datasets map-style .shuffle()|batch", peers)):
            try:
                got[name].append(run_phase(script, phase, *args, python=python, timeout=1800))
            except PhaseFailed as e:
                print(e, file=sys.stderr)
                return None
            print(f"[epoch {name}] {got[name][-1]['rows_per_s']:,.0f} rows/s", flush=True)
    med = {k: statistics.median(r["rows_per_s"] for r in v) for k, v in got.items()}
    rss = {k: statistics.median(r.get("peak_rss_mb", 0.0) for r in v) for k, v in got.items()}
    return {"youmu": med["youmu"], "hf": med["hf"], "ratio": med["youmu"] / med["hf"], "youmu_rss": rss["youmu"],
            "hf_rss": rss["hf"]}


# -- tokenize and dbl: bench_text's runs ---------------------------------------------------
def phase_text(docs: int, repeat: int) -> None:
    import bench_text as bt
    import pyarrow as pa
    import pyarrow.parquet as pq

    from youmu.streams.batched import BATCH_ROWS
    from youmu.text import Tokenize

    texts = bt.corpus(docs)
    tok = bt.tokenizer(texts, 16_000)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "text.parquet"
        pq.write_table(pa.table({"text": texts}), path, row_group_size=1024, compression="zstd")
        runs = [
            ("limit", lambda: bt.limit(tok, texts, BATCH_ROWS)),
            # the same tokenizer in 2 fork workers, half the batches each, one count handed
            # over per batch: what two tokenizing processes make on this machine's cores
            ("limit2w", lambda: bt.limit_in_worker(tok, texts, BATCH_ROWS, 2)),
            # ... and handing over what youmu's workers hand over (padded batches of 8 through
            # SendCollate): the hand-off's share of the gap, apart from youmu's stream
            ("send2w", lambda: bt.encode_and_send(tok, texts, BATCH_ROWS, 2, 8)),
            # windows of 256 rows: the default window holds the whole --quick set, and workers
            # are dealt whole windows (one worker would tokenize it all, the other idle)
            ("workers", lambda: bt.youmu_stream(path, Tokenize(tok), 2, batch_size=8, send=True, buffer_size=256)),
            ("dbl", lambda: bt.dbl_stream(path, Tokenize(tok), 2, buffer_size=256)),
        ]
        wall, cpu, n, _ = bt.median_of(runs, repeat)
    out = {"unit": "tokens/s", "tokens": n}
    for name in wall:
        out[f"{name}_wall"], out[f"{name}_cpu"] = n / wall[name], n / cpu[name]
    emit(out)


# -- vision: YoumuDataset + VisionTransform against decode + resize alone ------------------
def phase_vision(mb: int, repeat: int) -> None:
    import bench_vision as bv
    import pyarrow.parquet as pq

    from youmu.torch import YoumuDataset
    from youmu.vision import ByteTokenizer, VisionTransform, load_image

    with tempfile.TemporaryDirectory() as d:
        paths = [str(p) for p in bv.generate(Path(d), mb << 20, 50_000, 400_000)]
        images = [r["bytes"] for p in paths for r in pq.read_table(p, columns=["image"]).column("image").to_pylist()]
        transform = VisionTransform(ByteTokenizer())

        def youmu_pass() -> int:
            ds = YoumuDataset(paths, columns=["image", "conversations", "id"], shuffle="page", output="python",
                              transform=transform, seed=0)
            return sum(len(s["image_grid_thw"]) for s in ds)

        def limit_pass() -> int:
            for b in images:
                load_image(b)
            return len(images)

        res: dict[str, list[float]] = {"youmu_wall": [], "youmu_cpu": [], "limit_wall": [], "limit_cpu": []}
        for _ in range(repeat):
            for name, f in (("youmu", youmu_pass), ("limit", limit_pass)):
                t, c = time.perf_counter(), _cpu()
                n = f()
                res[name + "_wall"].append(n / (time.perf_counter() - t))
                res[name + "_cpu"].append(n / (_cpu() - c))
    emit({"unit": "images/s", "images": len(images), **{k: statistics.median(v) for k, v in res.items()}})


# -- budget: bench_page_peak's measurement ---------------------------------------------------
def phase_budget(page_mb: int, budget_mb: int) -> None:
    import bench_page_peak as bp

    with tempfile.TemporaryDirectory() as d:
        big, warm = Path(d) / "big.parquet", Path(d) / "warm.parquet"
        images = 25
        page = bp.write(big, images, (page_mb << 20) // images, 3, "none")
        bp.write(warm, 2, 1 << 16, 1, "none")
        res = bp.run_case(big, warm, page, budget_mb << 20)
    cap = 1.5 * budget_mb if page_mb <= budget_mb else 2.0 * page_mb
    emit({"unit": "MB", "page_mb": page_mb, "budget_mb": budget_mb, "added_mb": res["added_mb"], "cap_mb": cap})


# -- odb: padding at W=3 -----------------------------------------------------------------------
def phase_odb(n: int | None) -> None:
    # The whole proxy set by default (54,424 samples, ~2 s): with fewer samples the epoch's
    # last, partly filled grouping pool (per rank) weighs more, and it pads more than a full
    # one (8,192 samples over 3 ranks is 2.67 pools each: 1.30 % instead of 1.19 %).
    from synthetic import proxy_lengths

    from youmu.batching.algo.simulation import simulate

    lengths = proxy_lengths("sharegpt4o", n)
    pct = {w: 100 * simulate(lengths, w, 12288, 1024).padding_ratio for w in (2, 3)}
    emit({"unit": "% padding", "padding_pct": pct[3], "padding_pct_w2": pct[2], "paper_lo": 0.6, "paper_hi": 1.0,
          "samples": len(lengths)})


# -- the table ---------------------------------------------------------------------------------
def _record(records: list[dict[str, Any]], key: str, stage: str, limit: str, cpu: float,
            wall: float | None, detail: str) -> None:
    """One measured stage for ``--json``: its ratio to its limit and its target."""
    target, side = TARGETS[key]
    records.append({"key": key, "stage": stage, "limit": limit, "ratio_cpu": cpu, "ratio_wall": wall,
                    "target": target, "target_is": side, "detail": detail})


def _ratio_row(stage: str, limit: str, r: dict[str, Any], you: str, lim: str,
               records: list[dict[str, Any]], key: str | None) -> str:
    """One table row of ``you`` against ``lim`` in ``r``; recorded for the plot under
    ``key`` (``None``: a row that explains another, not a stage with a target)."""
    cw, cc = r[f"{you}_wall"] / r[f"{lim}_wall"], r[f"{you}_cpu"] / r[f"{lim}_cpu"]
    if key is not None:
        _record(records, key, stage, limit, cc, cw,
                f"{r[f'{you}_cpu']:,.0f} vs {r[f'{lim}_cpu']:,.0f} {r['unit']} per CPU s")
    return (f"| {stage} | {limit} | {r[f'{you}_cpu']:,.0f} vs {r[f'{lim}_cpu']:,.0f} {r['unit']} per CPU s "
            f"| **{cc:.2f}** | {cw:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="about a minute: smaller data, fewer repeats")
    ap.add_argument("--only", default=",".join(STAGES), help=f"comma-separated stages of {', '.join(STAGES)}")
    ap.add_argument("--data", default="bench-data/tokens", help="the datagen token set (written if missing)")
    ap.add_argument("--peers-python", default=PEERS_PYTHON)
    ap.add_argument("--work", default="bench-data/peers-work", help="the HF baseline's Arrow conversion (cached)")
    ap.add_argument("--json", type=Path, help="also write the measured stages here (for plot_limits.py)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--arg", nargs="*", default=[], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phase:
        fn = {"pages": phase_pages, "text": phase_text, "vision": phase_vision, "budget": phase_budget,
              "odb": phase_odb}[a.phase]
        fn(*[None if x == "None" else (x if not x.lstrip("-").isdigit() else int(x)) for x in a.arg])
        return
    only = set(a.only.split(","))
    q = a.quick
    me = str(Path(__file__).resolve())
    rows: list[str] = []
    records: list[dict[str, Any]] = []

    def stage(name: str, phase: str, *args: Any, env: dict[str, str] | None = None) -> dict[str, Any] | None:
        t0 = time.perf_counter()
        try:
            r = run_phase(me, phase, "--arg", *map(str, args), env=env, timeout=1800)
        except PhaseFailed as e:
            rows.append(f"| {name} | | failed: {e.cause} | | |")
            print(e, file=sys.stderr)
            return None
        print(f"[{name}: {time.perf_counter() - t0:.0f} s] {r}", flush=True)
        return r

    if "pages" in only:
        from datagen import generate

        data = a.data + ("-quick" if q else "")
        generate(Path(data), 0.1 if q else 0.5)
        r = stage("page decode", "pages", data, 200 if q else 400, 3 if q else 7)
        if r:
            rows.append(_ratio_row("a random page, 1 thread (list<int32>, zstd, 1 MiB pages)",
                                   "pread + zstd decompression (reused context and buffer) + one copy of the same "
                                   "pages", r, "youmu", "limit", records, "page decode"))
    if "tokenize" in only:
        r = stage("text", "text", 800 if q else 4000, 1 if q else 3, env={"RAYON_NUM_THREADS": "1"})
        if r:
            rows.append(_ratio_row("online tokenization, 2 DataLoader workers (short texts)",
                                   "tokenizers encode_batch alone", r, "workers", "limit", records,
                                   "tokenization"))
            rows.append(_ratio_row("the same, against the tokenizer in as many workers",
                                   "encode_batch in 2 fork workers, a count handed over per batch", r, "workers",
                                   "limit2w", records, None))
            rows.append(_ratio_row("the tokenizer in 2 workers, handing over the same padded batches of 8",
                                   "encode_batch in 2 fork workers, a count handed over per batch", r, "send2w",
                                   "limit2w", records, None))
            rows.append(_ratio_row("online tokenization, 2 DataLoader workers (short texts)",
                                   "the tokenizer in 2 workers with the same hand-off", r, "workers", "send2w",
                                   records, None))
            rows.append(_ratio_row("DynamicBatchLoader handing samples from 2 workers",
                                   "the batched hand-off (batches of 8, SendCollate)", r, "dbl", "workers", records,
                                   "DBL hand-off"))
    if "vision" in only:
        r = stage("vision", "vision", 12 if q else 48, 1 if q else 3)
        if r:
            rows.append(_ratio_row("image-text samples (VisionTransform, in the process)",
                                   "decode + resize alone (Pillow, load_image)", r, "youmu", "limit", records, "images"))
    if "epoch" in only:
        peers = None if q else peers_python(a.peers_python)
        if peers is None:
            why = "not in --quick" if q else "skipped: needs make peers-venv"
            rows.append(f"| a shuffled epoch per Arrow batch | HF datasets map-style (goal ≥ 3×) | {why} | | |")
        else:
            r = epoch_pairs(peers, a.data, a.work)
            if r:
                rows.append(f"| a shuffled epoch per Arrow batch (input_ids + doc_id, batches of 1,024 rows, "
                            f"buffer 8,192) | HF datasets map-style .shuffle() (goal ≥ 3×) | {r['youmu']:,.0f} vs "
                            f"{r['hf']:,.0f} rows/s (peak RSS {r['youmu_rss']:,.0f} vs {r['hf_rss']:,.0f} MB) | | "
                            f"**{r['ratio']:.2f}×** |")
    if "budget" in only:
        for page_mb, budget_mb in ((24, 64),) if q else ((24, 64), (160, 64)):
            r = stage(f"budget {page_mb}/{budget_mb}", "budget", page_mb, budget_mb)
            if r:
                key = "memory budget" if page_mb <= budget_mb else "memory, a page over the budget"
                _record(records, key, f"memory_budget={budget_mb} MB, {page_mb} MB pages",
                        f"RSS growth ≤ {r['cap_mb']:.0f} MB", r["added_mb"] / r["cap_mb"], None,
                        f"+{r['added_mb']:.0f} MB")
                rows.append(f"| memory_budget={budget_mb} MB, {page_mb} MB pages | RSS growth ≤ {r['cap_mb']:.0f} MB "
                            f"| +{r['added_mb']:.0f} MB | **{r['added_mb'] / r['cap_mb']:.2f}** of the cap | |")
    if "lightning" in only:
        if q:
            rows.append("| Lightning fed by youmu | a plain DataLoader over the same tensors | not in --quick | | |")
        else:
            r = lightning_pairs()
            if r:
                _record(records, "Lightning", "Lightning fed by youmu (YoumuDataModule)", "a plain DataLoader",
                        r["ratio"], r["ratio"], f"{r['youmu']:,.0f} vs {r['map']:,.0f} samples/s")
                rows.append(f"| Lightning fed by youmu (`YoumuDataModule`, DDP over 2 CPU ranks, a 1-layer GPT-2) | "
                            f"a plain DataLoader over the same rows in memory | {r['youmu']:,.0f} vs {r['map']:,.0f} "
                            f"samples/s (median of {r['pairs']} pairs, both orders; each pair "
                            f"{', '.join(f'{x:.2f}' for x in r['each'])}) | | **{r['ratio']:.2f}** |")
    if "odb" in only:
        r = stage("odb", "odb", "None")
        if r:
            _record(records, "ODB padding", f"ODB padding, W=3 ({r['samples']:,} samples)", "the paper's 1.0 %",
                    r["padding_pct"] / 1.0, None, f"{r['padding_pct']:.2f} %")
            rows.append(f"| ODB padding, W=3, L_max 12288 (ShareGPT4o proxy, {r['samples']:,} samples; W=2: "
                        f"{r['padding_pct_w2']:.2f} %) | the paper's 0.6–1.0 % | {r['padding_pct']:.2f} % "
                        f"| {r['padding_pct'] / 1.0:.2f}× the paper's upper end | |")
    if "gpu" in only:
        import subprocess

        out = subprocess.run([sys.executable, str(HERE / "gpu_wait.py"), "--quick"], capture_output=True, text=True,
                             timeout=1800)
        last = (out.stdout.strip().splitlines() or [out.stderr.strip()[-200:]])[-1]
        rows.append(f"| the training loop's wait for data per step (GPU) | ≤ 3 ms per step | {last} | | |")
    print(f"\n## Every stage against its limit ({'--quick' if q else 'full'} run, "
          f"load average {os.getloadavg()[0]:.1f})\n")
    print("| stage | its limit | youmu vs the limit | ratio (CPU s) | ratio (wall) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(row)
    if a.json:
        import json

        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"quick": q, "load_average": os.getloadavg()[0], "stages": records},
                                     indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
