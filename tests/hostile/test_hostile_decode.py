"""The hostile user, decoding family: damaged data pages and forged saved indexes.

A damaged page is refused with a ``CorruptFileError`` naming the file, the column and
the row group wherever pyarrow refuses it, on both decoders (the token decoder and the
arrow-rs path); a saved index whose checksum was recomputed over forged tables is
refused as a damaged "index file", never loaded to read other rows.
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import youmu

# -- damaged data pages --------------------------------------------------------------


def _read_all(path: Path) -> list:
    idx = youmu.PageIndex(path)
    return pa.Table.from_batches(idx.read_pages(range(len(idx))), schema=idx.schema).to_pylist()


def _pyarrow_refuses(data: bytes) -> bool:
    try:
        pq.read_table(pa.BufferReader(data))
    except Exception:  # noqa: BLE001 - any refusal
        return True
    return False


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("fast", [True, False])
def test_flipped_level_bits_of_a_list_page_are_refused_where_pyarrow_refuses(
    tmp_path: Path, version: str, fast: bool
) -> None:
    """list<int64> with empty lists (so the arrow-rs path, where arrow-rs built other rows),
    every bit of the first data pages' headers and levels flipped in turn."""
    good = tmp_path / "t.parquet"
    table = pa.table({"input_ids": [list(range(i % 37)) for i in range(300)]})
    # written here: the page version and encodings are what the flipped bits attack
    pq.write_table(table, good, compression="none", use_dictionary=False, data_page_size=512, write_batch_size=64,
                   data_page_version=version, write_page_index=True)
    data = good.read_bytes()
    want = table.to_pylist()
    start = pq.ParquetFile(good).metadata.row_group(0).column(0).data_page_offset
    bad = tmp_path / "flip.parquet"
    refused = 0
    youmu.set_fast_decode(fast)
    try:
        for byte in range(start, start + 120):
            for bit in range(8):
                d = bytearray(data)
                d[byte] ^= 1 << bit
                if not _pyarrow_refuses(bytes(d)):
                    continue
                bad.write_bytes(d)
                try:
                    got = _read_all(bad)
                except youmu.YoumuError as e:
                    assert str(bad) in str(e), e
                    refused += 1
                    continue
                assert got == want, f"byte {byte} bit {bit}: pyarrow refuses, youmu returned other rows"
    finally:
        youmu.set_fast_decode(True)
    assert refused > 50


def test_flipped_bits_of_a_token_page_beside_other_columns_are_refused_where_pyarrow_refuses(
    tmp_path: Path,
) -> None:
    """Token ids with a document id: the token decoder reads the token column, arrow-rs
    the id; every bit of the token column's first page header and levels flipped in turn."""
    good = tmp_path / "t.parquet"
    table = pa.table({"input_ids": [list(range(1 + i % 37)) for i in range(300)], "doc_id": np.arange(300)})
    # written here: uncompressed v1 pages, so the flipped bits are the header's and the levels'
    pq.write_table(table, good, compression="none", use_dictionary=False, data_page_size=512, write_batch_size=64,
                   write_page_index=True)
    data = good.read_bytes()
    want = table.to_pylist()
    before = youmu.io_stats()["fast_decoded_pages"]
    assert _read_all(good) == want
    assert youmu.io_stats()["fast_decoded_pages"] > before  # the token decoder is what the flips attack
    start = pq.ParquetFile(good).metadata.row_group(0).column(0).data_page_offset
    bad = tmp_path / "flip.parquet"
    refused = 0
    for byte in range(start, start + 80):
        for bit in range(8):
            d = bytearray(data)
            d[byte] ^= 1 << bit
            if not _pyarrow_refuses(bytes(d)):
                continue
            bad.write_bytes(d)
            try:
                got = _read_all(bad)
            except youmu.YoumuError as e:
                assert str(bad) in str(e), e
                refused += 1
                continue
            assert got == want, f"byte {byte} bit {bit}: pyarrow refuses, youmu returned other rows"
    assert refused > 50


def test_a_level_above_the_maximum_names_file_column_and_row_group(tmp_path: Path) -> None:
    """A nullable list column: a definition level turned into one above the column's
    maximum (an RLE run's value) is refused by name, as pyarrow refuses it."""
    path = tmp_path / "n.parquet"
    rows = [None if i % 5 == 0 else [i, None, i + 1] for i in range(40)]
    # written here: v2 pages, plain and uncompressed, so the level bytes can be found and patched
    pq.write_table(pa.table({"ids": pa.array(rows, pa.list_(pa.int64()))}), path, compression="none",
                   use_dictionary=False, data_page_version="2.0", write_page_index=True)
    data = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    # levels of width 2 (max 3) hold bytes 0..3 as run values; find a flip pyarrow calls malformed
    for at in range(start, start + 200):
        for bit in range(8):
            d = bytearray(data)
            d[at] ^= 1 << bit
            try:
                pq.read_table(pa.BufferReader(bytes(d)))
                continue
            except Exception as e:  # noqa: BLE001
                if "Malformed levels" not in str(e):
                    continue
            bad = tmp_path / "bad.parquet"
            bad.write_bytes(d)
            with pytest.raises(youmu.CorruptFileError) as err:
                _read_all(bad)
            msg = str(err.value)
            assert str(bad) in msg and "row group 0" in msg and "ids" in msg, msg
            assert "level" in msg, msg
            return
    pytest.fail("no flip made a malformed level")


# -- forged saved indexes ------------------------------------------------------------


@dataclass
class Field:
    """Where a number of the saved layout lies: byte offset and struct format."""

    at: int
    fmt: str
    what: str


def _parse(payload: bytes) -> tuple[list[Field], int]:
    """The numbers of a saved index's tables (`persist.rs`, format 3, local files), and
    where its last file ends."""
    fields: list[Field] = []
    pos = 8

    def take(fmt: str, what: str) -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<" + fmt, payload, pos)
        fields.append(Field(pos, fmt, what))
        pos += struct.calcsize(fmt)
        return v

    def blob() -> None:
        nonlocal pos
        n = take("Q", "length")
        pos += n

    take("I", "version")
    if take("B", "columns tag"):
        for _ in range(take("I", "column count")):
            blob()
    take("B", "int96 unit")
    for _ in range(take("I", "file count")):
        blob()  # path
        take("Q", "size")
        take("q", "mtime")
        assert take("B", "stamp") == 0
        blob()  # footer
        nrg = take("I", "row groups")
        nleaves = take("I", "leaves")
        for _ in range(nrg):
            take("B", "page source")
            located = take("B", "has locations")
            if located:
                for _ in range(nleaves):
                    for _ in range(take("I", "page count")):
                        take("q", "page offset")
                        take("I", "page size")
                        take("q", "page first row")
            for _ in range(take("I", "page starts")):
                take("Q", "page start" if located else "page start (no locations)")
    return fields, pos


def _seal(payload: bytes) -> bytes:
    """The checksum trailer as `checksum.rs` writes it: CRC32, then YOUMUCRC."""
    return payload + struct.pack("<I", zlib.crc32(payload)) + b"YOUMUCRC"


def _set(payload: bytes, f: Field, value: int) -> bytes:
    b = bytearray(payload)
    struct.pack_into("<" + f.fmt, b, f.at, value)
    return bytes(b)


@pytest.fixture(scope="module")
def two_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("forge")
    paths = []
    for k in range(2):
        p = d / f"{k}.parquet"
        # written here: tiny pages with and without an offset index, the layouts a forged index lies about
        pq.write_table(pa.table({"a": np.arange(100 * k, 100 * k + 100, dtype=np.int64),
                                 "ids": [list(range(i % 7)) for i in range(100)]}),
                       p, data_page_size=64, write_batch_size=10, write_page_index=True, row_group_size=50)
        paths.append(p)
    return paths


def _forged(tmp_path: Path, payload: bytes, name: str) -> Path:
    p = tmp_path / f"{name}.youmu"
    p.write_bytes(_seal(payload))
    return p


def _refused_as_index_file(path: Path) -> None:
    with pytest.raises(youmu.CorruptFileError) as e:
        idx = youmu.PageIndex.load(path)
        idx.read_pages(range(len(idx)))
    assert "index file" in str(e.value) and str(path) in str(e.value), e.value


def test_forged_indexes_with_a_recomputed_checksum_are_refused(two_files: list[Path], tmp_path: Path) -> None:
    payload = youmu.PageIndex(two_files).to_bytes()[:-12]
    fields, end = _parse(payload)
    assert end == len(payload)
    by = {}
    for f in fields:
        by.setdefault(f.what, []).append(f)
    (count,) = by["file count"]
    # one file fewer: the second file's bytes are left over
    _refused_as_index_file(_forged(tmp_path, _set(payload, count, 1), "fewer"))
    # bytes after the last file
    _refused_as_index_file(_forged(tmp_path, payload + b"\0" * 8, "trailing"))
    # a page-start table shifted by one row (in a row group with page locations to check
    # it against): pages would hold other rows
    second = by["page start"][1]
    value = struct.unpack_from("<Q", payload, second.at)[0]
    _refused_as_index_file(_forged(tmp_path, _set(payload, second, value + 1), "shifted"))
    # page locations out of order, or outside their column chunk
    offsets = by["page offset"]
    a, b = struct.unpack_from("<q", payload, offsets[0].at)[0], struct.unpack_from("<q", payload, offsets[1].at)[0]
    swapped = _set(_set(payload, offsets[0], b), offsets[1], a)
    _refused_as_index_file(_forged(tmp_path, swapped, "swapped"))
    _refused_as_index_file(_forged(tmp_path, _set(payload, offsets[0], 0), "outside"))
    # a first row that is not row 0, a page size of 0
    firsts = by["page first row"]
    _refused_as_index_file(_forged(tmp_path, _set(payload, firsts[0], 1), "first-row"))
    _refused_as_index_file(_forged(tmp_path, _set(payload, by["page size"][0], 0), "empty-page"))


def test_a_fuzz_of_forged_tables_never_reads_other_rows(two_files: list[Path], tmp_path: Path) -> None:
    """Numbers of the tables changed, the checksum recomputed: a load either refuses the
    index with a typed error or reads exactly the rows the intact index reads. (Where a
    row group has no page locations — its pages continue rows — the page starts come
    from a header scan and cannot be checked without one: a forged start there moves a
    page boundary, the rows read stay the file's.)"""
    idx = youmu.PageIndex(two_files)
    payload = idx.to_bytes()[:-12]
    want = pa.Table.from_batches(idx.read_pages(range(len(idx)))).to_pylist()
    fields, _ = _parse(payload)
    tables = [f for f in fields if f.what not in ("version", "columns tag", "int96 unit", "length", "stamp",
                                                  "size", "mtime")]
    rng = random.Random(7)
    accepted = refused = 0
    p = tmp_path / "forged.youmu"
    for _ in range(400):
        f = rng.choice(tables)
        (v,) = struct.unpack_from("<" + f.fmt, payload, f.at)
        bits = struct.calcsize(f.fmt) * 8
        new = rng.choice([v + 1, v - 1, v + rng.randrange(2, 1000), v ^ (1 << rng.randrange(bits)), 0])
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if f.fmt.islower() else (0, (1 << bits) - 1)
        if not lo <= new <= hi or new == v:
            continue
        p.write_bytes(_seal(_set(payload, f, new)))
        try:
            other = youmu.PageIndex.load(p)
            got = pa.Table.from_batches(other.read_pages(range(len(other)))).to_pylist()
        except youmu.YoumuError:
            refused += 1
            continue
        accepted += 1
        assert got == want, f"{f.what} at byte {f.at}: {v} -> {new} loads and reads other rows"
    assert refused > 200


def test_random_bytes_of_a_sealed_index_of_every_column_kind_give_a_typed_error_or_the_rows(
        tmp_path: Path) -> None:
    """Any byte of a saved index changed (strings, schema and tables alike), the checksum
    recomputed: loading and reading it either raises a ``YoumuError`` or reads the
    files' rows — never an untyped error from a layer below (an outside fuzz once saw
    ``pyarrow.lib.ArrowInvalid`` escape, 2 in 2,000; not reproduced since, kept as a guard
    over strings, structs, lists of structs, timestamps and dictionaries)."""
    paths = []
    for k in range(2):
        n = 120
        t = pa.table({"id": np.arange(n), "text": [f"row {i} " * (i % 5) for i in range(n)],
                      "st": pa.array([{"x": i, "y": str(i)} for i in range(n)]),
                      "msgs": pa.array([[{"role": "user", "content": "hi" * (i % 3)}] * (i % 3) for i in range(n)]),
                      "ts": pa.array(np.arange(n).astype("datetime64[ms]")),
                      "dict": pa.array([["a", "b", "c"][i % 3] for i in range(n)]).dictionary_encode()})
        paths.append(tmp_path / f"{k}.parquet")
        # written here: every column kind, with and without a page index, for the forged index to describe
        pq.write_table(t, paths[-1], data_page_size=128, write_batch_size=10, write_page_index=bool(k),
                       row_group_size=60)
    payload = youmu.PageIndex(paths).to_bytes()[:-12]
    rng = random.Random(11)
    p = tmp_path / "flipped.youmu"
    for _ in range(300):
        b = bytearray(payload)
        for _ in range(rng.choice([1, 1, 2, 4])):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256) if rng.random() < 0.5 else b[i] ^ (1 << rng.randrange(8))
        p.write_bytes(_seal(bytes(b)))
        try:
            idx = youmu.PageIndex.load(p)
            batches = idx.read_pages(range(len(idx)))
            idx.read_rows(np.arange(min(10, idx.num_rows)))
            _ = idx.schema, repr(idx), idx.columns
            if batches:
                pa.Table.from_batches(batches)
        except youmu.YoumuError:
            continue
