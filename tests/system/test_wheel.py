"""The wheel users install works on its own: ``maturin build`` makes one abi3 wheel
(CPython >= 3.10) that, installed into a clean virtual environment with only its
declared dependencies (no torch, no source tree), imports, reads Parquet, ships its
type stubs and ``py.typed``, and runs its CLI. A wheel missing a module, the native
library or a stub fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_abi3_wheel_installs_and_works_in_a_clean_venv(tmp_path: Path) -> None:
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    if not Path(maturin).exists() and shutil.which("maturin") is None:
        pytest.skip("maturin is not installed")
    out = tmp_path / "dist"
    subprocess.run([maturin, "build", "--release", "--quiet", "--out", str(out)], cwd=ROOT, check=True)
    wheels = list(out.glob("youmu-*.whl"))
    assert len(wheels) == 1 and "-cp310-abi3-" in wheels[0].name, [w.name for w in wheels]

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(wheels[0])], check=True, env=pip_env)
    work = tmp_path / "elsewhere"  # outside the source tree: nothing importable by accident
    work.mkdir()
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([str(py), str(ROOT / "tests" / "support" / "wheel_smoke.py")], cwd=work, env=clean_env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "wheel smoke test passed" in res.stdout
