"""``examples/elastic_resume.py`` runs (a small corpus): a job preempted and resumed on
4 → 3 → 2 ranks and 2 → 1 DataLoader workers, through ``YoumuDataset`` with
``StatefulDataLoader`` and through ``DynamicBatchLoader``, trains every row exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic_resume.py"


@pytest.mark.timeout(900)
def test_elastic_resume_example_trains_every_row_once(tmp_path):
    pytest.importorskip("torchdata")
    run = subprocess.run([sys.executable, str(EXAMPLE), "--rows", "384", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=880)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    verified = [line for line in run.stdout.splitlines() if line.startswith("verified:")]
    assert len(verified) == 2, run.stdout
    for line in verified:
        assert line.endswith("every row trained exactly once") and "of 384 rows" in line, line
    assert "4x2 -> 3x1 -> 2x1" in verified[0]
