"""Which Gloo channel a ``TrainerLoader`` runs its collectives on (step agreement of
unsized streams, batch counts, the checkpoint's gather of every rank's state).

A loader that runs collectives in a background thread cannot share its channel with the
trainer's main thread: two threads' all-gathers on one Gloo group pair up differently on
different ranks.

Example:
    >>> default_channel().world_size          # no torch.distributed job: one rank
    1
"""

from __future__ import annotations

from typing import Any

from youmu.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["channel_arg", "default_channel", "pairs_channel", "stream_channel"]


def default_channel() -> Any:
    """A Gloo channel over the default group when torch.distributed runs (collective)."""
    import torch.distributed as dist

    from youmu.distributed.channel import GlooChannel

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return GlooChannel.from_default_group()
    return GlooChannel.local()


def channel_arg(channel: Any) -> Any:
    """``channel`` when it is ``None`` or a youmu ``GlooChannel`` (a backend's name such as
    ``"gloo"`` is not one), else :class:`~youmu.errors.ArgumentTypeError`."""
    from youmu.distributed.channel import GlooChannel

    if channel is not None and not isinstance(channel, GlooChannel):
        raise ArgumentTypeError(f"channel must be a youmu.distributed.GlooChannel or None (build one with "
                                f"GlooChannel.from_process_group), got {type(channel).__name__} {channel!r:.40}")
    return channel


def stream_channel(channel: Any) -> Any:
    """The channel of a ``TrainerLoader`` over a stream: ``channel`` (checked), else the
    default group's."""
    return channel_arg(channel) if channel is not None else default_channel()


def pairs_channel(source: Any, channel: Any) -> Any:
    """The channel of a ``TrainerLoader`` over a loader of (batch, info) pairs.

    A loader that runs its collectives in a background thread (``BalancedLoader`` with
    ``prefetch > 0`` plans its steps ahead) cannot share its channel: the trainer's
    checkpoint gathers every rank's state from the main thread, and two threads' all-gathers
    on one Gloo group pair up differently on different ranks (a size message matched
    against a payload: "Received data size doesn't match expected size", and Gloo aborts
    the process). ``DynamicBatchLoader``'s aligner is such a thread
    (``collectives_in_background``). Such a loader's ``TrainerLoader`` gets ``channel``
    when it is another one, else a new group over the default one. A loader that
    communicates only in the caller's thread (``BalancedLoader`` with ``prefetch=0``)
    shares its own; one without a channel (a Ray client: its peers meet in the planner)
    uses ``channel`` or the default group's."""
    channel_arg(channel)
    own = getattr(source, "channel", None)
    if own is None:
        return channel if channel is not None else default_channel()
    if not (getattr(source, "prefetch", 0) or getattr(source, "collectives_in_background", False)):
        return own
    if channel is not None and channel is not own:
        return channel
    fresh = default_channel()
    if fresh.world_size != own.world_size:
        raise InvalidArgumentError(
            f"{type(source).__name__} plans steps in a background thread on its channel ({own.world_size} ranks), so "
            "the TrainerLoader needs a channel of its own over the same ranks: pass channel= (another Gloo group "
            "than the loader's; on a DeviceMesh, a second youmu.integrations.mesh.data_parallel(mesh)'s channel)"
        )
    return fresh
