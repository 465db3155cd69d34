"""Peak memory of a page larger than the memory budget: read alone, without read-ahead,
it costs about that page — its bytes and the values decoded from them — not a
multiple of it (benches/bench_page_peak.py measures the same thing, with the figures
in benches/RESULTS.md).

The peak is measured in a fresh interpreter (``VmHWM`` after resetting it, so imports
and set-up do not count) and checked as a ratio to the page's size with a margin, so
the test does not depend on the machine: the floor is 2× (a binary column's values are
copied out of the page); before youmu released page-sized buffers and kept the slices
it hands on small, a stream of such pages peaked at 2.7–5.7×.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from page_peak import run_case, write

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's VmHWM reset")


@pytest.mark.parametrize("codec", ["none", "snappy"])
def test_a_page_over_the_budget_peaks_at_about_the_page(tmp_path, codec) -> None:
    path, warm = tmp_path / "big.parquet", tmp_path / "warm.parquet"
    page = write(path, 25, 1 << 20, 3, codec)  # three row groups, each one page of 25 × 1 MB
    write(warm, 2, 1000, 1, codec)
    res = run_case(path, warm, page, budget=4 << 20)
    assert res["rows"] == 75
    assert res["peak_over_page"] <= 2.9, res
