"""The shuffle modes: a registry of small strategy objects, one file each, as MosaicML
streaming keeps its shuffle algorithms by name. A mode is its name (``"page"``,
``"row"``, ``"local"``, ``"none"``: what users write and states hold) and the orders it
gives (:class:`~youmu.order.modes.base.ShuffleMode`: the epoch's page order, a window's
row order, a row mode's position order), each written once in the mode's file;
:class:`youmu.order.shuffle.ShardPlan` asks them, and no other module compares a mode's
name (``tests/promises/test_layering.py`` holds them to it).

A new mode is one file in this folder: a :class:`ShuffleMode` subclass decorated with
:func:`register` (every module here is imported when the package is).

Example:
    >>> from youmu.order.modes import ShuffleMode
    >>> [m for m in ShuffleMode if m.shuffles_windows]
    ['page', 'local']
"""

from __future__ import annotations

import importlib
import pkgutil

from youmu.order.modes.base import MODES, ShuffleMode, permutation, register

__all__ = ["ShuffleMode", "SHUFFLE_MODES", "MODES", "register", "permutation"]

# every mode's file registers it: importing them all is what makes a new mode one file
for _found in pkgutil.iter_modules(__path__):
    if _found.name != "base":
        importlib.import_module(f"{__name__}.{_found.name}")

#: The modes' names, in the order errors list them.
SHUFFLE_MODES: tuple[str, ...] = tuple(MODES)
