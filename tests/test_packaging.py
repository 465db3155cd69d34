"""Packaging promises: the core works without torch; the CLI entry point exists."""

from __future__ import annotations

import subprocess
import sys


def test_core_streams_and_pure_layers_do_not_import_torch() -> None:
    code = (
        "import sys, youmu, youmu.stream, youmu.shuffle, youmu.sharding, youmu.stateful, youmu.rows, youmu.cli\n"
        "import youmu.mixture, youmu.dist, youmu.batching, youmu.planning\n"
        "youmu.PageIndex; youmu.Permutation(10)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_console_script_is_installed() -> None:
    out = subprocess.run([sys.executable, "-m", "youmu.cli", "--help"], capture_output=True, text=True, check=True)
    assert "inspect" in out.stdout and "index" in out.stdout
