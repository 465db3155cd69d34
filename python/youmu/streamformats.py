"""The state formats of youmu's torch streams, in a module that imports nothing, so that
merging or checking a stream's states (:func:`youmu.merge_states`) never imports torch.
The streams (:class:`youmu.torch.MapStream`, :func:`youmu.torch.pack`) tag their states
with these; a Parquet stream's tag lives with it in :mod:`youmu.parquet`, which is
torch-free itself.

Example:
    >>> MAPSTREAM_FORMAT, PACK_FORMAT
    ('youmu.MapStream/1', 'youmu.PackedDataset/1')
"""

from __future__ import annotations

__all__ = ["MAPSTREAM_FORMAT", "PACK_FORMAT"]

#: The tag of a ``MapStream``'s (and ``MixtureStream``'s) states.
MAPSTREAM_FORMAT = "youmu.MapStream/1"

#: The tag of a ``pack(...)`` stream's states (``PackedDataset``).
PACK_FORMAT = "youmu.PackedDataset/1"
