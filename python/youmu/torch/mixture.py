"""Deprecated location of :class:`youmu.torch.MixtureStream` (now in
:mod:`youmu.torch.mapstream`; kept for one release).

Example:
    >>> from youmu.torch import MixtureStream      # the public name
"""

from __future__ import annotations

import warnings

from youmu.torch.mapstream import MixtureStream

__all__ = ["MixtureStream"]

warnings.warn("youmu.torch.mixture moved to youmu.torch.mapstream (import youmu.torch.MixtureStream)",
              DeprecationWarning, stacklevel=2)
