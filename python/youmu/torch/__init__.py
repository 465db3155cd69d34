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

import importlib as _importlib

# A DataLoader worker pickles its first tensor on its queue-feeder thread, and torch makes
# a lazy import there (torch.nested, in its tensor reducer). On CPython 3.11 an import on
# that thread racing one on the worker's main thread can raise KeyError inside importlib's
# module locks, killing the feeder and leaving the trainer waiting forever. Importing the
# module once here, before any worker forks, keeps that import out of the workers.
try:
    _importlib.import_module("torch.nested._internal.nested_tensor")
except ImportError:  # another torch layout: nothing to pre-import
    pass

from youmu.torch.collate import PadCollate, collate_pad, lm_collate
from youmu.torch.dataset import YoumuDataset
from youmu.torch.mapstream import MapStream, MixtureStream
from youmu.torch.pack import PackedDataset, collate_packed, pack
from youmu.torch.prefetch import Prefetcher
from youmu.torch.sendable import SendCollate
from youmu.torch.sharded import ShardedStream

__all__ = [
    "MapStream",
    "MixtureStream",
    "PackedDataset",
    "PadCollate",
    "Prefetcher",
    "SendCollate",
    "ShardedStream",
    "YoumuDataset",
    "collate_packed",
    "collate_pad",
    "lm_collate",
    "pack",
]
