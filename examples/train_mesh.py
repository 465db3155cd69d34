"""A ``DeviceMesh`` job (torchtitan-style: 2 data-parallel × 2 tensor-parallel, CPU, 4 ranks over
Gloo) fed by youmu, its state saved with ``torch.distributed.checkpoint``.

    python examples/train_mesh.py

The loader is built per data-parallel rank: tensor-parallel peers build the same stream
and get identical batches (no broadcast), data-parallel ranks get disjoint shards. The
loader's state goes into the DCP checkpoint under one key per data-parallel rank; the
first job stops at ``--stop-at`` after ``dcp.save``, the second ``dcp.load``s and continues.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from trainer_data import VOCAB, launch, lm_sample, workdir, write_corpus


class Model(torch.nn.Module):
    """Embedding (replicated) and an output layer split by vocabulary columns over "tp"."""

    def __init__(self, mesh: Any) -> None:
        super().__init__()
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 32)
        self.out = torch.nn.Linear(32, VOCAB, bias=False)
        parallelize_module(self, mesh["tp"], {"out": ColwiseParallel(use_local_output=False)})

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.emb(input_ids)).full_tensor()[:, :-1]
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)


def run(rank: int, world: int, args: argparse.Namespace) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh

    from youmu.integrations import TrainerLoader
    from youmu.integrations.mesh import LoaderState, data_parallel
    from youmu.mixture import MixtureDataset
    from youmu.torch import MapStream, lm_collate

    paths = write_corpus(args.out / "data")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size, channel = data_parallel(mesh)
    mix = MixtureDataset({k: str(v) for k, v in paths.items()}, {"web": 0.7, "code": 0.3}, block_size=64,
                         length=1024)
    loader = TrainerLoader(MapStream(mix, rank=dp_rank, world_size=dp_size, drop_last=True, transform=lm_sample),
                           batch_size=8, collate_fn=lm_collate, channel=channel)
    model = Model(mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = str(args.out / "dcp")
    if args.resume:
        state = {"model": model.state_dict(), "loader": LoaderState(loader, mesh)}
        dcp.load(state, checkpoint_id=ckpt)
        model.load_state_dict(state["model"])
    dp = mesh.get_group("dp")
    step = 0
    for _ in range(loader.epoch, args.epochs):
        for batch in loader:
            model(batch["input_ids"], batch["labels"]).backward()
            for grad in (model.emb.weight.grad, model.out.weight.grad.to_local()):  # data-parallel average
                dist.all_reduce(grad, group=dp)
                grad /= dp_size
            opt.step()
            opt.zero_grad()
            step += 1
            if not args.resume and step == args.stop_at:
                dcp.save({"model": model.state_dict(), "loader": LoaderState(loader, mesh)}, checkpoint_id=ckpt)
                if rank == 0:
                    print(f"first job: saved at step {step} (epoch {loader.epoch}) to {ckpt}")
                return
    if rank == 0:
        print(f"resumed job: {step} more steps, loader epoch {loader.epoch}; {loader.metrics()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--stop-at", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.out = workdir(args.out, "youmu-mesh-")
    for resume in (False, True):
        args.resume = resume
        launch(run, 4, args)


if __name__ == "__main__":
    main()
