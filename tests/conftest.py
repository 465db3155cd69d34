"""Shared fixtures and markers of every test folder.

The folders (``docs/contributing.md`` says what goes where): ``unit/<layer>`` one folder per
layer of ``python/youmu``, ``promises`` what the project promises across layers (goldens,
the loader contract, saved formats, the guards of the layout), ``hostile`` bad input,
``integrations`` the trainers, Ray, object stores and the Hub, ``system`` whole jobs (the
release wheel, the demos and examples), ``support`` what they share (helpers, the
multi-process job scripts, pinned JSON fixtures; on pytest's ``pythonpath``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from where import PARQUET_TESTING, TESTS

SYSTEM = TESTS / "system"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under ``tests/system`` is marked ``system``: its own CI stage (``make
    test-system``), not ``make test``."""
    for item in items:
        if SYSTEM in Path(item.path).parents:
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    data = PARQUET_TESTING / "data"
    if not data.is_dir():
        pytest.skip(f"conformance corpus not found at {data} (expected ../shared/parquet-testing beside the repo)")
    return data
