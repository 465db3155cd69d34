"""Deprecated location of :mod:`youmu.dist.channel` (kept for one release).

Example:
    >>> from youmu.dist import GlooChannel       # the new home
"""

from __future__ import annotations

import warnings

from youmu.dist.channel import DEFAULT_TIMEOUT, GlooChannel, abandon_collectives, channel_for
from youmu.errors import ChannelError

__all__ = ["GlooChannel", "ChannelError", "DEFAULT_TIMEOUT", "abandon_collectives", "channel_for"]

warnings.warn(
    "youmu.batching.channel moved to youmu.dist (GlooChannel, channel_for); the old path goes away in the next release",
    DeprecationWarning,
    stacklevel=2,
)
