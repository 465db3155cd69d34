"""The README's first command stays working, and so do the examples users copy.

Runs ``examples/demo.py`` as a user would (2 spawned DDP ranks over Gloo) for a handful
of steps, on a reduced corpus built from this machine's Python sources (site-packages
capped at 1 MB each, so the build takes seconds), with ODB and with packing; runs the
custom-transform example on that corpus; and compiles every example (the HF Trainer one
needs ``transformers``, which is optional).
"""

from __future__ import annotations

import json
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("batching", ["odb", "packing"])
def test_demo_trains_and_summarises(out: Path, batching: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--steps", "4", "--batching", batching,
         "--corpus-mb", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=550,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batching"] == batching
    assert summary["steps_per_rank"] == {"0": 4, "1": 4}  # every rank takes the same steps
    assert 0.0 <= summary["padding_ratio"] < (0.2 if batching == "odb" else 1e-9)
    assert summary["tokens"] > 0 and summary["first_loss"] > 0 and summary["tokens_per_s"] > 0
    for stage in ("stage 1", "stage 2"):
        shares = summary["mixture"][stage]["sources"]
        assert "stdlib.tomllib" in shares and all({"target", "realised"} <= set(v) for v in shares.values())
    assert (out / "training.png").exists()
    assert "tokens/s" in proc.stdout and "realised share / target" in proc.stdout
    if batching == "odb":
        assert summary["odb_metrics_rank0"]["samples"] > 0


@pytest.mark.timeout(300)
def test_custom_transform_example(out: Path) -> None:
    corpus = out / "corpus"
    if not (corpus / "manifest.json").exists():
        pytest.skip("needs the corpus the demo test builds")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_transform.py"), str(corpus / "stdlib.json"),
         "--tokenizer", str(corpus / "tokenizer.json"), "--batches", "2"],
        capture_output=True, text=True, timeout=250,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "batch 1:" in proc.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_compile(path: Path, tmp_path: Path) -> None:
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)
