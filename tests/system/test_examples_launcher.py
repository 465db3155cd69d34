"""The examples' launcher starts ranks as ``torchrun`` would: each rank's DataLoader
workers start the platform's default way (fork on Linux), not as fresh interpreters
(what ``torch.multiprocessing.spawn`` leaves behind as its children's start method)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, sys
    sys.path.insert(0, {examples!r})
    from trainer_data import launch

    def record(rank, world, out):
        with open(f"{{out}}/rank{{rank}}.json", "w") as f:
            json.dump(multiprocessing.get_start_method(), f)

    if __name__ == "__main__":
        launch(record, 2, sys.argv[1])
    """
)


@pytest.mark.timeout(300)
def test_each_rank_starts_its_workers_the_platform_s_default_way(tmp_path: Path) -> None:
    script = tmp_path / "record.py"
    script.write_text(SCRIPT.format(examples=str(ROOT / "examples")))
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, timeout=280)
    default = subprocess.run(
        [sys.executable, "-c", "import multiprocessing as m; print(m.get_start_method())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert seen == [default, default]
