"""What any youmu state may be, whoever forged it: the bounds every state meets before
a field of it is read, checked once where a state enters — :func:`youmu.state.contract.check_state`
(every ``load_state_dict``), :func:`youmu.merge_states` and the state file codec
(:mod:`youmu.state.files`: its JSON is measured before it is parsed, its arrays before
they are allocated).

A saved state is a small tree: a loader's state holds its streams' states, and a
planning loader's carried samples hold the user's own (a chat's list of dicts of
lists). None is anywhere near :data:`MAX_STATE_DEPTH` levels deep, holds an integer
anywhere near :data:`MAX_INT_BITS` bits (positions, epochs and counters are int64,
seeds and fingerprints below 2**64: each field's own check holds it to its range and
names the field), or refers to itself. A tree past those is forged or corrupted, and
reading it field by field would end in a ``RecursionError``, a ``ValueError`` from
printing a 5,000-digit integer, or a walk that never ends. Here it is one
:class:`~youmu.errors.StateError` saying where, in time linear in the tree's distinct
nodes and memory bounded by its depth. How many entries a list may hold depends on
the field (worker positions: the state's own ``num_workers``), and is the reader's
check.

Example:
    >>> check_tree({"epoch": 1, "positions": {0: [3, 4]}}, owner="MapStream")
    >>> loop = {"epoch": 1}
    >>> loop["again"] = loop
    >>> check_tree(loop, owner="MapStream")
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: MapStream state refers to itself at state['again']: not a saved state
    >>> check_tree({"n": 10**100}, owner="MapStream")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: MapStream state holds a 333-bit integer at state['n']: no state integer has more ...
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from youmu.errors import StateError

__all__ = ["MAX_STATE_DEPTH", "MAX_INT_BITS", "MAX_ARRAY_RANK", "MAX_ARRAY_BYTES", "check_tree", "check_encoded_tree",
           "check_json_depth", "check_array_shape"]

#: The deepest a state may nest (a loader's state, its streams', a carried sample's own
#: lists and dicts are a dozen or two levels).
MAX_STATE_DEPTH = 64

#: The most bits an integer anywhere in a state may have: far above any field's range
#: (int64 positions; seeds below 2**64), which the field's own check enforces and
#: names; this bound keeps integers too large to print or compare cheaply (a 5,000-digit
#: one is a ``ValueError`` of Python's own conversion limit) from reaching those checks.
MAX_INT_BITS = 256

#: The most dimensions an array in a state has (numpy's limit was 32 until numpy 2).
MAX_ARRAY_RANK = 32

#: The most bytes an array in a state may claim (int64 sizes, as numpy and torch keep them).
MAX_ARRAY_BYTES = (1 << 63) - 1

# the state file's tagged encoding adds at most 3 levels per level of the state (an
# int-keyed dict: tag object, its items, a [key, value] pair) and an envelope
_ENCODED_DEPTH = 3 * MAX_STATE_DEPTH + 2


def _where(path: list[Any]) -> str:
    return "state" + "".join(f"[{k!r:.40}]" for k in path)


def _too_deep(who: str, limit: int, path: list[Any], what: str) -> StateError:
    return StateError(f"{who} is nested deeper than {limit} levels (at {_where(path[:8])}...): {what} is never "
                      "that deep, so it is forged or corrupted")


def check_tree(state: Any, *, owner: str) -> None:
    """Refuse a state deeper than :data:`MAX_STATE_DEPTH`, holding itself, or holding an
    integer of more than :data:`MAX_INT_BITS` bits: a :class:`StateError` names ``owner``
    and where. Each distinct dict, list or tuple is walked once (a tree sharing one
    subtree a million times costs one walk of it)."""
    _walk(state, f"{owner} state", MAX_STATE_DEPTH, "a state")


def _walk(root: Any, who: str, limit: int, what: str) -> None:
    heights: dict[int, int] = {}  # id -> height of a container already walked
    open_ids: set[int] = set()  # containers on the current path: seeing one again is a cycle
    path: list[Any] = []
    keep: list[Any] = []  # the walked containers stay alive, so their ids stay theirs

    def height(node: Any, depth: int) -> int:
        if isinstance(node, bool) or node is None or isinstance(node, (str, float, bytes)):
            return 0
        if isinstance(node, int):
            if node.bit_length() > MAX_INT_BITS:
                raise StateError(f"{who} holds a {node.bit_length():,}-bit integer at {_where(path)}: no "
                                 f"state integer has more than {MAX_INT_BITS} bits")
            return 0
        if isinstance(node, Mapping):
            children: Any = node.items()
        elif isinstance(node, (list, tuple)):
            children = enumerate(node)
        else:
            return 0  # arrays, tensors, numpy scalars: leaves, sized by what made them
        key = id(node)
        if key in open_ids:
            raise StateError(f"{who} refers to itself at {_where(path)}: not a saved state")
        known = heights.get(key)
        if known is None:
            if depth >= limit:
                raise _too_deep(who, limit, path, what)
            open_ids.add(key)
            keep.append(node)
            known = 0
            for k, v in children:
                if isinstance(node, Mapping):
                    height(k, depth + 1)
                path.append(k)
                known = max(known, height(v, depth + 1) + 1)
                path.pop()
            open_ids.discard(key)
            heights[key] = known
        if depth + known > limit:
            raise _too_deep(who, limit, path, what)
        return known

    height(root, 0)


def check_encoded_tree(tree: Any, *, where: str) -> None:
    """:func:`check_tree` for a state's plain encoding (:func:`youmu.state.files.to_plain`:
    up to 3 levels per level of the state), read from a file or a framework's
    checkpoint."""
    _walk(tree, f"{where}: the encoded state", _ENCODED_DEPTH, "an encoded state")


# a JSON string (escapes included) or one bracket: what nesting is counted over
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def check_json_depth(data: bytes, *, where: str) -> None:
    """Refuse JSON nested deeper than a state's encoding can be, before it is parsed (a
    parser recurses per level: 100,000 levels are a ``RecursionError``, and memory)."""
    depth = 0
    for m in _JSON_TOKENS.finditer(data):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > _ENCODED_DEPTH:
                raise StateError(f"{where}: not a valid youmu state (nested deeper than {_ENCODED_DEPTH} levels at "
                                 f"byte {m.start()}: a forged or corrupted file)")
        elif c in (b"]", b"}"):
            depth -= 1


def check_array_shape(shape: Any, itemsize: int, *, where: str) -> tuple[int, ...]:
    """An array's shape as a state file gives it, checked before anything is allocated:
    at most :data:`MAX_ARRAY_RANK` dimensions, each an int >= 0, and at most
    :data:`MAX_ARRAY_BYTES` bytes counting only its non-zero dimensions (a shape like
    ``[10**15, 10**15, 0]`` holds nothing, yet no library can make it)."""
    if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise StateError(f"{where}: 'shape' must be a list of ints >= 0")
    if len(shape) > MAX_ARRAY_RANK:
        raise StateError(f"{where}: an array of {len(shape)} dimensions (at most {MAX_ARRAY_RANK})")
    if any(d.bit_length() > MAX_INT_BITS for d in shape) or \
            math.prod(d for d in shape if d) * itemsize > MAX_ARRAY_BYTES:
        raise StateError(f"{where}: shape {shape!r:.120} is larger than any array ({MAX_ARRAY_BYTES:,} bytes at most)")
    return tuple(shape)
