"""Saved states of every released format keep loading, and today's writers keep their bytes.

``state_formats_v1.json`` holds, per case, a state saved by youmu when the state formats
were first declared in one place (:mod:`youmu.state.formats`), the JSON text of it that a
checkpoint held, and the items the saving object delivered after it. The formats frozen
here are those no other fixture froze: a ``YoumuDataset`` rank state, a ``MixtureStream``
state with its ``mixture`` field, a ``pack`` rank state, and ``DynamicBatchLoader`` states
of version 2 (map-style mid-epoch and done, iterable without workers) with their merged
states, and a ``TokenUpdates`` state saved mid-update (its case added with its format, the
others left as frozen). Each test loads the frozen state into a freshly built object and checks the rest
it delivers; the objects built the same way and run to the same point save the same bytes.

The fixture is written once (``YOUMU_FREEZE_STATES=1`` writes it from the code at hand);
regenerating it defeats its purpose: a format change that refuses or misreads a frozen
state is a format break to be versioned, not a fixture to refresh.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from parquet_fixtures import write_columns
from where import SUPPORT

import youmu
from youmu.state.files import from_plain, to_plain

FIXTURE = SUPPORT / "state_formats_v1.json"
FREEZE = os.environ.get("YOUMU_FREEZE_STATES") == "1"


# -- the objects the states were saved by ---------------------------------------------------------
def _parquet(tmp: Path) -> str:
    path = tmp / "rows.parquet"
    write_columns(path, {"id": pa.array(range(60), pa.int64()), "n": pa.array([i % 7 for i in range(60)], pa.int32())},
                  row_group_size=10)
    return str(path)


def _youmu_dataset(tmp: Path) -> Any:
    from youmu.torch import YoumuDataset

    return YoumuDataset(_parquet(tmp), rank=1, world_size=2, shuffle="page", seed=3, buffer_size=20)


def _mixture_stream(tmp: Path) -> Any:
    from youmu.mixture import MixtureDataset
    from youmu.torch import MixtureStream

    mix = MixtureDataset({"a": list(range(50)), "b": list(range(100, 130))}, {"a": 0.7, "b": 0.3}, seed=2,
                         block_size=8, length=64)
    return MixtureStream(mix, rank=0, world_size=2)


def _pack(tmp: Path) -> Any:
    from youmu.torch import MapStream, pack

    rows = [{"input_ids": np.arange(1, 2 + i % 7).tolist()} for i in range(40)]
    return pack(MapStream(rows, rank=0, world_size=1), seq_len=5, eos_id=0)


def _map_loader(tmp: Path) -> Any:
    from youmu.batching import DynamicBatchLoader

    return DynamicBatchLoader([{"id": i, "n": 1 + i % 9} for i in range(40)], token_budget=16,
                              length_fn=lambda s: s["n"], collate_fn=_ids, pool_size=8, num_workers=0, seed=4,
                              timeout=60, heartbeat=0.1)


def _iterable_loader(tmp: Path) -> Any:
    from youmu.batching import DynamicBatchLoader
    from youmu.torch import MapStream

    rows = [{"id": i, "n": 1 + i % 9} for i in range(40)]
    return DynamicBatchLoader(MapStream(rows, rank=0, world_size=1), token_budget=16, length_fn=lambda s: s["n"],
                              collate_fn=_ids, pool_size=8, num_workers=0, seed=4, timeout=60, heartbeat=0.1)


def _ids(samples: list[dict[str, int]]) -> list[int]:
    return [int(s["id"]) for s in samples]


def _item(x: Any) -> Any:
    """An item as plain JSON: a stream's row, a packed sequence, a loader's batch."""
    if isinstance(x, tuple) and len(x) == 2 and hasattr(x[1], "step"):  # a loader's (batch, info)
        return x[0]
    if isinstance(x, dict):
        return {k: _item(v) for k, v in x.items()}
    if hasattr(x, "tolist"):
        return x.tolist()
    return x


def _token_steps() -> list[Any]:
    """A run's step infos for ``TokenUpdates``: loss tokens 10..59, some fractional (``"approx"``)."""
    from youmu.batching.algo.step_info import StepInfo

    return [StepInfo(step=k, num_samples=1, num_tokens=t, global_num_samples=2, global_num_tokens=t, loss_scale=1.0,
                     world_size=2) for k, t in enumerate([(k * 37) % 50 + 10 + (k % 3) * 0.25 for k in range(20)])]


def _token_updates(tmp: Path | None = None) -> Any:
    from youmu.batching import TokenUpdates

    return TokenUpdates(100)


def _token_rest(updates: Any, steps: list[Any]) -> list[Any]:
    """``[step, factor]`` of each update the steps close, the flush last (step -1)."""
    out = [[info.step, f] for info in steps if (f := updates.add(info)) is not None]
    return out + ([[-1, f]] if (f := updates.flush()) is not None else [])


def _save_token_updates() -> tuple[Any, list[Any]]:
    updates, steps = _token_updates(), _token_steps()
    for info in steps[:7]:
        updates.add(info)
    return updates.state_dict(), _token_rest(updates, steps[7:])


BUILD = {"YoumuDataset": _youmu_dataset, "MixtureStream": _mixture_stream, "pack": _pack,
         "DynamicBatchLoader.map": _map_loader, "DynamicBatchLoader.iterable": _iterable_loader}
TAKE = {"YoumuDataset": 7, "MixtureStream": 9, "pack": 3, "DynamicBatchLoader.map": 3,
        "DynamicBatchLoader.iterable": 3}


def _save(name: str, tmp: Path) -> tuple[Any, list[Any]]:
    """The state ``name``'s object saves after :data:`TAKE` items, and the items after."""
    obj = BUILD[name](tmp)
    it = iter(obj)
    for _ in range(TAKE[name]):
        next(it)
    state = (it if name.startswith("DynamicBatchLoader") else obj).state_dict()
    rest = [_item(x) for x in it]
    if hasattr(obj, "close"):
        obj.close()
    return state, rest


def _done(tmp: Path) -> tuple[Any, list[Any]]:
    obj = _map_loader(tmp)
    it = iter(obj)
    list(it)
    state = it.state_dict()
    obj.close()
    return state, []


def _freeze(tmp: Path) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    for name in BUILD:
        state, rest = _save(name, tmp)
        cases[name] = {"state": to_plain(state), "text": json.dumps(to_plain(state)), "rest": rest}
    state, _ = _done(tmp)
    cases["DynamicBatchLoader.done"] = {"state": to_plain(state), "text": json.dumps(to_plain(state)), "rest": []}
    for name in ("DynamicBatchLoader.map", "DynamicBatchLoader.iterable"):
        merged = youmu.merge_states([from_plain(cases[name]["state"], where=name)])
        cases[name + ".merged"] = {"state": to_plain(merged), "text": json.dumps(to_plain(merged)),
                                   "rest": cases[name]["rest"]}
    state, rest = _save_token_updates()
    cases["TokenUpdates"] = {"state": to_plain(state), "text": json.dumps(to_plain(state)), "rest": rest}
    return cases


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if FREEZE:
        FIXTURE.write_text(json.dumps(_freeze(tmp_path_factory.mktemp("freeze")), indent=1) + "\n")
    return json.loads(FIXTURE.read_text())


def _state(frozen: dict[str, Any], name: str, data: str | None = None) -> Any:
    state = from_plain(frozen[name]["state"], where=name)
    if data is not None:
        # a Parquet file's fingerprint counts its bytes, which pyarrow's version writes into the footer: the
        # format is what is frozen, so the state names this run's copy of the same rows
        state["data"] = data
    return state


# -- the frozen states load ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["YoumuDataset", "MixtureStream", "pack"])
def test_a_frozen_stream_state_resumes_to_the_rows_the_saving_stream_went_on_with(
        name: str, frozen: dict[str, Any], tmp_path: Path) -> None:
    obj = BUILD[name](tmp_path)
    data = obj.state_dict()["data"] if name == "YoumuDataset" else None
    obj.load_state_dict(_state(frozen, name, data))
    assert [_item(x) for x in obj] == frozen[name]["rest"]


@pytest.mark.parametrize("name", ["DynamicBatchLoader.map", "DynamicBatchLoader.iterable", "DynamicBatchLoader.done"])
def test_a_frozen_loader_state_resumes_to_the_batches_the_saving_loader_went_on_with(
        name: str, frozen: dict[str, Any], tmp_path: Path) -> None:
    loader = (_iterable_loader if "iterable" in name else _map_loader)(tmp_path)
    loader.load_state_dict(_state(frozen, name))
    assert [_item(x) for x in loader] == frozen[name]["rest"]
    loader.close()


@pytest.mark.parametrize("name", ["DynamicBatchLoader.map.merged", "DynamicBatchLoader.iterable.merged"])
def test_a_frozen_merged_loader_state_delivers_the_samples_the_saving_loader_went_on_with(
        name: str, frozen: dict[str, Any], tmp_path: Path) -> None:
    """A merged state deals what the job left afresh: the same samples, in batches the
    new job groups."""
    loader = (_iterable_loader if "iterable" in name else _map_loader)(tmp_path)
    loader.load_state_dict(_state(frozen, name))
    got = sorted(i for b in (_item(x) for x in loader) for i in b)
    assert got == sorted(i for b in frozen[name]["rest"] for i in b)
    loader.close()


def test_a_frozen_token_updates_state_closes_the_updates_the_saving_one_went_on_with(frozen: dict[str, Any]) -> None:
    updates = _token_updates()
    updates.load_state_dict(_state(frozen, "TokenUpdates"))
    assert not updates.at_boundary  # saved mid-update
    assert _token_rest(updates, _token_steps()[7:]) == frozen["TokenUpdates"]["rest"]


# -- today's writers keep the frozen bytes -------------------------------------------------------------
@pytest.mark.parametrize("name", ["MixtureStream", "pack", "DynamicBatchLoader.map", "DynamicBatchLoader.iterable"])
def test_the_same_object_run_to_the_same_point_saves_the_frozen_bytes(name: str, frozen: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    state, rest = _save(name, tmp_path)
    assert json.dumps(to_plain(state)) == frozen[name]["text"]
    assert rest == frozen[name]["rest"]


def test_a_finished_epoch_and_the_merges_save_the_frozen_bytes(frozen: dict[str, Any], tmp_path: Path) -> None:
    state, _ = _done(tmp_path)
    assert json.dumps(to_plain(state)) == frozen["DynamicBatchLoader.done"]["text"]
    for name in ("DynamicBatchLoader.map", "DynamicBatchLoader.iterable"):
        merged = youmu.merge_states([_state(frozen, name)])
        assert json.dumps(to_plain(merged)) == frozen[name + ".merged"]["text"]


def test_token_updates_run_to_the_same_point_saves_the_frozen_bytes(frozen: dict[str, Any]) -> None:
    state, rest = _save_token_updates()
    assert json.dumps(to_plain(state)) == frozen["TokenUpdates"]["text"]
    assert rest == frozen["TokenUpdates"]["rest"]


def test_the_youmu_dataset_state_keeps_its_bytes_but_for_the_data_fingerprint(frozen: dict[str, Any],
                                                                              tmp_path: Path) -> None:
    state, rest = _save("YoumuDataset", tmp_path)
    saved = json.loads(frozen["YoumuDataset"]["text"])
    assert json.dumps(to_plain(state)) == json.dumps({**saved, "data": state["data"]})
    assert rest == frozen["YoumuDataset"]["rest"]


# -- the declarations are what a load checks -----------------------------------------------------------
_FORGERIES = ("forged", -1, 1.5, [None], {"forged": 1}, None)


def _declaration(state: Any) -> Any:
    from youmu.batching.algo.loss import TOKEN_UPDATES_STATE
    from youmu.batching.state import LOADER_STATE
    from youmu.state.stream import format_of

    for fmt in (LOADER_STATE, TOKEN_UPDATES_STATE):
        if state["format"] in fmt.tags:
            return fmt
    return format_of(state["format"])


@pytest.mark.parametrize("name", ["YoumuDataset", "MixtureStream", "pack", "DynamicBatchLoader.map",
                                  "DynamicBatchLoader.iterable", "DynamicBatchLoader.done", "TokenUpdates"])
def test_every_value_a_declared_field_refuses_a_load_refuses_naming_the_field(
        name: str, frozen: dict[str, Any], tmp_path: Path) -> None:
    """The hostile checks walk the format's declaration (youmu.state.formats): for each
    field, each forged value its declared check refuses, and a required field left out,
    ``load_state_dict`` raises a StateError naming that field, never another error."""
    from youmu.errors import StateError

    obj = {**BUILD, "TokenUpdates": _token_updates}[name.replace(".done", ".map")](tmp_path)
    data = obj.state_dict()["data"] if name == "YoumuDataset" else None
    state = _state(frozen, name, data)
    fmt = _declaration(state)
    refused = 0
    for field in fmt.fields:
        forged_states = [{k: v for k, v in state.items() if k != field.name}] if field.required else []
        for value in _FORGERIES:
            forged = {**state, field.name: value}
            try:
                field.check(forged, field.name, fmt.owner)
            except StateError:
                forged_states.append(forged)
        for forged in forged_states:
            # named as a field, or as a setting this object's differs from
            with pytest.raises(StateError, match=f"'{field.name}'|{field.name}="):
                obj.load_state_dict(forged)
            refused += 1
    assert refused >= 3 * len(fmt.fields) // 2
    if hasattr(obj, "close"):
        obj.close()
