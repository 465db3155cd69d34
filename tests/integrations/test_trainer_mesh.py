"""``DeviceMesh`` jobs fed by youmu (youmu.integrations.mesh): 2 data-parallel × 2
tensor-parallel on 4 CPU processes over Gloo. Tensor-parallel peers get identical batches
and data-parallel ranks disjoint ones (fixed-size and dynamic batches), and a
``torch.distributed.checkpoint`` save/load resumes the stream exactly (same samples after
the resume, same final parameters — the model's output layer is tensor-parallel), also in
a job of 3 data-parallel ranks (the rest of the epoch exactly once)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from batching_mp import run_world
from torch.distributed.device_mesh import init_device_mesh
from trainers_mp import VOCAB, N, collate, dataset, length

from youmu.batching import DynamicBatchLoader
from youmu.errors import InvalidArgumentError
from youmu.integrations import TrainerLoader, split_info
from youmu.integrations.mesh import LoaderState, data_parallel
from youmu.torch import MapStream

# a 4-process device mesh (22 s): the whole module runs in make test-system
pytestmark = pytest.mark.slow

class TPModel(torch.nn.Module):
    """Embedding (replicated) and an output layer split by columns over the "tp" dimension."""

    def __init__(self, mesh: Any) -> None:
        super().__init__()
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.out = torch.nn.Linear(8, VOCAB, bias=False)
        with torch.no_grad():
            self.emb.weight.copy_(torch.randn(VOCAB, 8, generator=g) * 0.3)
            self.out.weight.copy_(torch.randn(VOCAB, 8, generator=g) * 0.3)
        parallelize_module(self, mesh["tp"], {"out": ColwiseParallel(use_local_output=False)})

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.emb(input_ids)).full_tensor()  # gather the tp shards of the vocabulary
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


def _loader(mesh: Any) -> TrainerLoader:
    dp_rank, dp_size, channel = data_parallel(mesh)
    return TrainerLoader(MapStream(dataset(), rank=dp_rank, world_size=dp_size, drop_last=True), batch_size=4,
                         collate_fn=collate, channel=channel)


def _train(mesh: Any, *, stop: int | None = None, save: str | None = None, load: str | None = None,
           epochs: int = 2) -> tuple[list[list[int]], list[torch.Tensor]]:
    model = TPModel(mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = _loader(mesh)
    state = {"model": model.state_dict(), "loader": LoaderState(loader, mesh)}
    if load:
        dcp.load(state, checkpoint_id=load)
        model.load_state_dict(state["model"])
    dp_group = mesh.get_group("dp")
    seen: list[list[int]] = []
    steps = 0
    for _ in range(loader.epoch, epochs):
        for batch in loader:
            seen.append(batch["id"].tolist())
            model(batch["input_ids"], batch["labels"]).backward()
            emb = model.emb.weight.grad  # data parallel: average the replicated layer's and the local shards' grads
            dist.all_reduce(emb, group=dp_group)
            emb /= 2
            local = model.out.weight.grad.to_local()
            dist.all_reduce(local, group=dp_group)
            local /= 2
            opt.step()
            opt.zero_grad()
            steps += 1
            if steps == stop:
                dcp.save({"model": model.state_dict(), "loader": LoaderState(loader, mesh)}, checkpoint_id=save)
                return seen, []
    return seen, [model.emb.weight.detach().clone(), model.out.weight.full_tensor().detach().clone()]


def mesh_world(rank: int, world: int, tmp: str) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    res: dict[str, Any] = {"coord": tuple(mesh.get_coordinate())}
    full, full_params = _train(mesh)
    res["full"] = full
    _train(mesh, stop=8, save=f"{tmp}/dcp")
    resumed, resumed_params = _train(mesh, load=f"{tmp}/dcp")
    res["resumed"] = resumed
    res["params_equal"] = all(torch.equal(a, b) for a, b in zip(full_params, resumed_params))
    # dynamic batches over the data-parallel channel
    dp_rank, dp_size, channel = data_parallel(mesh)
    dbl = DynamicBatchLoader(dataset(), token_budget=40, length_fn=length, collate_fn=collate, pool_size=8,
                             num_workers=0, uneven="pad", group=channel)
    # the aligner exchanges rounds on the loader's channel from its own thread: the
    # TrainerLoader's gathers run on a second data-parallel channel
    _, _, trainer_channel = data_parallel(mesh)
    res["odb"] = []
    for batch in TrainerLoader(dbl, channel=trainer_channel):
        inputs, info = split_info(batch)
        res["odb"].append((inputs["id"].tolist(), inputs["input_ids"].tolist(), info.loss_scale))
    try:
        LoaderState(TrainerLoader(MapStream(dataset(), rank=0, world_size=1), batch_size=2,
                                  channel=channel.__class__.local()), mesh)
        res["refused"] = dp_rank == 0  # only a mismatch is refused
    except InvalidArgumentError:
        res["refused"] = dp_rank == 1
    return res


def mesh_resize_world(rank: int, world: int, tmp: str) -> dict[str, Any]:
    """3 data-parallel ranks resume the checkpoint 2 x 2 ranks saved (the loader's key only)."""
    mesh = init_device_mesh("cpu", (3,), mesh_dim_names=("dp",))
    loader = _loader(mesh)
    dcp.load({"loader": LoaderState(loader, mesh)}, checkpoint_id=f"{tmp}/dcp")
    res = {"len": len(loader), "epoch": loader.epoch}
    res["seen"] = [batch["id"].tolist() for batch in loader]
    return res


@pytest.fixture(scope="module")
def mesh_tmp(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("mesh"))


@pytest.fixture(scope="module")
def results(mesh_tmp) -> list[dict[str, Any]]:
    return run_world(mesh_world, 4, mesh_tmp, timeout=300)


def _by_coord(results: list[dict[str, Any]], key: str) -> dict[tuple[int, int], Any]:
    return {r["coord"]: r[key] for r in results}


def test_tp_peers_identical_dp_ranks_disjoint(results) -> None:
    for key in ("full", "odb"):
        got = _by_coord(results, key)
        for dp in (0, 1):
            assert got[(dp, 0)] == got[(dp, 1)] and got[(dp, 0)]
    full = _by_coord(results, "full")
    epoch1 = [i for dp in (0, 1) for b in full[(dp, 0)][: N // 8] for i in b]
    assert sorted(epoch1) == list(range(N))
    odb = _by_coord(results, "odb")
    assert len(odb[(0, 0)]) == len(odb[(1, 0)])  # the same steps on both data-parallel ranks
    assert sorted(i for dp in (0, 1) for ids, _, _ in odb[(dp, 0)] for i in ids) == list(range(N))


def test_dcp_resume_continues_exactly(results) -> None:
    for r in results:
        assert r["resumed"] == r["full"][8:]
        assert r["params_equal"]


def test_loader_state_refuses_a_loader_of_another_rank(results) -> None:
    assert all(r["refused"] for r in results)


def test_dcp_resume_on_another_data_parallel_size(results, mesh_tmp) -> None:
    resized = run_world(mesh_resize_world, 3, mesh_tmp, timeout=300)
    full = _by_coord(results, "full")
    per_epoch = N // 2 // 4
    # the 2 x 2 job saved after step 8: 2 steps into its second epoch on each data-parallel rank
    before = [i for dp in (0, 1) for b in full[(dp, 0)][per_epoch:8] for i in b]
    after = [i for r in resized for b in r["seen"] for i in b]
    # the rest of the epoch exactly once, less what drop_last=True drops to even out 3 ranks
    assert len(set(before + after)) == len(before + after)
    assert len(set(range(N)) - set(before + after)) == (N - len(before)) % 3
    steps = {len(r["seen"]) for r in resized}
    assert len(steps) == 1 and [r["len"] for r in resized] == [8 - per_epoch + steps.pop()] * 3
    assert [r["epoch"] for r in resized] == [1] * 3
