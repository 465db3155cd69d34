"""Shared fixtures (the conformance corpus, an S3 server) and markers of every test folder.

The folders (``docs/contributing.md`` says what goes where): ``unit/<layer>`` one folder per
layer of ``python/youmu``, ``promises`` what the project promises across layers (goldens,
the loader contract, saved formats, the guards of the layout), ``hostile`` bad input,
``integrations`` the trainers, Ray, object stores and the Hub, ``system`` whole jobs (the
release wheel, the demos and examples), ``support`` what they share (helpers, the
multi-process job scripts, pinned JSON fixtures; on pytest's ``pythonpath``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """A real S3-compatible server for one test module: moto on 127.0.0.1 behind a proxy
    that can inject faults (``tests/support/s3util.py``); its bucket is ``youmu-test``."""
    from s3util import S3

    server = S3()
    yield server
    server.stop()
