"""Argument checks for every public entry point of youmu's Python layers.

A mistake surfaces at the call that made it, naming the argument, rather than as a
numpy or heap error deep inside a plan — or, worse, on one rank of a distributed job
while the others wait in a collective. Convention: a value of the wrong *type* raises
:class:`~youmu.errors.ArgumentTypeError` (a ``TypeError``); a value of the right type
outside its range raises :class:`~youmu.errors.InvalidArgumentError` (a
``ValueError``). Floats are never truncated to ints and bools are never numbers.

Example:
    >>> int_arg("buffer_size", 8, minimum=1)
    8
    >>> int_arg("buffer_size", 8.0)
    Traceback (most recent call last):
    ...
    youmu.errors.ArgumentTypeError: buffer_size must be an int, got float 8.0
"""

from __future__ import annotations

import datetime
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "MAX_SEED",
    "seed_arg",
    "int_arg",
    "opt_int_arg",
    "float_arg",
    "seconds_arg",
    "bool_arg",
    "choice_arg",
    "callable_arg",
    "instance_arg",
    "index_of",
    "int_array",
    "float_array",
    "storage_options_arg",
    "workers_arg",
    "MAX_WORKERS",
]

#: The most DataLoader workers a loader starts: each is a process, and asking for more
#: than any machine runs would start processes until the system refuses (a hang first).
MAX_WORKERS = 1 << 10

T = TypeVar("T")


#: The largest seed: seeds are u64 everywhere (the Rust permutations, the mixtures,
#: the planner's tie-breaking), so one range holds for every loader.
MAX_SEED = (1 << 64) - 1


def seed_arg(seed: Any, name: str = "seed") -> int:
    """The one seed rule: an int in ``[0, 2**64)``.

    >>> seed_arg(7)
    7
    >>> seed_arg(-1)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: seed must be an int >= 0, got -1
    """
    return int_arg(name, seed, minimum=0, maximum=MAX_SEED)


def int_arg(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int`` (Python or numpy integer; never a bool or a float).

    >>> int_arg("world_size", 0, minimum=1)
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: world_size must be a positive int, got 0
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise InvalidArgumentError(f"{name} must be {what}, got {v!r}")
    if maximum is not None and v > maximum:
        raise InvalidArgumentError(f"{name} must be at most {maximum:,}, got {v:,}")
    return v


def workers_arg(value: Any, name: str = "num_workers") -> int:
    """A number of DataLoader worker processes: ``0 <= value <= MAX_WORKERS``.

    >>> workers_arg(2)
    2
    """
    return int_arg(name, value, minimum=0, maximum=MAX_WORKERS)


def opt_int_arg(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    """:func:`int_arg`, with ``None`` passed through."""
    return None if value is None else int_arg(name, value, minimum=minimum, maximum=maximum)


def float_arg(name: str, value: Any, *, positive: bool = False, non_negative: bool = False) -> float:
    """``value`` as a finite ``float`` (ints accepted; bools and strings are not)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidArgumentError(f"{name} must be finite, got {v!r}")
    if positive and not v > 0:
        raise InvalidArgumentError(f"{name} must be > 0, got {v!r}")
    if non_negative and v < 0:
        raise InvalidArgumentError(f"{name} must be >= 0, got {v!r}")
    return v


def seconds_arg(name: str, value: Any) -> float:
    """A positive, finite duration in seconds (a number or a ``datetime.timedelta``).

    >>> seconds_arg("timeout", datetime.timedelta(minutes=1))
    60.0
    """
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    return float_arg(name, value, positive=True)


def bool_arg(name: str, value: Any) -> bool:
    """A real bool: ``"no"`` or ``0.5`` would silently read as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def choice_arg(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (a string)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be one of {tuple(choices)}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise InvalidArgumentError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def callable_arg(name: str, value: T | None, *, optional: bool = False) -> T | None:
    """A callable (or ``None`` when ``optional``)."""
    if value is None and optional:
        return None
    if not callable(value):
        what = "callable or None" if optional else "callable"
        raise ArgumentTypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def instance_arg(name: str, value: Any, types: type | tuple[type, ...], what: str) -> Any:
    """``value`` when it is an instance of ``types`` (``what`` says what is expected, in
    words), else :class:`~youmu.errors.ArgumentTypeError` naming the argument.

    >>> instance_arg("text", "hi", str, "a str")
    'hi'
    >>> instance_arg("text", None, str, "a str")
    Traceback (most recent call last):
    ...
    youmu.errors.ArgumentTypeError: text must be a str, got NoneType
    """
    if not isinstance(value, types):
        raise ArgumentTypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def storage_options_arg(value: Any, name: str = "storage_options") -> dict[str, Any] | None:
    """Object-store settings as :class:`youmu.PageIndex` takes them: ``None`` or a
    mapping of str keys to str, bool or number values (checked here, at the call that
    passed them, rather than where a loader process first builds its index).

    >>> storage_options_arg({"endpoint": "http://127.0.0.1:9000", "timeout": "5s"})
    {'endpoint': 'http://127.0.0.1:9000', 'timeout': '5s'}
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(f"{name} must be a dict of str -> str, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, (str, bool, int, float)):
            raise ArgumentTypeError(f"{name} must map str keys to str values, got {k!r}: {type(v).__name__}")
    return dict(value)


def index_of(value: Any, what: str) -> int:
    """An integer a user function returned (``int``, numpy or 0-d tensor integer)."""
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be an int, got {type(value).__name__} {value!r}") from None


def int_array(values: Any, name: str) -> np.ndarray:
    """A 1-d int64 array; integral floats (``3.0``) are accepted, fractional ones and
    non-numbers are not (``np.asarray(..., dtype=int64)`` would silently truncate)."""
    if isinstance(values, range):
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    if isinstance(values, (str, bytes)):
        raise ArgumentTypeError(f"{name} must be a sequence of integers, got {type(values).__name__}")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(f"{name} must be a sequence of integers: {e}") from None
    if arr.ndim != 1:
        raise _dim_error(name, arr)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)  # no copy on the hot path (int64 already)
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or (arr != np.rint(arr)).any():
            raise InvalidArgumentError(f"{name} must be integers, got non-integral values")
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        raise ArgumentTypeError(f"{name} must be integers, got booleans")
    try:
        out = np.asarray([index_of(x, name) for x in arr.tolist()], dtype=np.int64)
    except ArgumentTypeError:
        raise ArgumentTypeError(f"{name} must be integers, got {arr.dtype} values") from None
    except OverflowError:  # Python ints beyond int64 (numpy keeps them as objects)
        raise InvalidArgumentError(f"{name} must be integers in the int64 range") from None
    return out


def float_array(values: Any, name: str) -> np.ndarray:
    """A 1-d float64 array (costs, sizes, times)."""
    if isinstance(values, (str, bytes)) or values is None:
        raise ArgumentTypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(f"{name} must be a sequence of numbers: {e}") from None
    if arr.ndim != 1:
        raise _dim_error(name, arr)
    return arr


def _dim_error(name: str, arr: np.ndarray) -> Exception:
    if arr.ndim == 0:
        return ArgumentTypeError(f"{name} must be a sequence, got the scalar {arr.item()!r}")
    return InvalidArgumentError(f"{name} must be one-dimensional, got shape {arr.shape}")
