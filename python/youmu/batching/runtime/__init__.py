"""Online dynamic batching's threaded runtime: the aligner thread, the handshake, epochs,
the sample feed from DataLoader workers, the hand-off, shutdown and metrics."""
