"""Helpers shared by the benchmark scripts: subprocess phases with their own peak RSS
(of the process, or of its whole tree: DataLoader workers, ``map`` processes), and the
peer venv that runs the Hugging Face ``datasets`` baselines."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
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


class TreePeak:
    """Peak RSS and PSS of a process (``pid``, default this one) and all its descendants
    together, sampled in a thread: RSS every ``every`` seconds (``/proc/<pid>/statm``,
    microseconds), PSS every ``pss_every`` (``/proc/<pid>/smaps_rollup``: PSS counts the
    pages forked workers share with their parent once, but the kernel walks the page
    tables for it — tens of ms of system time per process with torch loaded, so it is
    sampled sparsely or not at all with ``pss_every=None``)."""

    def __init__(self, pid: int | None = None, every: float = 0.05, pss_every: float | None = 1.0) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.peak = 0
        self.peak_pss = 0
        self.every, self.pss_every = every, pss_every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psutil

        last_pss = float("-inf")
        while not self.stop.is_set():
            try:
                tree = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:  # the root exited
                return
            with_pss = self.pss_every is not None and time.monotonic() - last_pss >= self.pss_every
            total = pss = 0
            for p in tree:
                try:
                    total += p.memory_info().rss
                    if with_pss:
                        pss += _pss(p.pid)
                except (psutil.Error, OSError):
                    pass
            self.peak = max(self.peak, total)
            if with_pss:
                last_pss = time.monotonic()
                self.peak_pss = max(self.peak_pss, pss)
            time.sleep(self.every)

    def close(self) -> tuple[float, float]:
        """Stop sampling: ``(peak RSS MB, peak PSS MB)``."""
        self.stop.set()
        self.thread.join()
        return self.peak / 2**20, self.peak_pss / 2**20


def _pss(pid: int) -> int:
    """PSS of ``pid`` in bytes (``smaps_rollup``)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


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


class PhaseFailed(RuntimeError):
    """A phase that exited unsuccessfully: its exit status (negative: the signal that
    killed it), what its process tree died of (:func:`cause_of_death`) and its stderr,
    so a bench can report the run as failed and go on with the next one."""

    def __init__(self, phase: str, returncode: int, stderr: str) -> None:
        self.phase, self.returncode, self.stderr = phase, returncode, stderr
        self.cause = cause_of_death(returncode, stderr)
        super().__init__(f"phase {phase} failed ({self.cause}):\n{stderr[-4000:]}")


#: How a descendant's death reaches a phase's stderr: torch.multiprocessing's
#: ``spawn`` for a rank, the DataLoader for a worker, ``faulthandler`` for any process.
_DEATHS = (
    re.compile(r"process \d+ terminated with signal (SIG\w+)"),
    re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: ([\w ]+)"),
    re.compile(r"Fatal Python error: ([\w ]+)"),
)


def cause_of_death(returncode: int, stderr: str) -> str:
    """What killed a phase, in words: the signal of the phase process itself, else the
    first signal its stderr reports for a rank, a DataLoader worker or a faulting
    interpreter, else its exit status."""
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    for pattern in _DEATHS:
        found = pattern.search(stderr)
        if found:
            return f"a child died: {found.group(1).strip()}"
    return f"exit status {returncode}"


def run_phase(script: str, phase: str, *args: str, timeout: int = 1800, python: str | None = None,
              tree_rss: bool = False, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --phase phase args`` in a fresh interpreter (``python``, default this
    one); it prints one JSON line. Another interpreter (the peers' venv) gets this
    checkout's ``python/`` on its path, so it imports the same youmu. ``tree_rss``: the
    phase's whole process tree is sampled (:class:`TreePeak`) and its peaks added as
    ``tree_peak_rss_mb`` / ``tree_peak_pss_mb``. ``env``: variables to set for it."""
    environ = dict(os.environ, **(env or {}))
    if python is not None:
        src = str(Path(__file__).resolve().parents[1] / "python")
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, environ.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([python or sys.executable, script, "--phase", phase, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environ)
    peak = TreePeak(proc.pid) if tree_rss else None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    finally:
        peaks = peak.close() if peak is not None else None
    if proc.returncode != 0:
        raise PhaseFailed(phase, proc.returncode, stderr)
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    if peaks is not None:
        result["tree_peak_rss_mb"], result["tree_peak_pss_mb"] = round(peaks[0], 1), round(peaks[1], 1)
    return result


def emit(result: dict[str, Any]) -> None:
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print(json.dumps(result))
