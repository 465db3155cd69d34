"""Online dynamic batching's pure algorithms: grouping, DGAP alignment, the round protocol,
loss scaling, sampling, simulation and step descriptions. No threads, no torch.distributed.

Example:
    >>> from youmu.batching.algo.grouping import form_groups, padded_tokens
    >>> padded_tokens([3, 5, 4])  # a group pads every sample to its longest
    15
"""

__all__: list[str] = []
