"""The seam matrix: exactly once at every seam between youmu and what wraps it.

Rows — what feeds the trainer: ``YoumuDataset`` in each shuffle mode, ``pack``,
``MapStream`` over a ``MixtureDataset``, an unsized ``DynamicBatchLoader``, a
``BalancedLoader`` and a ``RayBalancedLoader`` client. Columns — who iterates it: a plain
loop, torchdata's ``StatefulDataLoader`` with and without persistent workers, the Hugging
Face ``Trainer``, Accelerate, Lightning and a ``DeviceMesh`` loop with DCP. Events: a
SIGKILL at a random step after a checkpoint, the resume on the same and on another world
size, a second epoch.

The full product (9 rows x 7 columns x 3 events) would take hours on CI's 2 cores, so the
trainer cells are a covering design: every row meets every trainer, and every (row, event)
and (trainer, event) pair is covered (``TRAINER_CELLS``; the Ray client, which needs a
Ray cluster, in HF and Lightning: ``test_a_killed_trainer_fed_by_ray_resumes_exactly``).
Each trainer cell runs three jobs of real trainer processes (spawned Gloo ranks): an uninterrupted reference, a job that
checkpoints every ``SAVE`` optimizer steps and is SIGKILLed (not stopped politely) at a step
drawn after a checkpoint, and the job resumed from that checkpoint. The property:

* on the same world size, every rank trains exactly the batches of the reference, in its
  order, step by step — nothing lost, nothing twice, over two epochs;
* on another world size (one epoch), no row (no token for ``pack``) is trained twice, and
  the rows not trained are at most the counted exclusion: the rows a rank holds past the
  step count every rank agrees on (equal steps per rank), under one batch per new rank.

The stream cells (plain loop, ``StatefulDataLoader``) run in this process: they resume
from a saved state in a new loader, which is what a killed process leaves behind.

The trainer cells are marked ``slow`` and ``seams``: ``make test`` leaves them out and
``make test-seams`` runs every one of them, the Ray cells included (CI runs both).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import torch
from batching_mp import run_world
from seams_mp import EOS, PAD, SEQ, batch_rows, chat_corpus, corpus, job, micro_batches, read_log

SAVE = 3  # optimizer steps between checkpoints


def _kill_step(cell: str) -> int:
    """The optimizer step after which the job dies: drawn after the checkpoint of step
    ``SAVE``, before the next one (seeded by the cell, so a failure replays)."""
    return SAVE + random.Random(cell).randrange(SAVE)


# (trainer, row, old world, new world, DataLoader workers)
TRAINER_CELLS = [
    ("lightning", "pack", 2, 2, 0),
    ("lightning", "dbl", 2, 2, 0),
    ("lightning", "rows-page", 2, 3, 2),
    ("hf", "rows-row", 2, 2, 2),
    ("hf", "mixture", 2, 3, 0),
    ("accelerate", "balanced", 2, 2, 0),
    ("accelerate", "pack", 2, 3, 0),
    ("mesh", "mixture", 2, 2, 0),
    ("accelerate", "rows-none", 2, 2, 0),
    ("mesh", "rows-local", 2, 2, 1),
    ("mesh", "dbl", 2, 3, 0),
    # micro-batches of balanced steps, accumulated by Lightning, behind its one-batch prefetch
    ("lightning", "balanced", 2, 2, 0),
    # the README's SFT recipe: ChatTemplate in 2 DataLoader workers per rank, every chat once
    ("hf", "sft", 2, 3, 2),
]


def _cell(tmp: str, trainer: str, kind: str, old: int, new: int, workers: int, ray: Any = None) -> None:
    """``ray``: ``deploy(run) -> (address, deployment name)``, a deployment per job."""
    name = f"{trainer}-{kind}-{old}-{new}"
    kill = _kill_step(name)
    m = micro_batches(kind)  # batches per optimizer step: checkpoints count steps
    epochs = 2 if old == new else 1
    corpus(tmp)

    def serve(run: str) -> Any:
        return None if ray is None else ray(run)

    if old == new:
        run_world(job, old, trainer, kind, tmp, "ref", SAVE, None, None, epochs, workers, serve("ref"), timeout=400)
    died = run_world(job, old, trainer, kind, tmp, "cut", SAVE, kill * m + 1, None, epochs, workers, serve("cut"),
                     timeout=400, allow_errors=True)
    assert all(d == ("dead", -9) for d in died), f"{name}: the job was not killed at step {kill}: {died}"
    run_world(job, new, trainer, kind, tmp, "resumed", SAVE, None, ("cut", SAVE), epochs, workers, serve("resumed"),
              timeout=400)
    before = [read_log(f"{tmp}/cut/rank{r}.jsonl", upto=SAVE * m) for r in range(old)]
    after = [read_log(f"{tmp}/resumed/rank{r}.jsonl") for r in range(new)]
    if old == new:
        ref = [read_log(f"{tmp}/ref/rank{r}.jsonl") for r in range(old)]
        for r in range(old):
            got = before[r] + after[r]
            assert len(got) == len(ref[r]), f"{name} rank {r}: {len(got)} batches trained, {len(ref[r])} expected"
            assert got == ref[r], f"{name} rank {r}: batch {next(i for i, (a, b) in enumerate(zip(got, ref[r])) if a != b)} differs"
        return
    trained = Counter(i for job_log in (before, after) for rank_log in job_log for b in rank_log for i in b)
    every = _epoch_items(kind, tmp)
    twice = sorted((trained - every).elements())
    assert not twice, f"{name}: trained twice: {twice[:10]}"
    missing = sum((every - trained).values())
    assert missing < new * batch_rows(kind), f"{name}: {missing} items never trained"
    if kind == "sft":  # join mode drains every rank: each chat (its assistant tokens) trained exactly once
        assert not missing, f"{name}: chats never trained: {sorted((every - trained).elements())[:10]}"


def _epoch_items(kind: str, tmp: str) -> Counter[int]:
    """Every item of an epoch, as often as the epoch holds it (a mixture draws some rows
    of a small source more than once)."""
    import pyarrow.parquet as pq

    if kind == "mixture":
        mix = _source(kind, tmp).dataset
        return Counter(int(mix[i]["id"]) for i in range(len(mix)))
    table = pq.read_table(chat_corpus(tmp) if kind == "sft" else corpus(tmp))
    if kind == "pack":
        return Counter(t for row in table.column("input_ids").to_pylist() for t in row)
    return Counter(table.column("id").to_pylist())


@pytest.mark.slow
@pytest.mark.seams
@pytest.mark.timeout(1800)  # three trainer jobs of up to 400 s each
@pytest.mark.parametrize(("trainer", "kind", "old", "new", "workers"),
                         [pytest.param(*c, id=f"{c[0]}-{c[1]}-{c[2]}to{c[3]}") for c in TRAINER_CELLS])
def test_a_killed_trainer_resumes_exactly(tmp_path, trainer: str, kind: str, old: int, new: int,
                                          workers: int) -> None:
    _cell(str(tmp_path), trainer, kind, old, new, workers)


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    """A local Ray cluster (a head and one node for the loaders), started once."""
    ray = pytest.importorskip("ray")
    import seams_mp
    from ray.cluster_utils import Cluster

    ray.cloudpickle.register_pickle_by_value(seams_mp)  # its functions reach the actors by value
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                      "object_store_memory": 100 << 20})
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.mark.slow
@pytest.mark.seams
@pytest.mark.timeout(1800)  # three trainer jobs of up to 400 s each
@pytest.mark.parametrize(("trainer", "kind"), [("hf", "ray"), ("lightning", "ray"), ("hf", "ray-sft")])
def test_a_killed_trainer_fed_by_ray_resumes_exactly(tmp_path, ray_cluster: Any, trainer: str, kind: str) -> None:
    """A RayBalancedLoader client feeds the trainer through TrainerLoader like any loader
    of (batch, info) pairs; the resumed job's clients belong to a new deployment.
    ``ray-sft``: chats templated by ``ChatTemplate`` in the source loaders — each chat's
    assistant tokens (the chat, by its id in the data) trained exactly once an epoch,
    across the kill."""
    from seams_mp import assistant_tokens, deploy_ray

    tmp = str(tmp_path)
    deployments = []

    def serve(run: str) -> Any:
        deployments.append(deploy_ray(tmp, f"{trainer}-{kind}-{run}", kind))
        return ray_cluster.address, f"{trainer}-{kind}-{run}"

    try:
        _cell(tmp, trainer, kind, 2, 2, 0, ray=serve)
    finally:
        for d in deployments:
            d.shutdown()
    if kind == "ray-sft":  # every chat, with its assistant tokens, trained once an epoch
        labelled = assistant_tokens(tmp)
        assert min(labelled.values()) > 0, "a chat without assistant tokens: the labels were not made"
        logs = [read_log(f"{tmp}/cut/rank{r}.jsonl", upto=SAVE * micro_batches(kind)) + read_log(
            f"{tmp}/resumed/rank{r}.jsonl") for r in range(2)]
        assert all(len(log) % 2 == 0 for log in logs)
        every = Counter(labelled.keys())  # each chat once
        for epoch in range(2):  # each rank's log: two epochs of as many batches
            trained = Counter(i for log in logs for b in log[epoch * len(log) // 2:(epoch + 1) * len(log) // 2]
                              for i in b)
            assert trained == every, f"epoch {epoch}: {sorted((trained - every) | (every - trained))[:10]}"




# -- stream cells: a plain loop and StatefulDataLoader, in this process -----------------------
# (row, column, world sizes before and after): a column is "plain" (the stream's own
# iterator), "sdl" (StatefulDataLoader, 2 workers) or "sdl-persistent" (with
# persistent_workers=True). The resumed job loads the state, finishes the epoch, then
# set_epoch(1) and a second epoch; "plain-set-epoch" is the loop users write: load the
# state, then for each epoch from the state's on: set_epoch(epoch), iterate.
STREAM_CELLS = [
    ("rows-page", "sdl-persistent", 1, 1),
    ("rows-row", "sdl", 1, 1),
    ("rows-local", "plain", 2, 3),
    ("rows-none", "sdl", 2, 3),
    ("pack", "sdl", 1, 1),
    ("pack", "plain", 2, 3),
    ("mixture", "sdl-persistent", 2, 3),
    ("mixture", "plain", 1, 1),
    ("dbl", "plain", 1, 1),
    ("balanced", "plain", 1, 1),
    # set_epoch(e) right after loading a state of epoch e keeps the resume point
    ("rows-page", "plain-set-epoch", 1, 1),
    # pack resumed from a merged state with persistent workers: the next epoch whole
    ("pack", "sdl-persistent", 2, 1),
]
def _source(kind: str, tmp: str, rank: int = 0, world: int = 1) -> Any:
    from trainers_mp import dataset

    from youmu.batching import DynamicBatchLoader
    from youmu.distributed import GlooChannel
    from youmu.mixture import MixtureDataset
    from youmu.planning import BalancedLoader
    from youmu.torch import MapStream, YoumuDataset, collate_pad, pack

    def rows(shuffle: str = "page", **kw: Any) -> Any:
        return YoumuDataset(corpus(tmp), shuffle=shuffle, buffer_size=8, seed=1, rank=rank, world_size=world, **kw)

    if kind.startswith("rows-"):
        return rows(kind[5:])
    if kind == "pack":
        return pack(rows(columns=["input_ids"], output="numpy"), seq_len=SEQ, eos_id=EOS, pad_id=PAD)
    if kind == "mixture":
        from seams_mp import ROWS

        data = dataset(ROWS)
        mix = MixtureDataset({"web": data[:64], "code": data[64:]}, {"web": 0.75, "code": 0.25}, block_size=8,
                             length=ROWS)
        return MapStream(mix, rank=rank, world_size=world)
    assert world == 1
    if kind == "dbl":
        return DynamicBatchLoader(rows(), token_budget=24, length_fn=lambda r: len(r["input_ids"]),
                                  collate_fn=collate_pad, pool_size=8, num_workers=0, seed=7)
    if kind == "balanced":
        return BalancedLoader(rows(), num_microbatches=2, global_batch_size=8, length_fn=lambda r: len(r["input_ids"]),
                              collate_fn=collate_pad, seed=3, drop_last=True, channel=GlooChannel.local())
    raise ValueError(kind)


def _keys(kind: str, item: Any) -> list[int]:
    """A delivered item's row ids (tokens for ``pack``)."""
    if isinstance(item, tuple):  # (batch, info) of a loader
        item = item[0]
    if kind == "pack":
        ids = item["input_ids"]
        return [int(t) for t in (ids.flatten().tolist() if hasattr(ids, "flatten") else ids) if t not in (EOS, PAD)]
    ids = item["id"]
    ids = ids.tolist() if hasattr(ids, "tolist") else ids
    return [int(i) for i in ids] if isinstance(ids, list) else [int(ids)]


class _Run:
    """One job's rank over a source of a matrix row, iterated by a column."""

    def __init__(self, kind: str, column: str, source: Any) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader

        from youmu.torch import collate_packed, collate_pad

        self.kind, self.source = kind, source
        self.set_epoch_first = column == "plain-set-epoch"
        if column.startswith("plain"):
            self.loader = source
        else:
            collate = collate_packed if kind == "pack" else collate_pad
            self.loader = StatefulDataLoader(source, batch_size=2, num_workers=2, collate_fn=collate,
                                             persistent_workers=column == "sdl-persistent")

    def epoch(self, epoch: int | None, stop: int | None = None, save: int | None = None) -> tuple[list[int], Any]:
        """``set_epoch(epoch)`` (unless ``None``) and the items of the pass (of its first
        ``stop`` batches); with ``save``, the items up to batch ``save`` and the loader's
        state after it (what a job killed after that checkpoint leaves)."""
        if epoch is not None:
            self.source.set_epoch(epoch)
        got: list[int] = []
        saved: tuple[list[int], Any] | None = None
        for n, item in enumerate(self.loader, start=1):
            got += _keys(self.kind, item)
            if n == save:
                saved = list(got), self.loader.state_dict()
            if n == stop:
                break
        if save is not None:
            assert saved is not None, f"the epoch ended before batch {save}"
            return saved
        return got, None


def _stream_cell(tmp: str, kind: str, column: str, old: int, new: int) -> None:
    import youmu

    corpus(tmp)
    stop = 3 + random.Random(f"{kind}-{column}").randrange(3)  # the kill, after the checkpoint at 3
    if old == new:
        ref = _Run(kind, column, _source(kind, tmp))
        want = [ref.epoch(0)[0], ref.epoch(1)[0]]
        head, state = _Run(kind, column, _source(kind, tmp)).epoch(0, stop=stop, save=3)
        resumed = _Run(kind, column, _source(kind, tmp))
        resumed.loader.load_state_dict(state)
        got = [head + resumed.epoch(0 if resumed.set_epoch_first else None)[0], resumed.epoch(1)[0]]
        assert got[0] == want[0], f"epoch 0: {_diff(got[0], want[0])}"
        assert got[1] == want[1], f"epoch 1: {_diff(got[1], want[1])}"
        return
    states, before = [], []
    for r in range(old):
        head, state = _Run(kind, column, _source(kind, tmp, r, old)).epoch(0, stop=stop, save=3)
        before += head
        states.append(state)
    merged = youmu.merge_states(states)
    after = []
    for r in range(new):
        src = _source(kind, tmp, r, new)
        src.load_state_dict(merged)
        run = _Run(kind, column, src)
        after += run.epoch(None)[0]  # the merged state positions the stream: no set_epoch
        # the next epoch is a full one of the new job, through the same loader (its
        # persistent workers stay)
        assert run.epoch(1)[0] == _Run(kind, column, _source(kind, tmp, r, new)).epoch(1)[0], f"rank {r}, epoch 1"
    assert Counter(before + after) == _epoch_items(kind, tmp), _diff(before + after, list(_epoch_items(kind, tmp).elements()))


def _diff(got: list[int], want: list[int]) -> str:
    extra, missing = Counter(got) - Counter(want), Counter(want) - Counter(got)
    return f"{len(got)} delivered, {len(want)} expected; twice or foreign {sorted(extra)[:8]}, lost {sorted(missing)[:8]}"


_CELLS = [pytest.param(*c, id=f"{c[0]}-{c[1]}-{c[2]}to{c[3]}") for c in STREAM_CELLS]


@pytest.mark.parametrize(("kind", "column", "old", "new"), _CELLS)
def test_a_stream_resumes_exactly(tmp_path, kind: str, column: str, old: int, new: int) -> None:
    _stream_cell(str(tmp_path), kind, column, old, new)


# (trainer, row, DataLoader workers): one rank on one GPU, killed and resumed. The trainer
# moves every batch to the device, pins host memory and prefetches as GPU jobs do, and
# the default process group is NCCL (DynamicBatchLoader aligns over a Gloo group of its
# own); skipped where no CUDA device is present (CI's machines have none).
GPU_CELLS = [("lightning", "pack", 0), ("lightning", "dbl", 0), ("hf", "rows-row", 2)]


@pytest.mark.slow
@pytest.mark.seams
@pytest.mark.timeout(1200)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("trainer", "kind", "workers"),
                         [pytest.param(*c, id=f"{c[0]}-{c[1]}-cuda") for c in GPU_CELLS])
def test_a_killed_trainer_on_a_gpu_resumes_exactly(tmp_path, monkeypatch, trainer: str, kind: str,
                                                   workers: int) -> None:
    monkeypatch.setenv("YOUMU_SEAMS_DEVICE", "cuda")
    _cell(str(tmp_path), trainer, kind, 1, 1, workers)
