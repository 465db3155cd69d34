"""The stream core: ``core`` (``ShardedStream``/``PositionalStream``), the Parquet stream
(``parquet``, ``spec``, ``rowstream``), rows and their conversion (``rows``, ``convert``),
the transform kinds (``batched``, ``skips``), the page grid and the Hugging Face Hub resolver.

Example:
    >>> from youmu.streams.core import ShardedStream
    >>> ShardedStream.__module__
    'youmu.streams.core'
"""

__all__: list[str] = []
