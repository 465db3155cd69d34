"""What the ranks of a :class:`~youmu.planning.balanced_loader.BalancedLoader` say to each other
every step, over the loader's :class:`~youmu.distributed.GlooChannel`.

1. **Status and metadata** (:meth:`StepExchange.gather`): one variable-length
   all-gather (:func:`youmu.distributed.all_gather_varlen`) of ``[status, metadata...]``
   per rank — the status is ``OK``, ``EXHAUSTED`` (a stream ran short), ``FAILED``
   (reading its data raised) or ``CLOSED`` (its trainer stopped iterating); the
   metadata is the rank's candidates (:meth:`~youmu.planning.engine.meta.SampleMeta.encode`).
   A rank that fails or stops sends its status with no metadata as its last word
   (:meth:`StepExchange.announce`), so its peers raise
   :class:`~youmu.errors.RankFailedError` or :class:`~youmu.errors.PeerClosedError`
   at once instead of waiting for the collective timeout.
2. **Samples** (:meth:`StepExchange.move_samples`): the payloads the plan moves to
   another rank, one :func:`youmu.distributed.all_gather_bytes` per step (only when the
   plan moves anything — a decision every rank makes alike). Each rank sends one
   pickle per destination behind a small index, and receivers unpickle only the
   segments addressed to them.
3. **Images** (:meth:`StepExchange.move_images`), with MegaScale-Data's hybrid balance
   only: the image payloads to the rank that encodes them, the same way.

Every rank makes the same collectives in the same order; the plan is a pure function
of what was gathered, so the ranks never need to agree on anything else.

Example:
    >>> from youmu.distributed import GlooChannel
    >>> ex = StepExchange(GlooChannel.local())
    >>> [(status, vec.tolist()) for status, vec in ex.gather(OK, [2, 0, 5, 6])]
    [(0, [2, 0, 5, 6])]
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from youmu.distributed import all_gather_bytes, all_gather_varlen
from youmu.distributed.status import CLOSED, FAILED, raise_for_stopped_peers
from youmu.errors import ProtocolError

__all__ = ["OK", "EXHAUSTED", "StepExchange"]

# the first word of every rank's per-step message
# FAILED and CLOSED are the codes every youmu loader protocol shares (youmu.distributed.status)
OK, EXHAUSTED = 0, -1
_STATUSES = (OK, EXHAUSTED, FAILED, CLOSED)
_NO_STATUS = -(2**62)


class StepExchange:
    """One iteration's per-step protocol on ``channel`` (see the module doc).

    ``announce`` sends at most one last word per iteration: a producer thread that is
    stopped and the generator it drops may both try to say ``CLOSED``, and a second
    message would be a collective no peer ever joins.
    """

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.rank = channel.rank
        self.world_size = channel.world_size
        self.said_last_word = False

    # -- status and metadata ------------------------------------------------------------------
    def gather(self, status: int, meta: Sequence[int] | np.ndarray = ()) -> list[tuple[int, np.ndarray]]:
        """Every rank's ``(status, metadata vector)``, in rank order; raises when a
        peer failed or closed (after the collective, so every rank made it)."""
        body = np.asarray(meta, dtype=np.int64).reshape(-1)
        vec = np.empty(body.size + 1, dtype=np.int64)
        vec[0] = status
        vec[1:] = body
        rows = all_gather_varlen(self.channel, vec)
        # an empty message carries no status at all: never one of ours
        out = [(int(r[0]) if r.size else _NO_STATUS, r[1:]) for r in rows]
        bad = [k for k, (s, _) in enumerate(out) if s not in _STATUSES]
        if bad:
            raise ProtocolError(f"rank(s) {bad} sent a step status that is not one of {_STATUSES}: "
                                f"{[out[k][0] for k in bad]} (do all ranks run the same youmu version?)")
        self.check_peers([s for s, _ in out])
        return out

    def check_peers(self, statuses: Sequence[int]) -> None:
        raise_for_stopped_peers(statuses, loader="BalancedLoader")

    def announce(self, status: int) -> None:
        """This rank's last word (``FAILED`` or ``CLOSED``), in the place of its next
        status message; at most once per iteration."""
        if self.said_last_word:
            return
        self.said_last_word = True
        vec = np.array([status], dtype=np.int64)
        all_gather_varlen(self.channel, vec)

    # -- samples ----------------------------------------------------------------------------------
    def move_samples(self, plan: Any, held: Mapping[int, Any]) -> dict[int, Any]:
        """Payloads this rank needs from the others, by sample id (``held``: this
        rank's payloads by id). Every rank calls it for the same steps."""
        meta = plan.meta
        mine = meta.origin == self.rank
        moving = (plan.buckets >= 0) & (plan.buckets != meta.origin)
        if not moving.any():
            return {}
        outgoing = mine & moving
        sends = {int(d): [(int(i), held[int(i)]) for i in meta.ids[outgoing & (plan.buckets == d)]]
                 for d in np.unique(plan.buckets[outgoing]).tolist()}
        return self._send(sends)

    def move_images(self, plan: Any, held: Mapping[tuple[int, int], Any]) -> dict[tuple[int, int], Any]:
        """With a hybrid plan (:attr:`~youmu.planning.engine.planner.StepPlan.image_ranks`): the
        image payloads this rank encodes that were read on another rank, by ``(sample
        id, image index)`` (``held``: this rank's placed images by that key). Every rank
        calls it for the same steps."""
        meta, ranks = plan.meta, plan.image_ranks
        p, o = meta.image_csr()
        owner = np.repeat(np.arange(len(meta)), np.diff(o))
        origin = meta.origin[owner]
        moving = (ranks >= 0) & (ranks != origin)
        if not moving.any():
            return {}
        outgoing = moving & (origin == self.rank)
        k = np.arange(p.size) - o[owner]
        sends: dict[int, list[tuple[Any, Any]]] = {}
        for x in np.nonzero(outgoing)[0].tolist():
            key = (int(meta.ids[owner[x]]), int(k[x]))
            sends.setdefault(int(ranks[x]), []).append((key, held[key]))
        return self._send(sends)

    def _send(self, sends: Mapping[int, list[tuple[Any, Any]]]) -> dict[Any, Any]:
        """One all-gather of ``{destination rank: [(key, payload), ...]}`` from every
        rank: per destination one pickle behind a small index, so receivers unpickle
        only the segments addressed to them."""
        index: list[int] = []
        bodies: list[bytes] = []
        for dest in sorted(sends):
            blob = pickle.dumps(sends[dest], protocol=5)
            index += [dest, len(blob)]
            bodies.append(blob)
        head = np.array([len(bodies)] + index, dtype=np.int64).tobytes()
        got: dict[Any, Any] = {}
        for k, message in enumerate(all_gather_bytes(self.channel, head + b"".join(bodies))):
            if k == self.rank:
                continue
            nseg = int(np.frombuffer(message[:8], dtype=np.int64)[0])
            segs = np.frombuffer(message[8: 8 + 16 * nseg], dtype=np.int64).reshape(nseg, 2).tolist()
            pos = 8 + 16 * nseg
            for dest, length in segs:
                if dest == self.rank:
                    got.update(pickle.loads(message[pos: pos + length]))
                pos += length
        return got
