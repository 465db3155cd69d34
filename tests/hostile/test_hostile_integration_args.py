"""A hostile user's arguments to every public function and class of
``youmu.integrations`` (wrong types, absurd values), and ``youmu``'s command line read
by a pipe that closes early. Each argument is refused with a typed ``YoumuError``
naming it — never an ``AttributeError``, ``TypeError`` or ``ZeroDivisionError`` from
deep inside — and ``youmu inspect ... | head`` ends quietly, as ``cat`` does."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from parquet_fixtures import write_ids

torch = pytest.importorskip("torch")

from trainers_mp import collate, dataset  # noqa: E402

from youmu.errors import YoumuError  # noqa: E402
from youmu.integrations import TrainerLoader, odb_steps_per_epoch, scale_loss  # noqa: E402
from youmu.integrations.accelerate import CheckpointedLoader, log_metrics, prepare  # noqa: E402
from youmu.integrations.hf import load_loader_state, loader_state_path, make_trainer  # noqa: E402
from youmu.integrations.mesh import LoaderState, data_parallel  # noqa: E402
from youmu.torch import MapStream  # noqa: E402


def _loader(**kw: Any) -> TrainerLoader:
    return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=4, collate_fn=collate, **kw)


CALLS: dict[str, tuple[Callable[[], Any], str]] = {
    "TrainerLoader(channel='gloo')": (lambda: _loader(channel="gloo"), "channel must be a youmu"),
    "TrainerLoader(channel=3)": (lambda: _loader(channel=3), "channel must be a youmu"),
    "TrainerLoader(device='warp-drive')": (lambda: _loader(device="warp-drive"), "device must be"),
    "TrainerLoader(device=[0])": (lambda: _loader(device=[0]), "device must be"),
    "TrainerLoader(source_key=7)": (lambda: _loader(source_key=7), "source_key must be"),
    "odb_steps_per_epoch(None)": (lambda: odb_steps_per_epoch(None), "loader must be a youmu DynamicBatchLoader"),
    "odb_steps_per_epoch(stream)": (lambda: odb_steps_per_epoch(MapStream([1])), "loader must be"),
    "data_parallel(None)": (lambda: data_parallel(None), "mesh must be a torch.distributed DeviceMesh"),
    "data_parallel('dp')": (lambda: data_parallel("dp"), "mesh must be"),
    "LoaderState(loader, mesh='x')": (lambda: LoaderState(_loader(), mesh="x"), "mesh must be"),
    "LoaderState(None)": (lambda: LoaderState(None), "loader must be a TrainerLoader"),
    "LoaderState.load_state_dict(None)": (lambda: LoaderState(_loader()).load_state_dict(None), "no youmu loader"),
    "scale_loss(1.0, 'info')": (lambda: scale_loss(1.0, "info"), "info must be a batch's step info"),
    "scale_loss(1.0, object())": (lambda: scale_loss(1.0, object()), "info must be"),
    "loader_state_path(dir, 'x')": (lambda: loader_state_path("/tmp", "x"), "rank must be"),
    "loader_state_path(dir, -1)": (lambda: loader_state_path("/tmp", -1), "rank must be"),
    "loader_state_path(None, 0)": (lambda: loader_state_path(None, 0), "checkpoint_dir must be a path"),
    "load_loader_state(None, dir)": (lambda: load_loader_state(None, "/tmp"), "loader must be"),
    "load_loader_state(loader, 5)": (lambda: load_loader_state(_loader(), 5), "checkpoint_dir must be"),
    "make_trainer(3)": (lambda: make_trainer(3), "trainer_cls must be a Trainer class"),
    "prepare(None, loader)": (lambda: prepare(None, _loader()), "accelerator must be"),
    "log_metrics(None, loader)": (lambda: log_metrics(None, _loader()), "accelerator must be"),
    "CheckpointedLoader(None)": (lambda: CheckpointedLoader(None), "loader must be"),
    "CheckpointedLoader.load_state_dict(7)": (lambda: CheckpointedLoader(_loader()).load_state_dict(7),
                                              "expects the dict"),
    "TrainerLoader.follow_consumption(0)": (lambda: _loader().follow_consumption(0), "depth must be"),
    "TrainerLoader.set_epoch('1')": (lambda: _loader().set_epoch("1"), "epoch must be"),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_every_integration_argument_is_checked_with_a_typed_error(call: str) -> None:
    make, message = CALLS[call]
    with pytest.raises(YoumuError, match=message):
        make()


def test_the_lightning_callback_and_data_module_check_their_arguments() -> None:
    pytest.importorskip("lightning")
    from youmu.integrations.lightning import LoaderMetrics, YoumuDataModule

    for bad in (0, -5, "50", 2.5):
        with pytest.raises(YoumuError, match="every_n_steps must be"):
            LoaderMetrics(every_n_steps=bad)
    module = YoumuDataModule(_loader)
    with pytest.raises(YoumuError, match="must be a dict"):
        module.load_state_dict([1, 2])


# -- the command line, read by a pipe that closes ------------------------------------------------
def test_inspect_into_a_closed_pipe_ends_quietly(ids_file: Callable[..., str]) -> None:
    path = ids_file(1000, column="x", row_group_size=10)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before a byte is written: as `| head -0`, deterministic
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run([sys.executable, "-m", "youmu", "inspect", str(path), str(path)], stdout=write,
                              stderr=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(write)
    assert proc.stderr.decode() == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert proc.returncode == 141  # what a Unix tool killed by SIGPIPE tells its shell


def test_inspect_into_head_prints_the_first_line_and_no_error(tmp_path: pathlib.Path) -> None:
    path = write_ids(tmp_path / "t.parquet", 1000, column="x", row_group_size=10)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = f"{sys.executable} -m youmu inspect {' '.join([str(path)] * 200)} | head -n 1"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, env=env, timeout=120)
    assert proc.stdout.decode().strip().endswith("t.parquet") and proc.stderr.decode() == ""
