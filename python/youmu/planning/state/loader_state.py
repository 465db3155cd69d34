"""A :class:`~youmu.planning.BalancedLoader`'s side of youmu's stream contract
(:mod:`youmu.state.contract`): epochs (``set_epoch``), where the trainer is
(``state_dict``) and where the next pass starts (``load_state_dict``: a rank's own
state, :mod:`youmu.planning.state.checkpoint`, or a state of every rank merged for another
topology, :mod:`youmu.planning.state.merge`). The loader's steps are in
:mod:`youmu.planning.balanced_loader`; this mixin holds what it keeps between them.

Example:
    >>> from youmu.planning import BalancedLoader
    >>> loader = BalancedLoader([{"input_ids": [1]}], num_microbatches=1, global_batch_size=1, prefetch=0)
    >>> isinstance(loader, LoaderState), loader.state_dict()["step"]
    (True, 0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from youmu.errors import LoaderError
from youmu.loaders.passes import StepLoader
from youmu.planning.state.checkpoint import BALANCED_LOADER_STATE, Snapshots, parse_state, start_snapshot
from youmu.planning.state.merge import parse_merged
from youmu.state.contract import state_int
from youmu.state.jobs import is_merged

__all__ = ["LoaderState", "Loaded"]


@dataclass(frozen=True)
class Loaded:
    """A loaded state, waiting for the next pass (a :class:`~youmu.loaders.passes.PassCursor`'s
    point): the step and micro-batch it resumes at (``None``: the epoch's start), what
    it restores (the sources' states, the carry, the next index; ``None``: replay), the
    state itself, and whether it is a merged one (every rank must restore)."""

    resume: tuple[int, int] | None
    restored: dict[str, Any] | None
    state: dict[str, Any]
    merged: bool


class LoaderState(StepLoader[Any]):
    """The stream contract of :class:`~youmu.planning.BalancedLoader` (a mixin: the
    loader sets these attributes in its constructor)."""

    world_size: int
    resume_mode: str
    _names: list[str]
    _sources: dict[str, Any]
    _portable: dict[str, Any]
    _fingerprint: int
    _stateful: bool
    _epoch_due: bool
    _snapshots: Snapshots

    def _fresh_snapshots(self) -> Snapshots:
        return Snapshots(self.resume_mode != "replay" and self._stateful, self.resume_mode)

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` from the next pass on (youmu.state.contract's loader contract): it is
        forwarded to every source that has ``set_epoch`` (``YoumuDataset``,
        ``MapStream``, ``DynamicBatchLoader``, ...; lists and iterators have no
        epochs) now, or — called during a pass, which keeps its epoch — when the next
        pass starts. A loaded resume point is kept if it was saved in ``epoch`` (or
        does not say: states saved before loaders recorded their epoch), and cleared
        otherwise.

        >>> from youmu.planning import BalancedLoader
        >>> loader = BalancedLoader([{"input_ids": [1]}], num_microbatches=1, global_batch_size=1, prefetch=0)
        >>> loader.set_epoch(3); loader.epoch
        3
        """
        if self._pass.set_epoch(epoch):  # a loaded resume point of another epoch: cleared
            self._snapshots = self._fresh_snapshots()
        if self._pass.pass_epoch is not None:
            self._epoch_due = True  # a pass in progress reads its sources at its own epoch
        else:
            self._forward_epoch(self._pass.epoch)

    def _forward_epoch(self, epoch: int) -> None:
        for name in self._names:
            src = self._sources[name]
            if hasattr(src, "set_epoch"):
                src.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the trainer is: the next step and how many of its micro-batches it
        has taken (call it between micro-batches, on every rank, like a model
        checkpoint).

        A new loader with the same arguments on the same ranks continues, after
        :meth:`load_state_dict`, with exactly the micro-batches the uninterrupted run
        would have yielded next. Keys: ``format`` (``"youmu.planning.BalancedLoader/2"``),
        ``mode`` (``"state"`` or ``"replay"``), ``world_size``, ``rank``,
        ``num_microbatches``, ``config`` (see :meth:`config_fingerprint`), ``step``,
        ``microbatch``; in ``"state"`` mode also ``streams`` (each source's
        ``state_dict()``, its pending samples, whether it ended), ``carry`` (samples
        held over: id, source, documents, tokens, payload) and ``next_index``.
        Payloads are the samples themselves: :mod:`youmu.state.files` writes them as data
        (numpy arrays and tensors by dtype, shape and bytes), never as a pickle.

        >>> from youmu.planning import BalancedLoader
        >>> BalancedLoader([{"input_ids": [1]}], num_microbatches=1, global_batch_size=1).state_dict()["mode"]
        'replay'
        """
        cursor = self._pass
        if cursor.point is not None:
            return dict(cursor.point.state)  # loaded, not yet resumed: the same point
        step, mb = cursor.delivered
        state: dict[str, Any] = {
            "mode": "replay", "world_size": self.world_size, "rank": self.rank, "epoch": cursor.state_epoch,
            "num_microbatches": self.num_microbatches, "config": self.config_fingerprint(),
            "settings": self._portable, "step": step, "microbatch": mb,
        }
        snap: dict[str, Any] | None = None
        snapshots = self._snapshots
        if snapshots.enabled:
            snap = snapshots.get(step)
            if snap is None and cursor.pass_epoch is None:
                try:  # not started: the sources' states now are step 0's start
                    snap = start_snapshot(self._names, self._sources)
                except Exception as e:  # noqa: BLE001 - as in Snapshots.record: replay instead (or say why not)
                    snapshots.error = e
        if snap is None and self.resume_mode == "state":
            err = snapshots.error
            why = f"{type(err).__name__}: {err}" if err else f"no resume point recorded for step {step}"
            raise LoaderError(f"resume_mode='state': cannot save the sources' states ({why}); "
                              "use resume_mode='replay' or 'auto'")
        if snap is not None:
            state["mode"] = "state"
            state.update(snap)
        return BALANCED_LOADER_STATE.write(state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` at the next pass (a pass in progress is
        closed first; every rank loads its own state, all at the same step and
        micro-batch).

        A ``"state"``-mode state restores each source's state when iteration starts
        (the sources must be the same datasets, not yet iterated), provided every
        rank has one; otherwise — and for ``"replay"``-mode states — the loader needs
        fresh sources and re-reads the steps before the resume point: every rank
        reads the same samples again and gathers their metadata, but none is moved
        or collated. Raises :class:`~youmu.errors.StateError` naming the field when
        the state does not fit this loader (another object's state, ``None``, a
        malformed field, another world size, rank, micro-batches per step, settings
        or resume mode); ranks that start from different positions fail at their
        first step.

        >>> from youmu.planning import BalancedLoader
        >>> loader = BalancedLoader([{"input_ids": [1]}], num_microbatches=1, global_batch_size=1)
        >>> loader.load_state_dict({"format": "youmu.MapStream/1"})
        Traceback (most recent call last):
        ...
        youmu.errors.StateError: not a BalancedLoader state: ... saved by youmu.MapStream/1, not a ...
        """
        can_restore = self.resume_mode != "replay" and self._stateful
        merged = is_merged(state)
        if merged:
            resume = parse_merged(state, settings=self._portable, names=self._names, rank=self.rank,
                                  world_size=self.world_size, can_restore=can_restore)
        else:
            resume = parse_state(
                state, world_size=self.world_size, rank=self.rank, num_microbatches=self.num_microbatches,
                config=self.config_fingerprint(), can_restore=can_restore, resume_mode=self.resume_mode,
                names=self._names,
            )
        epoch = state_int(state, "epoch", owner="BalancedLoader") if state.get("epoch") is not None else None
        self.close()  # a pass in progress ends: the state is where the next one starts
        self._snapshots = self._fresh_snapshots()
        # the sources load their states when iteration starts, once every rank has
        # agreed to restore (if one cannot, all replay over the untouched sources)
        step, mb = resume.step, resume.microbatch
        at = (step, mb) if (step, mb) != (0, 0) or resume.restored is not None else None
        self._pass.load(Loaded(at, resume.restored, dict(state), merged), epoch=epoch, step=step, microbatch=mb)
        if epoch is not None:
            self._epoch_due = True  # the sources read the state's epoch (replayed, or restored after it)

    def config_fingerprint(self) -> int:
        """63-bit hash of the settings that decide the plans (batch size or token
        budget, capacity, micro-batches, schedule, cost model, balancing method and
        placement, seed, ``drop_last``, sources, world size). A state saved under
        other settings would silently change every later plan, so
        :meth:`load_state_dict` refuses it, and the ranks compare it when they start.

        >>> from youmu.planning import BalancedLoader
        >>> a = BalancedLoader([], num_microbatches=1, global_batch_size=4).config_fingerprint()
        >>> a == BalancedLoader([], num_microbatches=1, global_batch_size=8).config_fingerprint()
        False
        """
        return self._fingerprint
