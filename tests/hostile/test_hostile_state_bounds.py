"""A hostile user's states past any bound: nested hundreds or 100,000 levels deep,
holding itself, an integer of 5,000 digits, an array of 100 dimensions or of shape
``[10**15, 10**15, 0]``, a million worker positions, a mixture claiming an origin of
10**18 indices. Whichever entry point a state takes — a state file, a trainer
integration's checkpoint, a stream's or loader's ``load_state_dict``,
``youmu.merge_states`` — each is one :class:`~youmu.errors.StateError` saying what is
wrong, in bounded time and memory (one bound, :mod:`youmu.state.bounds`, where a state
enters), never a ``RecursionError``, a ``ValueError`` or a walk that does not end."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainers_mp import collate, dataset  # noqa: E402

import youmu  # noqa: E402
from youmu.errors import StateError  # noqa: E402
from youmu.integrations import TrainerLoader  # noqa: E402
from youmu.integrations.accelerate import CheckpointedLoader  # noqa: E402
from youmu.integrations.hf import load_loader_state, loader_state_path  # noqa: E402
from youmu.integrations.mesh import LoaderState  # noqa: E402
from youmu.mixture import MixtureDataset  # noqa: E402
from youmu.state import files as statefile  # noqa: E402
from youmu.torch import MapStream, MixtureStream  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _loader() -> TrainerLoader:
    return TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=4, collate_fn=collate)


def _nested(depth: int) -> Any:
    tree: Any = 0
    for _ in range(depth):
        tree = [tree]
    return tree


def _deep_json(depth: int) -> bytes:
    """A state file whose state holds a list nested ``depth`` deep, written by hand (no
    encoder could write it: each would recurse as deep)."""
    return (b'{"format":"youmu.StateFile/1","state":{"format":"youmu.TrainerLoader/1","x":' + b"[" * depth + b"0"
            + b"]" * depth + b"}}")


# -- the state file codec, and every integration that reads one ------------------------------
FORGED_FILES = {
    "600 deep": _deep_json(600),
    "100,000 deep": _deep_json(100_000),
    "a 5,000-digit integer": b'{"format":"youmu.StateFile/1","state":{"steps":' + b"9" * 5000 + b"}}",
    "an ndarray of 100 dimensions": json.dumps({"format": "youmu.StateFile/1", "state": {
        "x": {"__youmu__": "ndarray", "dtype": "<i8", "shape": [1] * 100, "b64": "AAAAAAAAAAA="}}}).encode(),
    "an ndarray of shape [10**15, 10**15, 0]": json.dumps({"format": "youmu.StateFile/1", "state": {
        "x": {"__youmu__": "ndarray", "dtype": "<i8", "shape": [10**15, 10**15, 0], "b64": ""}}}).encode(),
    "a tensor of shape [10**15, 10**15, 0]": json.dumps({"format": "youmu.StateFile/1", "state": {
        "x": {"__youmu__": "tensor", "dtype": "int64", "shape": [10**15, 10**15, 0], "b64": ""}}}).encode(),
    "a shape entry of 100 digits": json.dumps({"format": "youmu.StateFile/1", "state": {
        "x": {"__youmu__": "ndarray", "dtype": "<i8", "shape": [0, 10**99], "b64": ""}}}).encode(),
}
WHY = r"nested deeper than|integer of [\d,]+ digits|dimensions \(at most 32\)|larger than any array"


@pytest.mark.parametrize("blob", list(FORGED_FILES.values()), ids=list(FORGED_FILES))
def test_a_forged_state_file_is_a_state_error_from_every_reader(blob: bytes, tmp_path: pathlib.Path) -> None:
    with pytest.raises(StateError, match=WHY):
        statefile.loads(blob, where="rank file")
    # Hugging Face: the checkpoint folder's rank file
    loader = _loader()
    pathlib.Path(loader_state_path(tmp_path, 0)).write_bytes(blob)
    with pytest.raises(StateError, match=WHY):
        load_loader_state(loader, tmp_path)
    # DeviceMesh + DCP: the gathered states' blob
    with pytest.raises(StateError, match=WHY):
        LoaderState(loader).load_state_dict({LoaderState.KEY: blob})


def test_a_forged_plain_tree_is_refused_by_the_accelerate_and_lightning_checkpoints() -> None:
    # what torch.load gives back from a framework checkpoint: the envelope as plain data
    deep = {"format": "youmu.StateFile/1", "state": _nested(100_000)}
    loop: dict[str, Any] = {"format": "youmu.StateFile/1"}
    loop["state"] = {"a": loop}
    huge = {"format": "youmu.StateFile/1", "state": {"steps": 10**5000}}
    for tree, why in ((deep, "nested deeper than"), (loop, "refers to itself"), (huge, "16,610-bit integer")):
        with pytest.raises(StateError, match=why):
            CheckpointedLoader(_loader()).load_state_dict(tree)
        with pytest.raises(StateError, match=why):
            statefile.open_envelope(tree, where="the Lightning checkpoint's youmu loader state")


# -- states in memory: every load_state_dict and merge_states ---------------------------------
def _map_state() -> dict[str, Any]:
    stream = MapStream(list(range(10)))
    it = iter(stream)
    next(it)
    return stream.state_dict()


def _self_referencing() -> dict[str, Any]:
    state = _map_state()
    state["positions"] = {0: 1, "again": state}
    return state


def _shared(levels: int) -> dict[str, Any]:
    # `levels` levels of [a, a]: 2**levels paths to one list
    node: Any = [0]
    for _ in range(levels):
        node = [node, node]
    return {**_map_state(), "extra": node}


FORGED_STATES: dict[str, tuple[Callable[[], Any], str]] = {
    "600 deep": (lambda: {**_map_state(), "extra": _nested(600)}, "nested deeper than"),
    "100,000 deep": (lambda: {**_map_state(), "extra": _nested(100_000)}, "nested deeper than"),
    "itself": (_self_referencing, "refers to itself"),
    "a 5,000-digit epoch": (lambda: {**_map_state(), "epoch": 10**4999}, "16,607-bit integer"),
    "a 5,000-digit worker id": (lambda: {**_map_state(), "positions": {10**4999: 1}}, "16,607-bit integer"),
    "2**70 paths to one list": (lambda: _shared(70), "nested deeper than"),
}


@pytest.mark.parametrize("case", list(FORGED_STATES))
def test_a_forged_state_is_a_state_error_from_every_load_and_from_merge(case: str) -> None:
    make, why = FORGED_STATES[case]
    with pytest.raises(StateError, match=why):
        MapStream(list(range(10))).load_state_dict(make())
    with pytest.raises(StateError, match=why):
        youmu.merge_states([make()])
    trainer_state = {"format": "youmu.TrainerLoader/1", "rank": 0, "world_size": 1, "epoch": 0, "steps": 1,
                     "finished": False, "source": make()}
    with pytest.raises(StateError, match=why):
        _loader().load_state_dict(trainer_state)


def test_states_as_deep_as_the_bound_allows_still_load() -> None:
    # the bound refuses forgeries only: a state (and its file) just inside it is read,
    # and one list shared 2**40 ways inside it is walked once, not 2**40 times
    from youmu.state.bounds import MAX_STATE_DEPTH

    inside = {**_map_state(), "extra": _nested(MAX_STATE_DEPTH - 2)}
    MapStream(list(range(10))).load_state_dict(inside)
    MapStream(list(range(10))).load_state_dict(_shared(40))
    assert statefile.loads(statefile.dumps(inside), where="rank file")["extra"] == inside["extra"]


def test_a_million_worker_positions_are_refused_by_the_states_own_worker_count() -> None:
    state = _map_state()
    forged = {**state, "num_workers": 2, "positions": {w: 0 for w in range(10**6)}}
    with pytest.raises(StateError, match=r"holds 1,000,000 worker positions but the state has num_workers=2"):
        MapStream(list(range(10))).load_state_dict(forged)
    with pytest.raises(StateError, match=r"holds 1,000,000 worker positions but the state has num_workers=2"):
        youmu.merge_states([forged])
    # the same through a StatefulDataLoader's per-worker snapshot: bounded by its worker count
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(MapStream(list(range(40))), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    next(it)
    saved = loader.state_dict()
    del it
    snapshot = saved["_snapshot"]["_worker_snapshots"]["worker_0"]
    snapshot["dataset_state"] = {**snapshot["dataset_state"], "positions": {w: 0 for w in range(10**6)}}
    with pytest.raises(StateError, match=r"holds 1,000,000 worker positions but the state has num_workers=2"):
        youmu.merge_states([saved])


def test_a_forged_mixture_origin_is_refused_before_its_run_table_is_made() -> None:
    children = {n: [(n, i) for i in range(300)] for n in "ab"}
    old = MixtureDataset(children, {"a": 0.5, "b": 0.5}, length=200, seed=5, block_size=16)
    new = MixtureDataset(children, {"a": 0.9, "b": 0.1}, length=200, seed=5, block_size=16)
    streams = [MixtureStream(old, rank=r, world_size=2, run=8) for r in range(2)]
    for s in streams:
        it = iter(s)
        for _ in range(20):
            next(it)
    merged = youmu.merge_states([s.state_dict() for s in streams])
    forged = {**merged, "mixture": {**merged["mixture"], "origin_len": 10**18}}
    with pytest.raises(StateError, match=r"'origin_len'\]=1,000,000,000,000,000,000 is longer than any mixture"):
        MixtureStream(new, rank=0, world_size=2, run=8).load_state_dict(forged)
    MixtureStream(new, rank=0, world_size=2, run=8).load_state_dict(merged)  # the state as saved loads
