"""Conformance: every readable column of every parquet-testing file, read page by page
through youmu, equals what pyarrow reads, value for value (types and nulls included).
A column youmu cannot read must raise a typed ``YoumuError`` — never wrong data — and
each column's outcome is pinned (``conformance_outcomes.json``), so a column that
matched today and raises tomorrow fails the suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from where import PARQUET_TESTING, SUPPORT, parquet_testing_files

import youmu

FILES = parquet_testing_files()
#: files whose values take long to read (45 s: strings of a 4 kB file decompress to gigabytes): make test-system
SLOW_FILES = {"large_string_map.brotli.parquet"}
RESULTS: dict[str, list[str]] = {"matched": [], "raised": [], "pyarrow_cannot_read": []}


def _columns(path: Path) -> list[str] | None:
    try:
        return pq.read_schema(path).names
    except Exception:
        return None


def _same(expected: pa.ChunkedArray, got: pa.ChunkedArray) -> bool:
    if got.type != expected.type:
        # arrow-rs and pyarrow may pick equivalent encodings (e.g. large vs small
        # offsets, dictionary vs plain): compare values after casting to pyarrow's type.
        try:
            got = got.cast(expected.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
    if expected.combine_chunks().equals(got.combine_chunks()):
        return True
    if pa.types.is_temporal(expected.type):
        # to_pylist() refuses nanosecond values that datetime cannot hold
        expected, got = expected.cast(pa.int64()), got.cast(pa.int64())
    return _values_equal(expected.to_pylist(), got.to_pylist())


def _values_equal(a: object, b: object) -> bool:
    """Structural equality where NaN equals NaN (Arrow's equals() says it does not)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    return a == b


def _outcome(path: Path, col: str) -> str:
    """``equal``, ``error:<YoumuError class>`` or ``pyarrow_cannot_read`` for one column
    (any other outcome — an untyped exception, different values — fails the test)."""
    try:
        expected = pq.read_table(path, columns=[col]).column(0)
    except Exception:
        return "pyarrow_cannot_read"
    try:
        idx = youmu.PageIndex(path, columns=[col])
        batches = idx.read_pages(range(len(idx)))
    except youmu.YoumuError as e:
        return f"error:{type(e).__name__}"
    key = f"{path.name}:{col}"
    assert sum(b.num_rows for b in batches) == idx.num_rows == len(expected), key
    got = pa.chunked_array([b.column(0) for b in batches]) if batches else pa.chunked_array([], type=expected.type)
    assert _same(expected, got), f"{key}: youmu's pages differ from pyarrow's values"
    return "equal"


def _file_outcomes(path: Path) -> dict[str, str]:
    columns = _columns(path)
    if columns is None:
        # pyarrow cannot read the file at all: youmu must fail cleanly too (or read it).
        try:
            youmu.PageIndex(path)
            return {"*": "pyarrow_cannot_read;youmu_opens"}
        except youmu.YoumuError as e:
            return {"*": f"pyarrow_cannot_read;error:{type(e).__name__}"}
    return {col: _outcome(path, col) for col in columns}


def _file_key(path: Path) -> str:
    return str(path.relative_to(PARQUET_TESTING / "data"))


# The pinned outcome of every column of the corpus: a change from "equal" to a typed error
# (or between error classes) is a change of behaviour and must be made on purpose, by
# regenerating this file (`PYTHONPATH=tests/support python tests/promises/test_conformance.py --pin`) in the same commit.
PINNED_PATH = SUPPORT / "conformance_outcomes.json"
PINNED: dict[str, dict[str, str]] = json.loads(PINNED_PATH.read_text()) if PINNED_PATH.exists() else {}


@pytest.mark.skipif(not FILES, reason=f"conformance corpus not found under {PARQUET_TESTING}")
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_FILES else p for p in FILES],
                         ids=[p.name for p in FILES])
def test_every_column_matches_pyarrow_or_raises_its_pinned_typed_error(path: Path) -> None:
    outcomes = _file_outcomes(path)
    for col, outcome in outcomes.items():
        key = f"{path.name}:{col}"
        kind = "matched" if outcome == "equal" else "raised" if outcome.startswith("error:") else "pyarrow_cannot_read"
        RESULTS[kind].append(key)
    pinned = PINNED.get(_file_key(path))
    assert pinned is not None, f"{_file_key(path)} has no pinned outcome: run `PYTHONPATH=tests/support python tests/promises/test_conformance.py --pin`"
    changed = {c: (pinned.get(c), o) for c, o in outcomes.items() if pinned.get(c) != o}
    changed.update({c: (o, None) for c, o in pinned.items() if c not in outcomes})
    assert not changed, f"{_file_key(path)}: outcome changed (pinned, now): {changed}"


def _int96_columns(path: Path) -> list[str]:
    try:
        schema = pq.read_metadata(path).schema
    except Exception:
        return []
    cols = {schema.column(i).path.split(".")[0] for i in range(len(schema)) if schema.column(i).physical_type == "INT96"}
    return sorted(cols)


INT96_FILES = [p for p in FILES if _int96_columns(p)]
# Julian days past 2^31 (5.8 million years): pyarrow reads the day as unsigned, arrow-rs
# (like Spark and Impala, which write the type) as signed, so such rows have two answers.
_SIGNED_DAYS_LIMIT = (2**31 - 2_440_588) * 86_400
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@pytest.mark.skipif(not INT96_FILES, reason="no INT96 file in the conformance corpus")
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("path", INT96_FILES, ids=[p.name for p in INT96_FILES])
def test_int96_columns_equal_pyarrow_in_each_unit_that_holds_them(path: Path, unit: str) -> None:
    """With ``coerce_int96_timestamp_unit``, youmu reads what pyarrow reads where the
    value fits the unit, and raises ``ValueOverflowError`` (file, column, row group) where
    pyarrow returns a wrapped value."""
    for col in _int96_columns(path):
        expected = pq.read_table(path, columns=[col], coerce_int96_timestamp_unit=unit).column(0)
        seconds = pq.read_table(path, columns=[col], coerce_int96_timestamp_unit="s").column(0)
        seconds = seconds.cast(pa.int64()).to_pylist()
        limit = 2**63 // _PER_SECOND[unit] - 1
        same_day = [i for i, v in enumerate(seconds) if v is None or abs(v) < _SIGNED_DAYS_LIMIT]
        fits = [i for i in same_day if seconds[i] is None or abs(seconds[i]) < limit]
        idx = youmu.PageIndex(path, columns=[col], coerce_int96_timestamp_unit=unit)
        got = idx.read_rows(fits).column(0)
        want = expected.take(pa.array(fits, pa.int64()))
        assert got.cast(pa.int64()).to_pylist() == want.cast(pa.int64()).to_pylist(), f"{path.name}:{col} {unit}"
        if len(fits) < len(same_day):
            with pytest.raises(youmu.ValueOverflowError) as e:
                idx.read_pages(range(len(idx)))
            assert str(path) in str(e.value) and f'"{col}"' in str(e.value) and "row group" in str(e.value)


def test_zz_report_conformance_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """Print the tally (runs last by name): matched / raising / total readable columns."""
    if not FILES:
        pytest.skip("conformance corpus absent")
    total = len(RESULTS["matched"]) + len(RESULTS["raised"])
    line = (
        f"parquet-testing conformance: {len(RESULTS['matched'])} columns matched, "
        f"{len(RESULTS['raised'])} raised a typed YoumuError, {total} readable by pyarrow in total "
        f"({len(RESULTS['pyarrow_cannot_read'])} files/columns pyarrow itself cannot read)"
    )
    with capsys.disabled():
        print("\n" + line)
        print("raised: " + json.dumps(RESULTS["raised"]))
    assert total > 0


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--pin"]:
        sys.exit("usage: PYTHONPATH=tests/support python tests/promises/test_conformance.py --pin   (rewrites tests/support/conformance_outcomes.json)")
    pins = {_file_key(p): _file_outcomes(p) for p in FILES}
    PINNED_PATH.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
    print(f"pinned {sum(len(v) for v in pins.values())} outcomes of {len(pins)} files")
