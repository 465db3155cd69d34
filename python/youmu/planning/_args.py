"""Argument checks shared by the planning modules.

Every public entry point validates its arguments up front, so a mistake surfaces at
the call that made it (naming the argument) rather than as a numpy or heap error deep
inside a plan — or, worse, on one rank of a distributed job while the others wait in
a collective. Convention: a value of the wrong *type* raises ``TypeError``; a value of
the right type outside its range raises ``ValueError``.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np


def int_arg(name: str, value: Any, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (Python or numpy integer; never a bool or a float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return v


def opt_int_arg(name: str, value: Any, *, minimum: int | None = None) -> int | None:
    """:func:`int_arg`, with ``None`` passed through."""
    return None if value is None else int_arg(name, value, minimum=minimum)


def float_arg(name: str, value: Any, *, positive: bool = False, non_negative: bool = False) -> float:
    """``value`` as a finite ``float`` (ints accepted; bools and strings are not)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be > 0, got {v!r}")
    if non_negative and v < 0:
        raise ValueError(f"{name} must be >= 0, got {v!r}")
    return v


def bool_arg(name: str, value: Any) -> bool:
    """A real bool: ``"no"`` or ``0.5`` would silently read as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def choice_arg(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def index_of(value: Any, what: str) -> int:
    """An integer a user function returned (``int``, numpy or 0-d tensor integer)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}") from None


def int_array(values: Any, name: str) -> np.ndarray:
    """A 1-d int64 array; integral floats (``3.0``) are accepted, fractional ones and
    non-numbers are not (``np.asarray(..., dtype=int64)`` would silently truncate)."""
    if isinstance(values, range):
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of integers, got {type(values).__name__}")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a sequence of integers: {e}") from None
    if arr.ndim != 1:
        raise _dim_error(name, arr)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)  # no copy on the hot path (int64 already)
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or (arr != np.rint(arr)).any():
            raise ValueError(f"{name} must be integers, got non-integral values")
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        raise TypeError(f"{name} must be integers, got booleans")
    try:
        out = np.asarray([index_of(x, name) for x in arr.tolist()], dtype=np.int64)
    except TypeError:
        raise TypeError(f"{name} must be integers, got {arr.dtype} values") from None
    return out


def float_array(values: Any, name: str) -> np.ndarray:
    """A 1-d float64 array of finite values >= 0 (costs, sizes, times)."""
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a sequence of numbers: {e}") from None
    if arr.ndim != 1:
        raise _dim_error(name, arr)
    return arr


def _dim_error(name: str, arr: np.ndarray) -> Exception:
    if arr.ndim == 0:
        return TypeError(f"{name} must be a sequence, got the scalar {arr.item()!r}")
    return ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
