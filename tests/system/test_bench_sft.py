"""The SFT benchmark's bookkeeping (``benches/bench_sft.py``): repeats alternate the
pipelines, youmu is compared with each peer run in the same repeat, a run whose process
tree dies is reported as crashed with what killed it (a rank, a DataLoader worker, the
phase itself), and a pipeline that did not train every chat exactly once on the same
tokens fails the bench."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"


def _bench(name: str) -> ModuleType:
    """A module of ``benches/`` loaded from its file: the bench under test and its helpers
    (``bench_sft`` puts its own folder on the path for its helpers, as when it is run)."""
    spec = importlib.util.spec_from_file_location(name, BENCHES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_util = _bench("_util")
bench_sft = _bench("bench_sft")
PhaseFailed, run_phase = _util.PhaseFailed, _util.run_phase

ROWS = 16


def run(kind: str, repeat: int, *, first: float = 2.0, rate: float = 10.0, ids: list[int] | None = None,
        real: int = 1000) -> dict[str, Any]:
    ids = list(range(ROWS)) if ids is None else ids
    return {"pipeline": kind, "repeat": repeat, "samples": len(ids), "unique_samples": len(set(ids)),
            "real_tokens": real, "padded_tokens": 2 * real, "first_step_s": first, "samples_per_s": rate,
            "train_samples_per_s": rate, "cpu_s": 30.0, "tree_peak_rss_mb": 3000.0, "tree_peak_pss_mb": 1500.0,
            "extra_disk_mb": 0.0, "steps": 2, "load_before": 1.0}


def crashed(kind: str, repeat: int) -> dict[str, Any]:
    return {"pipeline": kind, "repeat": repeat, "crashed": "a child died: SIGSEGV", "stderr_tail": "...",
            "load_before": 1.0}


def test_each_repeat_runs_every_pipeline_once_starting_one_further_along() -> None:
    kinds = ["youmu", "youmu-odb", "hf-map", "hf-stream"]
    orders = [bench_sft.run_order(kinds, r) for r in range(5)]
    assert all(sorted(o) == sorted(kinds) for o in orders)
    assert [o[0] for o in orders] == ["youmu", "youmu-odb", "hf-map", "hf-stream", "youmu"]


def test_youmu_is_compared_with_each_peer_of_the_same_repeat_only() -> None:
    results = [run("youmu", 0, first=1.0), run("hf-map", 0, first=4.0), run("hf-stream", 0, first=2.0),
               run("youmu", 1, first=3.0), run("hf-map", 1, first=3.0), crashed("hf-stream", 1)]
    pairs = {(p["ours"], p["peer"]): p for p in bench_sft.ratios(results)}
    assert set(pairs) == {("youmu", "hf-map"), ("youmu", "hf-stream")}
    assert pairs["youmu", "hf-map"]["first_step_s"] == [0.25, 1.0]
    # repeat 1's hf-stream crashed: only repeat 0 pairs youmu with it
    assert pairs["youmu", "hf-stream"]["repeats"] == 1 and pairs["youmu", "hf-stream"]["first_step_s"] == [0.5]


def test_a_complete_epoch_on_the_same_tokens_passes() -> None:
    assert bench_sft.epoch_problems([run("youmu", 0), run("hf-map", 0)], ROWS, max_steps=0) == []


@pytest.mark.parametrize("ids", [list(range(ROWS - 1)), [*range(ROWS - 1), 0]], ids=["a chat missing", "a chat twice"])
def test_a_chat_not_trained_exactly_once_fails(ids: list[int]) -> None:
    problems = bench_sft.epoch_problems([run("youmu", 0), run("hf-stream", 0, ids=ids)], ROWS, max_steps=0)
    assert len(problems) == 1 and problems[0].startswith("hf-stream (repeat 0)")


def test_different_token_counts_fail() -> None:
    problems = bench_sft.epoch_problems([run("youmu", 0), run("hf-map", 0, real=999)], ROWS, max_steps=0)
    assert len(problems) == 1 and "hf-map (repeat 0) 999" in problems[0]


def test_a_crashed_run_is_reported_and_fails_the_bench(capsys: pytest.CaptureFixture[str]) -> None:
    results = [run("youmu", 0), crashed("hf-stream", 0), run("youmu", 1), run("hf-stream", 1)]
    args = argparse.Namespace(rows=ROWS, batch_size=8, ranks=2, repeat=2, max_steps=0, out=None)
    failures = bench_sft.report(results, args)
    assert failures == ["hf-stream crashed in repeat 0 (a child died: SIGSEGV)"]
    out = capsys.readouterr().out
    assert "| hf-stream |" in out and "| 2 (1) |" in out  # two runs, one crashed: the figures are the other's
    assert "FAILED: hf-stream crashed in repeat 0" in out


def test_a_figure_is_given_as_median_and_range() -> None:
    assert bench_sft.spread([3.0, 1.0, 2.0], "{:.1f}") == "2.0 (1.0–3.0)"
    assert bench_sft.spread([3.0], "{:.1f}") == "3.0"


#: A phase that dies the way a benchmark's process tree can: itself, a rank started by
#: torch.multiprocessing.spawn, or a DataLoader worker, each by a segmentation fault.
PHASES = textwrap.dedent(
    """
    import faulthandler, sys

    def rank(i):
        faulthandler._sigsegv()

    class Faulting:
        def __getitem__(self, i):
            faulthandler._sigsegv()

        def __len__(self):
            return 1

    if __name__ == "__main__":
        how = sys.argv[2]
        if how == "itself":
            faulthandler._sigsegv()
        import torch
        if how == "rank":
            torch.multiprocessing.spawn(rank, nprocs=1)
        else:
            sys.path.insert(0, sys.argv[3])
            import bench_sft
            bench_sft.worker_fault_stacks()
            next(iter(torch.utils.data.DataLoader(Faulting(), num_workers=1)))
    """
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("how", "cause", "where"), [
    ("itself", "killed by SIGSEGV", "in <module>"),
    ("rank", "a child died: SIGSEGV", "in rank"),
    ("worker", "a child died: Segmentation fault", "in __getitem__"),  # torch's own handler prints no stack
])
def test_a_phase_killed_by_a_signal_names_it_and_shows_where(tmp_path: Path, how: str, cause: str, where: str) -> None:
    if how != "itself":
        pytest.importorskip("torch")
    script = tmp_path / "phase.py"
    script.write_text(PHASES)
    with pytest.raises(PhaseFailed) as failed:
        run_phase(str(script), how, str(BENCHES), tree_rss=True, timeout=280, env={"PYTHONFAULTHANDLER": "1"})
    assert failed.value.cause == cause
    # faulthandler's dump of the faulting process's Python stack ("line N in f", a traceback's is "line N, in f")
    assert "Fatal Python error: Segmentation fault" in failed.value.stderr
    assert re.search(rf'phase\.py", line \d+ {re.escape(where)}\n', failed.value.stderr)


def test_a_phase_that_fails_without_a_signal_gives_its_exit_status(tmp_path: Path) -> None:
    script = tmp_path / "phase.py"
    script.write_text("raise SystemExit(3)\n")
    with pytest.raises(PhaseFailed) as failed:
        run_phase(str(script), "exit")
    assert failed.value.cause == "exit status 3" and failed.value.returncode == 3
