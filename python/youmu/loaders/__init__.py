"""The loader contract every youmu loader keeps (``passes``): one pass cursor, one epoch rule,
one close.

Example:
    >>> from youmu.loaders.passes import microbatches
    >>> microbatches.__module__
    'youmu.loaders.passes'
"""

__all__: list[str] = []
