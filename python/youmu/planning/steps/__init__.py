"""A planned step's pieces: the per-rank sources and their reads, micro-batches, varlen
packing, the exchange between ranks and the carry of samples into the next step."""
