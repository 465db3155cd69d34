"""Differential fuzzing of page decoding: flip bits and bytes inside the data pages of
generated Parquet files and compare what youmu and pyarrow make of each damaged file.

Each flip has one outcome per reader: ``same`` (the original values), ``raised`` (an
error; for youmu only a ``YoumuError`` counts), or ``silent`` (other values, no error).
youmu may never return other values where pyarrow raises, and may not be silently
wrong more often than pyarrow overall. Used by ``tests/unit/pages/test_fuzz_differential.py``
(a fixed seed, CI-sized) and ``benches/fuzz_differential.py`` (thousands of flips).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import youmu

__all__ = ["FILES", "Flip", "Report", "fuzz"]


def _lengths(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    return rng.integers(lo, hi, n)


def _tokens(rng: np.random.Generator) -> pa.Table:
    """The column youmu is built for: list<int32>, no nulls, no empty lists."""
    return pa.table({"input_ids": pa.array(
        [rng.integers(0, 50_000, k).astype(np.int32) for k in _lengths(rng, 200, 1, 30)], pa.list_(pa.int32()))})


def _int_lists(rng: np.random.Generator) -> pa.Table:
    """list<int64> with empty lists (so decoded by arrow-rs, not the token decoder)."""
    return pa.table({"input_ids": [list(range(i % 37)) for i in range(300)]})


def _strings(rng: np.random.Generator) -> pa.Table:
    words = ["", "a", "token", "ümlaut", "longer words here", "x" * 40]
    return pa.table({"text": pa.array(
        [None if rng.random() < 0.1 else " ".join(rng.choice(words, rng.integers(0, 4))) for _ in range(300)],
        pa.string())})


def _nullable(rng: np.random.Generator) -> pa.Table:
    ids = [None if rng.random() < 0.1 else [None if rng.random() < 0.1 else int(v)
                                             for v in rng.integers(-1000, 1000, rng.integers(0, 12))]
           for _ in range(250)]
    score = [None if rng.random() < 0.2 else float(v) for v in rng.integers(0, 100, 250)]
    return pa.table({"ids": pa.array(ids, pa.list_(pa.int64())), "score": pa.array(score, pa.float64())})


def _nested(rng: np.random.Generator) -> pa.Table:
    turns = pa.list_(pa.struct([("role", pa.string()), ("ids", pa.list_(pa.int32()))]))
    rows = [[{"role": str(rng.choice(["user", "assistant"])),
              "ids": [int(v) for v in rng.integers(0, 500, rng.integers(0, 6))]}
             for _ in range(rng.integers(0, 4))] for _ in range(150)]
    return pa.table({"chat": pa.array(rows, turns), "ids2": pa.array(
        [[[int(v) for v in rng.integers(0, 9, rng.integers(0, 3))] for _ in range(rng.integers(0, 3))]
         for _ in range(150)], pa.list_(pa.list_(pa.int16())))})


#: The generated files: a table maker per kind of column.
FILES: dict[str, Callable[[np.random.Generator], pa.Table]] = {
    "tokens": _tokens,
    "int_lists": _int_lists,
    "strings": _strings,
    "nullable": _nullable,
    "nested": _nested,
}

#: How each file is written: (page version, compression, page CRCs, page index, dictionary).
WRITES = [
    (v, c, crc, pi, d)
    for v in ("1.0", "2.0")
    for c in ("none", "snappy", "zstd")
    for crc in (False, True)
    for pi in (True, False)
    for d in (False, True)
]


@dataclass
class Flip:
    """One damaged file and what each reader made of it."""

    file: str
    write: str
    offset: int
    change: str
    youmu: str
    pyarrow: str
    detail: str = ""
    pyarrow_detail: str = ""
    saved: str = ""


@dataclass
class Report:
    """Outcome counts over all flips: ``counts[(youmu, pyarrow)]``."""

    counts: Counter = field(default_factory=Counter)
    worse: list[Flip] = field(default_factory=list)
    untyped: list[Flip] = field(default_factory=list)

    def silent(self, reader: str) -> int:
        i = 0 if reader == "youmu" else 1
        return sum(n for k, n in self.counts.items() if k[i] == "silent")

    def table(self) -> str:
        rows = ["| youmu | pyarrow | flips |", "|---|---|---|"]
        for (y, p), n in sorted(self.counts.items()):
            rows.append(f"| {y} | {p} | {n} |")
        return "\n".join(rows)


def _write(table: pa.Table, path: Path, write: tuple) -> None:
    version, codec, crc, page_index, dictionary = write
    # written here: the writer settings are what the fuzzer varies
    pq.write_table(table, path, data_page_version=version, compression=codec, write_page_checksum=crc,
                   write_page_index=page_index, use_dictionary=dictionary, data_page_size=512,
                   write_batch_size=64, dictionary_pagesize_limit=4096)


def _data_page_ranges(path: Path) -> list[tuple[int, int]]:
    """[start, end) of every column chunk's data pages (headers included)."""
    md = pq.ParquetFile(path).metadata
    out = []
    for rg in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(rg).column(c)
            start = col.data_page_offset
            chunk_start = col.dictionary_page_offset if col.has_dictionary_page else start
            out.append((start, chunk_start + col.total_compressed_size))
    return out


def _pyarrow(data: bytes, want: pa.Table) -> tuple[str, str]:
    try:
        got = pq.read_table(pa.BufferReader(data))
    except Exception as e:  # noqa: BLE001 - any refusal counts as noticing
        return "raised", f"{type(e).__name__}: {e}"
    return ("same" if got.equals(want) else "silent"), ""


def _youmu(path: Path, want: pa.Table, fast: bool) -> tuple[str, str]:
    youmu.set_fast_decode(fast)
    try:
        idx = youmu.PageIndex(path)
        got = pa.Table.from_batches(idx.read_pages(range(len(idx))), schema=idx.schema)
    except youmu.YoumuError as e:
        return "raised", str(e)
    except Exception as e:  # noqa: BLE001 - an untyped error is a failure of its own
        return "untyped", f"{type(e).__name__}: {e}"
    finally:
        youmu.set_fast_decode(True)
    return ("same" if got.equals(want) else "silent"), ""


def _flips(rng: random.Random, data: bytes, ranges: list[tuple[int, int]]) -> Iterator[tuple[int, str, bytes]]:
    while True:
        start, end = rng.choice(ranges)
        at = rng.randrange(start, end)
        d = bytearray(data)
        if rng.random() < 0.7:
            bit = rng.randrange(8)
            d[at] ^= 1 << bit
            yield at, f"bit {bit}", bytes(d)
        else:
            v = rng.randrange(256)
            if v == d[at]:
                v ^= 0xFF
            d[at] = v
            yield at, f"byte {v:#04x}", bytes(d)


def fuzz(work: Path, flips: int, seed: int = 0, per_file: int = 8, keep: bool = False) -> Report:
    """Run `flips` flips over the generated files (`per_file` flips for each file written);
    with `keep`, each file youmu misread where pyarrow refused it is kept in `work`."""
    rng = random.Random(seed)
    report = Report()
    done = 0
    writes = list(WRITES)
    while done < flips:
        for name, make in FILES.items():
            write = rng.choice(writes)
            good = work / f"{name}.parquet"
            _write(make(np.random.default_rng(rng.randrange(1 << 30))), good, write)
            data = good.read_bytes()
            want_pa = pq.read_table(good)
            idx = youmu.PageIndex(good)
            want_ym = pa.Table.from_batches(idx.read_pages(range(len(idx))), schema=idx.schema)
            assert want_ym.to_pylist() == want_pa.to_pylist(), f"{name} {write}: youmu misreads the intact file"
            bad = work / f"{name}-flip.parquet"
            for at, change, damaged in islice(_flips(rng, data, _data_page_ranges(good)), per_file):
                if done >= flips:
                    return report
                done += 1
                p, p_detail = _pyarrow(damaged, want_pa)
                bad.write_bytes(damaged)
                # both decoders where the token decoder applies: each must hold on its own
                for fast in (True, False) if name == "tokens" else (True,):
                    y, detail = _youmu(bad, want_ym, fast)
                    flip = Flip(name, f"{write} fast={fast}", at, change, y, p, detail, p_detail)
                    report.counts[(y, p)] += 1
                    if y == "untyped":
                        report.untyped.append(flip)
                    elif y == "silent" and p == "raised":
                        report.worse.append(flip)
                        if keep:
                            flip.saved = str(work / f"worse-{len(report.worse)}.parquet")
                            Path(flip.saved).write_bytes(damaged)
                    elif y == "raised" and str(bad) not in detail:
                        report.untyped.append(flip)
    return report
