"""The one parser of the samples a planning loader's state carries over a step
boundary: ``carry`` entries ``(id, source, documents, tokens, payload[, image patches])``.

Both deployments save them: :class:`~youmu.planning.BalancedLoader` with the sample
itself as the payload (and, with ``images_fn``, its images' encoder patches), the Ray
step planner (:class:`youmu.ray.state.PlannerState`) with the sample's *position* in
its origin rank's stream (an int: samples are re-read by position). They are checked
here, once; a malformed entry is a :class:`~youmu.errors.StateError` naming the
owner and the field.

Example:
    >>> parse_carry([[3, 1, [2, 5], 7, 42]], owner="RayPlanner", where="'carry'[0]", num_sources=2,
    ...             positions=True)
    [Held(id=3, source=1, docs=[2, 5], tokens=7, payload=42)]
    >>> parse_carry([[3, 2, [7], 7, 42]], owner="BalancedLoader", where="'carry'", num_sources=2)
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: BalancedLoader state field 'carry'[0] is malformed: ... source an int in range(2), ...
"""

from __future__ import annotations

from typing import Any

from youmu.errors import StateError
from youmu.planning.steps.rank_sources import Held
from youmu.state.contract import MAX_STATE_INT, is_state_int

__all__ = ["parse_carry"]



def parse_carry(entries: Any, *, owner: str, where: str, num_sources: int, positions: bool = False) -> list[Held]:
    """Check and parse the ``carry`` entries of a state: ``(id, source, documents,
    tokens, payload[, image patches])`` with ``source`` in ``range(num_sources)``,
    ``documents`` and image patches lists of ints >= 0 and, with ``positions``, the
    payload a stream position (an int >= 0, no image patches)."""
    if not isinstance(entries, (list, tuple)):
        raise StateError(f"{owner} state field {where} must be a list, got {type(entries).__name__}")
    what = "(id, source, documents, tokens, position)" if positions else \
        "(id, source, documents, tokens, sample[, image patches])"
    held = []
    for k, entry in enumerate(entries):
        field = f"{where}[{k}]"
        if not isinstance(entry, (list, tuple)) or len(entry) not in ((5,) if positions else (5, 6)):
            raise StateError(f"{owner} state field {field} must be {what}, got {type(entry).__name__}")
        sid, src, docs, tokens, payload, *images = entry
        if images and not (isinstance(images[0], (list, tuple)) and all(is_state_int(x) for x in images[0])):
            raise StateError(f"{owner} state field {field}: image patches must be a list of ints >= 0")
        docs_ok = isinstance(docs, (list, tuple)) and all(is_state_int(d) for d in docs)
        if not (is_state_int(sid, -MAX_STATE_INT) and is_state_int(src) and src < num_sources
                and is_state_int(tokens) and docs_ok and (is_state_int(payload) or not positions)):
            position = ", the position an int >= 0" if positions else ""
            raise StateError(f"{owner} state field {field} is malformed: id must be an int, source an int in "
                             f"range({num_sources}), tokens an int >= 0 and documents a list of ints >= 0{position}")
        held.append(Held(int(sid), int(src), [int(d) for d in docs], int(tokens),
                         int(payload) if positions else payload,
                         [int(x) for x in images[0]] if images else None))
    return held
