"""The hostile user: what a careless (or unlucky) caller tries, and what comes back —
a typed ``YoumuError`` whose message names the argument, file or state field, or
correct data. Never an abort, a hang, a Rust backtrace, a wrapped value, a silent
truncation or other rows. Grouped by family; each bug found adds a case to its family.

Cases that aborted the interpreter before run in a subprocess, so an abort fails one
test instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_fixtures import write_columns, write_ids, write_table, write_token_rows
from torch.utils.data import DataLoader

import youmu
from youmu.errors import ArgumentTypeError, InvalidArgumentError, StateError
from youmu.mixture import FlatMixture, MixtureDataset
from youmu.torch import MapStream, YoumuDataset, pack

ROOT = Path(__file__).resolve().parents[2]


def run_isolated(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter (an abort there is a failed test here)."""
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT / "python")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=full_env
    )


def outcomes(code: str) -> dict[str, list[str]]:
    """Each case of `code` prints one JSON line [name, exception class, message]."""
    r = run_isolated(code)
    assert r.returncode == 0, f"subprocess died (rc {r.returncode}):\n{r.stderr[-3000:]}"
    assert "panicked" not in r.stderr, r.stderr[-3000:]
    return {name: [cls, msg] for name, cls, msg in map(json.loads, r.stdout.splitlines())}


CASES_PRELUDE = """
import json, numpy as np, pyarrow as pa, pyarrow.parquet as pq, youmu
def case(name, f):
    try:
        f()
        print(json.dumps([name, "returned", ""]))
    except BaseException as e:
        print(json.dumps([name, type(e).__name__ + "|" + ",".join(c.__name__ for c in type(e).__mro__), str(e)]))
"""


def tokens(n: int, seed: int = 0, lo: int = 1, hi: int = 40) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {"input_ids": pa.array([rng.integers(0, 1000, int(k)).astype(np.int32) for k in rng.integers(lo, hi, n)],
                               pa.list_(pa.int32()))}
    )


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 rows of one int column in 10 pages of 10 rows (page i holds 10*i .. 10*i+9)."""
    path = tmp_path_factory.mktemp("small") / "a.parquet"
    write_ids(path, 100, column="a", data_page_size=64, write_batch_size=10, write_page_index=True)
    assert len(youmu.PageIndex(path)) == 10
    return path


# -- absurd sizes --------------------------------------------------------------------


@pytest.fixture(scope="module")
def absurd(tmp_path_factory: pytest.TempPathFactory, small: Path) -> dict[str, list[str]]:
    big = tmp_path_factory.mktemp("big") / "big.parquet"
    # one page of 1 MiB: reading it a million times is a terabyte
    write_columns(big, {"s": ["x" * (1 << 20)]})
    return outcomes(CASES_PRELUDE + f"""
small = youmu.PageIndex({str(small)!r}); big = youmu.PageIndex({str(big)!r})
virtual = np.broadcast_to(np.int64(0), (10**12,))   # 10^12 ids in 8 bytes of memory
case("Permutation.range", lambda: youmu.Permutation(10**12).range())
case("Permutation.take", lambda: youmu.Permutation(10**12).take(range(10**12)))
case("Permutation.inverse_take", lambda: youmu.Permutation(10**12).inverse_take(virtual))
case("read_pages virtual", lambda: small.read_pages(virtual))
case("read_pages range", lambda: small.read_pages(range(10**12)))
case("read_pages repeats", lambda: big.read_pages(np.zeros(10**6, np.int64)))
case("prefetch repeats", lambda: big.prefetch(np.zeros(10**6, np.int64)))
case("read_rows repeats", lambda: big.read_rows(np.zeros(10**7, np.int64)))
case("read_window take", lambda: small.read_window([0], take=virtual))
case("read_window repeats", lambda: big.read_window(np.zeros(10**6, np.int64)))
case("prefetch_window take", lambda: big.prefetch_window([0], take=np.zeros(10**7, np.int64)))
case("locate_rows", lambda: small.locate_rows(virtual))
fm = youmu._core.FlatMap([2**62, 2**62 - 1])
case("FlatMap.locate_many", lambda: fm.locate_many(range(10**12)))
mm = youmu._core.MixtureMap(["a", "b"], [10, 10], [(0, [1.0, 1.0])], length=2**62)
case("MixtureMap.locate_many", lambda: mm.locate_many(virtual))
case("MixtureMap.samples_many", lambda: mm.samples_many(range(10**12)))
case("MixtureMap.block_counts", lambda: mm.block_counts(0, 2**63))
case("set_num_threads huge", lambda: youmu.set_num_threads(2**40))
case("set_num_threads negative", lambda: youmu.set_num_threads(-1))
case("set_num_threads float", lambda: youmu.set_num_threads(2.0))
""")


@pytest.mark.parametrize(
    "case, names",
    [
        ("Permutation.range", "Permutation.range(0, 1000000000000)"),
        ("Permutation.take", "take() argument 'idx'"),
        ("Permutation.inverse_take", "inverse_take() argument 'idx'"),
        ("read_pages virtual", "read_pages() argument 'ids'"),
        ("read_pages repeats", "1000000 pages"),
        ("prefetch repeats", "prefetch (1000000 pages)"),
        ("read_rows repeats", "read_rows (10000000 rows)"),
        ("read_window take", "read_window() argument 'take'"),
        ("read_window repeats", "read_window (1000000 pages)"),
        ("prefetch_window take", "reordered by take (10000000 rows)"),
        ("locate_rows", "locate_rows() argument 'rows'"),
        ("FlatMap.locate_many", "locate_many() argument 'idx'"),
        ("MixtureMap.locate_many", "locate_many() argument 'idx'"),
        ("MixtureMap.samples_many", "samples_many() argument 'idx'"),
    ],
)
def test_outputs_that_cannot_fit_are_a_memory_error_not_an_abort(absurd: dict, case: str, names: str) -> None:
    cls, msg = absurd[case]
    assert cls.startswith("RequestTooLargeError|") and "MemoryError" in cls and "YoumuError" in cls, (cls, msg)
    assert names in msg and "of memory is available" in msg, msg


def test_ids_beyond_the_index_are_out_of_range_whatever_their_count(absurd: dict) -> None:
    cls, msg = absurd["read_pages range"]
    assert cls.startswith("PageOutOfRangeError|") and "IndexError" in cls, (cls, msg)
    assert "page 999999999999 is out of range" in msg


def test_thread_counts_and_block_numbers_are_bounded(absurd: dict) -> None:
    for case in ("set_num_threads huge", "set_num_threads negative"):
        cls, msg = absurd[case]
        assert cls.startswith("InvalidArgumentError|") and "ValueError" in cls, (cls, msg)
        assert "set_num_threads(n)" in msg and "1024" in msg, msg
    cls, msg = absurd["set_num_threads float"]
    assert cls.startswith("ArgumentTypeError|") and "TypeError" in cls, (cls, msg)
    cls, msg = absurd["MixtureMap.block_counts"]
    assert cls.startswith("InvalidArgumentError|") and "has no block" in msg, (cls, msg)


def test_thread_count_from_the_environment_is_clamped() -> None:
    r = run_isolated("import youmu; print(youmu.num_threads())", env={"YOUMU_NUM_THREADS": str(10**9)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) == 1024


# -- corrupt bytes -------------------------------------------------------------------


def test_a_malformed_embedded_arrow_schema_is_a_corrupt_file_without_a_backtrace(tmp_path: Path) -> None:
    # one character at a time through the base64 of the ARROW:schema key: arrow-ipc
    # panics on some of these messages ("called `Option::unwrap()` on a `None` value")
    good = tmp_path / "good.parquet"
    write_ids(good, 3, start=1, column="a")
    r = run_isolated(f"""
        import json, pyarrow.parquet as pq, youmu
        data = open({str(good)!r}, "rb").read()
        enc = pq.read_metadata({str(good)!r}).metadata[b"ARROW:schema"]
        pos = data.find(enc)
        bad = {str(tmp_path / "bad.parquet")!r}
        seen = {{"ok": 0, "malformed": 0, "corrupt": 0}}
        for i in range(16, 48):
            for c in b"AEQgw/+9":
                d = bytearray(data); d[pos + i] = c
                open(bad, "wb").write(d)
                try:
                    youmu.PageIndex(bad).read_page(0)
                    seen["ok"] += 1
                except youmu.CorruptFileError as e:
                    assert str(e).startswith(bad + ":"), e
                    seen["malformed" if "ARROW:schema" in str(e) and "malformed" in str(e) else "corrupt"] += 1
        print(json.dumps(seen))
    """, env={"RUST_BACKTRACE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "panicked" not in r.stderr and "backtrace" not in r.stderr, r.stderr[-3000:]
    seen = json.loads(r.stdout)
    assert seen["malformed"] > 0, seen  # the panicking messages were reached
    # the CLI says the same, naming the file
    from youmu.cli import inspect_file

    d = bytearray(good.read_bytes())
    enc = pq.read_metadata(good).metadata[b"ARROW:schema"]
    pos = d.find(enc)
    bad = tmp_path / "bad.parquet"
    for i in range(16, 48):
        for c in b"AEQgw/+9":
            e = bytearray(d)
            e[pos + i] = c
            bad.write_bytes(e)
            try:
                youmu.PageIndex(bad)
            except youmu.CorruptFileError as err:
                if "malformed" in str(err):
                    import io

                    out = io.StringIO()
                    assert inspect_file(str(bad), out=out) == 1
                    assert str(bad) in out.getvalue() and "ARROW:schema" in out.getvalue()
                    return
    pytest.fail("no panicking schema found")


def _single_page_token_file(path: Path, **kwargs: object) -> tuple[bytes, int, int]:
    """A token file of one uncompressed v1 data page; returns the bytes, the page's
    offset and the length of its header + levels (where a flipped bit is a level)."""
    table = tokens(200, lo=1, hi=12)
    # written here: these writer settings put the bytes to flip where this test finds them
    pq.write_table(table, path, compression="none", use_dictionary=False, write_statistics=False,
                   write_page_index=True, data_page_size=1 << 20, **kwargs)
    data = path.read_bytes()
    start = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    nvals = sum(len(x) for x in table.column(0).to_pylist())
    page = data[start:]
    for h in range(8, 64):  # header length: where the level lengths make the values add up
        rl = int.from_bytes(page[h:h + 4], "little")
        dl = int.from_bytes(page[h + 4 + rl:h + 8 + rl], "little")
        end = h + 8 + rl + dl
        if rl < 4096 and dl < 4096 and int.from_bytes(page[end + 4 * nvals:end + 4 * nvals + 4], "little") != 0:
            return data, start, end
    raise AssertionError("page layout not found")


def test_a_flipped_bit_in_token_levels_is_refused_where_pyarrow_refuses(tmp_path: Path) -> None:
    good = tmp_path / "t.parquet"
    data, start, levels_end = _single_page_token_file(good)
    expected = pq.read_table(good).column(0).to_pylist()
    bad = tmp_path / "flip.parquet"
    refused = 0
    for byte in range(start, start + levels_end):
        for bit in range(8):
            d = bytearray(data)
            d[byte] ^= 1 << bit
            bad.write_bytes(d)
            try:
                pq.read_table(bad)
                continue  # pyarrow accepts it: nothing to demand
            except Exception:
                pass
            try:
                idx = youmu.PageIndex(bad)
                got = pa.Table.from_batches(idx.read_pages(range(len(idx)))).column(0).to_pylist()
            except youmu.YoumuError as e:  # CorruptFileError; UnsupportedError for a flipped encoding
                assert str(bad) in str(e)
                refused += 1
                continue
            assert got == expected, f"byte {byte - start} bit {bit}: pyarrow refuses, youmu returned other rows"
    assert refused > 100


def test_a_flipped_bit_in_a_checksummed_page_is_refused_by_both_decoders(tmp_path: Path) -> None:
    good = tmp_path / "t.parquet"
    data, start, levels_end = _single_page_token_file(good, write_page_checksum=True)
    bad = tmp_path / "flip.parquet"
    try:
        for fast in (True, False):
            youmu.set_fast_decode(fast)
            for byte in (levels_end - 3, levels_end + 17, levels_end + 400):  # levels, values
                d = bytearray(data)
                d[start + byte] ^= 0x10
                bad.write_bytes(d)
                idx = youmu.PageIndex(bad)
                with pytest.raises(youmu.CorruptFileError) as e:
                    idx.read_pages(range(len(idx)))
                msg = str(e.value)
                assert str(bad) in msg and "row group 0" in msg and "page 0" in msg, msg
                assert "checksum" in msg.lower() or "crc" in msg.lower(), msg
    finally:
        youmu.set_fast_decode(True)
    # intact checksums read as before
    idx = youmu.PageIndex(good)
    assert pa.Table.from_batches(idx.read_pages(range(len(idx)))).equals(pq.read_table(good))


def test_every_bit_flip_of_a_saved_index_is_refused_or_harmless(small: Path, tmp_path: Path) -> None:
    idx = youmu.PageIndex(small)
    blob = idx.to_bytes()
    want = [b.column(0).to_pylist() for b in idx.read_pages(range(len(idx)))]
    accepted = 0
    for bit in range(len(blob) * 8):
        b = bytearray(blob)
        b[bit // 8] ^= 1 << (bit % 8)
        try:
            other = youmu.PageIndex.from_bytes(bytes(b))
        except (youmu.CorruptFileError, youmu.StaleIndexError):
            continue
        accepted += 1
        assert other.num_rows == idx.num_rows
        assert [x.column(0).to_pylist() for x in other.read_pages(range(len(other)))] == want, bit
    assert accepted == 0  # a checksum catches every single-bit flip


def test_damaged_index_files_say_index_file_not_parquet(small: Path, tmp_path: Path) -> None:
    saved = tmp_path / "a.youmu"
    youmu.PageIndex(small).save(saved)
    blob = saved.read_bytes()
    for name, content in [("truncated", blob[: len(blob) // 2]), ("random", os.urandom(300)), ("empty", b""),
                          ("tail", blob[:-1])]:
        p = tmp_path / f"{name}.youmu"
        p.write_bytes(content)
        with pytest.raises(youmu.CorruptFileError) as e:
            youmu.PageIndex.load(p)
        assert str(p) in str(e.value) and "index file" in str(e.value) and "Parquet file" not in str(e.value)
    with pytest.raises(youmu.CorruptFileError, match="this is a Parquet file, not a saved index"):
        youmu.PageIndex.load(small)
    old = bytearray(blob)
    old[8:12] = (1).to_bytes(4, "little")  # an index written by format 1
    (tmp_path / "old.youmu").write_bytes(old)
    with pytest.raises(youmu.StaleIndexError, match="format 1.*rebuild it"):
        youmu.PageIndex.load(tmp_path / "old.youmu")


# -- values that do not fit ----------------------------------------------------------


@pytest.fixture(scope="module")
def far_future(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import datetime as dt

    path = tmp_path_factory.mktemp("int96") / "far.parquet"
    ts = pa.array([dt.datetime(2000, 1, 1), dt.datetime(2300, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)],
                  pa.timestamp("us"))
    # as Spark writes: INT96, no Arrow schema recording a unit (the writer options under test)
    pq.write_table(pa.table({"ts": ts}), path, use_deprecated_int96_timestamps=True, store_schema=False)
    return path


def test_int96_beyond_the_unit_is_an_overflow_error_not_a_wrapped_value(far_future: Path) -> None:
    for unit in (None, "ns"):
        idx = youmu.PageIndex(far_future, coerce_int96_timestamp_unit=unit)
        assert idx.schema.field("ts").type == pa.timestamp("ns")
        with pytest.raises(youmu.ValueOverflowError) as e:
            idx.read_page(0)
        assert isinstance(e.value, OverflowError)
        msg = str(e.value)
        assert str(far_future) in msg and '"ts"' in msg and "row group 0" in msg and "2300-01-01" in msg, msg
        with pytest.raises(youmu.ValueOverflowError):
            idx.read_rows([1])
    assert idx.read_rows([0]).column(0).to_pylist()[0].year == 2000  # the rows that fit still read


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_int96_read_in_a_unit_that_holds_it_equals_pyarrow(far_future: Path, tmp_path: Path, unit: str) -> None:
    idx = youmu.PageIndex(far_future, coerce_int96_timestamp_unit=unit)
    assert idx.coerce_int96_timestamp_unit == unit
    expected = pq.read_table(far_future, coerce_int96_timestamp_unit=unit)
    assert pa.Table.from_batches(idx.read_pages(range(len(idx)))).equals(expected)
    idx.save(tmp_path / "far.youmu")  # the unit is part of the saved index
    again = youmu.PageIndex.load(tmp_path / "far.youmu")
    assert again.coerce_int96_timestamp_unit == unit and again.schema == idx.schema


def test_an_unknown_int96_unit_is_refused_by_name(far_future: Path) -> None:
    with pytest.raises(youmu.InvalidArgumentError, match="coerce_int96_timestamp_unit must be"):
        youmu.PageIndex(far_future, coerce_int96_timestamp_unit="days")


# -- argument types ------------------------------------------------------------------

BAD_IDS = {
    "float array": np.array([1.0]),
    "float list": [1.5],
    "bool list": [True],
    "bool array": np.array([True, False]),
    "bytes": b"\x01",
    "str": "12",
    "2-d": np.zeros((2, 2), np.int64),
    "0-d": np.array(3),
    "object array": np.array([1, 2], dtype=object),
    "set": {1, 2},
    "int": 3,
}


def _id_methods(idx: youmu.PageIndex) -> dict:
    perm = youmu.Permutation(10)
    mm = youmu._core.MixtureMap(["a", "b"], [5, 5], [(0, [1.0, 1.0])])
    return {
        "read_pages() argument 'ids'": idx.read_pages,
        "read_rows() argument 'rows'": idx.read_rows,
        "locate_rows() argument 'rows'": idx.locate_rows,
        "prefetch() argument 'ids'": idx.prefetch,
        "read_window() argument 'ids'": idx.read_window,
        "read_window() argument 'take'": lambda x: idx.read_window([0], take=x),
        "prefetch_window() argument 'ids'": idx.prefetch_window,
        "prefetch_window() argument 'take'": lambda x: idx.prefetch_window([0], take=x),
        "take() argument 'idx'": perm.take,
        "inverse_take() argument 'idx'": perm.inverse_take,
        "locate_many() argument 'idx'": youmu._core.FlatMap([5, 5]).locate_many,
        "samples_many() argument 'idx'": mm.samples_many,
    }


@pytest.mark.parametrize("kind", list(BAD_IDS))
def test_non_integer_ids_are_a_type_error_naming_the_argument(small: Path, kind: str) -> None:
    for arg, method in _id_methods(youmu.PageIndex(small)).items():
        with pytest.raises(youmu.ArgumentTypeError) as e:
            method(BAD_IDS[kind])
        assert isinstance(e.value, TypeError) and arg in str(e.value), (arg, str(e.value))


GOOD_IDS = {
    "list": [6, 2, 4],
    "tuple": (6, 2, 4),
    "numpy scalars": [np.int64(6), np.uint8(2), np.int32(4)],
    "strided": np.arange(10)[::2][[3, 1, 2]],
    "reversed": np.array([4, 2, 6])[::-1],
    "every stride": np.arange(7)[6:1:-2][[0, 2, 1]],
    **{f"dtype {t}": np.array([6, 2, 4], dtype=t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32",
                                                            "int64", "uint64", ">i8", "<u4")},
}


@pytest.mark.parametrize("kind", list(GOOD_IDS))
def test_any_one_dimensional_integer_ids_are_accepted(small: Path, kind: str) -> None:
    idx = youmu.PageIndex(small)
    got = [b.column(0)[0].as_py() for b in idx.read_pages(GOOD_IDS[kind])]
    assert got == [60, 20, 40]
    assert youmu.Permutation(10, seed=3).take(GOOD_IDS[kind]).tolist() == youmu.Permutation(10, seed=3).take(
        [6, 2, 4]).tolist()
    assert [b.column(0)[0].as_py() for b in idx.read_pages(range(9, 0, -4))] == [90, 50, 10]


def test_single_ids_refuse_floats_and_bools(small: Path) -> None:
    idx = youmu.PageIndex(small)
    for bad in (True, 1.0, np.float64(2.0), "1"):
        for arg, call in [("read_page() argument 'i'", idx.read_page), ("page_info() argument 'i'", idx.page_info),
                          ("Permutation index", youmu.Permutation(5).__getitem__)]:
            with pytest.raises(youmu.ArgumentTypeError, match=arg.replace("(", r"\(").replace(")", r"\)")):
                call(bad)
    assert idx.read_page(np.int64(-1)).column(0)[0].as_py() == 90
    with pytest.raises(youmu.PageOutOfRangeError):
        idx.read_page(2**80)


def test_paths_and_columns_of_the_wrong_type_say_what_was_passed(small: Path) -> None:
    assert youmu.PageIndex(os.fsencode(small)).num_rows == 100  # bytes paths, as open() takes them
    with pytest.raises(youmu.ArgumentTypeError, match=r"argument 'paths' must be a path .* got int"):
        youmu.PageIndex(3)
    with pytest.raises(youmu.ArgumentTypeError, match=r"argument 'paths' .* got int"):
        youmu.PageIndex([str(small), 3])
    with pytest.raises(youmu.ArgumentTypeError, match=r"argument 'columns' must be a list .* pass \['a'\]"):
        youmu.PageIndex(small, columns="a")
    with pytest.raises(youmu.ArgumentTypeError, match=r"argument 'columns' .* item 0 is int"):
        youmu.PageIndex(small, columns=[0])
    with pytest.raises(youmu.ArgumentTypeError, match="argument 'progress' must be callable"):
        youmu.PageIndex(small, progress="yes")
    with pytest.raises(youmu.ArgumentTypeError, match="coerce_int96_timestamp_unit must be a str, got int"):
        youmu.PageIndex(small, coerce_int96_timestamp_unit=5)


def test_save_and_load_paths_of_the_wrong_type_name_the_argument(small: Path, tmp_path: Path) -> None:
    """Not PyO3's builtin TypeError naming no argument: a youmu error that says which."""
    index = youmu.PageIndex(small)
    with pytest.raises(youmu.ArgumentTypeError, match=r"PageIndex.save\(\) argument 'path' must be a path .* got int"):
        index.save(3)
    with pytest.raises(youmu.ArgumentTypeError, match=r"PageIndex.load\(\) argument 'path' must be a path .* got list"):
        youmu.PageIndex.load([str(tmp_path)])
    for path in (tmp_path / "a.idx", str(tmp_path / "b.idx"), os.fsencode(tmp_path / "c.idx")):
        index.save(path)
        assert youmu.PageIndex.load(path).num_rows == index.num_rows


# -- ambiguous names -----------------------------------------------------------------


def test_a_duplicated_column_name_is_ambiguous_not_the_first(tmp_path: Path) -> None:
    path = tmp_path / "dup.parquet"
    write_table(path, pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["a", "a"]))
    with pytest.raises(Exception, match="Multiple matches"):
        pq.read_table(path, columns=["a"])
    with pytest.raises(youmu.AmbiguousColumnError) as e:
        youmu.PageIndex(path, columns=["a"])
    assert isinstance(e.value, youmu.ColumnNotFoundError) and isinstance(e.value, ValueError)
    assert str(path) in str(e.value) and '"a"' in str(e.value) and "2 top-level columns" in str(e.value)
    both = youmu.PageIndex(path)  # all columns: both are read, in order
    assert both.read_page(0).column(1).to_pylist() == ["x", "y"]


# -- callbacks -----------------------------------------------------------------------


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError])
def test_a_progress_callback_that_raises_stops_the_build(tmp_path: Path, exc: type[BaseException]) -> None:
    for i in range(40):
        write_ids(tmp_path / f"{i:02}.parquet", 1, start=i, column="a")
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        raise exc("stop")

    with pytest.raises(exc, match="stop"):
        youmu.PageIndex(tmp_path, progress=progress)
    assert len(calls) <= youmu.num_threads() + 1, calls  # files not started were skipped


# -- saving --------------------------------------------------------------------------


def test_save_writes_through_a_symlink_and_keeps_it(small: Path, tmp_path: Path) -> None:
    real = tmp_path / "real.youmu"
    real.write_bytes(b"old")
    link = tmp_path / "link.youmu"
    link.symlink_to(real.name)
    youmu.PageIndex(small).save(link)
    assert link.is_symlink() and youmu.PageIndex.load(real).num_rows == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.youmu", "real.youmu"]


def test_save_refuses_what_is_not_a_regular_file(small: Path, tmp_path: Path) -> None:
    idx = youmu.PageIndex(small)
    for target, kind in [(Path("/dev/null"), "a character device"), (tmp_path, "a directory")]:
        with pytest.raises(youmu.InvalidArgumentError) as e:
            idx.save(target)
        assert f"save(path): {target} is {kind}" in str(e.value)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_failed_save_names_the_callers_path_and_leaves_nothing(small: Path, tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "a.youmu"
    with pytest.raises(youmu.YoumuIOError) as e:
        youmu.PageIndex(small).save(target)
    assert str(e.value).startswith(str(target) + ":") and ".tmp" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_saves_into_one_folder_do_not_mix(small: Path, tmp_path: Path) -> None:
    idx = youmu.PageIndex(small)
    errors: list[BaseException] = []

    def save(i: int) -> None:
        try:
            for _ in range(20):
                idx.save(tmp_path / f"{i}.youmu")
                idx.save(tmp_path / "shared.youmu")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.youmu", "1.youmu", "2.youmu", "3.youmu", "shared.youmu"]
    for p in tmp_path.iterdir():
        assert youmu.PageIndex.load(p).num_rows == 100


# -- odd files -----------------------------------------------------------------------


def test_inspect_reports_every_column_of_a_wide_file_in_one_pass(tmp_path: Path) -> None:
    from youmu.cli import inspect_file

    path = tmp_path / "wide.parquet"
    write_columns(path, {f"c{i}": np.arange(10, dtype=np.int64) for i in range(2000)})
    import io

    out = io.StringIO()
    assert inspect_file(str(path), out=out) == 0
    text = out.getvalue()
    assert text.count("pages 1 (") == 2000 and "  c1999: codec" in text


# == streams, states and the Python layers ==========================================
N = 120


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> youmu.PageIndex:
    d = tmp_path_factory.mktemp("hostile")
    write_token_rows(d / "a.parquet", 1 + np.arange(N) % 9, row_group_size=10)
    return youmu.PageIndex(str(d), columns=["input_ids", "id"])


def ds(index: youmu.PageIndex, **kw) -> YoumuDataset:
    return YoumuDataset(index, **{"shuffle": "none", "buffer_size": 20, "output": "python", **kw})


def ids(items) -> list[int]:
    return [int(x["id"]) for x in items]


# -- two iterators, one stream -------------------------------------------------------------
@pytest.mark.parametrize("make", ["youmu", "map", "pack"])
def test_two_iterators_of_one_stream_are_independent_passes(index, make) -> None:
    """Regression: ``zip(d, d)`` gave (0, 1), (1, 2), ... and a peek made the next loop
    skip a row: the iterators shared one position."""
    build = {
        "youmu": lambda: ds(index),
        "map": lambda: MapStream(list(range(30)), rank=0, world_size=1),
        "pack": lambda: pack(ds(index), seq_len=16),
    }[make]
    key = {"youmu": lambda x: x["id"], "map": lambda x: x, "pack": lambda x: x["input_ids"].tolist()}[make]
    d = build()
    whole = [key(x) for x in build()]
    pairs = list(zip(d, d))
    assert [key(a) for a, _ in pairs] == [key(b) for _, b in pairs] == whole
    next(iter(d))  # a peek
    assert [key(x) for x in d] == whole


# -- epochs --------------------------------------------------------------------------------
def test_set_epoch_reaches_persistent_dataloader_workers(index) -> None:
    """Regression: with ``persistent_workers=True`` epoch 1 repeated epoch 0's order."""
    d = ds(index, shuffle="page")
    loader = DataLoader(d, batch_size=None, num_workers=2, persistent_workers=True)
    epochs = []
    for e in range(3):
        d.set_epoch(e)
        epochs.append([int(x["id"]) for x in loader])
    fresh = []
    for e in range(3):
        ref = ds(index, shuffle="page")
        ref.set_epoch(e)
        fresh.append([int(x["id"]) for x in DataLoader(ref, batch_size=None, num_workers=2)])
    assert epochs == fresh
    assert epochs[0] != epochs[1] != epochs[2]
    assert all(sorted(e) == list(range(N)) for e in epochs)


# -- foreign and absurd states ---------------------------------------------------------------
def test_a_state_of_another_kind_of_stream_is_refused_naming_it(index) -> None:
    d = ds(index)
    next(iter(d))
    m = MapStream(list(range(N)), rank=0, world_size=1)
    with pytest.raises(StateError, match="youmu.YoumuDataset/1"):
        m.load_state_dict(d.state_dict())
    with pytest.raises(StateError, match="youmu.MapStream/1"):
        d.load_state_dict(m.state_dict())
    with pytest.raises(StateError, match="youmu.PackedDataset/1"):
        d.load_state_dict(pack(ds(index), seq_len=8).state_dict())


@pytest.mark.parametrize(
    "bad",
    [None, 3, "state", [], {}, {"format": "youmu.YoumuDataset/1"}],
)
def test_a_state_that_is_not_a_state_is_a_state_error(index, bad) -> None:
    with pytest.raises(StateError):
        ds(index).load_state_dict(bad)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("positions", {0: -3}, "ints >= 0"),
        ("positions", {0: 1.5}, "ints >= 0"),
        ("positions", {-1: 3}, "invalid worker id"),
        ("positions", {"x": 3}, "non-integer worker id"),
        ("positions", {0: 10**9}, "past the end"),
        ("positions", [1, 2], "dict of worker"),
        ("epoch", -1, "epoch"),
        ("epoch", 1.0, "must be an int"),
        ("num_workers", 0, "num_workers"),
        ("seed", 9, "seed=9"),
        ("shuffle", "page", "shuffle='page'"),
        ("world_size", 2, "world_size=2"),
    ],
)
def test_absurd_state_fields_are_refused_naming_the_field(index, field, value, message) -> None:
    d = ds(index)
    state = d.state_dict()
    state[field] = value
    with pytest.raises(StateError, match=message):
        ds(index).load_state_dict(state)


def test_positions_of_more_workers_than_saved_are_refused(index) -> None:
    state = {**ds(index).state_dict(), "num_workers": 2, "positions": {0: 1, 5: 1}}
    with pytest.raises(StateError, match="num_workers=2"):
        ds(index).load_state_dict(state)


def test_map_stream_positions_past_its_shard_are_refused() -> None:
    m = MapStream(list(range(10)), rank=0, world_size=2)
    state = {**m.state_dict(), "positions": {0: 6}}
    with pytest.raises(StateError, match="past the end"):
        MapStream(list(range(10)), rank=0, world_size=2).load_state_dict(state)


# -- arguments ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"world_size": 0, "rank": 0}, InvalidArgumentError, "world_size"),
        ({"world_size": 2, "rank": 2}, InvalidArgumentError, "rank 2"),
        ({"seed": 1.5}, ArgumentTypeError, "seed"),
        ({"seed": -1}, InvalidArgumentError, "seed"),
        ({"buffer_size": 20.0}, ArgumentTypeError, "buffer_size"),
        ({"buffer_size": 0}, InvalidArgumentError, "buffer_size"),
        ({"shuffle": "pages"}, InvalidArgumentError, "shuffle"),
        ({"output": "pandas"}, InvalidArgumentError, "output"),
        ({"drop_last": "yes"}, ArgumentTypeError, "drop_last"),
        ({"transform": 3}, ArgumentTypeError, "transform"),
        ({"memory_budget": 1.5e9}, ArgumentTypeError, "memory_budget"),
    ],
)
def test_youmu_dataset_checks_its_arguments_at_construction(index, kwargs, error, name) -> None:
    with pytest.raises(error, match=name):
        ds(index, **kwargs)


def test_columns_given_as_one_string_is_a_type_error_naming_columns(index) -> None:
    with pytest.raises(ArgumentTypeError, match="columns"):
        YoumuDataset(index, columns="input_ids")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="columns"):
        youmu.RowDataset(index, columns="input_ids")  # type: ignore[arg-type]


def test_epochs_are_ints(index) -> None:
    with pytest.raises(ArgumentTypeError, match="epoch"):
        ds(index).set_epoch(1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="epoch"):
        ds(index).set_epoch(-1)


def test_pack_checks_its_arguments_when_built_not_at_the_first_item(index) -> None:
    with pytest.raises(InvalidArgumentError, match="seq_len"):
        pack(ds(index), seq_len=0)
    with pytest.raises(ArgumentTypeError, match="seq_len"):
        pack(ds(index), seq_len=8.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="column"):
        pack(ds(index), seq_len=8, column="nope")
    with pytest.raises(ArgumentTypeError, match="iter_positions"):
        pack([1, 2, 3], seq_len=8)


@pytest.mark.parametrize("bad", [np.array([1.5]), np.array([True]), b"\x01", "1", np.zeros((1, 1), dtype=np.int64)])
def test_index_arrays_of_the_python_layers_refuse_non_integers(index, bad) -> None:
    rows = youmu.RowDataset(index)
    flat = FlatMixture({"a": rows, "b": list(range(5))}, seed=0)
    mix = MixtureDataset({"a": rows, "b": list(range(5))}, {"a": 0.5, "b": 0.5}, block_size=4)
    for call in (rows.take, flat.__getitems__, mix.__getitems__, flat.locate_many):
        with pytest.raises((ArgumentTypeError, InvalidArgumentError), match="indices"):
            call(bad)


def test_integer_index_arrays_of_any_layout_are_taken(index) -> None:
    rows = youmu.RowDataset(index)
    strided = np.arange(10)[::-2]  # reversed, non-contiguous
    assert rows.take(strided).column("id").to_pylist() == strided.tolist()
    assert rows.take(np.array([3, 4], dtype=np.uint8)).column("id").to_pylist() == [3, 4]


def test_map_stream_refuses_what_is_not_map_style() -> None:
    with pytest.raises(ArgumentTypeError, match="map-style"):
        MapStream(iter(range(3)), rank=0, world_size=1)
    with pytest.raises(InvalidArgumentError, match="run"):
        MapStream(list(range(3)), rank=0, world_size=1, run=0)


def test_set_epoch_reaches_persistent_spawned_workers(index) -> None:
    d = ds(index, shuffle="page")
    loader = DataLoader(d, batch_size=None, num_workers=1, persistent_workers=True, multiprocessing_context="spawn")
    d.set_epoch(0)
    first = [int(x["id"]) for x in loader]
    d.set_epoch(1)
    second = [int(x["id"]) for x in loader]
    ref = ds(index, shuffle="page")
    ref.set_epoch(1)
    assert second == [int(x["id"]) for x in ref] != first


# -- wrong types at the vision and stream helpers ------------------------------------------
NOT_AN_IMAGE = [None, 3, "x.png", b"not an image", {"a": 1}, [1, 2], 1.5]


@pytest.mark.parametrize("value", NOT_AN_IMAGE, ids=repr)
def test_the_image_helpers_refuse_what_is_not_an_image_by_name(value: object) -> None:
    pytest.importorskip("PIL")
    from youmu.vision import to_rgb, upright_size

    for fn in (to_rgb, upright_size):  # an AttributeError ('int' has no attribute 'mode') before
        with pytest.raises(ArgumentTypeError, match=r"img must be a PIL\.Image\.Image"):
            fn(value)


@pytest.mark.parametrize("value", [None, 3, b"x", ["a", 1], {"a": 1}, 1.5], ids=repr)
def test_the_byte_tokenizer_encodes_text_only(value: object) -> None:
    from youmu.vision import ByteTokenizer

    with pytest.raises(ArgumentTypeError, match="text must be a str"):
        ByteTokenizer().encode(value)  # type: ignore[arg-type]


def test_the_byte_tokenizer_decodes_its_own_ids_only() -> None:
    from youmu.vision import ByteTokenizer

    t = ByteTokenizer()
    assert t.decode(np.array(t.encode("hé<|im_start|>"))) == "hé<|im_start|>"
    for ids in ([-1], [t.vocab_size], [10**9]):  # a ValueError from bytearray before
        with pytest.raises(InvalidArgumentError, match=rf"range\(0, {t.vocab_size}\)"):
            t.decode(ids)
    for ids in (None, 3, ["a"], [[1]], [1.5]):  # TypeError / 'unhashable type' before
        with pytest.raises(youmu.YoumuError, match="ids must be"):
            t.decode(ids)  # type: ignore[arg-type]


def test_a_dict_not_keyed_by_position_is_no_map_style_dataset() -> None:
    with pytest.raises(InvalidArgumentError, match=r"keys are not 0\.\.1.*positions 0\.\.len\(dataset\)-1"):
        MapStream({"a": 1, "b": 2})  # a KeyError at the first read before
    assert sorted(MapStream({1: "b", 0: "a"})) == ["a", "b"]  # keyed by position: fine
