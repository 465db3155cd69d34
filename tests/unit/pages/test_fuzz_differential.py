"""Differential fuzzing of page decoding against pyarrow (see ``tests/support/flipfuzz.py``).

Single-bit and byte flips inside the data pages of generated files — lists of ints,
strings, nullable and nested columns, page v1 and v2, uncompressed, snappy and zstd,
with and without page CRCs, page indexes and dictionaries — and youmu (both of its
decoders) must return the original values or raise a typed error wherever pyarrow
raises, and be silently wrong no more often than pyarrow. A fixed seed: the same flips
every run. ``benches/fuzz_differential.py --flips N`` runs the long version.
"""

from __future__ import annotations

from pathlib import Path

from flipfuzz import fuzz  # noqa: E402

#: flips of the CI run (a few seconds a thousand)
FLIPS = 2000


def test_youmu_is_never_silently_wrong_where_pyarrow_refuses(tmp_path: Path) -> None:
    report = fuzz(tmp_path, FLIPS, seed=20261126)
    assert not report.untyped, "\n".join(map(str, report.untyped[:10]))
    assert not report.worse, "\n".join(map(str, report.worse[:10]))
    assert report.silent("youmu") <= report.silent("pyarrow"), report.table()
    # the flips did damage: both readers refused many files (a fuzz that cannot fail would not)
    assert report.counts[("raised", "raised")] > FLIPS // 10, report.table()
