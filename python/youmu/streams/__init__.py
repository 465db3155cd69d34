"""The stream core, torch-free: ``core`` (``ShardedStream``/``PositionalStream``), the
Parquet stream (``parquet``, ``spec``, ``rowstream``), sequence packing (``packing``;
:mod:`youmu.torch` adds only torch's base class and tensors to it), rows and their
conversion (``rows``, ``convert``), the transform kinds (``batched``, ``skips``), the
page grid and the Hugging Face Hub resolver.

Example:
    >>> from youmu.streams.core import ShardedStream
    >>> ShardedStream.__module__
    'youmu.streams.core'
"""

__all__: list[str] = []
