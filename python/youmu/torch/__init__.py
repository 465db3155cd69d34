"""PyTorch adapters. This is the only part of youmu that imports torch.

Example:
    >>> from youmu.torch import YoumuDataset, pack, collate_packed   # doctest: +SKIP
"""

from youmu.torch.collate import collate_pad
from youmu.torch.dataset import YoumuDataset
from youmu.torch.mapstream import MapStream
from youmu.torch.mixture import MixtureStream
from youmu.torch.pack import PackedDataset, collate_packed, pack
from youmu.torch.prefetch import Prefetcher

__all__ = ["YoumuDataset", "MapStream", "MixtureStream", "PackedDataset", "pack", "collate_packed", "collate_pad", "Prefetcher"]
