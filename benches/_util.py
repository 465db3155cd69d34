"""Helpers shared by the benchmark scripts: subprocess phases with their own peak RSS,
and the peer venv that runs the Hugging Face ``datasets`` baselines."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The peers' interpreter (``make peers-venv``): HF ``datasets`` and a trainer stack of its
#: own, kept out of the project venv because their pins conflict with the project's.
PEERS_PYTHON = ".venv-peers/bin/python"


def peak_rss_mb() -> float:
    """Peak RSS of this process. VmHWM is reset by exec; ru_maxrss is not (a child
    forked from a big parent would report the parent's peak)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peers_python(path: str = PEERS_PYTHON, what: str = "HF datasets baseline") -> str | None:
    """``path`` if that interpreter exists and imports ``datasets``; else ``None``, after
    printing one line saying the baseline is skipped and why (youmu's side still runs)."""
    if not Path(path).exists():
        print(f"{what} skipped: {path} missing (run `make peers-venv`); measuring youmu alone", flush=True)
        return None
    probe = subprocess.run([path, "-c", "import datasets"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["failed"])[-1]
        print(f"{what} skipped: {path} cannot import datasets ({last}); measuring youmu alone", flush=True)
        return None
    return path


def run_phase(script: str, phase: str, *args: str, timeout: int = 1800, python: str | None = None) -> dict[str, Any]:
    """Run ``script --phase phase args`` in a fresh interpreter (``python``, default this
    one); it prints one JSON line. Another interpreter (the peers' venv) gets this
    checkout's ``python/`` on its path, so it imports the same youmu."""
    env = None
    if python is not None:
        src = str(Path(__file__).resolve().parents[1] / "python")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run(
        [python or sys.executable, script, "--phase", phase, *args], capture_output=True, text=True, timeout=timeout,
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"phase {phase} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def emit(result: dict[str, Any]) -> None:
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print(json.dumps(result))
