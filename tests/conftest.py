"""Shared fixtures: where the conformance corpus lives, and small dataset writers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PARQUET_TESTING = Path(os.environ.get("YOUMU_PARQUET_TESTING", ROOT.parent / "shared" / "parquet-testing"))


def parquet_testing_files() -> list[Path]:
    data = PARQUET_TESTING / "data"
    if not data.is_dir():
        return []
    return sorted(p for p in data.rglob("*.parquet"))


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    data = PARQUET_TESTING / "data"
    if not data.is_dir():
        pytest.skip(f"conformance corpus not found at {data} (expected ../shared/parquet-testing beside the repo)")
    return data
