"""Disaggregated source loaders on Ray, in the manner of MegaScale-Data: each data
source's loader runs **once**, as an actor (pinned by Ray resources, e.g. to CPU
nodes), instead of once per source × DataLoader worker × rank inside the training
processes; one planner actor decides each step's global batch (mixing, cost models,
balancing over ranks × micro-batches); every training rank's client fetches only its
own micro-batches. The optional extra ``youmu[ray]``; nothing else in youmu imports
Ray.

* :class:`RayLoaders` — starts (or connects to) a deployment and gives each rank its
  client (``deploy``);
* :class:`Source` — one source as a loader opens it (a ``YoumuDataset``'s arguments,
  or a stream function); :class:`SourceLoader` — the loader actor (``loader``);
* :class:`StepPlanner`, :class:`PlannerState` — the planner actor and the few integers
  it resumes from (``planner``);
* :class:`RayBalancedLoader` — the per-rank client: the ``(batch, MicroBatchInfo)``
  sequence of :class:`youmu.planning.BalancedLoader`, prefetched on a background
  thread, resumable from ``state_dict()`` (``client``).

**Same stream as in process.** For the same seed, sources, schedule and balancing, a
deployment yields on every rank exactly the samples, order and micro-batch
assignment (and every ``MicroBatchInfo`` field) of ``BalancedLoader`` over each rank's
``YoumuDataset(..., rank=r, world_size=W)`` of every source: the planner runs
youmu.planning's own reader, planner and assembler over the loaders' metadata.

**Failover.** What a loader reads at step ``s`` is a pure function of (seed, step,
schedule, index), so no actor has state worth saving: loaders restart and rebuild
their indexes (Ray resubmits the interrupted call, which returns what the first
attempt would have); a restarted planner resumes from the state the clients hand it
(the step, stream positions, a few carried references). Killing any actor mid-epoch
leaves the delivered stream bit-identical; one that cannot come back within
``timeout`` is a :class:`~youmu.errors.LoaderUnavailableError` on every rank. With
``standby=True`` each loader has a hot replica that answers while it restarts.

Example (in one process with ``local=True``; after ``ray.init(...)`` drop it and the
same code runs on actors):
    >>> from youmu.planning import BalancedLoader
    >>> from youmu.ray import RayLoaders, Source
    >>> from youmu.mixture.mapstream import MapStream
    >>> data = {"web": [{"input_ids": [1] * (i % 9 + 1)} for i in range(40)],
    ...         "code": [{"input_ids": [2] * (i % 4 + 2)} for i in range(40)]}
    >>> stream = lambda name: (lambda rank, world_size: MapStream(data[name], rank=rank, world_size=world_size))
    >>> settings = dict(num_microbatches=2, global_batch_size=6, schedule={"web": 2, "code": 1}, capacity=16,
    ...                 cost="llama-12b", drop_last=True)
    >>> ray_path = RayLoaders({n: Source(stream=stream(n)) for n in data}, world_size=1, local=True, **settings)
    >>> in_process = BalancedLoader({n: stream(n)(0, 1) for n in data}, prefetch=0, **settings)
    >>> a, b = list(ray_path.client(0, prefetch=0)), list(in_process)
    >>> len(a), a == b
    (20, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from youmu._internal.lazy import lazy_attributes

if TYPE_CHECKING:
    from youmu.ray.client import Deployment, RayBalancedLoader
    from youmu.ray.deploy import RayLoaders
    from youmu.ray.planner_actor import StepPlanner
    from youmu.ray.source import Source
    from youmu.ray.source_actor import SourceLoader
    from youmu.ray.state import PlannerState

# imported on first use: the modules that run actors import Ray, while the state
# formats (youmu.ray.state, youmu.ray.merge) are read without it
_LAZY: dict[str, str] = {
    "Deployment": "youmu.ray.client",
    "PlannerState": "youmu.ray.state",
    "RayBalancedLoader": "youmu.ray.client",
    "RayLoaders": "youmu.ray.deploy",
    "Source": "youmu.ray.source",
    "SourceLoader": "youmu.ray.source_actor",
    "StepPlanner": "youmu.ray.planner_actor",
}

__all__ = ["Deployment", "PlannerState", "RayBalancedLoader", "RayLoaders", "Source", "SourceLoader", "StepPlanner"]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
