"""The SFT demo runs end to end at a tiny size from the main demo's ``--sft`` flag: chats
generated in UltraChat's layout with Table 10's length shape, published to a local Hub
and read as ``hf://datasets/...``, a tokenizer trained here,
online chat templating in DataLoader workers, the Hugging Face Trainer on 2 ranks over
Gloo with dynamic batches, fixed batches and packing; a summary and a plot."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
ROWS = 64


@pytest.mark.timeout(1500)  # six trainer processes start; minutes on a loaded 2-core machine
def test_sft_demo_tiny(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--sft", "--rows", str(ROWS), "--pool", "32",
         "--token-budget", "1024", "--seq-len", "512", "--hub", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=1480,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "sft.png").stat().st_size > 10_000
    d = s["dataset"]
    # read where such data is published: the local Hub, through hf:// (resolve, redirect, ranged reads)
    assert d["source"] == "hf://datasets/youmu/sft-chats/data/ultrachat.parquet"
    assert d["rows"] == ROWS and d["truncated"] == 0  # cutoff_len above every sample, as in the paper
    assert 0.25 < d["lengths"]["cv"] < 0.75 and d["lengths"]["mean"] > 60  # UltraChat's shape, scaled by 1/8
    odb, fixed, packed = s["modes"]["odb"], s["modes"]["fixed"], s["modes"]["pack"]
    for m in (odb, fixed):  # every chat exactly once per epoch
        assert m["samples"] == m["unique_samples"] == ROWS and m["duplicate_samples"] == 0
        assert m["real_tokens"] == d["tokens"]
    # packing: no sample twice (one </s> each); the ranks stop together, so the longer
    # rank's last packed rows may be left out
    assert ROWS // 2 <= packed["samples"] <= ROWS
    assert d["tokens"] // 2 <= packed["real_tokens"] <= d["tokens"] + ROWS
    assert odb["padding_ratio"] < fixed["padding_ratio"]
    assert packed["padding_ratio"] < fixed["padding_ratio"]
    assert odb["max_padded_tokens_per_batch"] <= max(1024, d["lengths"]["max"])
    for m in (odb, fixed, packed):
        losses = [v for _, v in m["loss_curve"]]
        assert all(math.isfinite(v) and v > 0 for v in losses) and m["samples_per_s"] > 0
        # an untrained model starts near uniform over the vocabulary
        assert abs(losses[0] - math.log(d["tokenizer_vocab"])) < 1.0
        assert m["steps"] > 0 and len(m["peak_rss_mb"]) == 2
