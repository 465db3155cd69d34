"""The VLM demo runs end to end at a tiny size, from its own script and from the main
demo's ``--vlm`` flag: an image-text Parquet drawn with Pillow, 2 ranks over Gloo, ODB
and fixed batches, a summary and a plot; and it shows on screen the figures that say
whether ODB cost model quality: each run's held-out loss per token, the caption
(supervised) tokens its optimizer updates average over, and the measured reason for the
gap that remains (how alike an update's samples are, and the control experiment's
figures)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("PIL")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_vlm_demo_tiny(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--vlm", "--rows", "48", "--pool", "16",
         "--token-budget", "512", "--patch-budget", "1024", "--heldout-rows", "12", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "vlm.png").stat().st_size > 10_000
    assert s["dataset"]["rows"] == 48 and s["dataset"]["patches_max_over_min"] >= 5
    odb, fixed = s["modes"]["odb"], s["modes"]["fixed"]
    assert odb["unique_samples"] == 48 and odb["samples"] == 48  # every row once
    assert fixed["unique_samples"] == 48
    assert odb["max_patches_per_batch"] <= 1024  # the second budget (no image alone exceeds it)
    assert odb["padding_ratio"] < fixed["padding_ratio"]
    assert all(v > 0 for _, v in odb["loss_curve"]) and odb["samples_per_s"] > 0
    # one yardstick for both runs: the loss on a held-out set of another seed, after the epoch
    assert 0 < odb["heldout_loss"] < 20 and 0 < fixed["heldout_loss"] < 20
    assert (tmp_path / "data" / "heldout.parquet").exists()
    # ODB's steps hold 1 to ~20 captions (its budgets count image tokens); its updates
    # accumulate them into the fixed arm's caption tokens per update (TokenUpdates), so
    # the two runs' updates average over the same supervised tokens
    target = s["settings"]["update_tokens"]
    assert odb["steps"] > odb["updates"] and abs(odb["updates"] - fixed["updates"]) <= 1
    assert odb["loss_tokens_per_update_cv"] < odb["loss_tokens_per_step_cv"]
    assert abs(odb["loss_tokens_per_update_mean"] - target) < 0.35 * target
    assert abs(fixed["loss_tokens_per_update_mean"] - target) < 0.1 * target
    # ... and the screen says so, with each run's held-out loss
    screen = proc.stdout
    assert "held-out loss per token" in screen and "caption (supervised) tokens per optimizer update" in screen
    for name in ("odb", "fixed"):
        r = s["modes"][name]
        assert f"{name}: held-out {r['heldout_loss']:.3f}; {r['updates']} updates" in screen
        assert f"CV {r['loss_tokens_per_update_cv']:.2f}" in screen
    assert "ODB held-out minus fixed" in screen
    assert s["comparison"]["odb_minus_fixed"] == round(odb["heldout_loss"] - fixed["heldout_loss"], 4)
    # the measured reason: this run's figure (how alike an ODB update's samples are against
    # a fixed update's) and the control experiment's held-out figures, on one line
    reason = [line for line in screen.splitlines() if line.startswith("why: ")]
    assert len(reason) == 1, screen[-2000:]
    a, b = odb["length_cv_within_update"], fixed["length_cv_within_update"]
    assert 0 < a < 2 and 0 < b < 2
    assert f"CV within an update {a:.2f}, fixed {b:.2f}" in reason[0]
    assert s["comparison"]["length_cv_within_update"] == {"odb": a, "fixed": b}
    assert len(re.findall(r"\b[01]\.\d{3}\b", reason[0])) >= 4, reason[0]  # the replay's held-out losses
