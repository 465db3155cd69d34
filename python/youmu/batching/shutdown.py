"""Interpreter exit with loader epochs still running: bounded, and never a C++ abort.

Every epoch that starts an aligner thread registers here. At exit, :func:`drain_at_exit`
(an ``atexit`` hook) gives the live epochs a bounded chance to finish, closes what is
left, and parks any thread still waiting on a peer.

Why the last part matters: a daemon thread that returns from a collective while the
interpreter is finalising is killed as it re-acquires the GIL, inside a C++
``noexcept`` frame, and the process aborts with "terminate called without an active
exception". Aligners still waiting on a peer are parked for good
(:func:`~youmu.dist.abandon_collectives`).

Example:
    >>> drain_at_exit()          # nothing live: returns at once
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Protocol

from youmu.dist.channel import abandon_collectives

__all__ = ["ExitParticipant", "register", "drain_at_exit"]

log = logging.getLogger("youmu.batching")

# How long the exit hook waits for abandoned collectives to park (they poll every <= 2 ms).
_PARK_WAIT_S = 2.0
# How often the hook looks at threads it waits for.
_POLL_S = 0.01


class ExitParticipant(Protocol):
    """What the exit hook needs of an epoch (``youmu.batching.epoch.EpochIterator``)."""

    @property
    def aligner_thread(self) -> threading.Thread: ...

    @property
    def timeout(self) -> float: ...

    @property
    def heartbeat(self) -> float: ...

    @property
    def parked(self) -> threading.Event: ...

    def serving_peers(self) -> bool:
        """This rank's data is done and its aligner only serves its peers' last rounds."""
        ...

    def leave(self) -> None:
        """Close at the next round, even in join mode's tail."""
        ...



_LIVE: "weakref.WeakSet[ExitParticipant]" = weakref.WeakSet()


def register(epoch: ExitParticipant) -> None:
    """Put a started epoch under the exit hook's care (held weakly)."""
    _LIVE.add(epoch)


def close_grace(epoch: ExitParticipant) -> float:
    """How long a closing aligner may take at exit: one close round needs every peer's
    aligner to answer, which a live peer does within about a heartbeat; a peer that
    does not answer in this time is not going to help by waiting for the full timeout."""
    return min(epoch.timeout, max(10.0, 20 * epoch.heartbeat))


def _settled(epoch: ExitParticipant) -> bool:
    t = epoch.aligner_thread
    return not t.is_alive() or epoch.parked.is_set()


@atexit.register
def drain_at_exit() -> None:
    """Shut every live epoch down before the interpreter finalises.

    1. A rank whose own data ended may still owe its peers the last rounds (join mode):
       wait for that, up to the loader's ``timeout`` (``loader.wait_finished()`` waits
       without a bound).
    2. Close whatever still runs (an abandoned loop, a tail that outlived step 1); the
       peers learn it at the next round and raise ``PeerClosedError`` if they wanted
       more, instead of seeing a connection reset.
    3. Park aligners still blocked on a peer that does not answer, so none returns from
       a collective into the finalising interpreter (a C++ abort).
    """
    try:
        live = [e for e in list(_LIVE) if e.aligner_thread.is_alive()]
        if live:
            t0 = time.monotonic()
            for e in live:
                if e.serving_peers():
                    e.aligner_thread.join(max(t0 + e.timeout - time.monotonic(), 0.0))
            running = [e for e in live if e.aligner_thread.is_alive()]
            for e in running:
                e.leave()
            t1 = time.monotonic()
            for e in running:
                e.aligner_thread.join(max(t1 + close_grace(e) - time.monotonic(), 0.0))
            stuck = [e for e in running if e.aligner_thread.is_alive()]
            if stuck:
                abandon_collectives()
                deadline = time.monotonic() + _PARK_WAIT_S
                while time.monotonic() < deadline and not all(_settled(e) for e in stuck):
                    time.sleep(_POLL_S)
                log.warning(
                    "youmu.batching: at exit, %d loader iteration(s) still waited for peers and were abandoned",
                    len(stuck),
                )
    except Exception:  # noqa: BLE001 - never fail interpreter shutdown
        pass
