"""Calls to :mod:`youmu.ray`'s actors: one deadline per call, failover to a standby,
and typed errors instead of hangs.

Every method of a source loader and of the step planner is a pure function of its
arguments (positions, steps, states), so a call may be repeated anywhere — on the
same actor after Ray restarts it (``max_task_retries=-1`` resubmits it there), or on a
standby replica — and returns the same result. That is the whole failover story:

* a call waits at most ``timeout`` seconds (a restart included); then it raises
  :class:`~youmu.errors.LoaderUnavailableError` naming the actor — never a hang;
* an actor killed for good (``ActorDiedError``) fails over to its standby, or raises
  at once when it has none;
* with a standby (MegaScale-Data, §6.1: "Shadow Loaders" promoted on failure), a call
  the current replica has not answered within ``hedge_after`` seconds is sent to the
  other replica too and the first answer wins — a killed loader's restart stall is
  hidden without detecting the failure first;
* an actor that hangs (a call past its deadline still unanswered) fails the next
  calls at once instead of making every caller wait out a timeout of its own;
* an error raised by the method itself (a transform's bug, a plan that cannot be
  made) is raised again in the caller as itself, not as a Ray wrapper.

:class:`Actor` also wraps plain Python objects ("local" actors: calls run at once in
the caller), so the whole disaggregated path runs in one process for tests and
examples.

Example:
    >>> class Echo:
    ...     def twice(self, x):
    ...         return 2 * x
    >>> echo = Actor.local("demo.echo", Echo(), kind="source loader")
    >>> echo.call("twice", 21, timeout=1.0)
    42
    >>> [c.result() for c in (echo.submit("twice", k, timeout=1.0) for k in range(3))]
    [0, 2, 4]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ray
from ray import exceptions as rex

from youmu._internal.args import float_arg
from youmu.errors import LoaderError, LoaderUnavailableError

__all__ = ["Actor", "Call", "gather", "reraise_remote"]

# how long to wait before resubmitting a call that failed because its actor was
# restarting (Ray normally resubmits by itself; this covers errors that slip through)
_RETRY_PAUSE = 0.05


class _Done:
    """The outcome of a call to a local actor (run at once)."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


def reraise_remote(e: BaseException, actor: str) -> BaseException:
    """The exception a caller should see for ``e``, raised by a call to ``actor``:
    a method's own error unwrapped from Ray's ``RayTaskError`` (youmu's typed errors
    stay typed across processes), anything else as a :class:`LoaderError`."""
    if isinstance(e, rex.RayTaskError):
        cause = getattr(e, "cause", None)
        if isinstance(cause, BaseException) and not isinstance(cause, rex.RayTaskError):
            add_note = getattr(cause, "add_note", None)  # Python >= 3.11
            if add_note is not None:
                add_note(f"(raised in {actor}; remote traceback:\n{getattr(e, 'traceback_str', '')})")
            return cause
        return LoaderError(f"{actor} raised: {e}")
    return e


class Actor:
    """One logical actor and its replicas: the primary, and a standby if any (or a
    plain object, see :meth:`local`).

    Replicas are named Ray actors, looked up by name in each process that calls them
    (so an ``Actor`` pickles to a few strings, and no actor's constructor arguments
    hold another's handle: Ray could not restart it once those arguments went out of
    scope).

    Args:
        name: the actor's name (errors name it).
        replicas: the replicas' actor names (or handles), the primary first.
        kind: what it is, for messages (``"source loader"``, ``"step planner"``).
        namespace: the replicas' Ray namespace.
        hedge_after: with two replicas, seconds before an unanswered call is also sent
            to the other one.
    """

    def __init__(self, name: str, replicas: Sequence[Any], *, kind: str, namespace: str | None = None,
                 hedge_after: float = 0.5) -> None:
        if not replicas:
            raise LoaderError(f"{kind} {name!r} has no replica")
        self.name = name
        self.kind = kind
        self.namespace = namespace
        self.hedge_after = float_arg("hedge_after", hedge_after, positive=True)
        self.is_local = False
        self.replica_names = [r if isinstance(r, str) else f"{name}#{k}" for k, r in enumerate(replicas)]
        self._handles: list[Any] = [None if isinstance(r, str) else r for r in replicas]
        #: the replica that answered last (calls go there first)
        self.current = 0
        # replicas killed for good (ActorDiedError): never tried again
        self._dead: set[int] = set()
        # a call that outlived its deadline unanswered, and since when: the actor hangs
        self._stuck: tuple[list[Any], float] | None = None

    @classmethod
    def local(cls, name: str, obj: Any, *, kind: str) -> Actor:
        """A plain object in this process standing in for an actor."""
        a = cls(name, [obj], kind=kind)
        a.is_local = True
        return a

    def attach(self, handles: Sequence[Any]) -> Actor:
        """Use these handles of the replicas (the process that created them has them)."""
        self._handles = list(handles)
        return self

    @property
    def replicas(self) -> list[Any]:
        """The replicas' handles (looked up by name on first use)."""
        return [self._handle(k) for k in range(len(self._handles))]

    def _handle(self, k: int) -> Any:
        h = self._handles[k]
        if h is None:
            try:
                h = ray.get_actor(self.replica_names[k], namespace=self.namespace)
            except ValueError:
                self._dead.add(k)  # no such actor: killed for good, or never started
                raise LoaderUnavailableError(f"{self.kind} {self.replica_names[k]!r} does not exist (killed for good, "
                                             f"or never started in namespace {self.namespace!r})",
                                             actor=self.name) from None
            self._handles[k] = h
        return h

    def __getstate__(self) -> dict[str, Any]:
        # names travel (to the planner actor, to rank processes); handles and call
        # bookkeeping are this process's
        if self.is_local:
            raise LoaderError(f"local {self.kind} {self.name!r} cannot leave its process")
        return {"name": self.name, "kind": self.kind, "replicas": self.replica_names, "namespace": self.namespace,
                "hedge_after": self.hedge_after}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__init__(st["name"], st["replicas"], kind=st["kind"], namespace=st["namespace"],  # type: ignore[misc]
                      hedge_after=st["hedge_after"])

    def __repr__(self) -> str:
        return f"Actor({self.kind} {self.name!r}, {len(self._handles)} replica(s))"

    # -- calls ------------------------------------------------------------------------------
    def _send(self, replica: int, method: str, args: tuple[Any, ...]) -> Any:
        if self.is_local:
            try:
                return _Done(getattr(self._handles[replica], method)(*args))
            except BaseException as e:  # noqa: BLE001 - handed to result(), as Ray would
                return _Done(error=e)
        try:
            target = self._handle(replica)
        except LoaderUnavailableError as e:
            return _Done(error=e)
        return getattr(target, method).remote(*args)

    def submit(self, method: str, *args: Any, timeout: float) -> Call:
        """Start ``method(*args)``; :meth:`Call.result` waits for it."""
        self._check_not_stuck()
        return Call(self, method, args, timeout)

    def call(self, method: str, *args: Any, timeout: float) -> Any:
        """``method(*args)``, waited for."""
        return self.submit(method, *args, timeout=timeout).result()

    def _check_not_stuck(self) -> None:
        if self._stuck is None:
            return
        refs, since = self._stuck
        ready, _ = ray.wait(refs, num_returns=1, timeout=0)
        if ready:
            self._stuck = None  # it answered after all: it is back
            return
        raise LoaderUnavailableError(
            f"{self.kind} {self.name!r} has not answered a call for {time.monotonic() - since:.1f} s "
            "(it hangs, or its restart cannot be scheduled)", actor=self.name)

    def _alive(self) -> list[int]:
        return [k for k in range(len(self._handles)) if k not in self._dead]


class Call:
    """A call in flight to an :class:`Actor` (see the module doc)."""

    def __init__(self, actor: Actor, method: str, args: tuple[Any, ...], timeout: float) -> None:
        self.actor, self.method, self.args = actor, method, args
        self.timeout = float(timeout)
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout
        first = actor.current if actor.current not in actor._dead else (actor._alive() or [0])[0]
        # (replica, ref or _Done) of every attempt still in flight
        self.attempts: list[tuple[int, Any]] = [(first, actor._send(first, method, args))]
        self.hedged = False

    def _unavailable(self, why: str) -> LoaderUnavailableError:
        a = self.actor
        return LoaderUnavailableError(f"{a.kind} {a.name!r} {why} (call {self.method}, timeout {self.timeout:g} s)",
                                      actor=a.name)

    def result(self) -> Any:
        """The call's result, from whichever replica answers first; raises
        :class:`~youmu.errors.LoaderUnavailableError` at the deadline, or the method's
        own error."""
        a = self.actor
        if a.is_local:
            done = self.attempts[0][1]
            if done.error is not None:
                raise done.error
            return done.value
        while True:
            now = time.monotonic()
            if not self.attempts:
                alive = a._alive()
                if not alive:
                    raise self._unavailable("died and cannot restart")
                if now >= self.deadline:
                    raise self._unavailable("did not come back in time")
                time.sleep(_RETRY_PAUSE)
                k = alive[0] if a.current not in alive else a.current
                self.attempts.append((k, a._send(k, self.method, self.args)))
                continue
            wait_until = self.deadline
            others = [k for k in a._alive() if k not in {r for r, _ in self.attempts}]
            if others and not self.hedged:
                wait_until = min(wait_until, self.started + a.hedge_after)
            failed = [(r, x) for r, x in self.attempts if isinstance(x, _Done)]
            if failed:  # the replica could not even be looked up: it is gone for good
                a._dead.update(r for r, _ in failed)
                self.attempts = [(r, x) for r, x in self.attempts if not isinstance(x, _Done)]
                if not self.attempts and not a._alive():
                    raise failed[0][1].error  # type: ignore[misc]
                continue
            refs = [ref for _, ref in self.attempts]
            ready, _ = ray.wait(refs, num_returns=1, timeout=max(wait_until - now, 0.0))
            if ready:
                k = next(r for r, ref in self.attempts if ref == ready[0])
                try:
                    value = ray.get(ready[0], timeout=max(self.deadline - time.monotonic(), 0.0) + 1.0)
                except rex.RayTaskError as e:
                    raise reraise_remote(e, a.name) from None
                except rex.ActorDiedError:
                    a._dead.add(k)  # killed for good: never again (a restartable actor is retried by Ray)
                    self.attempts = [(r, ref) for r, ref in self.attempts if r != k]
                    continue
                except (rex.RayError, rex.GetTimeoutError):
                    # restarting, its node lost, the result's object lost: ask again
                    self.attempts = [(r, ref) for r, ref in self.attempts if ref != ready[0]]
                    continue
                a.current = k
                return value
            now = time.monotonic()
            if now >= self.deadline:
                a._stuck = (refs, self.started)
                raise self._unavailable("did not answer in time")
            if others and not self.hedged:
                # MegaScale-Data §6.1 promotes a shadow loader on failure; pure calls let us
                # simply ask the standby too and take the first answer
                self.hedged = True
                self.attempts.append((others[0], a._send(others[0], self.method, self.args)))


def gather(calls: Sequence[Call]) -> list[Any]:
    """Every call's result, in order (each under its own deadline)."""
    return [c.result() for c in calls]
