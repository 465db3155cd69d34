"""Helpers shared by the benchmark scripts: subprocess phases with their own peak RSS."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Any


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


def run_phase(script: str, phase: str, *args: str, timeout: int = 1800) -> dict[str, Any]:
    """Run ``script --phase phase args`` in a fresh interpreter; it prints one JSON line."""
    out = subprocess.run(
        [sys.executable, script, "--phase", phase, *args], capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise RuntimeError(f"phase {phase} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def emit(result: dict[str, Any]) -> None:
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print(json.dumps(result))
