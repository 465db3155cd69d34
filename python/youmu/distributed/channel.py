"""A small, explicit Gloo channel for CPU metadata exchange between ranks.

The batching and planning layers exchange a few kilobytes of integers per round or
step. They need their own Gloo group so that these CPU collectives never interleave
with the trainer's NCCL (or Gloo) collectives, and so that they can run in a
background thread while the trainer's main thread is inside a gradient all-reduce.

A :class:`GlooChannel` is created explicitly, never inherited through ``fork``:

* :meth:`GlooChannel.from_default_group`: a new Gloo group over the ranks of an
  initialised default process group (which may be NCCL: the new group reuses its
  store, not its backend). ``torch.distributed.new_group`` is collective, so every
  rank calls this at the same point, in the main process, before DataLoader workers
  start.
* :meth:`GlooChannel.from_tcp_store`: its own rendezvous on a ``TCPStore``
  (``host_store=True`` on exactly one rank), with no default group at all; or
  :meth:`GlooChannel.from_store` over any existing ``torch.distributed.Store``
  (e.g. a client of the trainer's store, under a prefix of its own).
* :meth:`GlooChannel.from_process_group`: wrap a Gloo group you created.

Only public ``torch.distributed`` APIs are used (``new_group``, ``TCPStore``,
``PrefixStore``, ``ProcessGroupGloo``). Every collective has a timeout (the group's):
a rank that dies closes its sockets and its peers fail at once; a rank that hangs makes
its peers fail after ``timeout``. Failures raise :class:`ChannelError` on every rank.

A channel is not thread-safe: one thread uses it at a time (the loader owns one).

Collectives wait by polling ``Work.is_completed()`` (a yield, then a short backoff)
rather than blocking in ``Work.wait()``: a background thread blocked in C++ with the
GIL released, that returns while the interpreter is finalising, is killed in a
``noexcept`` frame (pybind11 re-acquiring the GIL) and the process aborts with
"terminate called without an active exception". Polling keeps the thread in Python,
and :func:`abandon_collectives` (called by the loaders' exit hook) parks any thread
still waiting on a peer, so it never re-enters the interpreter.

Example (two processes, each with its rank)::

    ch = GlooChannel.from_tcp_store("127.0.0.1", 29600, rank, 2, host_store=(rank == 0))
    rows = ch.all_gather_int64([rank, 10 * rank])   # [tensor([0, 0]), tensor([1, 10])]
    ch.close()
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from youmu._internal.args import seconds_arg
from youmu.errors import ArgumentTypeError, ChannelError, InvalidArgumentError

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["GlooChannel", "channel_for", "abandon_collectives", "DEFAULT_TIMEOUT"]

#: Default per-collective timeout in seconds.
DEFAULT_TIMEOUT = 300.0

# Set once, at interpreter exit (see abandon_collectives); never cleared.
_ABANDON = threading.Event()
# Threads parked by _ABANDON wait on this event, which is never set.
_NEVER = threading.Event()
# Waiting for a collective: yield the GIL for this long, then sleep with a backoff up to
# _POLL_MAX. The yield phase keeps a localhost round as fast as a blocking wait (measured
# on 2 cores: ~0.6 ms per all_gather either way); the cap bounds the wake-ups while a
# peer is slow (heartbeat rounds) to ~500/s of a few microseconds each.
_SPIN_S = 5e-4
_POLL_MIN = 5e-5
_POLL_MAX = 2e-3


def abandon_collectives() -> None:
    """Park every thread that is (or starts) waiting on a channel collective, for good.

    For interpreter exit only, after the owners had their bounded chance to finish:
    a parked thread keeps its process group referenced (so no destructor waits for the
    pending collective) and never returns into the finalising interpreter. Peers see
    this process's sockets close when it exits and raise :class:`ChannelError`.
    """
    _ABANDON.set()


def _timedelta(timeout: float | datetime.timedelta) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds_arg("timeout", timeout))


class GlooChannel:
    """All-gathers of int64 vectors over a dedicated Gloo process group.

    Attributes:
        rank, world_size: this process's rank in the channel and the channel size.
        timeout: per-collective timeout.
        collectives, bytes_gathered, seconds: running totals (for metrics).
    """

    def __init__(self, pg: Any, rank: int, world_size: int, timeout: datetime.timedelta, owner: Any = None) -> None:
        self._pg = pg
        self._owner = owner  # keeps a TCPStore (server) alive as long as the channel
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self.collectives = 0
        self.bytes_gathered = 0
        self.seconds = 0.0
        self._closed = False
        self._lease = threading.Lock()
        #: set when a thread parked in a collective of this channel (see abandon_collectives)
        self.parked = threading.Event()

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_default_group(cls, timeout: float | datetime.timedelta = DEFAULT_TIMEOUT) -> GlooChannel:
        """A new Gloo group over all ranks of the initialised default group (collective)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ChannelError("torch.distributed is not initialised; use GlooChannel.from_tcp_store instead")
        td = _timedelta(timeout)
        try:
            pg = dist.new_group(backend="gloo", timeout=td)
        except Exception as e:  # noqa: BLE001 - surfaced with context
            raise ChannelError(f"creating the Gloo group failed: {e}") from e
        return cls(pg, dist.get_rank(), dist.get_world_size(), td)

    @classmethod
    def from_process_group(cls, group: Any, timeout: float | datetime.timedelta = DEFAULT_TIMEOUT) -> GlooChannel:
        """Wrap an existing Gloo process group (``timeout`` is informational: the
        group's own timeout bounds its collectives)."""
        import torch.distributed as dist

        rank = dist.get_rank(group) if _registered(group) else group.rank()
        size = dist.get_world_size(group) if _registered(group) else group.size()
        return cls(group, rank, size, _timedelta(timeout))

    @classmethod
    def from_store(
        cls,
        store: Any,
        rank: int,
        world_size: int,
        *,
        prefix: str = "youmu/batching",
        timeout: float | datetime.timedelta = DEFAULT_TIMEOUT,
    ) -> GlooChannel:
        """A Gloo group rendezvousing through ``store`` under ``prefix``.

        Every rank must use the same store and prefix; use a fresh prefix for every
        channel created on the same store.
        """
        import torch.distributed as dist

        if not 0 <= rank < world_size:
            raise InvalidArgumentError(f"rank {rank} is not in range(world_size={world_size})")
        td = _timedelta(timeout)
        try:
            pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, world_size, td)
        except Exception as e:  # noqa: BLE001
            raise ChannelError(f"Gloo rendezvous under {prefix!r} failed: {e}") from e
        return cls(pg, rank, world_size, td, owner=store)

    @classmethod
    def from_tcp_store(
        cls,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        *,
        host_store: bool = False,
        prefix: str = "youmu/batching",
        timeout: float | datetime.timedelta = DEFAULT_TIMEOUT,
        connect_timeout: float | datetime.timedelta = 60.0,
    ) -> GlooChannel:
        """Rendezvous on a ``TCPStore`` at ``host:port``, independent of any default group.

        Exactly one rank passes ``host_store=True`` (it runs the store server); the
        others connect as clients. To piggyback on the trainer's store (e.g.
        ``MASTER_ADDR:MASTER_PORT`` when rank 0 hosts it), every rank connects with
        ``host_store=False`` and a prefix of its own.
        """
        import torch.distributed as dist

        try:
            store = dist.TCPStore(
                host, int(port), world_size if host_store else None, host_store,
                timeout=_timedelta(connect_timeout), wait_for_workers=False,
            )
        except Exception as e:  # noqa: BLE001
            raise ChannelError(f"connecting to the TCPStore at {host}:{port} failed: {e}") from e
        return cls.from_store(store, rank, world_size, prefix=prefix, timeout=timeout)

    # -- collectives ----------------------------------------------------------------------
    def all_gather_int64(self, values: Sequence[int] | torch.Tensor) -> list[torch.Tensor]:
        """Gather one int64 vector per rank (the same length on every rank).

        Returns the ``world_size`` vectors in rank order. Raises :class:`ChannelError`
        when a peer is gone or the timeout expires.
        """
        import torch

        if self._closed:
            raise ChannelError("the channel is closed")
        t = torch.as_tensor(values, dtype=torch.int64).reshape(-1).contiguous()
        if self.world_size == 1 and self._pg is None:
            return [t.clone()]
        if _ABANDON.is_set():
            raise ChannelError("the interpreter is exiting: no new collectives")
        outs = [torch.empty_like(t) for _ in range(self.world_size)]
        start = time.perf_counter()
        try:
            work = self._pg.allgather([outs], [t])
            self._wait(work)
        except Exception as e:  # noqa: BLE001 - gloo raises RuntimeError for peers lost / timeouts
            raise ChannelError(f"all_gather on rank {self.rank} failed: {e}") from e
        self.seconds += time.perf_counter() - start
        self.collectives += 1
        self.bytes_gathered += t.numel() * 8 * self.world_size
        return outs

    def _wait(self, work: Any) -> None:
        """Wait for ``work`` in Python (see the module doc), then collect its outcome.

        The group's own timeout still bounds the collective: Gloo completes the work
        with an error, which ``wait()`` raises.
        """
        if not work.is_completed():
            spin_until = time.perf_counter() + _SPIN_S
            delay = _POLL_MIN
            while not work.is_completed():
                if _ABANDON.is_set():
                    self.parked.set()
                    _NEVER.wait()  # never returns: the process is exiting
                if time.perf_counter() < spin_until:
                    time.sleep(0)
                else:
                    time.sleep(delay)
                    delay = min(2 * delay, _POLL_MAX)
        work.wait()  # completed: returns at once, or raises the collective's error

    def all_gather_rows(self, values: Sequence[int]) -> list[list[int]]:
        """:meth:`all_gather_int64` returning Python lists.

        >>> GlooChannel.local().all_gather_rows([1, 2])
        [[1, 2]]
        """
        import torch

        return torch.stack(self.all_gather_int64(values)).tolist()

    def barrier(self) -> None:
        """Wait until every rank reaches this point (a one-int all_gather)."""
        self.all_gather_int64([0])

    def lease(self, timeout: float) -> bool:
        """Take exclusive use of the channel (a loader's aligner holds it for a whole
        iteration, so a second iteration on the same channel waits for the first to
        finish its protocol instead of interleaving messages). Returns False on timeout."""
        return self._lease.acquire(timeout=timeout)

    def release_lease(self) -> None:
        self._lease.release()

    def close(self) -> None:
        """Drop the group. Further collectives raise :class:`ChannelError`."""
        self._closed = True
        self._pg = None
        self._owner = None

    @classmethod
    def local(cls) -> GlooChannel:
        """A one-rank channel without a process group (single-process runs)."""
        return cls(None, 0, 1, datetime.timedelta(seconds=DEFAULT_TIMEOUT))  # youmu's own constant: nothing to check

    def __repr__(self) -> str:
        return f"GlooChannel(rank={self.rank}, world_size={self.world_size}, timeout={self.timeout.total_seconds():g}s)"


def _registered(group: Any) -> bool:
    """Whether ``group`` is known to torch.distributed's world (created by new_group)."""
    import torch.distributed as dist

    try:
        dist.get_rank(group)
        return True
    except Exception:  # noqa: BLE001 - a raw ProcessGroupGloo is not registered
        return False


def channel_for(
    group: Any = None, *, timeout: float | datetime.timedelta = DEFAULT_TIMEOUT, name: str = "group"
) -> GlooChannel:
    """The channel a loader exchanges on, from what the user passed as ``name``:

    * a :class:`GlooChannel` — used as it is;
    * a ``torch.distributed`` Gloo process group (or a ``ProcessGroupGloo``) — wrapped
      (:meth:`GlooChannel.from_process_group`);
    * ``None`` — a new Gloo group over the initialised default group (collective: every
      rank creates its loader at the same point), or a one-rank channel when
      ``torch.distributed`` is not initialised (or has one rank).

    >>> channel_for(None).world_size
    1
    """
    if isinstance(group, GlooChannel):
        return group
    if group is not None:
        import torch.distributed as dist

        if not isinstance(group, (dist.ProcessGroup, dist.ProcessGroupGloo)):
            raise ArgumentTypeError(
                f"{name} must be a youmu GlooChannel or a torch.distributed (Gloo) process group, "
                f"got {type(group).__name__}"
            )
        return GlooChannel.from_process_group(group, timeout=timeout)
    try:
        import torch.distributed as dist
    except ImportError:  # torch without distributed support: one process
        return GlooChannel.local()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return GlooChannel.from_default_group(timeout=timeout)
    return GlooChannel.local()
