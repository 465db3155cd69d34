"""What every trainer integration shares: batch descriptions, channels, consumption
counts, per-rank job states, logged figures, step counting and the trainer settings checks.

Example:
    >>> from youmu.integrations.trainer import settings, states
    >>> settings.__name__.rsplit(".", 1)[-1], states.__name__.rsplit(".", 1)[-1]
    ('settings', 'states')
"""

__all__: list[str] = []
