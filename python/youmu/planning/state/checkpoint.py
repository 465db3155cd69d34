"""Checkpoints of a :class:`~youmu.planning.balanced_loader.BalancedLoader`: where each step
starts on this rank, what a saved state must hold, and how the ranks agree on where
to start.

* :class:`Snapshots` — per step, this rank's position at the step's start (its
  sources' own states, the samples it held beyond them, its arrival counter),
  recorded by the producer between steps; a ``"state"``-mode state is the snapshot
  of the step the trainer is in (MegaScale-Data's differential checkpoints record
  loader state per step in the same spirit; here each rank keeps its own).
* :func:`config_fingerprint` — a hash of every setting that decides the plans; a
  state saved under other settings is refused, and ranks compare it when they start.
* :data:`BALANCED_LOADER_STATE` — the format, declared field by field
  (:mod:`youmu.state.formats`): ``state_dict`` writes through it, in its order;
* :func:`parse_state` — the one validator of a state given to ``load_state_dict``
  (each field by its declared check): a foreign state, ``None`` or a malformed field is
  a :class:`~youmu.errors.StateError` naming the field.
* :func:`agree_on_start` — every rank starts from the same step and micro-batch with
  the same settings, and restores its sources' states only if every rank can.

Example:
    >>> state = {"format": BALANCED_LOADER_FORMAT, "mode": "replay", "world_size": 1, "rank": 0, "num_microbatches": 2,
    ...          "config": 7, "step": 3, "microbatch": 1}
    >>> parse_state(state, world_size=1, rank=0, num_microbatches=2, config=7, can_restore=False,
    ...             resume_mode="auto", names=["default"])
    Resume(step=3, microbatch=1, restored=None)
    >>> parse_state(dict(state, microbatch="1"), world_size=1, rank=0, num_microbatches=2, config=7,
    ...             can_restore=False, resume_mode="auto", names=["default"])
    Traceback (most recent call last):
    ...
    youmu.errors.StateError: invalid resume position: BalancedLoader state field 'microbatch' must be an int, ...
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu.distributed import describe, fingerprint
from youmu.errors import StateError
from youmu.planning.engine.schedule import MixingSchedule
from youmu.planning.steps.carry import parse_carry
from youmu.planning.steps.rank_sources import Held, RankReader
from youmu.state.contract import check_state
from youmu.state.formats import OWN, RANK, StateField, StateFormat, an_int, optional
from youmu.state.jobs import is_merged

__all__ = [
    "BALANCED_LOADER_FORMAT",
    "BALANCED_LOADER_STATE",
    "RESUME_MODES",
    "Resume",
    "Snapshots",
    "agree_on_start",
    "config_fingerprint",
    "json_leaves",
    "load_source",
    "parse_state",
    "restored_state",
    "restore_sources",
    "start_snapshot",
]

#: tag of :meth:`BalancedLoader.state_dict` (bumped when the layout changes)
BALANCED_LOADER_FORMAT = "youmu.planning.BalancedLoader/2"
RESUME_MODES = ("auto", "state", "replay")
_OWNER = "BalancedLoader"

log = logging.getLogger("youmu.planning")


def _mode(st: Mapping[str, Any], key: str, owner: str) -> str:
    if st.get(key) not in ("state", "replay"):
        raise StateError(f"{owner} state field {key!r} must be 'state' or 'replay', got {st.get(key)!r}")
    return str(st[key])


def _as_saved(st: Mapping[str, Any], key: str, owner: str) -> Any:
    """A value the loader compares with its own (the settings' fingerprint, the
    portable settings)."""
    return st[key]


def _streams(st: Mapping[str, Any], key: str, owner: str) -> list[Mapping[str, Any]]:
    streams = st.get(key)
    if not isinstance(streams, list) or not all(isinstance(s, Mapping) for s in streams):
        raise StateError(f"{owner} state field {key!r} must be a list of per-source dicts, got "
                         f"{type(streams).__name__}")
    for k, s in enumerate(streams):
        where = f"{key}[{k}]"
        if not isinstance(s.get("done"), bool):
            raise StateError(f"{owner} state field {where}['done'] must be a bool, got {s.get('done')!r}")
        if not isinstance(s.get("pending"), list):
            raise StateError(f"{owner} state field {where}['pending'] must be a list of samples, got "
                             f"{type(s.get('pending')).__name__}")
        if "source_state" not in s:
            raise StateError(f"{owner} state field {where} has no 'source_state'")
    return streams


def _carry(st: Mapping[str, Any], key: str, owner: str) -> list[Held]:
    streams = st.get("streams")
    return parse_carry(st.get(key), owner=owner, where=repr(key), num_sources=len(streams) if isinstance(streams, list)
                       else 0)


#: The ``BalancedLoader`` format, declared once (:mod:`youmu.state.formats`): its fields
#: in the order ``state_dict`` writes them; a ``"state"``-mode state adds this rank's
#: snapshot (``streams``, ``carry``, ``next_index``).
BALANCED_LOADER_STATE = StateFormat(_OWNER, BALANCED_LOADER_FORMAT, (
    StateField("mode", _mode, scope=RANK, merge=OWN),
    StateField("world_size", an_int(1)),
    StateField("rank", an_int(), scope=RANK, merge=OWN),
    StateField("epoch", optional(an_int()), required=False),
    StateField("num_microbatches", an_int(1)),
    StateField("config", _as_saved),
    StateField("settings", _as_saved, required=False),  # compared key by key by a merge
    StateField("step", an_int()),
    StateField("microbatch", an_int()),
    StateField("streams", _streams, scope=RANK, merge=OWN, required=False),
    StateField("carry", _carry, scope=RANK, merge=OWN, required=False),
    StateField("next_index", an_int(), scope=RANK, merge=OWN, required=False),
), merger="youmu.planning.state.merge:merge_balanced_states")


# ------------------------------------------------------------------------------------------
# snapshots
# ------------------------------------------------------------------------------------------
def _snapshot_of(reader: RankReader, carry: list[Held]) -> dict[str, Any]:
    return {
        "streams": [s.snapshot() for s in reader.streams],
        "carry": [h.as_tuple() for h in carry],
        "next_index": reader.measure.next_index,
    }


def start_snapshot(names: Sequence[str], sources: Mapping[str, Any]) -> dict[str, Any]:
    """Step 0's start before anything was read: the sources' states now."""
    return {"streams": [{"name": n, "done": False, "pending": [], "source_state": sources[n].state_dict()}
                        for n in names], "carry": [], "next_index": 0}


class Snapshots:
    """Per step, this rank's position at the step's start (written by the producer,
    read by ``state_dict`` in the trainer's thread).

    ``enabled`` turns off for good at the first source that cannot save a mid-epoch
    state (e.g. a ``DynamicBatchLoader`` over a stateless iterable); ``error`` says why.
    """

    def __init__(self, enabled: bool, resume_mode: str) -> None:
        self.enabled = enabled
        self.resume_mode = resume_mode
        self.error: BaseException | None = None
        self._by_step: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def record(self, step: int, reader: RankReader, carry: list[Held]) -> None:
        """Record where ``step`` starts. Called between steps, so no source is mid-item."""
        if not self.enabled:
            return
        try:
            snap = _snapshot_of(reader, carry)
        except Exception as e:  # noqa: BLE001 - reported by state_dict(), not fatal to training
            self.enabled = False
            self.error = e
            log.info("BalancedLoader: a source cannot save a mid-epoch state (%s: %s); "
                     "resume_mode=%r", type(e).__name__, e, self.resume_mode)
            with self._lock:
                self._by_step.clear()
            return
        with self._lock:
            self._by_step[step] = snap

    def get(self, step: int) -> dict[str, Any] | None:
        with self._lock:
            return self._by_step.get(step)

    def forget_before(self, step: int) -> None:
        """Drop the snapshots of steps the trainer can no longer resume at."""
        with self._lock:
            for k in [k for k in self._by_step if k < step]:
                del self._by_step[k]


# ------------------------------------------------------------------------------------------
# the settings a state belongs to
# ------------------------------------------------------------------------------------------
def describe_schedule(schedule: Any) -> Any:
    """Mixing schedules by content (their repr names only the sources)."""
    if schedule is None:
        return None
    if isinstance(schedule, MixingSchedule):
        content = schedule.content()
        if content[0] == "fn":
            return ["fn", describe(content[1]), content[2]]
        return content
    mix = schedule.mixture
    return ["mixture", schedule.names, schedule.batch_size, len(mix),
            [[st.start, list(map(int, st.children)), list(map(float, st.weights))] for st in mix.stages]]


def json_leaves(value: Any) -> Any:
    """``value`` with every leaf JSON cannot encode replaced by its ``str`` — what
    ``json.dumps(default=str)`` wrote when fingerprints were first computed, so saved
    states keep their fingerprints."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, dict):
        return {k: json_leaves(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_leaves(v) for v in value]
    return str(value)


_LATER_SETTINGS = ("encoder_cost_fn", "encoder_balance")


def config_fingerprint(
    planner: Any,
    *,
    global_batch_size: int | None,
    token_budget: int | None,
    schedule: Any,
    sources: list[str],
    reorder_only: bool,
    drop_last: bool,
    world_size: int,
) -> int:
    """63-bit hash of the settings that decide the plans (:func:`youmu.distributed.fingerprint`).

    >>> from youmu.planning import Planner
    >>> a = config_fingerprint(Planner().distribute(2), global_batch_size=8, token_budget=None, schedule=None,
    ...                        sources=["default"], reorder_only=False, drop_last=False, world_size=2)
    >>> a == config_fingerprint(Planner().distribute(2), global_batch_size=16, token_budget=None, schedule=None,
    ...                         sources=["default"], reorder_only=False, drop_last=False, world_size=2)
    False
    """
    cfg = {
        # a setting added later enters only when set, so states saved before it stay valid
        "planner": {f.name: describe(getattr(planner, f.name)) for f in dataclasses.fields(planner)
                    if not (f.name in _LATER_SETTINGS and getattr(planner, f.name) is None)},
        "global_batch_size": global_batch_size,
        "token_budget": token_budget,
        "schedule": describe_schedule(schedule),
        "sources": sources,
        "reorder_only": reorder_only,
        "drop_last": drop_last,
        "world_size": world_size,
    }
    return fingerprint(json_leaves(cfg))


# ------------------------------------------------------------------------------------------
# loading a state
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Resume:
    """Where a loaded state resumes: the step, the micro-batches of it already
    delivered, and (restoring the sources' states) what this rank held then."""

    step: int
    microbatch: int
    restored: dict[str, Any] | None = None


def parse_state(
    state: Any,
    *,
    world_size: int,
    rank: int,
    num_microbatches: int,
    config: int,
    can_restore: bool,
    resume_mode: str,
    names: list[str],
) -> Resume:
    """Validate ``state`` for a loader with these settings (see the module doc).

    ``can_restore``: this loader can restore its sources' states (they are stateful
    and ``resume_mode`` is not ``"replay"``); a ``"state"``-mode state then restores
    them, otherwise the loader replays to the resume point.
    """
    fmt = BALANCED_LOADER_STATE
    try:
        state = check_state(state, fmt.tags, owner=_OWNER)
    except StateError as e:
        raise StateError(f"not a BalancedLoader state: {e}") from None
    mode = fmt.field("mode").check(state, "mode", _OWNER)
    # a state-mode state also replays (it holds the position too), not the reverse
    restore = mode == "state" and can_restore
    if resume_mode == "state" and not restore:
        raise StateError("resume_mode='state' but the state was saved in replay mode (its sources "
                         "could not save their states); load it with resume_mode='replay' or 'auto'")
    check_state(state, BALANCED_LOADER_FORMAT, owner=_OWNER, expect={"world_size": world_size,
                                                            "num_microbatches": num_microbatches})
    if state.get("config") != config:
        raise StateError(f"state was saved with config={state.get('config')!r}, this BalancedLoader has {config!r} "
                         "(batch size, token budget, capacity, cost, method, placement, schedule, seed, "
                         "drop_last or sources differ)")
    if restore:
        # the sources' states are this rank's
        check_state(state, BALANCED_LOADER_FORMAT, owner=_OWNER, expect={"rank": rank})
    try:
        step, mb = (fmt.field(k).check(state, k, _OWNER) for k in ("step", "microbatch"))
    except StateError as e:
        raise StateError(f"invalid resume position: {e}") from None
    if mb >= num_microbatches:
        raise StateError(f"invalid resume position step={step}, microbatch={mb}: field 'microbatch' must be "
                         f"< num_microbatches={num_microbatches}")
    # every other declared field by its declaration, so a field added to the format is
    # checked before the loader reads it (the snapshot's fields: restored_state, only
    # where the sources' states are restored)
    for f in fmt.fields:
        if f.name in state and f.name not in _READ_HERE:
            f.check(state, f.name, _OWNER)
    return Resume(step, mb, restored_state(state, names) if restore else None)


#: The fields :func:`parse_state` reads by name (above, or in :func:`restored_state`).
_READ_HERE = ("mode", "world_size", "num_microbatches", "config", "rank", "step", "microbatch", "streams", "carry",
              "next_index")


def restored_state(state: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """The ``streams``, ``carry`` and ``next_index`` fields of a ``"state"``-mode state,
    each by its declared check (the sources those of this loader, ``names``)."""
    fmt = BALANCED_LOADER_STATE
    streams = fmt.field("streams").check(state, "streams", _OWNER)
    got = [st.get("name") for st in streams]
    if got != names:
        raise StateError(f"state streams {got} do not match this loader's sources {names}")
    held = fmt.field("carry").check(state, "carry", _OWNER)
    next_index = fmt.field("next_index").check(state, "next_index", _OWNER)
    return {"streams": streams, "carry": held, "next_index": next_index}


def restore_sources(reader: RankReader, sources: Mapping[str, Any], restored: Mapping[str, Any]) -> list[Held]:
    """Put this rank back where the resumed step began: each source loads its state,
    each stream gets back its pending samples; returns the samples held then."""
    for s, st in zip(reader.streams, restored["streams"]):
        if not st["done"]:
            load_source(sources[s.name], st["source_state"])
        s.restore(st["pending"], st["done"], st.get("end_state"))
    reader.measure.next_index = int(restored["next_index"])
    return list(restored["carry"])


def load_source(source: Any, state: Any) -> None:
    """Load a source's state: its own, or a merged stream state (:func:`youmu.merge_states`),
    which a DataLoader's *dataset* loads (the loader is built fresh over it, and its
    workers copy the loaded stream when iteration starts)."""
    torch = sys.modules.get("torch")
    if is_merged(state) and torch is not None and isinstance(source, torch.utils.data.DataLoader):
        if not hasattr(source.dataset, "load_state_dict"):
            raise StateError(f"a merged stream state needs a youmu stream under the DataLoader, got "
                             f"{type(source.dataset).__name__}")
        source.dataset.load_state_dict(state)
        return
    source.load_state_dict(state)


def agree_on_start(channel: Any, step: int, microbatch: int, can_restore: bool, config: int, *,
                   strict: bool) -> bool:
    """Check that every rank starts from the same step and micro-batch with the same
    settings, and agree on how: restore the sources' states only if every rank can
    (one rank replaying while another restores would pair their collectives wrongly —
    a replaying rank gathers metadata while a restored one exchanges samples — and
    hang or mix data); otherwise all replay. ``strict`` (``resume_mode="state"`` with a
    loaded state): replaying is an error."""
    rows = channel.all_gather_rows([step, microbatch, int(can_restore), config])
    if any(r[0] != rows[0][0] or r[1] != rows[0][1] or r[3] != rows[0][3] for r in rows):
        desc = ", ".join(f"rank {k}: step {r[0]} micro-batch {r[1]} config {r[3]:x}" for k, r in enumerate(rows))
        raise StateError("the ranks' BalancedLoaders do not start from the same point with the same settings "
                         f"(load the same state_dict position on every rank): {desc}")
    restore = all(r[2] for r in rows)
    if not restore and strict:
        lacking = [k for k, r in enumerate(rows) if not r[2]]
        raise StateError(f"resume_mode='state' but rank(s) {lacking} have no source states to restore "
                         "(their states were saved in replay mode); resume with resume_mode='auto' or 'replay'")
    return restore
