"""Pure order maps: which positions a (rank, worker) owns (``sharding``), the shuffle modes
(``modes``) and the order of an epoch (``shuffle``), and the resume math over chains of levels
(``resume``). Functions of (seed, epoch, position) only: no I/O, no state formats.

Example:
    >>> from youmu.order.sharding import Shard, round_robin
    >>> list(round_robin(10, Shard(rank=1, world_size=2)))
    [1, 3, 5, 7, 9]
"""

__all__: list[str] = []
