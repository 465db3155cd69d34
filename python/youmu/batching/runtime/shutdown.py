"""Interpreter exit with loader epochs still running: bounded, and never a C++ abort.

Every epoch that starts an aligner thread registers here. At exit, :func:`drain_at_exit`
(an ``atexit`` hook) gives the live epochs a bounded chance to finish, closes what is
left, and then makes sure that no thread of theirs is still running when the
interpreter finalises.

Why the last part matters: a daemon thread that returns from a native call which
released the GIL (a torch op, a Gloo call, a tokenizer) while the interpreter is
finalising is killed as it re-acquires the GIL, inside a C++ ``noexcept`` frame, and
the process aborts with "terminate called without an active exception". Such windows
are short, but a thread that the operating system does not schedule for a few seconds
(a loaded machine) can sit in one for as long as it is not scheduled. So the hook does
not return while a thread is merely *running*: each aligner must have ended or be
parked inside a collective (:func:`~youmu.distributed.abandon_collectives`), where it waits
in Python for good; each fetcher thread must have ended. Only a thread that does not
get there within :data:`SETTLE_LIMIT_S` (user code that hangs) is left behind, with a
warning.

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

from youmu.distributed.channel import abandon_collectives

__all__ = ["ExitParticipant", "register", "drain_at_exit", "SETTLE_LIMIT_S"]

log = logging.getLogger("youmu.batching")

#: The longest the hook waits for threads still running local code (a collate, a
#: source read, a thread the OS has not scheduled) to end or park, after their peers
#: were given up on.
SETTLE_LIMIT_S = 60.0
# How often the hook looks at threads it waits for.
_POLL_S = 0.01


class ExitParticipant(Protocol):
    """What the exit hook needs of an epoch (``youmu.batching.runtime.epoch.EpochIterator``)."""

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

    def stop_fetching(self) -> threading.Thread | None:
        """Ask the fetcher thread to end at its next item; the thread (None if none)."""
        ...


_LIVE: weakref.WeakSet[ExitParticipant] = weakref.WeakSet()


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
    3. Give up on peers that do not answer: abandon the collectives, so an aligner
       waiting on one parks instead of returning into the finalising interpreter.
    4. Wait until every aligner has ended or parked and every fetcher has ended (see
       the module doc), up to :data:`SETTLE_LIMIT_S`.
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
                log.warning(
                    "youmu.batching: at exit, %d loader iteration(s) still waited for peers and were abandoned",
                    len(stuck),
                )
        _settle([e for e in list(_LIVE)])
    except Exception:  # noqa: BLE001 - never fail interpreter shutdown
        pass


def _settle(epochs: list[ExitParticipant]) -> None:
    """Step 4: no thread of ours may still be running when the interpreter finalises."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    fetchers = [t for t in (e.stop_fetching() for e in epochs) if t is not None]
    while time.monotonic() < deadline:
        if all(_settled(e) for e in epochs) and not any(t.is_alive() for t in fetchers):
            return
        time.sleep(_POLL_S)
    left = [t.name for t in fetchers if t.is_alive()] + [e.aligner_thread.name for e in epochs if not _settled(e)]
    log.warning("youmu.batching: at exit, thread(s) %s did not stop within %.0fs", left, SETTLE_LIMIT_S)
