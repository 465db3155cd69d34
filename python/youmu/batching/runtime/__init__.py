"""Online dynamic batching's threaded runtime: the aligner thread, the handshake, epochs,
the sample feed from DataLoader workers, the hand-off, shutdown and metrics.

Example:
    >>> from youmu.batching.runtime import aligner, handoff
    >>> aligner.__name__, handoff.__name__
    ('youmu.batching.runtime.aligner', 'youmu.batching.runtime.handoff')
"""

__all__: list[str] = []
