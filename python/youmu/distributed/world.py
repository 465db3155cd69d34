"""This process's rank and the world size, from the caller or from ``torch.distributed``.

Example:
    >>> rank_and_world(1, 4)
    (1, 4)
    >>> rank_and_world(None, None)      # torch.distributed not initialised: one process
    (0, 1)
"""

from __future__ import annotations

from youmu._internal.args import opt_int_arg
from youmu.errors import InvalidArgumentError

__all__ = ["rank_and_world"]


def rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)``: the given values, each missing one taken from an
    initialised ``torch.distributed`` default group, else ``(0, 1)``."""
    r = opt_int_arg("rank", rank, minimum=0)
    w = opt_int_arg("world_size", world_size, minimum=1)
    if r is None or w is None:
        try:
            import torch.distributed as dist
        except ImportError:  # torch is optional for youmu's torch-free layers
            dist = None  # type: ignore[assignment]
        if dist is not None and dist.is_available() and dist.is_initialized():
            r = dist.get_rank() if r is None else r
            w = dist.get_world_size() if w is None else w
        else:
            r = 0 if r is None else r
            w = 1 if w is None else w
    if not r < w:
        raise InvalidArgumentError(f"rank {r} is not in range(world_size={w})")
    return r, w
