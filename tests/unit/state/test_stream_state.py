"""The stream state format has one owner (``youmu.state.stream``): what it writes is what
the streams have always saved, byte for byte, and what it reads back is checked once
for a rank's load and for a merge alike."""

from __future__ import annotations

import json

import pytest

from youmu.errors import StateError
from youmu.merge import merge_states
from youmu.order.resume import Level
from youmu.state.jobs import MERGED_FORMAT
from youmu.state.stream import (
    MAPSTREAM_FORMAT,
    PACK_FORMAT,
    PER_RANK,
    STREAM_FORMATS,
    decode,
    decode_merged,
    encode,
    encode_chain,
    encode_merged,
    format_of,
    position_width,
    shared_settings,
)

ROWS = [[1, 2, 3][: 1 + i % 3] for i in range(40)]

# json.dumps of the states these streams saved before the format had one owner: the
# bytes a checkpoint holds must not change with the code that writes them
FROZEN_MAPSTREAM = (
    '{"format": "youmu.MapStream/1", "world_size": 2, "rank": 1, "run": 1, "drop_last": false, '
    '"data": "e6707312118d62f0", "epoch": 0, "num_workers": 1, "positions": {"0": 5}}')
FROZEN_PACK_MERGED = (
    '{"format": "youmu.MergedState/1", "stream": "youmu.PackedDataset/1", "seq_len": 4, "column": "input_ids", '
    '"eos_id": 0, "pad_id": null, "epoch": 0, "dataset": {"format": "youmu.MergedState/1", '
    '"stream": "youmu.MapStream/1", "run": 1, "drop_last": false, "data": "e6707312118d62f0", "epoch": 0, '
    '"resumed": [{"world_size": 2, "num_workers": [1, 1], "positions": [[4], [5]], "tokens": [[1], [2]]}]}}')
FROZEN_PACK_RESUMED = (
    '{"format": "youmu.PackedDataset/1", "seq_len": 4, "column": "input_ids", "eos_id": 0, "pad_id": null, '
    '"epoch": 0, "num_workers": 1, "positions": {"0": [3, 0]}, "dataset": {"format": "youmu.MapStream/1", '
    '"world_size": 1, "rank": 0, "run": 1, "drop_last": false, "data": "e6707312118d62f0", "epoch": 0, '
    '"num_workers": 1, "positions": {}, "resumed": [{"world_size": 2, "num_workers": [1, 1], '
    '"positions": [[4], [5]], "tokens": [[1], [2]]}]}}')


def _take(it, n: int) -> None:
    for _ in range(n):
        next(it)


def test_saved_states_keep_their_bytes() -> None:
    from youmu.torch import MapStream, pack

    s = MapStream(ROWS, rank=1, world_size=2)
    _take(iter(s), 5)
    assert json.dumps(s.state_dict()) == FROZEN_MAPSTREAM
    states = []
    for r in range(2):
        p = pack(MapStream(ROWS, rank=r, world_size=2), seq_len=4, eos_id=0)
        _take(iter(p), 3 + r)
        states.append(p.state_dict())
    merged = merge_states(states)
    assert json.dumps(merged) == FROZEN_PACK_MERGED
    p = pack(MapStream(ROWS, rank=0, world_size=1), seq_len=4, eos_id=0)
    p.load_state_dict(json.loads(FROZEN_PACK_MERGED))
    _take(iter(p), 2)
    assert json.dumps(p.state_dict()) == FROZEN_PACK_RESUMED


@pytest.mark.parametrize("width,positions", [(1, {0: 7, 2: 0}), (2, {1: (4, 3)})])
def test_a_state_reads_back_what_was_written_after_a_json_round_trip(width: int, positions: dict) -> None:
    fmt = PACK_FORMAT if width == 2 else MAPSTREAM_FORMAT
    assert position_width(fmt) == width
    chain = [Level(2, (1, 2), ((3,), (2, 0)))]
    st = encode(fmt, {"world_size": 1, "rank": 0, "seed": 5}, epoch=3, num_workers=3, positions=positions,
                chain=chain)
    got = decode(json.loads(json.dumps(st)), fmt, owner="S", expect={"seed": 5}, width=width)
    assert (got.epoch, got.num_workers, got.positions, got.chain) == (3, 3, positions, chain)


@pytest.mark.parametrize("fmt", [*STREAM_FORMATS, "example.Evens/1"])
@pytest.mark.parametrize("chain", [None, [Level(2, (1, 2), ((3,), (2, 0)))]])
def test_a_stream_state_is_what_its_declaration_writes(fmt: str, chain: list | None) -> None:
    # encode puts a state without the kind's own fields together itself (it runs once
    # per sample a loader reads ahead): the same keys in the same order as the declaration
    width = position_width(fmt)
    positions = {0: (4, 1) if width == 2 else 4, 1: (0, 0) if width == 2 else 0}
    settings = {"world_size": 2, "rank": 1, "seed": 5}
    st = encode(fmt, settings, epoch=2, num_workers=2, positions=positions, chain=chain)
    declared = format_of(fmt, width).write({
        "epoch": 2, "num_workers": 2, "positions": {w: list(p) if isinstance(p, tuple) else p
                                                    for w, p in positions.items()},
        **({"resumed": encode_chain(chain)} if chain else {})}, settings)
    assert json.dumps(st) == json.dumps(declared)
    assert list(st) == ["format", *settings, *(f.name for f in format_of(fmt, width).fields if f.name in st)]


def test_a_rank_load_and_a_merge_refuse_a_worker_past_num_workers_alike() -> None:
    st = encode(MAPSTREAM_FORMAT, {"world_size": 2, "rank": 0, "data": "d"}, epoch=0, num_workers=1,
                positions={1: 4})
    with pytest.raises(StateError, match=r"S state field 'positions' has workers \[1\] but num_workers=1"):
        decode(st, MAPSTREAM_FORMAT, owner="S")
    with pytest.raises(StateError, match=r"merge_states: states\[0\] field 'positions' has workers \[1\] but "):
        merge_states([st, {**st, "rank": 1, "positions": {0: 1}}])


def test_settings_shared_by_a_job_leave_out_every_per_rank_field() -> None:
    st = encode(MAPSTREAM_FORMAT, {"world_size": 2, "rank": 1, "seed": 5}, epoch=0, num_workers=1,
                positions={0: 4}, chain=[Level(1, (1,), ((2,),))])
    assert set(st) - set(PER_RANK) == {"seed"}
    assert shared_settings({**st, "dataset": {}}) == {"seed": 5}


def test_a_merged_state_reads_back_and_ignores_the_shard() -> None:
    chain = [Level(2, (1, 1), ((3,), (2,)))]
    merged = encode_merged(MAPSTREAM_FORMAT, {"seed": 5}, 1, chain=chain)
    assert merged["format"] == MERGED_FORMAT
    st, epoch, got = decode_merged(merged, MAPSTREAM_FORMAT, owner="S",
                                   expect={"seed": 5, "rank": 3, "world_size": 4})
    assert (epoch, got) == (1, chain)
    with pytest.raises(StateError, match="seed=5 but this S has seed=6"):
        decode_merged(merged, MAPSTREAM_FORMAT, owner="S", expect={"seed": 6})
    with pytest.raises(StateError, match="no 'dataset' field"):
        decode_merged(merged, MAPSTREAM_FORMAT, owner="S", expect={}, wrapped=True)
