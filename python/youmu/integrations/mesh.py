"""``DeviceMesh`` jobs (torchtitan-style data-parallel × tensor/pipeline-parallel) fed by
youmu, with the loader state in ``torch.distributed.checkpoint`` (DCP).

The loader is built per **data-parallel** rank: every rank of one data-parallel slice
(its tensor-parallel peers) builds the same stream with the same data-parallel rank, so
they get identical batches without a broadcast, and different data-parallel ranks get
disjoint shards. :func:`data_parallel` gives the data-parallel rank, size and a Gloo
channel over the data-parallel group (for youmu's small collectives: equal step counts,
``DynamicBatchLoader``'s alignment, gathering states); on GPUs the mesh's own groups
are NCCL, so the channel is a separate Gloo group over the same ranks.

:class:`LoaderState` puts the loader into a DCP state dict: every data-parallel rank's
state, gathered over the data-parallel channel, as JSON bytes under one key (``"dp_ranks"``;
:mod:`youmu.state.files`: loading it builds plain data, never runs code).
Every rank writes the same key with the same bytes, which DCP de-duplicates (so the
checkpoint holds them once). One key that every job reads, whatever its size, is what
lets a job of another data-parallel size resume: DCP loads only the keys the loading
job's state dict names, and a job of 3 data-parallel ranks could not name the keys of
the 2 that saved (torchtitan's one key per rank, ``"dp_rank_<r>"``, refuses a resize for
that reason). On load, a job of the same data-parallel size takes its own rank's part
and continues the stream exactly; a job of another size resumes the rest of the epoch
from every rank's state (:meth:`TrainerLoader.load_state_dict`).

Example (4 processes, 2 data-parallel × 2 tensor-parallel)::

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size, channel = data_parallel(mesh)
    loader = TrainerLoader(MapStream(mixture, rank=dp_rank, world_size=dp_size, drop_last=True),
                           batch_size=8, channel=channel)
    state = {"model": model.state_dict(), "loader": LoaderState(loader, mesh)}
    dcp.save(state, checkpoint_id=path)     # ... later, in a new job:
    dcp.load(state, checkpoint_id=path)     # the loader continues where it stopped (any dp size)

Example:
    >>> LoaderState.KEY
    'dp_ranks'
"""

from __future__ import annotations

from typing import Any

from youmu._internal.args import instance_arg
from youmu.errors import InvalidArgumentError, StateError
from youmu.integrations.trainer_loader import TrainerLoader
from youmu.state.files import dumps, loads

__all__ = ["data_parallel", "LoaderState"]


def _mesh_arg(mesh: Any) -> Any:
    from torch.distributed.device_mesh import DeviceMesh

    return instance_arg("mesh", mesh, DeviceMesh, "a torch.distributed DeviceMesh")


def data_parallel(mesh: Any, dim: str = "dp") -> tuple[int, int, Any]:
    """``(data-parallel rank, data-parallel size, GlooChannel over that group)`` of the
    calling rank in ``mesh`` (collective over the whole mesh: call it on every rank)."""
    import torch.distributed as dist

    from youmu.distributed.channel import GlooChannel

    _mesh_arg(mesh)
    instance_arg("dim", dim, str, "a mesh dimension's name (a str)")
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
    """A DCP ``Stateful`` over a :class:`TrainerLoader`: every data-parallel rank's state
    under one key (``state_dict`` is collective over the data-parallel channel; DCP calls
    it on every rank, in ``save`` and in ``load``)."""

    KEY = "dp_ranks"

    def __init__(self, loader: TrainerLoader, mesh: Any = None, dim: str = "dp") -> None:
        if not isinstance(loader, TrainerLoader):
            raise InvalidArgumentError(f"loader must be a TrainerLoader, got {type(loader).__name__}")
        self.loader = loader
        if mesh is not None:
            _mesh_arg(mesh)
            instance_arg("dim", dim, str, "a mesh dimension's name (a str)")
            if dim not in (mesh.mesh_dim_names or ()):
                raise InvalidArgumentError(f"the mesh has no {dim!r} dimension (its dimensions: "
                                           f"{list(mesh.mesh_dim_names or ())})")
        self.dp_rank = mesh.get_local_rank(dim) if mesh is not None else loader.rank
        if self.dp_rank != loader.rank:
            raise InvalidArgumentError(
                f"the loader is rank {loader.rank} of its channel but data-parallel rank {self.dp_rank} of the mesh: "
                "build it with data_parallel(mesh)'s channel"
            )

    def state_dict(self) -> dict[str, Any]:
        gathered = self.loader.gathered_state_dict()
        return {self.KEY: dumps(gathered),
                "dp_world_size": self.loader.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        blob = state.get(self.KEY) if isinstance(state, dict) else None
        if not isinstance(blob, (bytes, bytearray)):
            raise StateError(f"the checkpoint has no youmu loader state under {self.KEY!r}")
        self.loader.load_state_dict(loads(blob, where=f"the checkpoint's youmu loader state ({self.KEY!r})"))
