"""The hostile user: what a careless or adversarial caller tries, each case ending in a
typed error that names the argument, file or state field — or in correct data. Never
an abort, a hang, a silent truncation or wrong data. Grouped by family; each bug found
adds a case to its family."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

import youmu
from youmu.errors import ArgumentTypeError, InvalidArgumentError, StateError
from youmu.mixture import FlatMixture, MixtureDataset
from youmu.torch import MapStream, YoumuDataset, pack

N = 120


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> youmu.PageIndex:
    d = tmp_path_factory.mktemp("hostile")
    ids = np.arange(N)
    t = pa.table({"input_ids": pa.array([np.full(1 + i % 9, i, np.int32) for i in ids], pa.list_(pa.int32())),
                  "id": pa.array(ids, pa.int64())})
    pq.write_table(t, d / "a.parquet", row_group_size=10)
    return youmu.PageIndex(str(d), columns=["input_ids", "id"])


def ds(index: youmu.PageIndex, **kw) -> YoumuDataset:
    return YoumuDataset(index, **{"shuffle": "none", "buffer_size": 20, "output": "python", **kw})


def ids(items) -> list[int]:
    return [int(x["id"]) for x in items]


# -- two iterators, one stream -------------------------------------------------------------
@pytest.mark.parametrize("make", ["youmu", "map", "pack"])
def test_two_iterators_of_one_stream_are_independent_passes(index, make) -> None:
    """Regression: ``zip(d, d)`` gave (0, 1), (1, 2), ... and a peek made the next loop
    skip a row: the iterators shared one position."""
    build = {
        "youmu": lambda: ds(index),
        "map": lambda: MapStream(list(range(30)), rank=0, world_size=1),
        "pack": lambda: pack(ds(index), seq_len=16),
    }[make]
    key = {"youmu": lambda x: x["id"], "map": lambda x: x, "pack": lambda x: x["input_ids"].tolist()}[make]
    d = build()
    whole = [key(x) for x in build()]
    pairs = list(zip(d, d))
    assert [key(a) for a, _ in pairs] == [key(b) for _, b in pairs] == whole
    next(iter(d))  # a peek
    assert [key(x) for x in d] == whole


# -- epochs --------------------------------------------------------------------------------
def test_set_epoch_reaches_persistent_dataloader_workers(index) -> None:
    """Regression: with ``persistent_workers=True`` epoch 1 repeated epoch 0's order."""
    d = ds(index, shuffle="page")
    loader = DataLoader(d, batch_size=None, num_workers=2, persistent_workers=True)
    epochs = []
    for e in range(3):
        d.set_epoch(e)
        epochs.append([int(x["id"]) for x in loader])
    fresh = []
    for e in range(3):
        ref = ds(index, shuffle="page")
        ref.set_epoch(e)
        fresh.append([int(x["id"]) for x in DataLoader(ref, batch_size=None, num_workers=2)])
    assert epochs == fresh
    assert epochs[0] != epochs[1] != epochs[2]
    assert all(sorted(e) == list(range(N)) for e in epochs)


# -- foreign and absurd states ---------------------------------------------------------------
def test_a_state_of_another_kind_of_stream_is_refused_naming_it(index) -> None:
    d = ds(index)
    next(iter(d))
    m = MapStream(list(range(N)), rank=0, world_size=1)
    with pytest.raises(StateError, match="youmu.YoumuDataset/1"):
        m.load_state_dict(d.state_dict())
    with pytest.raises(StateError, match="youmu.MapStream/1"):
        d.load_state_dict(m.state_dict())
    with pytest.raises(StateError, match="youmu.PackedDataset/1"):
        d.load_state_dict(pack(ds(index), seq_len=8).state_dict())


@pytest.mark.parametrize(
    "bad",
    [None, 3, "state", [], {}, {"format": "youmu.YoumuDataset/1"}],
)
def test_a_state_that_is_not_a_state_is_a_state_error(index, bad) -> None:
    with pytest.raises(StateError):
        ds(index).load_state_dict(bad)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("positions", {0: -3}, "ints >= 0"),
        ("positions", {0: 1.5}, "ints >= 0"),
        ("positions", {-1: 3}, "invalid worker id"),
        ("positions", {"x": 3}, "non-integer worker id"),
        ("positions", {0: 10**9}, "past the end"),
        ("positions", [1, 2], "dict of worker"),
        ("epoch", -1, "epoch"),
        ("epoch", 1.0, "must be an int"),
        ("num_workers", 0, "num_workers"),
        ("seed", 9, "seed=9"),
        ("shuffle", "page", "shuffle='page'"),
        ("world_size", 2, "world_size=2"),
    ],
)
def test_absurd_state_fields_are_refused_naming_the_field(index, field, value, message) -> None:
    d = ds(index)
    state = d.state_dict()
    state[field] = value
    with pytest.raises(StateError, match=message):
        ds(index).load_state_dict(state)


def test_positions_of_more_workers_than_saved_are_refused(index) -> None:
    state = {**ds(index).state_dict(), "num_workers": 2, "positions": {0: 1, 5: 1}}
    with pytest.raises(StateError, match="num_workers=2"):
        ds(index).load_state_dict(state)


def test_map_stream_positions_past_its_shard_are_refused() -> None:
    m = MapStream(list(range(10)), rank=0, world_size=2)
    state = {**m.state_dict(), "positions": {0: 6}}
    with pytest.raises(StateError, match="past the end"):
        MapStream(list(range(10)), rank=0, world_size=2).load_state_dict(state)


# -- arguments ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"world_size": 0, "rank": 0}, InvalidArgumentError, "world_size"),
        ({"world_size": 2, "rank": 2}, InvalidArgumentError, "rank 2"),
        ({"seed": 1.5}, ArgumentTypeError, "seed"),
        ({"seed": -1}, InvalidArgumentError, "seed"),
        ({"buffer_size": 20.0}, ArgumentTypeError, "buffer_size"),
        ({"buffer_size": 0}, InvalidArgumentError, "buffer_size"),
        ({"shuffle": "pages"}, InvalidArgumentError, "shuffle"),
        ({"output": "pandas"}, InvalidArgumentError, "output"),
        ({"drop_last": "yes"}, ArgumentTypeError, "drop_last"),
        ({"transform": 3}, ArgumentTypeError, "transform"),
        ({"memory_budget": 1.5e9}, ArgumentTypeError, "memory_budget"),
    ],
)
def test_youmu_dataset_checks_its_arguments_at_construction(index, kwargs, error, name) -> None:
    with pytest.raises(error, match=name):
        ds(index, **kwargs)


def test_columns_given_as_one_string_is_a_type_error_naming_columns(index) -> None:
    with pytest.raises(ArgumentTypeError, match="columns"):
        YoumuDataset(index, columns="input_ids")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="columns"):
        youmu.RowDataset(index, columns="input_ids")  # type: ignore[arg-type]


def test_epochs_are_ints(index) -> None:
    with pytest.raises(ArgumentTypeError, match="epoch"):
        ds(index).set_epoch(1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="epoch"):
        ds(index).set_epoch(-1)


def test_pack_checks_its_arguments_when_built_not_at_the_first_item(index) -> None:
    with pytest.raises(InvalidArgumentError, match="seq_len"):
        pack(ds(index), seq_len=0)
    with pytest.raises(ArgumentTypeError, match="seq_len"):
        pack(ds(index), seq_len=8.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="column"):
        pack(ds(index), seq_len=8, column="nope")
    with pytest.raises(ArgumentTypeError, match="iter_positions"):
        pack([1, 2, 3], seq_len=8)


@pytest.mark.parametrize("bad", [np.array([1.5]), np.array([True]), b"\x01", "1", np.zeros((1, 1), dtype=np.int64)])
def test_index_arrays_of_the_python_layers_refuse_non_integers(index, bad) -> None:
    rows = youmu.RowDataset(index)
    flat = FlatMixture({"a": rows, "b": list(range(5))}, seed=0)
    mix = MixtureDataset({"a": rows, "b": list(range(5))}, {"a": 0.5, "b": 0.5}, block_size=4)
    for call in (rows.take, flat.__getitems__, mix.__getitems__, flat.locate_many):
        with pytest.raises((ArgumentTypeError, InvalidArgumentError), match="indices"):
            call(bad)


def test_integer_index_arrays_of_any_layout_are_taken(index) -> None:
    rows = youmu.RowDataset(index)
    strided = np.arange(10)[::-2]  # reversed, non-contiguous
    assert rows.take(strided).column("id").to_pylist() == strided.tolist()
    assert rows.take(np.array([3, 4], dtype=np.uint8)).column("id").to_pylist() == [3, 4]


def test_map_stream_refuses_what_is_not_map_style() -> None:
    with pytest.raises(ArgumentTypeError, match="map-style"):
        MapStream(iter(range(3)), rank=0, world_size=1)
    with pytest.raises(InvalidArgumentError, match="run"):
        MapStream(list(range(3)), rank=0, world_size=1, run=0)


def test_set_epoch_reaches_persistent_spawned_workers(index) -> None:
    d = ds(index, shuffle="page")
    loader = DataLoader(d, batch_size=None, num_workers=1, persistent_workers=True, multiprocessing_context="spawn")
    d.set_epoch(0)
    first = [int(x["id"]) for x in loader]
    d.set_epoch(1)
    second = [int(x["id"]) for x in loader]
    ref = ds(index, shuffle="page")
    ref.set_epoch(1)
    assert second == [int(x["id"]) for x in ref] != first
