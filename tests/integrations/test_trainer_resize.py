"""Trainer checkpoints that resume on another number of ranks: a job of 2 ranks saves
its ``TrainerLoader`` state mid-epoch, a job of 3 ranks (spawned, Gloo on CPU) loads it
and delivers the rest of the epoch exactly once with the same steps on every rank —
``YoumuDataset`` through ``StatefulDataLoader`` workers (2 ranks x 2 workers -> 3 ranks x
1 worker), ``pack``, the Hugging Face per-rank files, and a real Accelerate loop
(``save_state`` on 2 ranks, ``load_state`` on 3). Plus the states that must be refused:
an incomplete job, repeated ranks, states of other data, states of a foreign kind."""

from __future__ import annotations

import os
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
from batching_mp import run_world
from torchdata.stateful_dataloader import StatefulDataLoader
from trainers_mp import N, TinyLM, collate, dataset, torchrun_env, write_corpus

import youmu
from youmu.errors import StateError
from youmu.integrations import TrainerLoader
from youmu.integrations.accelerate import prepare
from youmu.integrations.hf import load_loader_state, loader_state_path
from youmu.integrations.trainer.states import GATHERED_FORMAT, TRAINER_LOADER_FORMAT
from youmu.state.files import write_state
from youmu.torch import MapStream, YoumuDataset, collate_packed, collate_pad, pack

# trainer jobs on 2 and 3 ranks (50 s): the whole module runs in make test-system
pytestmark = pytest.mark.slow

ROWS = 75  # rows of the Parquet corpus, pages of a few rows
TAKE = 2  # steps the 2-rank job takes before it saves
EOS, PAD = -2, -1


def _write(path: str, rows: int = ROWS, first: int = 0) -> None:
    write_corpus(path, rows, first)


def _rows(path: str, workers: int) -> TrainerLoader:
    ds = YoumuDataset(path, shuffle="page", buffer_size=8, seed=1)
    return TrainerLoader(ds, batch_size=4, num_workers=workers)


def _packed(path: str, workers: int) -> TrainerLoader:
    ds = YoumuDataset(path, columns=["input_ids"], buffer_size=8, seed=3, output="numpy")
    return TrainerLoader(pack(ds, seq_len=9, eos_id=EOS, pad_id=PAD), batch_size=2, collate_fn=collate_packed,
                         num_workers=workers)


def _ids(batch: dict[str, Any]) -> list[int]:
    return [int(i) for i in batch["id"]]


def _tokens(batch: dict[str, Any]) -> list[int]:
    return [int(t) for t in batch["input_ids"].flatten().tolist() if t not in (EOS, PAD)]


def _steps(it: Any, n: int | None, read: Any) -> tuple[list[int], int]:
    """What the next ``n`` steps of the iterator ``it`` (all it has for ``None``) deliver."""
    got, steps = [], 0
    for batch in it:
        got += read(batch)
        steps += 1
        if steps == n:
            break
    return got, steps


def old_job(rank: int, world: int, tmp: str) -> dict[str, Any]:
    if rank == 0:
        _write(f"{tmp}/rows.parquet")
    dist.barrier()
    res: dict[str, Any] = {}
    loader = _rows(f"{tmp}/rows.parquet", workers=2)
    res["rows_len"] = len(loader)
    res["rows"], _ = _steps(iter(loader), TAKE, _ids)
    res["rows_state"] = loader.gathered_state_dict()
    os.makedirs(f"{tmp}/hf", exist_ok=True)
    write_state(loader_state_path(f"{tmp}/hf", rank), loader.state_dict())  # what the HF callback writes
    packed = _packed(f"{tmp}/rows.parquet", workers=2)
    res["pack"], _ = _steps(iter(packed), TAKE, _tokens)
    res["pack_state"] = packed.gathered_state_dict()
    return res


def new_job(rank: int, world: int, tmp: str, rows_state: Any, pack_state: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    loader = _rows(f"{tmp}/rows.parquet", workers=1)
    loader.load_state_dict(rows_state)
    res["rows_len"], res["rows_epoch"] = len(loader), loader.epoch
    it = iter(loader)
    head, n = _steps(it, 1, _ids)
    mid = loader.gathered_state_dict()  # a resumed epoch saved by this job: same-size resume below
    rest, m = _steps(it, None, _ids)
    res["rows"], res["rows_steps"] = head + rest, n + m
    again = _rows(f"{tmp}/rows.parquet", workers=1)
    again.load_state_dict(mid)
    res["again_len"] = len(again)
    res["again"], _ = _steps(again, None, _ids)
    # the next epoch is a full one of this job
    res["next_len"] = len(loader)
    res["next"], res["next_steps"] = _steps(loader, None, _ids)
    res["next_epoch"] = loader.epoch
    # the Hugging Face per-rank files of the 2-rank job
    hf = _rows(f"{tmp}/rows.parquet", workers=0)
    load_loader_state(hf, f"{tmp}/hf")
    res["hf_len"] = len(hf)
    res["hf"], _ = _steps(hf, None, _ids)
    packed = _packed(f"{tmp}/rows.parquet", workers=0)
    packed.load_state_dict(pack_state)
    res["pack"], res["pack_steps"] = _steps(packed, None, _tokens)
    res["pack_epoch"] = packed.epoch
    return res


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    tmp = str(tmp_path_factory.mktemp("resize"))
    old = run_world(old_job, 2, tmp, timeout=300)
    new = run_world(new_job, 3, tmp, old[0]["rows_state"], old[0]["pack_state"], timeout=300)
    return tmp, old, new


def _rank_streams(make: Any, merged: dict[str, Any], world: int) -> list[list[Any]]:
    """The items each rank of a ``world``-rank job holds of the rest of the epoch: the
    streams themselves, in this process (the reference for the spawned job)."""
    out = []
    for r in range(world):
        stream = make(r, world)
        stream.load_state_dict(merged)
        out.append(list(stream))
    return out


def _merged(gathered: dict[str, Any]) -> dict[str, Any]:
    return youmu.merge_states([s["source"] for s in gathered["ranks"]])


def test_rows_through_workers_resume_on_three_ranks(jobs) -> None:
    tmp, old, new = jobs
    assert old[0]["rows_len"] == old[1]["rows_len"] > TAKE
    # 2 ranks x 2 workers took TAKE steps; 3 ranks x 1 worker deliver every other row once
    assert sorted(i for job in (old, new) for r in job for i in r["rows"]) == list(range(ROWS))
    left = _rank_streams(lambda r, w: YoumuDataset(f"{tmp}/rows.parquet", shuffle="page", buffer_size=8, seed=1,
                                                   rank=r, world_size=w, output="python"),
                         _merged(old[0]["rows_state"]), 3)
    assert [r["rows"] for r in new] == [[int(row["id"]) for row in rows] for rows in left]  # in stream order
    # the same steps on every rank: the steps taken before plus the fewest batches left
    batches = min(-(-len(rows) // 4) for rows in left)
    assert [r["rows_len"] for r in new] == [TAKE + batches] * 3
    assert [r["rows_steps"] for r in new] == [batches] * 3 and [r["rows_epoch"] for r in new] == [0] * 3


def test_the_resized_epoch_resumes_on_its_own_world_size(jobs) -> None:
    _, _, new = jobs
    for r in new:
        assert r["again_len"] == r["rows_len"]  # the resumed epoch's length travels in the state
        assert r["again"] == r["rows"][4:]  # the rows after the step the 3-rank job took before saving


def test_the_next_epoch_is_a_full_epoch_of_the_new_job(jobs) -> None:
    tmp, _, new = jobs
    assert [r["next_epoch"] for r in new] == [1] * 3
    ranks = [len(YoumuDataset(f"{tmp}/rows.parquet", shuffle="page", buffer_size=8, seed=1, rank=r, world_size=3,
                              output="python")) for r in range(3)]
    steps = min(-(-n // 4) for n in ranks)
    assert [r["next_len"] for r in new] == [r["next_steps"] for r in new] == [steps] * 3
    ids = [i for r in new for i in r["next"]]
    assert len(ids) == len(set(ids)) == sum(min(n, 4 * steps) for n in ranks)


def test_hf_per_rank_files_resume_on_three_ranks(jobs) -> None:
    _, _, new = jobs
    assert [r["hf"] for r in new] == [r["rows"] for r in new]
    assert [r["hf_len"] for r in new] == [r["rows_len"] for r in new]


def _tokens_of(seqs: list[Any]) -> list[int]:
    return [int(t) for s in seqs for t in s["input_ids"].tolist() if t not in (EOS, PAD)]


def test_pack_resumes_on_three_ranks(jobs) -> None:
    tmp, old, new = jobs
    table = pq.read_table(f"{tmp}/rows.parquet", columns=["input_ids"])
    truth = sorted(t for row in table.column("input_ids").to_pylist() for t in row)

    def make(r: int, w: int) -> Any:
        return pack(YoumuDataset(f"{tmp}/rows.parquet", columns=["input_ids"], buffer_size=8, seed=3, rank=r,
                                 world_size=w, output="numpy"), seq_len=9, eos_id=EOS, pad_id=PAD)

    left = _rank_streams(make, _merged(old[0]["pack_state"]), 3)
    steps = new[0]["pack_steps"]
    # unsized: the ranks agree each step and stop together when one is out of sequences
    assert [r["pack_steps"] for r in new] == [min(-(-len(seqs) // 2) for seqs in left)] * 3
    assert [r["pack"] for r in new] == [_tokens_of(seqs[: 2 * steps]) for seqs in left]
    assert [r["pack_epoch"] for r in new] == [0] * 3
    # every token exactly once: delivered by the first job, by the second, or still held by
    # a rank of the second when the first ran out
    held = [t for seqs in left for t in _tokens_of(seqs[2 * steps:])]
    assert sorted([t for job in (old, new) for r in job for t in r["pack"]] + held) == truth


# -- refused states (a 1-rank job here, the 2-rank job's states) -----------------------------
def _fresh(tmp: str) -> TrainerLoader:
    return _rows(f"{tmp}/rows.parquet", workers=0)


def test_an_incomplete_or_repeated_job_is_refused(jobs) -> None:
    tmp, old, _ = jobs
    ranks = old[0]["rows_state"]["ranks"]
    with pytest.raises(StateError, match=r"world_size=2 but the states of rank\(s\) \[1\] are missing"):
        _fresh(tmp).load_state_dict({"format": GATHERED_FORMAT, "ranks": ranks[:1]})
    with pytest.raises(StateError, match="rank 0 appears twice"):
        _fresh(tmp).load_state_dict([ranks[0], ranks[0]])
    with pytest.raises(StateError, match="needs every rank's state"):
        _fresh(tmp).load_state_dict(ranks[1])
    with pytest.raises(StateError, match="different epochs"):
        _fresh(tmp).load_state_dict([ranks[0], {**ranks[1], "epoch": 1}])
    # the per-rank files of a Trainer checkpoint: the missing one is named
    os.makedirs(f"{tmp}/partial", exist_ok=True)
    write_state(loader_state_path(f"{tmp}/partial", 0), ranks[0])
    with pytest.raises(StateError, match=r"no youmu loader state for rank\(s\) \[1\] .*youmu_loader_rank1.json"):
        load_loader_state(_fresh(tmp), f"{tmp}/partial")
    # a refused state leaves the loader as it was: a whole epoch from the start
    loader = _fresh(tmp)
    with pytest.raises(StateError):
        loader.load_state_dict({"format": GATHERED_FORMAT, "ranks": ranks[:1]})
    assert sorted(i for b in loader for i in _ids(b)) == list(range(ROWS))


def test_states_of_other_data_are_refused(jobs, tmp_path) -> None:
    tmp, old, _ = jobs
    ranks = old[0]["rows_state"]["ranks"]
    _write(str(tmp_path / "other.parquet"), rows=40, first=500)
    other = StatefulDataLoader(YoumuDataset(str(tmp_path / "other.parquet"), shuffle="page", buffer_size=8, seed=1,
                                            rank=1, world_size=2), batch_size=4, collate_fn=collate_pad)
    next(iter(other))
    with pytest.raises(StateError, match="'data'"):
        _fresh(tmp).load_state_dict([ranks[0], {**ranks[1], "source": other.state_dict()}])
    # the job's states, resumed by a loader over another stream
    with pytest.raises(StateError, match="MapStream.load_state_dict got a merged state of a 'youmu.YoumuDataset/1'"):
        TrainerLoader(MapStream(list(range(ROWS))), batch_size=4).load_state_dict(old[0]["rows_state"])
    with pytest.raises(StateError, match="seed"):
        TrainerLoader(YoumuDataset(f"{tmp}/rows.parquet", shuffle="page", buffer_size=8, seed=2),
                      batch_size=4).load_state_dict(old[0]["rows_state"])


def test_states_of_a_foreign_kind_are_refused(jobs) -> None:
    tmp, old, _ = jobs
    ranks = old[0]["rows_state"]["ranks"]
    streams = [MapStream(list(range(8)), rank=r, world_size=2).state_dict() for r in range(2)]
    with pytest.raises(StateError, match="not a youmu.TrainerLoader/1 state"):
        _fresh(tmp).load_state_dict({"format": GATHERED_FORMAT, "ranks": streams})
    with pytest.raises(StateError, match="not the state of a youmu stream"):
        _fresh(tmp).load_state_dict([{**s, "source": {"format": "youmu.Foreign/1"}} for s in ranks])
    with pytest.raises(StateError, match="non-empty list"):
        _fresh(tmp).load_state_dict({"format": GATHERED_FORMAT, "ranks": {"0": ranks[0]}})
    with pytest.raises(StateError, match="TrainerLoader.load_state_dict"):
        _fresh(tmp).load_state_dict({"format": TRAINER_LOADER_FORMAT.replace("/1", "/9"), "ranks": ranks})


# -- a real trainer: Accelerate saves on 2 ranks, resumes on 3 -------------------------------
def _accelerate_run(tmp: str, *, stop: int | None = None, load: bool = False) -> dict[str, Any]:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = TinyLM()
    raw = model
    loader = prepare(accelerator, TrainerLoader(MapStream(dataset(), drop_last=True), batch_size=4,
                                                collate_fn=collate))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    if load:
        accelerator.load_state(f"{tmp}/ckpt")
    out: dict[str, Any] = {"len": len(loader), "epoch": loader.epoch}
    steps = 0
    for batch in loader:
        accelerator.backward(model(**batch)["loss"])
        opt.step()
        opt.zero_grad()
        steps += 1
        if steps == stop:
            accelerator.save_state(f"{tmp}/ckpt")
            break
    out["steps"], out["seen"] = steps, raw.seen
    return out


def accelerate_world(rank: int, world: int, tmp: str, stop: int | None) -> dict[str, Any]:
    torchrun_env(rank, world)
    return _accelerate_run(tmp, stop=stop, load=stop is None)


def test_accelerate_checkpoint_of_two_ranks_resumes_on_three(tmp_path) -> None:
    old = run_world(accelerate_world, 2, str(tmp_path), 3, timeout=300)
    new = run_world(accelerate_world, 3, str(tmp_path), None, timeout=300)
    assert [r["steps"] for r in old] == [3, 3]
    # every sample trained exactly once over the two jobs; the 3 ranks take the same steps
    assert sorted(i for job in (old, new) for r in job for i in r["seen"]) == list(range(N))
    left = (N - 2 * 3 * 4) // 3  # per rank of the new job (MapStream deals the rest evenly here)
    assert [r["len"] for r in new] == [3 + -(-left // 4)] * 3
    assert [r["steps"] for r in new] == [-(-left // 4)] * 3 and [r["epoch"] for r in new] == [0] * 3
