"""Where the repository's parts are, for tests in any folder of ``tests/`` and their helpers.

``tests/support`` is on pytest's ``pythonpath`` (``pyproject.toml``); a test file run as a
script (to rewrite a pinned fixture) needs it on ``PYTHONPATH``.

Example::

    from where import SUPPORT
    cases = (SUPPORT / "golden_streams.json").read_text()
"""

from __future__ import annotations

import os
from pathlib import Path

#: tests/support: the helpers the tests import, the multi-process job scripts and the pinned JSON fixtures
SUPPORT = Path(__file__).resolve().parent
#: the repository's root
ROOT = SUPPORT.parents[1]
TESTS = ROOT / "tests"
BENCHES = ROOT / "benches"
EXAMPLES = ROOT / "examples"
#: the conformance corpus (apache/parquet-testing), beside the repository unless the variable says where
PARQUET_TESTING = Path(os.environ.get("YOUMU_PARQUET_TESTING", ROOT.parent / "shared" / "parquet-testing"))


def parquet_testing_files() -> list[Path]:
    """Every Parquet file of the conformance corpus, sorted; none where it is absent."""
    data = PARQUET_TESTING / "data"
    if not data.is_dir():
        return []
    return sorted(p for p in data.rglob("*.parquet"))
