"""``BalancedLoader``'s state: its checkpoint format, the loader's state methods and the
merge across topologies.

Example:
    >>> from youmu.planning.state import checkpoint, merge
    >>> merge.__name__
    'youmu.planning.state.merge'
"""

__all__: list[str] = []
