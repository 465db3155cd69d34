"""What every trainer integration shares: batch descriptions, channels, consumption
counts, per-rank job states, logged figures, step counting and the trainer settings checks."""
