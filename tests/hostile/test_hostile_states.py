"""Hostile states and inputs of youmu's Python streams: a state from other data or
another rank, a state taken where the rows did not go (DataLoader workers), a packing
position past the end, token columns that are not token ids, edited state fields,
and the argument families of the public functions around them. Every one is a typed
``YoumuError`` naming the field, argument or column — never a builtin exception, a
silent replay, or data other than what was indexed.

The README quickstart (``YoumuDataset`` → ``pack`` → a loader with 2 workers,
checkpoint, resume) is run here as written, through torchdata's
``StatefulDataLoader``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from parquet_fixtures import write_columns, write_table
from torch.utils.data import DataLoader
from where import SUPPORT

import youmu
import youmu.torch
from youmu.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    PageOutOfRangeError,
    StateError,
    ValueOverflowError,
    YoumuError,
)
from youmu.mixture import FlatMixture, MixtureDataset
from youmu.torch import MapStream, YoumuDataset, collate_packed, pack

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")]

ROOT = Path(__file__).resolve().parents[2]


def tokens_table(n: int, start: int = 0) -> pa.Table:
    ids = [[(start + i) % 97 + j for j in range(1 + (start + i) % 7)] for i in range(n)]
    return pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32())), "id": pa.array(range(start, start + n))})


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two files of the same shape (same window sizes) and different rows, plus a copy
    of the first one in another directory."""
    d = tmp_path_factory.mktemp("states")
    out = {}
    for name, start in (("a", 0), ("b", 1000)):
        path = d / f"{name}.parquet"
        write_table(path, tokens_table(400, start), row_group_size=20)
        out[name] = str(path)
    (d / "moved").mkdir()
    out["a_moved"] = shutil.copy(out["a"], d / "moved" / "a.parquet")
    return out


def ids_of(rows: Any) -> list[int]:
    return [int(r["id"]) for r in rows]


def take(it: Any, n: int) -> list[Any]:
    out = []
    for x in it:
        out.append(x)
        if len(out) == n:
            break
    return out


# ----------------------------------------------------------------------------------------
# a state of other data, or of another rank
# ----------------------------------------------------------------------------------------
def test_youmu_dataset_state_of_other_files_is_refused_naming_data(files) -> None:
    a = YoumuDataset(files["a"], buffer_size=40, seed=1)
    take(iter(a), 50)
    state = a.state_dict()
    b = YoumuDataset(files["b"], buffer_size=40, seed=1)
    assert b.window_pages == a.window_pages  # same window size: only the data differs
    with pytest.raises(StateError, match=r"data=.*other data"):
        b.load_state_dict(state)
    # the same files elsewhere (a copy, a move to another directory) are the same data
    moved = YoumuDataset(files["a_moved"], buffer_size=40, seed=1)
    moved.load_state_dict(state)
    rest = ids_of(moved)
    full = ids_of(YoumuDataset(files["a"], buffer_size=40, seed=1))
    assert rest == full[50:]


def test_youmu_dataset_state_of_another_rank_is_refused_naming_rank(files) -> None:
    r0 = YoumuDataset(files["a"], buffer_size=40, rank=0, world_size=2)
    take(iter(r0), 10)
    state = r0.state_dict()
    assert state["rank"] == 0 and state["world_size"] == 2
    r1 = YoumuDataset(files["a"], buffer_size=40, rank=1, world_size=2)
    with pytest.raises(StateError, match=r"rank=0 .* rank=1"):
        r1.load_state_dict(state)


def test_map_stream_state_of_another_dataset_or_rank_is_refused() -> None:
    s = MapStream(list(range(100)), rank=0, world_size=2)
    take(iter(s), 5)
    state = s.state_dict()
    with pytest.raises(StateError, match="data="):
        MapStream(list(range(101)), rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(StateError, match="rank=0"):
        MapStream(list(range(100)), rank=1, world_size=2).load_state_dict(state)
    MapStream(list(range(100)), rank=0, world_size=2).load_state_dict(state)  # the same: accepted


def test_map_stream_over_a_mixture_fingerprints_its_settings() -> None:
    children = {"a": list(range(50)), "b": list(range(20))}

    def mix(**kw: Any) -> MixtureDataset:
        return MixtureDataset(children, {"a": 0.7, "b": 0.3}, **{"block_size": 10, "length": 70, **kw})

    s = MapStream(mix())
    take(iter(s), 7)
    state = s.state_dict()
    MapStream(mix()).load_state_dict(state)
    # same length, other mixture: other items at the same positions (new weights need
    # the job's merged state: youmu.mixture.change)
    for other, match in ((mix(seed=1), "seed=0 but this one has seed=1"), (mix(block_size=7), "block_size=10"),
                         (MixtureDataset(children, {"a": 0.5, "b": 0.5}, block_size=10, length=70), "merge_states")):
        assert len(other) == 70
        with pytest.raises(StateError, match=match):
            MapStream(other).load_state_dict(state)
    flat = MapStream(FlatMixture(children, seed=0))
    take(iter(flat), 3)
    with pytest.raises(StateError, match="data="):
        MapStream(FlatMixture(children, seed=2)).load_state_dict(flat.state_dict())


def test_pack_state_of_other_data_or_rank_is_refused(files) -> None:
    p = pack(YoumuDataset(files["a"], buffer_size=40, rank=0, world_size=2), seq_len=16, eos_id=0)
    take(iter(p), 5)
    state = p.state_dict()
    with pytest.raises(StateError, match="data="):
        pack(YoumuDataset(files["b"], buffer_size=40, rank=0, world_size=2), seq_len=16, eos_id=0).load_state_dict(
            state)
    with pytest.raises(StateError, match="rank=0"):
        pack(YoumuDataset(files["a"], buffer_size=40, rank=1, world_size=2), seq_len=16, eos_id=0).load_state_dict(
            state)


@pytest.mark.parametrize("position", [(3, 10**9), (10**9, 0), (10**6, 5), (3, 7)])
def test_pack_position_past_a_row_or_the_shard_is_refused(files, position) -> None:
    def packed() -> Any:
        return pack(YoumuDataset(files["a"], buffer_size=40, shuffle="none"), seq_len=8, eos_id=0)

    # row 3 of the unshuffled file has 4 tokens plus eos: 5, so 7 tokens into it is past it
    state = packed().state_dict()
    state["positions"] = {0: list(position)}
    with pytest.raises(StateError, match=r"positions'\[0\].*past the end"):
        p = packed()
        p.load_state_dict(state)
        list(p)


def test_pack_position_inside_a_row_resumes() -> None:
    ds = MapStream([{"input_ids": np.arange(1, 11)} for _ in range(6)])
    full = [x["input_ids"].tolist() for x in pack(ds, seq_len=4)]
    p = pack(MapStream([{"input_ids": np.arange(1, 11)} for _ in range(6)]), seq_len=4)
    state = p.state_dict()
    state["positions"] = {0: [0, 4]}
    p.load_state_dict(state)
    assert [x["input_ids"].tolist() for x in p] == full[1:]


@pytest.mark.parametrize("position", [(3, 10**9), (10**9, 0), (3, 7)])
def test_pack_position_past_a_row_is_refused_through_merge_states_as_on_a_direct_load(files, position) -> None:
    """A merged state resumes the packing position as the wrapped stream's chain: a
    position a direct load refuses must not pack a different epoch after a merge."""
    def packed() -> Any:
        return pack(YoumuDataset(files["a"], buffer_size=40, shuffle="none"), seq_len=8, eos_id=0)

    state = packed().state_dict()
    state["positions"] = {0: list(position)}
    with pytest.raises(StateError, match=r"past the end|tokens of row \d+ were packed"):
        p = packed()
        p.load_state_dict(youmu.merge_states([state]))
        list(p)


# ----------------------------------------------------------------------------------------
# forged sizes: a small state never makes youmu allocate what it claims
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["num_workers", "world_size"])
def test_a_forged_job_size_is_refused_by_merge_states_before_it_allocates(field) -> None:
    state = {**MapStream(list(range(10))).state_dict(), field: 10**12, "positions": {0: 3}}
    with pytest.raises(StateError, match=rf"{field}.*1,?000,?000,?000,?000"):
        youmu.merge_states([state])


def test_a_forged_worker_count_is_refused_by_a_direct_load_too() -> None:
    stream = MapStream(list(range(10)))
    take(iter(stream), 2)
    state = {**stream.state_dict(), "num_workers": 10**12}
    with pytest.raises(StateError, match=r"'positions'\[0\]=2 is past the end of worker 0's shard \(1 items"):
        MapStream(list(range(10))).load_state_dict(state)  # worker 0 of 10**12: index math only


def test_a_forged_dataset_size_in_a_loader_state_is_merged_without_allocating_and_refused_at_load() -> None:
    from batching_mp import LengthDataset, collate_ids, sample_len, sample_tok, token_counts

    from youmu.batching import DynamicBatchLoader

    lengths = [8 + i % 5 for i in range(40)]

    def loader() -> Any:
        return DynamicBatchLoader(LengthDataset(lengths, token_counts(lengths)), token_budget=64, length_fn=sample_len,
                                  token_count_fn=sample_tok, collate_fn=collate_ids, pool_size=8, num_workers=0,
                                  timeout=20, heartbeat=0.1)

    first = loader()
    it = iter(first)
    next(it)
    state = first.state_dict()
    first.close()
    forged = {**state, "settings": {**state["settings"], "n": 10**10}}
    merged = youmu.merge_states([forged])  # the claimed size is index math here, never an array
    assert merged["n"] == 10**10
    with pytest.raises(StateError, match=r"n=10000000000 but this DynamicBatchLoader has n=40"):
        loader().load_state_dict(merged)


@pytest.mark.parametrize("field", ["epoch", "step", "next_index"])
def test_a_ray_planner_state_integer_past_int64_is_refused_like_every_other_states(field) -> None:
    # every state keeps its integers in [0, 2**63): int64 in shared memory, numpy and Rust
    from youmu.ray.state import PlannerState

    fresh = PlannerState(0, 0, ((0,),), ((False,),), (0,), ((),), (None,)).to_dict()
    assert PlannerState.from_dict(fresh, world_size=1, num_sources=1).epoch == 0
    forged = {**fresh, field: [2**64] if field == "next_index" else 2**64}
    with pytest.raises(StateError, match=rf"'{field}' must be (a list of 1 ints|an int) in \[0, 2\*\*63\)"):
        PlannerState.from_dict(forged, world_size=1, num_sources=1)


def test_a_list_of_state_integers_has_one_rule_whoever_reads_it() -> None:
    # a loader's own list (DynamicBatchLoader's keys), a chain's positions and a Ray
    # planner's cursors: one check, one message
    from youmu.ray.state import PlannerState
    from youmu.state.contract import state_ints
    from youmu.state.jobs import decode_chain

    fresh = PlannerState(0, 0, ((0,),), ((False,),), (0,), ((),), (None,)).to_dict()
    reads = [lambda: state_ints({"keys": [1, 2**63]}, "keys", owner="DynamicBatchLoader"),
             lambda: decode_chain([{"world_size": 1, "num_workers": [1], "positions": [[2**63]]}], "MapStream"),
             lambda: PlannerState.from_dict({**fresh, "next_index": [2**63]}, world_size=1, num_sources=1)]
    for read in reads:
        with pytest.raises(StateError, match=r"field .* must be a list of (1 )?ints in \[0, 2\*\*63\), got \["):
            read()


# ----------------------------------------------------------------------------------------
# forged chains of jobs: every owner reads the one wire form, and names the field
# ----------------------------------------------------------------------------------------
def _merged_map_stream() -> dict[str, Any]:
    s0 = MapStream(list(range(10)), rank=0, world_size=2)
    s1 = MapStream(list(range(10)), rank=1, world_size=2)
    take(iter(s0), 2)
    return youmu.merge_states([s0.state_dict(), s1.state_dict()])


@pytest.mark.parametrize("edit,message", [
    (lambda lv: {**lv, "pending": [[0], []]}, r"'resumed'\[0\] records 'pending'"),
    (lambda lv: {k: v for k, v in lv.items() if k != "num_workers"}, r"'resumed'\[0\]\['num_workers'\] must be"),
    (lambda lv: {**lv, "num_workers": [1, 2]}, r"'resumed'\[0\]\['positions'\] must hold one int per worker"),
    (lambda lv: {**lv, "positions": [[1.5], [0]]}, r"'resumed'\[0\]\['positions'\] must be a list of ints in \[0, 2\*\*63\)"),
])
def test_a_forged_stream_chain_is_refused_naming_the_field(edit, message) -> None:
    merged = _merged_map_stream()
    forged = {**merged, "resumed": [edit(merged["resumed"][0])]}
    with pytest.raises(StateError, match=message):
        MapStream(list(range(10))).load_state_dict(forged)


def test_a_forged_dynamic_batch_loader_chain_is_refused_naming_the_field() -> None:
    from youmu.batching.state import loader_levels

    good = {"world_size": 2, "num_workers": [1, 1], "positions": [[3], [2]], "pending": [[1], []]}
    assert loader_levels([good], "DynamicBatchLoader")[0].pending == ((1,), ())
    for lv, message in [({**good, "num_workers": [2, 1], "positions": [[3, 0], [2]]}, r"\['num_workers'\] must be one "
                                                                                       "per rank"),
                        ({**good, "tokens": [[0], [0]]}, r"'resumed'\[0\] records 'tokens'"),
                        ({k: v for k, v in good.items() if k != "pending"}, r"\['pending'\] must hold one list"),
                        ({**good, "pending": [[1], [-1]]}, r"'resumed'\[0\]\['pending'\]\[1\] must be a list of ints in \[0, 2\*\*63\)")]:
        with pytest.raises(StateError, match=message):
            loader_levels([lv], "DynamicBatchLoader")


def test_a_forged_ray_planner_chain_is_refused_naming_the_field() -> None:
    from youmu.order.resume import Level
    from youmu.ray.state import PlannerState
    from youmu.state.jobs import encode_chains

    fresh = PlannerState(0, 0, ((0, 0),), ((False, False),), (0,), ((),), (None,)).to_dict()
    two = Level(2, (1, 1), ((4,), (3,)))
    three = Level(3, (1, 1, 1), ((1,), (0,), (2,)))
    assert PlannerState.from_dict({**fresh, "resumed": encode_chains([[two], [two]])}, world_size=1,
                                  num_sources=2).resumed == ((2, ((4, 4), (3, 3))),)
    for chains, message in [(encode_chains([[two]]), r"'resumed' must hold one chain of levels per stream \(2\)"),
                            (encode_chains([[two], [three]]), r"'resumed'\[1\] holds jobs of world sizes \[3\]"),
                            (encode_chains([[two], [Level(2, (1, 2), ((4,), (3, 0)))]]),
                             r"'resumed'\[1\]\[0\]\['num_workers'\] must be one per rank"),
                            ([encode_chains([[two]])[0], [{**encode_chains([[two]])[0][0], "tokens": [[1], [0]]}]],
                             r"'resumed'\[1\]\[0\] records 'tokens'")]:
        with pytest.raises(StateError, match=message):
            PlannerState.from_dict({**fresh, "resumed": chains}, world_size=1, num_sources=2)


# ----------------------------------------------------------------------------------------
# pack: token columns that are not token ids
# ----------------------------------------------------------------------------------------
def _write(tmp_path: Path, table: pa.Table) -> str:
    path = tmp_path / "t.parquet"
    return str(write_table(path, table, row_group_size=10))


def test_pack_refuses_a_float_token_column_at_construction(tmp_path) -> None:
    path = _write(tmp_path, pa.table({"input_ids": pa.array([[1.7, 2.2]] * 20, type=pa.list_(pa.float64()))}))
    with pytest.raises(ArgumentTypeError, match="'input_ids'.*integer token ids"):
        pack(YoumuDataset(path), seq_len=4)


def test_pack_refuses_a_scalar_column_at_construction(tmp_path) -> None:
    path = _write(tmp_path, pa.table({"input_ids": pa.array(range(20))}))
    with pytest.raises(ArgumentTypeError, match="'input_ids'.*list of integer token ids"):
        pack(YoumuDataset(path), seq_len=4)


def test_pack_refuses_float_and_scalar_tokens_a_transform_makes() -> None:
    floats = MapStream([{"input_ids": [1.7, 2.2]}] * 4)
    with pytest.raises(ArgumentTypeError, match="'input_ids'.*integer token ids.*float"):
        list(pack(floats, seq_len=2))
    scalars = MapStream([{"input_ids": 5}] * 4)
    with pytest.raises(ArgumentTypeError, match="'input_ids'.*scalar"):
        list(pack(scalars, seq_len=2))
    missing = MapStream([{"tokens": [1, 2]}] * 4)
    with pytest.raises(youmu.ColumnNotFoundError, match="'input_ids'"):
        list(pack(missing, seq_len=2))


def test_pack_refuses_labels_out_of_step_with_the_ids_or_missing() -> None:
    short = MapStream([{"input_ids": [1, 2, 3], "labels": [-100, 2]}] * 4)
    with pytest.raises(InvalidArgumentError, match="3 'input_ids' but 2 'labels'"):
        list(pack(short, seq_len=2, label_column="labels"))
    missing = MapStream([{"input_ids": [1, 2]}] * 4)
    with pytest.raises(youmu.ColumnNotFoundError, match="'labels'"):
        list(pack(missing, seq_len=2, label_column="labels"))
    floats = MapStream([{"input_ids": [1, 2], "labels": [0.5, 1.0]}] * 4)
    with pytest.raises(ArgumentTypeError, match="'labels'.*integer"):
        list(pack(floats, seq_len=2, label_column="labels"))
    for bad in ("input_ids", 3, ""):
        with pytest.raises(ArgumentTypeError, match="label_column"):
            pack(short, seq_len=2, label_column=bad)


def test_pack_state_without_labels_is_refused_by_a_stream_that_packs_them() -> None:
    rows = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}] * 6
    plain = pack(MapStream(rows), seq_len=2)
    it = iter(plain)
    next(it)
    state = plain.state_dict()
    with pytest.raises(StateError, match="label_column"):
        pack(MapStream(rows), seq_len=2, label_column="labels").load_state_dict(state)


def test_pack_refuses_uint64_tokens_beyond_int64(tmp_path) -> None:
    big = (1 << 64) - 1
    path = _write(tmp_path, pa.table({"input_ids": pa.array([[1, big]] * 20, type=pa.list_(pa.uint64()))}))
    with pytest.raises(ValueOverflowError, match=f"'input_ids'.*{big}"):
        list(pack(YoumuDataset(path, shuffle="none"), seq_len=2))
    fine = _write(tmp_path, pa.table({"input_ids": pa.array([[1, 2]] * 20, type=pa.list_(pa.uint64()))}))
    got = [x["input_ids"].tolist() for x in pack(YoumuDataset(fine, shuffle="none"), seq_len=2)]
    assert got == [[1, 2]] * 20


def test_pack_eos_id_beyond_the_column_type_is_emitted_or_refused_at_construction(tmp_path) -> None:
    path = _write(tmp_path, pa.table({"input_ids": pa.array([[1, 2]] * 20, type=pa.list_(pa.int16()))}))
    # 70,000 does not fit int16 but fits the int64 input_ids every sequence is made of
    got = [x["input_ids"].tolist() for x in pack(YoumuDataset(path, shuffle="none"), seq_len=3, eos_id=70_000)]
    assert got[0] == [1, 2, 70_000]
    for arg in ("eos_id", "pad_id"):
        with pytest.raises(InvalidArgumentError, match=arg):
            pack(YoumuDataset(path), seq_len=3, **{arg: 1 << 64})
        with pytest.raises(ArgumentTypeError, match=arg):
            pack(YoumuDataset(path), seq_len=3, **{arg: 1.0})


# ----------------------------------------------------------------------------------------
# states taken in the main process of a stream DataLoader workers iterate
# ----------------------------------------------------------------------------------------
def _streams(files: dict[str, str]) -> dict[str, Any]:
    return {
        "YoumuDataset": YoumuDataset(files["a"], buffer_size=40),
        "MapStream": MapStream([{"input_ids": torch.arange(i % 5 + 1)} for i in range(200)]),
        "pack": pack(YoumuDataset(files["a"], buffer_size=40), seq_len=8, eos_id=0),
    }


@pytest.mark.parametrize("kind", ["YoumuDataset", "MapStream", "pack"])
def test_main_process_state_of_a_stream_workers_iterate_is_refused(files, kind) -> None:
    ds = _streams(files)[kind]
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = take(iter(loader), 30)
    assert len(got) == 30
    with pytest.raises(StateError, match="StatefulDataLoader"):
        ds.state_dict()
    # a pass in the main process makes the main process's state the real one again
    take(iter(ds), 3)
    assert ds.state_dict()["num_workers"] == 1
    # and set_epoch (a new epoch starts from its beginning) or a loaded state does too
    take(iter(loader), 5)
    with pytest.raises(StateError):
        ds.state_dict()
    ds.set_epoch(1)
    assert ds.state_dict()["positions"] == {}


def test_pack_wrapping_a_stream_workers_iterate_refuses_the_inner_state_too(files) -> None:
    ds = YoumuDataset(files["a"], buffer_size=40)
    packed = pack(ds, seq_len=8, eos_id=0)
    take(iter(DataLoader(packed, batch_size=4, num_workers=2, collate_fn=collate_packed,
                         multiprocessing_context="fork")), 3)
    with pytest.raises(StateError, match="StatefulDataLoader"):
        ds.state_dict()  # what the README quickstart used to do


def _quickstart_code() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"## Quickstart\s+```python\n(.*?)```", text, re.S)
    assert m, "the README has a Quickstart code block"
    return m.group(1)


def test_readme_quickstart_checkpoints_through_the_loader_and_resumes_the_tail(tmp_path, monkeypatch) -> None:
    """The quickstart's code as written (over a ``data/`` made here): its setup, 7
    batches of its loop, its checkpoint line; the checkpoint loaded into a fresh loader
    built by the same setup gives exactly the rest of the uninterrupted run."""
    code = _quickstart_code()
    setup, loop_and_rest = code.split("for epoch in range(2):", 1)
    checkpoint = loop_and_rest[loop_and_rest.index("\nstate = "):]
    assert "StatefulDataLoader" in setup and "loader.state_dict()" in checkpoint
    data = tmp_path / "data"
    data.mkdir()
    for k in range(3):  # ~180,000 tokens: 11 batches of 8 x 2048
        ids = [[(i + j) % 50_000 for j in range(100 + i % 200)] for i in range(300 * k, 300 * k + 300)]
        write_columns(data / f"part{k}.parquet", {"input_ids": ids}, row_group_size=1)
    monkeypatch.chdir(tmp_path)

    def run_setup() -> dict[str, Any]:
        ns: dict[str, Any] = {}
        exec(compile(setup, "README-quickstart", "exec"), ns)
        return ns

    ns = run_setup()
    ns["packed"].set_epoch(0)
    seen = [b["input_ids"].tolist() for b in take(iter(ns["loader"]), 7)]
    exec(compile(checkpoint, "README-quickstart", "exec"), ns)
    state = ns["state"]
    full = [b["input_ids"].tolist() for b in run_setup()["loader"]]
    assert seen == full[:7] and len(full) > 8
    resumed = run_setup()["loader"]
    resumed.load_state_dict(state)
    assert [b["input_ids"].tolist() for b in resumed] == full[7:]


# ----------------------------------------------------------------------------------------
# edited states, and public functions with builtin errors
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("field", "value", "message"), [
    ("epoch", 2**70, "'epoch' must be at most"),
    ("window_pages", "3", r"window_pages='3'"),
    ("num_workers", 2**70, "'num_workers' must be at most"),
    ("positions", {0: 2**70}, "positions"),
    ("rank", "0", "rank='0'"),
    ("data", None, "data=None"),
    ("seed", False, "seed=False"),  # False == 0: equal, but not an int
])
def test_edited_state_fields_are_state_errors_naming_them(files, field, value, message) -> None:
    ds = YoumuDataset(files["a"], buffer_size=40)
    take(iter(ds), 3)
    state = {**ds.state_dict(), field: value}
    with pytest.raises(StateError, match=message):
        YoumuDataset(files["a"], buffer_size=40).load_state_dict(state)


def test_window_pages_mismatch_names_both_values(files) -> None:
    ds = YoumuDataset(files["a"], buffer_size=40)
    state = {**ds.state_dict(), "window_pages": ds.window_pages + 1}
    with pytest.raises(StateError, match=rf"window_pages={ds.window_pages + 1} .* window_pages={ds.window_pages}"):
        YoumuDataset(files["a"], buffer_size=40).load_state_dict(state)


@pytest.mark.parametrize("make", [
    lambda f: YoumuDataset(f["a"]),
    lambda f: MapStream(list(range(5))),
    lambda f: pack(MapStream([{"input_ids": [1]}]), seq_len=2),
])
def test_set_epoch_beyond_int64_is_an_argument_error(files, make) -> None:
    with pytest.raises(InvalidArgumentError, match="epoch"):
        make(files).set_epoch(2**70)


def test_mixture_counters_out_of_range_are_typed() -> None:
    m = MixtureDataset({"a": list(range(10)), "b": list(range(5))}, {"a": 1, "b": 1}, block_size=4)
    n = len(m)
    assert sum(m.counts(n).values()) == n
    calls = [
        (lambda: m.counts(n + 1), PageOutOfRangeError, "i=16"),
        (lambda: m.counts(-1), InvalidArgumentError, "i must be"),
        (lambda: m.passes(n + 1), PageOutOfRangeError, "i="),
        (lambda: m.counts(2**70), PageOutOfRangeError, "i="),
        (lambda: m.counts("3"), ArgumentTypeError, "i must be an int"),
        (lambda: m.stage_of(-1), InvalidArgumentError, "i must be"),
        (lambda: m.locate(1.5), ArgumentTypeError, "i must be an int"),
        (lambda: m[True], ArgumentTypeError, "integers"),
        (lambda: m.block_start(0, 5), PageOutOfRangeError, "stage=5"),
        (lambda: m.block_start(-1), InvalidArgumentError, "b must be"),
        (lambda: m.block_counts(0, 5), PageOutOfRangeError, "stage=5"),
        (lambda: m.position("a", -1), InvalidArgumentError, "draw"),
        (lambda: m.position("a", 1.5), ArgumentTypeError, "draw"),
        (lambda: m.position("a", 2**70), InvalidArgumentError, "draw"),
    ]
    f = FlatMixture({"a": list(range(10)), "b": list(range(5))})
    calls += [
        (lambda: f.position("a", -1), InvalidArgumentError, "local"),
        (lambda: FlatMixture({"a": [1]}, shuffle="no"), ArgumentTypeError, "shuffle"),
    ]
    for call, cls, message in calls:
        with pytest.raises(cls, match=message):
            call()


@pytest.mark.parametrize("cache_pages", [0, 2])
def test_row_dataset_take_nothing_is_an_empty_table(files, cache_pages) -> None:
    ds = youmu.RowDataset(files["a"], cache_pages=cache_pages)
    got = ds.take([])
    assert got.num_rows == 0 and got.schema.names == ["input_ids", "id"]
    assert ds.__getitems__([]) == []
    assert ds.take(np.array([], dtype=np.int64)).num_rows == 0


def test_public_functions_raise_only_youmu_errors_on_hostile_arguments(files) -> None:
    """A sweep over the entry points of this layer with values of the wrong type or
    range: every failure is a YoumuError."""
    bad: list[tuple[str, Any]] = [
        ("YoumuDataset(seed=2**70)", lambda: YoumuDataset(files["a"], seed=2**70)),
        ("YoumuDataset(storage_options=3)", lambda: YoumuDataset(files["a"], storage_options=3)),
        ("YoumuDataset(storage_options={1: 2})", lambda: YoumuDataset(files["a"], storage_options={1: "x"})),
        ("RowDataset(storage_options=[])", lambda: youmu.RowDataset(files["a"], storage_options=[])),
        ("MapStream(run=2**70)", lambda: list(MapStream(list(range(3)), run=2**70))),
        ("MixtureDataset(seed=-1)", lambda: MixtureDataset({"a": [1]}, {"a": 1}, seed=-1)),
        ("pack(seq_len=2**70)", lambda: list(pack(MapStream([{"input_ids": [1]}]), seq_len=2**70))),
        ("load_state_dict(epoch=-1)", lambda: MapStream([1]).load_state_dict({**MapStream([1]).state_dict(),
                                                                              "epoch": -1})),
        ("RowDataset.take([2**70])", lambda: youmu.RowDataset(files["a"]).take([2**70])),
        ("RowDataset.take([1.5])", lambda: youmu.RowDataset(files["a"]).take([1.5])),
        ("RowDataset[2**70]", lambda: youmu.RowDataset(files["a"])[2**70]),
        ("MixtureDataset(block_size=2**70)", lambda: MixtureDataset({"a": [1]}, {"a": 1}, block_size=2**70)),
        ("MixtureDataset(length=2**70)", lambda: MixtureDataset({"a": [1]}, {"a": 1}, length=2**70)),
        ("MixtureDataset(stage start 2**70)", lambda: MixtureDataset({"a": [1]}, [(0, {"a": 1}), (2**70, {"a": 1})])),
        ("MixtureDataset(child_chunk=2**70)", lambda: MixtureDataset({"a": [1]}, {"a": 1}, child_chunk=2**70)),
        ("RowStream(None)", lambda: youmu.RowStream(None, "page", 1, 0, 0)),
        ("collate_packed([])", lambda: collate_packed([])),
        ("collate_packed([1])", lambda: collate_packed([1])),
        ("collate_pad([1])", lambda: youmu.torch.collate_pad([1])),
        ("Prefetcher(None)", lambda: youmu.torch.Prefetcher(None)),
    ]
    for name, call in bad:
        try:
            call()
        except YoumuError:
            continue
        except Exception as e:  # noqa: BLE001 - the point of the sweep
            pytest.fail(f"{name} raised {type(e).__module__}.{type(e).__name__}: {e}")
        pytest.fail(f"{name} was accepted")


# ----------------------------------------------------------------------------------------
# storage_options at every entry point that takes a path
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3(files):
    from s3util import S3

    server = S3()
    server.put_file("states/a.parquet", files["a"])
    yield server
    server.stop()


def test_storage_options_reach_youmu_dataset_and_row_dataset(s3, files, monkeypatch) -> None:
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    url = s3.url("states/a.parquet")
    local = ids_of(YoumuDataset(files["a"], buffer_size=40, seed=3, output="python"))
    remote = YoumuDataset(url, buffer_size=40, seed=3, output="python", storage_options=s3.options())
    assert ids_of(remote) == local
    # a state saved over the local file resumes over the same file in the store
    d = YoumuDataset(files["a"], buffer_size=40, seed=3, output="python")
    take(iter(d), 21)
    remote.load_state_dict(d.state_dict())
    assert ids_of(remote) == local[21:]
    rows = youmu.RowDataset(url, storage_options=s3.options())
    assert len(rows) == 400 and rows[5]["id"] == 5
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        YoumuDataset(youmu.PageIndex(files["a"]), storage_options=s3.options())


def test_storage_options_reach_the_ray_source_and_the_cli(s3, tmp_path, monkeypatch) -> None:
    pytest.importorskip("ray")
    from youmu.ray import Source

    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    url = s3.url("states/a.parquet")
    src = Source(url, storage_options=s3.options())
    assert src.open().num_rows == 400
    assert "secret_access_key" not in src.describe()["storage"]
    assert src.describe()["storage"]["endpoint"] == s3.proxy.endpoint
    with pytest.raises(ArgumentTypeError, match="storage_options"):
        Source(url, storage_options="endpoint=x")
    from youmu.cli import main

    opts = [f"--storage-option={k}={v}" for k, v in s3.options().items()]
    out = tmp_path / "a.youmu"
    assert main(["index", url, "-o", str(out), *opts]) == 0
    assert youmu.PageIndex.load(str(out), storage_options=s3.options()).num_rows == 400
    assert main(["inspect", url, *opts]) == 0


def test_a_forged_workers_field_or_packed_sample_in_a_loader_state_is_refused_naming_it() -> None:
    """A DynamicBatchLoader state of version 2 (tests/support/loader_states_v2.json): its
    ``workers`` (each DataLoader worker's dataset state, the rotation's turn) and its
    packed samples are checked before anything is loaded or built from them."""
    import json

    from youmu.batching.payloads import unpack_sample
    from youmu.batching.state import check_saved_state
    from youmu.state.files import from_plain

    raw = json.loads((SUPPORT / "loader_states_v2.json").read_text())["DynamicBatchLoader"]["workers"]
    state = from_plain(raw, where="fixture")
    assert check_saved_state(state)["workers"]["turn"] == state["workers"]["turn"]
    for forged, match in [({"states": [], "turn": 0}, "one dataset state per DataLoader worker"),
                          ({"states": [None] * 2000, "turn": 0}, "1 to 1024"),
                          ({"states": [None, None], "turn": 2}, "'turn' must be at most 1"),
                          ({"states": [None], "turn": True}, "'turn' must be an int"),
                          ([None], "a dict with 'states' and 'turn'")]:
        with pytest.raises(StateError, match=match):
            check_saved_state({**state, "workers": forged})
    packed = next(iter(state["payloads"].values()))[0]
    for kinds in ({"input_ids": ["torch", "object"]}, {"input_ids": ["pickle", "int64"]}, {"missing": ["list", "int64"]},
                  {"input_ids": "list"}):
        with pytest.raises(StateError, match="is not a packed integer sequence"):
            unpack_sample({**packed, "kinds": kinds}, where="'payloads'[25]")
    with pytest.raises(StateError, match="without 'fields' and 'kinds'"):
        unpack_sample({"format": packed["format"], "fields": []}, where="'payloads'[25]")
