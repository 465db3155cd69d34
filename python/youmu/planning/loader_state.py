"""A :class:`~youmu.planning.BalancedLoader`'s side of youmu's stream contract
(:mod:`youmu.stateful`): epochs (``set_epoch``), where the trainer is
(``state_dict``) and where the next pass starts (``load_state_dict``: a rank's own
state, :mod:`youmu.planning.checkpoint`, or a state of every rank merged for another
topology, :mod:`youmu.planning.merge`). The loader's steps are in
:mod:`youmu.planning.balanced_loader`; this mixin holds what it keeps between them.

Example:
    >>> from youmu.planning import BalancedLoader
    >>> loader = BalancedLoader([{"input_ids": [1]}], num_microbatches=1, global_batch_size=1, prefetch=0)
    >>> isinstance(loader, LoaderState), loader.state_dict()["step"]
    (True, 0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from youmu.errors import LoaderError
from youmu.jobstates import is_merged
from youmu.passes import ClosingLoader
from youmu.planning.checkpoint import STATE_FORMAT, Snapshots, parse_state, start_snapshot
from youmu.planning.merge import parse_merged
from youmu.stateful import check_epoch, keeps_resume_point

__all__ = ["LoaderState"]


class LoaderState(ClosingLoader):
    """The stream contract of :class:`~youmu.planning.BalancedLoader` (a mixin: the
    loader sets these attributes in its constructor)."""

    rank: int
    world_size: int
    num_microbatches: int
    resume_mode: str
    step: int
    epoch: int
    _names: list[str]
    _sources: dict[str, Any]
    _portable: dict[str, Any]
    _fingerprint: int
    _stateful: bool
    _iterating: bool
    _pass_epoch: int
    _epoch_due: bool
    _snapshots: Snapshots
    _delivered: tuple[int, int]
    _resume: tuple[int, int] | None
    _restored: dict[str, Any] | None
    _loaded_state: dict[str, Any] | None
    _merged: bool


    def _reset_pass(self) -> None:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` from the next pass on (youmu.stateful's loader contract): it is
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
        epoch = check_epoch(epoch)
        loaded = self._loaded_state if not self._iterating else None
        if loaded is not None and not keeps_resume_point(loaded.get("epoch"), epoch):
            self._reset_pass()
        self.epoch = epoch
        if self._iterating:
            self._epoch_due = True  # a pass in progress reads its sources at its own epoch
        else:
            self._forward_epoch(epoch)

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
        Payloads are the samples themselves: :mod:`youmu.statefile` writes them as data
        (numpy arrays and tensors by dtype, shape and bytes), never as a pickle.

        >>> from youmu.planning import BalancedLoader
        >>> BalancedLoader([{"input_ids": [1]}], num_microbatches=1, global_batch_size=1).state_dict()["mode"]
        'replay'
        """
        if self._loaded_state is not None and not self._iterating:
            return dict(self._loaded_state)  # loaded, not yet resumed: the same point
        step, mb = self._delivered
        state: dict[str, Any] = {
            "format": STATE_FORMAT, "mode": "replay", "world_size": self.world_size, "rank": self.rank,
            "epoch": self._pass_epoch if self._iterating else self.epoch,
            "num_microbatches": self.num_microbatches, "config": self.config_fingerprint(),
            "settings": self._portable, "step": step, "microbatch": mb,
        }
        snap: dict[str, Any] | None = None
        snapshots = self._snapshots
        if snapshots.enabled:
            snap = snapshots.get(step)
            if snap is None and not self._iterating:
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
        return state

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
        self.close()  # a pass in progress ends: the state is where the next one starts
        self._reset_pass()
        # the sources load their states when iteration starts, once every rank has
        # agreed to restore (if one cannot, all replay over the untouched sources)
        self._restored = resume.restored
        step, mb = resume.step, resume.microbatch
        self._resume = (step, mb) if (step, mb) != (0, 0) or resume.restored is not None else None
        self._delivered = (step, mb)
        self._loaded_state = dict(state)
        self._merged = merged
        self.step = step
        self._iterating = False

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
