"""Checkpoints are data: loading a youmu loader state never runs code.

A crafted pickle (its ``__reduce__`` names any callable) in a Hugging Face checkpoint
folder or a DeviceMesh DCP blob is refused without being read; a state file that is
empty, truncated, a directory or foreign is a ``StateError`` naming it; every value a
loader state holds (int dict keys, tuples, a planning loader's carried samples with
numpy arrays and tensors) round-trips through the codec exactly, and what youmu hands
Lightning and Accelerate loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import json
import pathlib
import pickle
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trainers_mp import collate, dataset  # noqa: E402

from youmu.errors import StateError  # noqa: E402
from youmu.integrations import TrainerLoader  # noqa: E402
from youmu.integrations.accelerate import CheckpointedLoader  # noqa: E402
from youmu.integrations.hf import load_loader_state, loader_state_path  # noqa: E402
from youmu.integrations.mesh import LoaderState  # noqa: E402
from youmu.planning import BalancedLoader  # noqa: E402
from youmu.state import files as statefile  # noqa: E402
from youmu.torch import MapStream  # noqa: E402


class Payload:
    """What an attacker pickles: unpickling it creates ``marker`` (a stand-in for any code)."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (pathlib.Path.touch, (self.marker,))


def _evil(marker: pathlib.Path) -> bytes:
    return pickle.dumps({"format": "youmu.TrainerLoader/1", "x": Payload(marker)}, protocol=pickle.HIGHEST_PROTOCOL)


def _loader() -> TrainerLoader:
    return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=4, collate_fn=collate)


def test_a_pickled_trainer_checkpoint_is_refused_without_running_it(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "ran"
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    (ckpt / "youmu_loader_rank0.pkl").write_bytes(_evil(marker))  # the name older youmu wrote
    with pytest.raises(StateError, match=r"pickled youmu loader state .*youmu_loader_rank0\.pkl.* no longer read"):
        load_loader_state(_loader(), ckpt)
    assert not marker.exists()
    # the same bytes under the current name: recognised as a pickle, not read
    pathlib.Path(loader_state_path(ckpt, 0)).write_bytes(_evil(marker))
    with pytest.raises(StateError, match=r"youmu_loader_rank0\.json is a pickle"):
        load_loader_state(_loader(), ckpt)
    assert not marker.exists()


def test_a_pickled_dcp_blob_is_refused_without_running_it(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(StateError, match="'dp_ranks'.* is a pickle"):
        LoaderState(_loader()).load_state_dict({"dp_ranks": _evil(marker), "dp_world_size": 1})
    assert not marker.exists()


def _saved(tmp_path: pathlib.Path) -> pathlib.Path:
    loader = _loader()
    it = iter(loader)
    next(it)
    path = pathlib.Path(loader_state_path(tmp_path, 0))
    statefile.write_state(path, loader.state_dict())
    return path


@pytest.mark.parametrize("damage", ["empty", "blank", "truncated", "directory", "not json", "foreign json",
                                    "bad tag", "bad array", "latin-1"])
def test_a_broken_state_file_is_a_state_error_naming_it(tmp_path: pathlib.Path, damage: str) -> None:
    path = _saved(tmp_path)
    good = path.read_bytes()
    if damage == "directory":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes({
            "empty": b"", "blank": b"\n  \n", "truncated": good[: len(good) // 2], "not json": b"hello",
            "foreign json": json.dumps({"epoch": 3}).encode(),
            "bad tag": json.dumps({"format": statefile.FORMAT, "state": {"__youmu__": "module", "name": "os"}}).encode(),
            "bad array": json.dumps({"format": statefile.FORMAT, "state": {
                "__youmu__": "ndarray", "dtype": "O", "shape": [1], "b64": ""}}).encode(),
            "latin-1": b"\xff\xfe\x00",
        }[damage])
    with pytest.raises(StateError, match=str(path).replace(".", r"\.")):
        load_loader_state(_loader(), tmp_path)
    with pytest.raises(StateError, match="youmu_loader_rank0"):
        statefile.read_state(path)


def test_a_missing_state_file_is_a_state_error_naming_it(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StateError, match=r"nothing\.json: no such youmu state file"):
        statefile.read_state(tmp_path / "nothing.json")


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


def test_every_value_a_state_holds_round_trips_exactly() -> None:
    value = {
        "positions": {0: 5, 3: 2**62}, "pack": (7, 0), "nested": [(1, (2, 3)), {"a": None, (1, 2): True}],
        "floats": [0.5, float("inf"), float("-inf"), float("nan"), -0.0], "text": "ü\x00\"",
        "bytes": b"\x00\xff", "__youmu__": "a user key that looks like the tag",
        "arrays": [np.arange(6, dtype=np.int32).reshape(2, 3), np.zeros((0, 4), dtype=">f8"), np.array([True, False]),
                   np.float16(1.5), np.int64(-3), np.array(2.5)],
        "tensors": [torch.arange(6).reshape(3, 2), torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
                    torch.tensor(7, dtype=torch.uint8), torch.zeros(0, 3), torch.ones(2, 2)[:, 0]],
    }
    again = statefile.loads(statefile.dumps(value), where="blob")
    assert _same(again, value)


def test_values_a_state_cannot_hold_are_refused_when_saved() -> None:
    with pytest.raises(StateError, match=r"cannot save a pathlib.*PosixPath.*at state\['carry'\]\[0\]"):
        statefile.dumps({"carry": [pathlib.Path("/x")]})
    with pytest.raises(StateError, match="numpy object"):
        statefile.dumps({"a": np.array([object()])})


def _balanced() -> TrainerLoader:
    def sample(i: int) -> dict[str, Any]:  # numpy payloads: carried samples are saved in the state
        return {"input_ids": np.arange(1 + (i * 7) % 13, dtype=np.int64), "id": i}

    def collate_np(samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": torch.tensor([s["id"] for s in samples])}

    return TrainerLoader(BalancedLoader(MapStream([sample(i) for i in range(40)]), num_microbatches=2, token_budget=16,
                                        collate_fn=collate_np, prefetch=0, resume_mode="state"))


@pytest.mark.parametrize("make", [_loader, _balanced], ids=["map-stream", "balanced-numpy-payloads"])
def test_the_framework_checkpoints_hold_plain_data_and_resume_exactly(make: Any) -> None:
    full = [b["id"].tolist() for b in make()]
    first = make()
    it = iter(first)
    head = [next(it)["id"].tolist() for _ in range(3)]
    buf = io.BytesIO()
    plain = CheckpointedLoader(first).state_dict()
    if make is _balanced:  # the state carries a sample over the step boundary, its array included
        assert '"ndarray"' in json.dumps(plain)
    torch.save({"youmu": plain}, buf)  # what Accelerate/Lightning do with it
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)["youmu"]  # plain data: loads without unpickling objects
    resumed = make()
    CheckpointedLoader(resumed).load_state_dict(saved)
    assert head + [b["id"].tolist() for b in resumed] == full
    # the per-rank file of a Hugging Face checkpoint carries the same state
    blob = statefile.dumps(first.state_dict())
    again = make()
    again.load_state_dict(statefile.loads(blob, where="rank file"))
    assert head + [b["id"].tolist() for b in again] == full
