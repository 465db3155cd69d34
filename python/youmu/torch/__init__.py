"""PyTorch adapters: youmu's streams as ``IterableDataset``s, collate functions,
packing and a prefetcher. ``import torch`` happens here (and in :mod:`youmu.distributed` when
a channel needs it), never in youmu's torch-free layers.

Example:
    >>> from youmu.torch import MapStream, collate_pad
    >>> rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4]}, {"input_ids": [5, 6]}]
    >>> batch = collate_pad(list(MapStream(rows, rank=0, world_size=2)))   # rank 0: rows 0 and 2
    >>> batch["input_ids"].tolist(), batch["input_ids_lengths"].tolist()
    ([[1, 2, 3], [5, 6, 0]], [3, 2])
"""

from youmu.torch.collate import PadCollate, collate_pad, pad_collate
from youmu.torch.dataset import YoumuDataset
from youmu.torch.mapstream import MapStream, MixtureStream
from youmu.torch.pack import PackedDataset, collate_packed, pack
from youmu.torch.prefetch import Prefetcher
from youmu.torch.sharded import ShardedStream

__all__ = [
    "MapStream",
    "MixtureStream",
    "PackedDataset",
    "PadCollate",
    "Prefetcher",
    "ShardedStream",
    "YoumuDataset",
    "collate_packed",
    "collate_pad",
    "pack",
    "pad_collate",
]
