"""Online dynamic batching's pure algorithms: grouping, DGAP alignment, the round protocol,
loss scaling, sampling, simulation and step descriptions. No threads, no torch.distributed."""
