"""Resume on another topology, end to end: youmu streams saved by the ranks of one job,
merged with ``youmu.merge_states`` and loaded by every rank of a job of another shape,
deliver the rest of the epoch exactly once — in process (ranks simulated by
``rank=, world_size=``) and through torchdata's ``StatefulDataLoader`` with real
worker processes."""

from __future__ import annotations

import json
import random
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from where import SUPPORT

import youmu
from youmu.errors import StateError
from youmu.mixture import MixtureDataset
from youmu.torch import MapStream, YoumuDataset, pack

pq = pytest.importorskip("pyarrow.parquet")
from parquet_fixtures import write_ids, write_unique_tokens  # noqa: E402

ROWS = (97, 64, 41)  # three files, row groups of 7 (one page each)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("resume")
    rng = np.random.RandomState(3)
    first = 0
    for i, n in enumerate(ROWS):
        # token t of row r is r * 1000 + t: every token of the corpus is unique
        write_unique_tokens(Path(root) / f"part-{i}.parquet", np.arange(first, first + n),
                            [rng.randint(0, 9) for _ in range(n)], row_group_size=7)
        first += n
    return str(root)


def _ids(rows) -> list[int]:
    return [int(r["id"]) for r in rows]


def _take(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _run_job(make, world, state, rng, last=False):
    """Every rank of a job loads ``state`` (None: a fresh epoch) and delivers a random
    part of its shard (all of it when ``last``); returns (items, per-rank states)."""
    items, states = [], []
    for r in range(world):
        s = make(r, world)
        if state is not None:
            s.load_state_dict(json.loads(json.dumps(state)))  # states survive JSON
        it = iter(s)
        got = list(it) if last else _take(it, rng.randint(0, 40))
        items += got
        states.append(s.state_dict())
    return items, states


@pytest.mark.parametrize("shuffle, drop_last, slices", [
    ("page", False, 1), ("page", True, 1), ("page", False, 3), ("page", True, 2), ("row", False, 1),
    ("row", True, 1), ("local", False, 1), ("local", True, 1), ("none", False, 1), ("none", True, 1),
])
def test_youmu_dataset_resizes_deliver_the_epoch_once(corpus, shuffle, drop_last, slices):
    def make(r, w):
        ds = YoumuDataset(corpus, columns=["id"], shuffle=shuffle, buffer_size=20, seed=5, rank=r, world_size=w,
                          drop_last=drop_last, output="python", page_slices=slices)
        ds.set_epoch(1)  # a merged state carries its epoch
        return ds

    rng = random.Random(zlib.crc32(f"{shuffle}{drop_last}{slices}".encode()))
    delivered: list[int] = []
    state = None
    worlds = [4, 3, 8, 2]
    for j, w in enumerate(worlds):
        items, states = _run_job(make, w, state, rng, last=j == len(worlds) - 1)
        delivered += _ids(items)
        state = youmu.merge_states(states[::-1])  # any order
        assert len(json.dumps(state)) <= 1024 * sum(worlds[: j + 1])
    counts = Counter(delivered)
    assert max(counts.values()) == 1
    missing = set(range(sum(ROWS))) - set(counts)
    if drop_last:
        assert len(missing) <= sum(w - 1 for w in worlds)
    else:
        assert not missing


def test_a_resumed_epoch_keeps_the_saved_windows_and_settings(corpus):
    a = YoumuDataset(corpus, columns=["id"], rank=0, world_size=1, output="python")
    b = YoumuDataset(corpus, columns=["id"], rank=0, world_size=16, output="python")
    assert a.window_pages != b.window_pages  # window_pages_for caps windows by the world size
    _take(iter(a), 50)
    merged = youmu.merge_states([a.state_dict()])
    b.load_state_dict(merged)
    assert b.window_pages == a.window_pages and b.state_dict()["window_pages"] == a.window_pages
    # the next epoch is the new job's own
    b.set_epoch(1)
    assert b.window_pages != a.window_pages


def test_same_topology_reload_of_a_resumed_rank(corpus):
    """A resumed job's per-rank state also resumes that rank directly."""
    def make(r, w):
        return YoumuDataset(corpus, columns=["id"], buffer_size=20, rank=r, world_size=w, output="python")

    states = []
    for r in range(2):
        s = make(r, 2)
        _take(iter(s), 10)
        states.append(s.state_dict())
    merged = youmu.merge_states(states)
    s = make(1, 3)
    s.load_state_dict(merged)
    it = iter(s)
    _take(it, 7)
    saved = json.loads(json.dumps(s.state_dict()))
    assert "resumed" in saved
    rest_direct = _ids(it)
    assert rest_direct
    t = make(1, 3)
    t.load_state_dict(saved)
    assert _ids(t) == rest_direct


def test_map_stream_over_a_mixture(corpus):
    mix = MixtureDataset({"a": list(range(300)), "b": list(range(1000, 1100))}, {"a": 0.7, "b": 0.3},
                         block_size=16, length=333, seed=1)
    truth = Counter(mix[i] for i in range(len(mix)))

    for run, drop_last in ((1, False), (16, False), (16, True)):
        def make(r, w, run=run, drop_last=drop_last):
            return MapStream(mix, rank=r, world_size=w, run=run, drop_last=drop_last, chunk=5)

        rng = random.Random(run)
        got: list[int] = []
        state = None
        worlds = [3, 5, 2, 4]
        for j, w in enumerate(worlds):
            items, states = _run_job(make, w, state, rng, last=j == len(worlds) - 1)
            got += items
            state = youmu.merge_states(states)
        seen = Counter(got)
        assert not seen - truth  # nothing more often than the mixture holds it
        lost = sum((truth - seen).values())
        assert lost == 0 if not drop_last else lost <= 3 * 16 + sum(w - 1 for w in worlds[1:])


def _tokens(seqs, pad=-1, eos=-2) -> list[int]:
    out: list[int] = []
    for s in seqs:
        out += [t for t in s["input_ids"].tolist() if t not in (pad, eos)]
    return out


def test_pack_resizes_deliver_every_token_once(corpus):
    def make(r, w):
        ds = YoumuDataset(corpus, columns=["input_ids", "id"], buffer_size=20, seed=2, rank=r, world_size=w,
                          output="numpy")
        return pack(ds, seq_len=11, eos_id=-2, pad_id=-1)

    rng = random.Random(7)
    got: list[int] = []
    state = None
    worlds = [2, 3, 1, 4]
    for j, w in enumerate(worlds):
        items, states = _run_job(make, w, state, rng, last=j == len(worlds) - 1)
        got += _tokens(items)
        state = youmu.merge_states(states)
    table = pq.read_table(corpus, columns=["input_ids"])
    truth = [t for row in table.column("input_ids").to_pylist() for t in row]
    assert sorted(got) == sorted(truth)


# -- StatefulDataLoader with real workers -----------------------------------------------
def _loader_jobs(make, jobs, per_rank_items, collect):
    from torchdata.stateful_dataloader import StatefulDataLoader

    got: list = []
    merged = None
    for j, (world, workers) in enumerate(jobs):
        states = []
        for r in range(world):
            ds = make(r, world)
            if merged is not None:
                ds.load_state_dict(merged)  # into the dataset, before the loader is built
            loader = StatefulDataLoader(ds, batch_size=None, num_workers=workers,
                                        multiprocessing_context="fork" if workers else None)
            it = iter(loader)
            take = None if j == len(jobs) - 1 else per_rank_items[(j + r) % len(per_rank_items)]
            got += collect(list(it) if take is None else _take(it, take))
            states.append(loader.state_dict())
            del it, loader
        merged = youmu.merge_states(states)
    return got


JOBS = [(2, 2), (3, 0), (2, 3)]  # 2 ranks × 2 workers → 3 ranks × 1 (main process) → 2 ranks × 3 workers


def test_stateful_dataloader_youmu_dataset(corpus):
    def make(r, w):
        return YoumuDataset(corpus, columns=["id"], buffer_size=20, seed=9, rank=r, world_size=w, output="python")

    got = _loader_jobs(make, JOBS, [13, 30, 5], _ids)
    assert sorted(got) == list(range(sum(ROWS)))


def test_stateful_dataloader_pack(corpus):
    def make(r, w):
        ds = YoumuDataset(corpus, columns=["input_ids"], buffer_size=20, seed=4, rank=r, world_size=w,
                          output="numpy")
        return pack(ds, seq_len=9, eos_id=-2, pad_id=-1)

    got = _loader_jobs(make, JOBS, [4, 9, 2], _tokens)
    table = pq.read_table(corpus, columns=["input_ids"])
    assert sorted(got) == sorted(t for row in table.column("input_ids").to_pylist() for t in row)


def test_stateful_dataloader_map_stream_over_a_mixture():
    mix = MixtureDataset({"a": list(range(200)), "b": list(range(1000, 1050))}, {"a": 0.8, "b": 0.2},
                         block_size=8, length=211, seed=3)

    def make(r, w):
        return MapStream(mix, rank=r, world_size=w, run=8, chunk=3)

    got = _loader_jobs(make, JOBS, [11, 25, 3], lambda items: [int(x) for x in items])
    assert Counter(got) == Counter(mix[i] for i in range(len(mix)))


# -- bad states -------------------------------------------------------------------------
def _rank_states(corpus, world=2, **kw):
    out = []
    for r in range(world):
        s = YoumuDataset(corpus, columns=["id"], buffer_size=20, rank=r, world_size=world, output="python", **kw)
        _take(iter(s), 3)
        out.append(s.state_dict())
    return out


def test_bad_merges_name_the_problem(corpus, tmp_path):
    states = _rank_states(corpus)
    with pytest.raises(StateError, match=r"rank\(s\) \[1\] are missing"):
        youmu.merge_states(states[:1])
    with pytest.raises(StateError, match="rank 0 appears twice"):
        youmu.merge_states([states[0], states[0]])
    with pytest.raises(StateError, match="'seed'"):
        youmu.merge_states([states[0], _rank_states(corpus, seed=1)[1]])
    with pytest.raises(StateError, match="'epoch'"):
        youmu.merge_states([states[0], {**states[1], "epoch": 3}])
    with pytest.raises(StateError, match="'shuffle'"):
        youmu.merge_states([states[0], _rank_states(corpus, shuffle="row")[1]])
    other = tmp_path / "other.parquet"
    write_ids(other, 50, row_group_size=7)
    foreign = YoumuDataset(str(other), columns=["id"], buffer_size=20, rank=1, world_size=2, output="python")
    with pytest.raises(StateError, match="'data'"):
        youmu.merge_states([states[0], foreign.state_dict()])
    with pytest.raises(StateError, match="not the state of a youmu stream"):
        youmu.merge_states([{"format": "youmu.DynamicBatchLoader/1"}])
    with pytest.raises(StateError, match="'format'"):
        youmu.merge_states([states[0], {**MapStream(list(range(9)), rank=1, world_size=2).state_dict()}])
    with pytest.raises(StateError, match="non-empty list"):
        youmu.merge_states(states[0])


def test_merged_state_into_a_different_stream_is_refused(corpus):
    merged = youmu.merge_states(_rank_states(corpus))
    with pytest.raises(StateError, match="seed"):
        YoumuDataset(corpus, columns=["id"], buffer_size=20, seed=1, output="python").load_state_dict(merged)
    with pytest.raises(StateError, match="drop_last"):
        YoumuDataset(corpus, columns=["id"], buffer_size=20, drop_last=True, output="python").load_state_dict(merged)
    with pytest.raises(StateError, match="MapStream"):
        MapStream(list(range(9))).load_state_dict(merged)
    with pytest.raises(StateError, match="past the end"):
        edited = json.loads(json.dumps(merged))
        edited["resumed"][0]["positions"][0][0] = 10**6
        YoumuDataset(corpus, columns=["id"], buffer_size=20, output="python").load_state_dict(edited)
    # a refused state leaves the stream as it was
    s = YoumuDataset(corpus, columns=["id"], buffer_size=20, output="python")
    with pytest.raises(StateError):
        s.load_state_dict(edited)
    assert sorted(_ids(s)) == list(range(sum(ROWS)))


# -- epochs after a resume: persistent workers, and the one epoch rule ------------------------
def _stream_kind(corpus: str, kind: str):
    """``(make(rank, world), collect(items) -> compared units, truth(epoch) -> Counter)``
    of one stream kind over the corpus."""
    table = pq.read_table(corpus, columns=["input_ids"])
    mix = MixtureDataset({"a": list(range(200)), "b": list(range(1000, 1050))}, {"a": 0.8, "b": 0.2},
                         block_size=8, length=211, seed=3)
    if kind == "youmu_dataset":
        return ((lambda r, w: YoumuDataset(corpus, columns=["id"], buffer_size=20, seed=9, rank=r, world_size=w,
                                           output="python")),
                _ids, lambda epoch: Counter(range(sum(ROWS))))
    if kind == "map_stream":
        return ((lambda r, w: MapStream(mix, rank=r, world_size=w, run=8, chunk=3)),
                lambda items: [int(x) for x in items], lambda epoch: Counter(mix[i] for i in range(len(mix))))
    assert kind == "pack"
    return ((lambda r, w: pack(YoumuDataset(corpus, columns=["input_ids"], buffer_size=20, seed=4, rank=r,
                                            world_size=w, output="numpy"), seq_len=9, eos_id=-2, pad_id=-1)),
            _tokens, lambda epoch: Counter(t for row in table.column("input_ids").to_pylist() for t in row))


@pytest.mark.filterwarnings("ignore:Length of IterableDataset")  # torch's len() check across epochs
@pytest.mark.parametrize("resume", ["fresh", "rank", "merged"])
@pytest.mark.parametrize("kind", ["youmu_dataset", "map_stream", "pack"])
def test_persistent_workers_deliver_every_epoch_exactly_once(corpus, kind, resume):
    """Epoch 0 (resumed from a rank's state, from a merged state, or fresh) then epoch 1
    through the same persistent DataLoader workers: each epoch's items exactly once."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    make, collect, truth = _stream_kind(corpus, kind)
    before: list = []
    rank_state = merged = None
    if resume != "fresh":
        world = 2 if resume == "merged" else 1
        states = []
        for r in range(world):
            loader = StatefulDataLoader(make(r, world), batch_size=None, num_workers=2,
                                        multiprocessing_context="fork")
            before += collect(_take(iter(loader), 5 + 3 * r))
            states.append(loader.state_dict())
            del loader
        if resume == "merged":
            merged = youmu.merge_states(states)  # StatefulDataLoader states merge as they are
        else:
            rank_state = states[0]
    ds = make(0, 1)
    if merged is not None:
        ds.load_state_dict(merged)  # into the dataset, before the loader is built
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                                multiprocessing_context="fork")
    if rank_state is not None:
        loader.load_state_dict(rank_state)
    epoch0 = collect(list(loader))
    assert Counter(before) + Counter(epoch0) == truth(0)
    ds.set_epoch(1)  # reaches the persistent workers
    assert Counter(collect(list(loader))) == truth(1)


# -- states saved before the job-states layer still load ---------------------------------------
def test_merged_states_saved_by_the_previous_layout_resume_to_the_same_rows() -> None:
    """``merged_states_v1.json`` holds merged states made by youmu before its merges
    shared one job-states layer (a ``MapStream`` epoch resumed twice: 2 ranks → 3 → 2;
    a ``pack`` with rows partly packed: 2 ranks → 3), with the rows every new rank
    then read. Today's code loads them and reads the same rows."""
    cases = json.loads((SUPPORT / "merged_states_v1.json").read_text())
    data = list(range(50))
    chain = cases["mapstream_chain"]
    got = []
    for r in range(chain["world_size"]):
        s = MapStream(data, rank=r, world_size=chain["world_size"])
        s.load_state_dict(chain["merged"])
        got.append([int(x) for x in s])
    assert got == chain["rows"]
    rows = [{"input_ids": np.arange(1, 2 + i % 7).tolist()} for i in range(40)]
    packed = cases["pack"]
    got = []
    for r in range(packed["world_size"]):
        p = pack(MapStream(rows, rank=r, world_size=packed["world_size"]), seq_len=5, eos_id=0)
        p.load_state_dict(packed["merged"])
        got.append([x["input_ids"].tolist() for x in p])
    assert got == packed["rows"]
