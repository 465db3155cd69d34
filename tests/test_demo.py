"""The README's first command stays working: the demo trains a few steps both ways.

Runs ``examples/demo.py`` as a user would (2 spawned DDP ranks over Gloo), on the corpus
it builds from this machine's Python sources, for a handful of steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("batching", ["odb", "packing"])
def test_demo_trains_and_summarises(out: Path, batching: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--steps", "4", "--batching", batching, "--out", str(out)],
        capture_output=True, text=True, timeout=850,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batching"] == batching
    assert summary["steps_per_rank"] == {"0": 4, "1": 4}  # every rank takes the same steps
    assert 0.0 <= summary["padding_ratio"] < (0.2 if batching == "odb" else 1e-9)
    assert summary["tokens"] > 0 and summary["first_loss"] > 0
    assert (out / "training.png").exists()
    if batching == "odb":
        assert summary["odb_metrics_rank0"]["samples"] > 0
