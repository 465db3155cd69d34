"""``DeviceMesh`` jobs (torchtitan-style data-parallel × tensor/pipeline-parallel) fed by
youmu, with the loader state in ``torch.distributed.checkpoint`` (DCP).

The loader is built per **data-parallel** rank: every rank of one data-parallel slice
(its tensor-parallel peers) builds the same stream with the same data-parallel rank, so
they get identical batches without a broadcast, and different data-parallel ranks get
disjoint shards. :func:`data_parallel` gives the data-parallel rank, size and a Gloo
channel over the data-parallel group (for youmu's small collectives: equal step counts,
``DynamicBatchLoader``'s alignment, gathering states); on GPUs the mesh's own groups
are NCCL, so the channel is a separate Gloo group over the same ranks.

:class:`LoaderState` puts the loader into a DCP state dict the way torchtitan does:
under one key per data-parallel rank (``"dp_rank_<r>"``), pickled. Tensor-parallel peers
write the same key with the same bytes, which DCP de-duplicates; on load each rank reads
its own data-parallel rank's key and continues the stream exactly.

Example (4 processes, 2 data-parallel × 2 tensor-parallel)::

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size, channel = data_parallel(mesh)
    loader = TrainerLoader(MapStream(mixture, rank=dp_rank, world_size=dp_size, drop_last=True),
                           batch_size=8, channel=channel)
    state = {"model": model.state_dict(), "loader": LoaderState(loader, mesh)}
    dcp.save(state, checkpoint_id=path)     # ... later, in a new job:
    dcp.load(state, checkpoint_id=path)     # the loader continues where it stopped

Example:
    >>> LoaderState.key(3)
    'dp_rank_3'
"""

from __future__ import annotations

import pickle
from typing import Any

from youmu.errors import InvalidArgumentError, StateError
from youmu.integrations.trainer_loader import TrainerLoader

__all__ = ["data_parallel", "LoaderState"]


def data_parallel(mesh: Any, dim: str = "dp") -> tuple[int, int, Any]:
    """``(data-parallel rank, data-parallel size, GlooChannel over that group)`` of the
    calling rank in ``mesh`` (collective over the whole mesh: call it on every rank)."""
    import torch.distributed as dist

    from youmu.distributed.channel import GlooChannel

    names = mesh.mesh_dim_names or ()
    if dim not in names:
        raise InvalidArgumentError(f"the mesh has no {dim!r} dimension (its dimensions: {list(names)})")
    d = names.index(dim)
    # every slice along `dim`: the groups of data-parallel peers (one per tp/pp position)
    grid = mesh.mesh.movedim(d, -1).reshape(-1, mesh.mesh.shape[d])
    slices = [[int(r) for r in row] for row in grid.tolist()]
    mine, _ = dist.new_subgroups_by_enumeration(slices, backend="gloo")
    channel = GlooChannel.from_process_group(mine)
    return mesh.get_local_rank(dim), mesh.size(d), channel


class LoaderState:
    """A DCP ``Stateful`` over a :class:`TrainerLoader`: one key per data-parallel rank."""

    def __init__(self, loader: TrainerLoader, mesh: Any = None, dim: str = "dp") -> None:
        if not isinstance(loader, TrainerLoader):
            raise InvalidArgumentError(f"loader must be a TrainerLoader, got {type(loader).__name__}")
        self.loader = loader
        self.dp_rank = mesh.get_local_rank(dim) if mesh is not None else loader.rank
        if self.dp_rank != loader.rank:
            raise InvalidArgumentError(
                f"the loader is rank {loader.rank} of its channel but data-parallel rank {self.dp_rank} of the mesh: "
                "build it with data_parallel(mesh)'s channel"
            )

    @staticmethod
    def key(dp_rank: int) -> str:
        return f"dp_rank_{dp_rank}"

    def state_dict(self) -> dict[str, Any]:
        return {self.key(self.dp_rank): pickle.dumps(self.loader.state_dict(), protocol=pickle.HIGHEST_PROTOCOL),
                "dp_world_size": self.loader.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("dp_world_size")
        if saved != self.loader.world_size:
            raise StateError(f"the checkpoint's loader state was saved with {saved} data-parallel ranks; this job has "
                             f"{self.loader.world_size}")
        blob = state.get(self.key(self.dp_rank))
        if not isinstance(blob, (bytes, bytearray)):
            raise StateError(f"the checkpoint has no loader state for data-parallel rank {self.dp_rank}")
        self.loader.load_state_dict(pickle.loads(blob))
