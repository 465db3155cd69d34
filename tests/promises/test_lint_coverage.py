"""The linters see every file of the package.

ruff's default excludes hold names such as ``dist`` and ``build``; a package folder with
such a name is silently skipped by ``ruff check python`` (``make lint``). This pins the
set ruff checks to the set of package files, so no exclude pattern can hide one again.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "youmu"


def _ruff() -> str:
    local = Path(sys.executable).parent / "ruff"
    found = str(local) if local.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: `make setup` installs it (requirements-dev.txt)")
    return found


def test_ruff_checks_every_package_file() -> None:
    out = subprocess.run([_ruff(), "check", "--show-files", "python"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    seen = {Path(line.strip()).resolve() for line in out.splitlines() if line.strip().endswith((".py", ".pyi"))}
    files = {p.resolve() for p in PACKAGE.rglob("*.py")} | {p.resolve() for p in PACKAGE.rglob("*.pyi")}
    missing = sorted(str(p.relative_to(ROOT)) for p in files - seen)
    assert not missing, f"ruff skips these package files (an exclude pattern hides them): {missing}"


def test_no_package_folder_has_a_name_tools_treat_as_build_output() -> None:
    reserved = {"dist", "build", "target", "node_modules", "site-packages", "__pypackages__", "_build", "buck-out"}
    bad = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*") if p.is_dir() and p.name in reserved)
    assert not bad, f"package folders named like build output: {bad}"
