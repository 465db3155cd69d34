"""A planned step's pieces: the per-rank sources and their reads, micro-batches, varlen
packing, the exchange between ranks and the carry of samples into the next step.

Example:
    >>> from youmu.planning.steps.microbatch import MicroBatchInfo
    >>> MicroBatchInfo.__module__
    'youmu.planning.steps.microbatch'
"""

__all__: list[str] = []
