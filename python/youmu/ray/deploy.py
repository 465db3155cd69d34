"""The front door: :class:`RayLoaders` starts (or finds) a deployment's actors — one
source loader per source (or group of sources), an optional standby for each, and
one step planner — and hands each training rank its client.

Placement is Ray's: ``loader_options`` / ``planner_options`` are passed to
``.options(...)`` of the actors (``resources={"loader": 1}`` pins loaders to nodes
that offer that resource, e.g. CPU nodes — MegaScale-Data, §6.2, runs its planner on
CPU pods and its loaders wherever CPU is idle). Every actor restarts without limit
(``max_restarts=-1``) and Ray resubmits calls interrupted by a restart
(``max_task_retries=-1``); the actors need no CPU reservation (``num_cpus=0``) unless
given one.

Actors are named ``{name}.planner``, ``{name}.loader{k}`` and
``{name}.loader{k}.standby`` in ``namespace``. Constructing ``RayLoaders`` with the same
arguments in several processes (every rank, say) starts them once and connects the
others; a deployment of that name with other settings is refused.
:meth:`RayLoaders.connect` finds a running deployment by name alone.

Example (``local=True`` runs the actors' code in this process, without Ray):
    >>> from youmu.ray import RayLoaders, Source
    >>> from youmu.mixture.mapstream import MapStream
    >>> data = {n: [{"input_ids": [0] * (i % 5 + 1)} for i in range(30)] for n in ("a", "b", "c")}
    >>> loaders = RayLoaders({n: Source(stream=lambda r, w, n=n: MapStream(data[n], rank=r, world_size=w))
    ...                       for n in data}, world_size=2, num_microbatches=2, global_batch_size=6,
    ...                      schedule={"a": 1, "b": 1, "c": 1}, sources_per_loader=2, local=True)
    >>> loaders.loader_names, loaders.planner_name
    (['youmu.loader0', 'youmu.loader1'], 'youmu.planner')
    >>> steps = list(loaders.client(1, prefetch=0).iter_steps())
    >>> len(steps), [info.global_num_samples for _, info in steps[0]], steps[0][0][1].source_counts
    (15, [6, 6], {'a': 2, 'b': 2, 'c': 2})
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ray

from youmu._internal.args import bool_arg, float_arg, int_arg, seconds_arg
from youmu.distributed import fingerprint
from youmu.errors import ArgumentTypeError, InvalidArgumentError, LoaderError, LoaderUnavailableError, YoumuError
from youmu.planning.settings import PlanSettings
from youmu.planning.steps.rank_sources import check_sample_fns
from youmu.ray.calls import Actor
from youmu.ray.client import Deployment, RayBalancedLoader
from youmu.ray.planner_actor import StepPlanner, fingerprint_of
from youmu.ray.source import MeasureFns, Source
from youmu.ray.source_actor import SourceLoader

__all__ = ["RayLoaders"]

_ACTOR_DEFAULTS = {"max_restarts": -1, "max_task_retries": -1, "num_cpus": 0}


class RayLoaders:
    """A deployment of disaggregated loaders (see the module doc).

    Args:
        sources: ``{name: Source}`` (or paths / a ``PageIndex`` / a stream function per
            name, see :class:`~youmu.ray.Source`), mixed by ``schedule``; or a single
            source (named ``"default"``, as ``BalancedLoader`` names a lone stream).
        world_size: training ranks ``W`` (one client each).
        num_microbatches, global_batch_size, token_budget, capacity, cost, method,
            placement, schedule, length_fn, docs_fn, token_count_fn, id_fn,
            collate_fn, group_size, seed, drop_last: as for
            :class:`~youmu.planning.BalancedLoader` (the measuring functions run in
            the loaders, ``collate_fn`` in each client); the stream is that of a
            ``BalancedLoader`` over each rank's share of every source.
        name, namespace: the actors' names (several deployments live side by side).
        sources_per_loader: sources served by one loader actor (MegaScale-Data, §5.3,
            defaults to one: every source's state in its own process; grouping saves
            processes when there are hundreds of sources).
        standby: one standby replica per loader; calls a loader has not answered
            within ``hedge_after`` seconds go to its standby too (hides a restart).
        loader_options, planner_options: more ``.options(...)`` for the actors
            (``resources=``, ``num_cpus=``, ``scheduling_strategy=``, ...).
        timeout: seconds a loader may take to answer, a restart included; then every
            rank raises :class:`~youmu.errors.LoaderUnavailableError`.
        cache_rows: rows each loader keeps between measuring and delivering them.
        detached: the actors outlive the process that started them (stop them with
            :meth:`shutdown`).
        local: run the loaders and the planner in this process (no Ray): the same
            code path, for tests and examples.
        settings: the plan's settings as one :class:`~youmu.planning.PlanSettings`
            (checked there, as for ``BalancedLoader``) instead of the keywords from
            ``num_microbatches`` to ``drop_last`` (not both).
    """

    def __init__(
        self,
        sources: Any,
        *,
        world_size: int | None = None,
        num_microbatches: int | None = None,
        global_batch_size: int | None = None,
        token_budget: int | None = None,
        capacity: int | None = None,
        cost: Any = None,
        method: str = "greedy",
        placement: str | None = None,
        schedule: Any = None,
        length_fn: Callable[[Any], int] | None = None,
        docs_fn: Callable[[Any], Iterable[int]] | None = None,
        token_count_fn: Callable[[Any], int] | None = None,
        id_fn: Callable[[Any], int] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        group_size: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        name: str = "youmu",
        namespace: str = "youmu",
        sources_per_loader: int = 1,
        standby: bool = False,
        loader_options: Mapping[str, Any] | None = None,
        planner_options: Mapping[str, Any] | None = None,
        timeout: float = 60.0,
        hedge_after: float = 0.5,
        cache_rows: int = 8192,
        detached: bool = False,
        local: bool = False,
        settings: PlanSettings | None = None,
    ) -> None:
        check_sample_fns(length_fn=length_fn, docs_fn=docs_fn, token_count_fn=token_count_fn, id_fn=id_fn,
                         collate_fn=collate_fn)
        if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
            raise ArgumentTypeError("name and namespace must be non-empty strings")
        per = int_arg("sources_per_loader", sources_per_loader, minimum=1)
        standby = bool_arg("standby", standby)
        detached = bool_arg("detached", detached)
        local = bool_arg("local", local)
        timeout = seconds_arg("timeout", timeout)
        hedge_after = float_arg("hedge_after", hedge_after, positive=True)
        int_arg("cache_rows", cache_rows, minimum=1)
        if isinstance(sources, Mapping):
            if not sources:
                raise InvalidArgumentError("sources is empty")
            specs = {str(n): Source.of(s, f"sources[{n!r}]") for n, s in sources.items()}
        else:
            specs = {"default": Source.of(sources)}
        # the plan keywords of this signature, as PlanSettings declares them (and checks them)
        given = PlanSettings.settings_or_keywords(settings, **PlanSettings.pick(locals()))
        if settings is not None and settings.world_size is not None:
            if world_size not in (None, settings.world_size):
                raise InvalidArgumentError(f"settings are for world_size={settings.world_size}, not {world_size}")
            world_size = settings.world_size
        if given.get("reorder_only") or given.get("encoder_cost") is not None:
            raise InvalidArgumentError("the Ray deployment plans balanced global batches: reorder_only and "
                                       "encoder_cost are BalancedLoader's only")
        if world_size is None:
            raise InvalidArgumentError("pass world_size= (the training ranks) or settings with a world size")
        settings = PlanSettings.make(names=list(specs), world_size=world_size, **given)
        names = list(settings.names)
        world: int = world_size
        fns = MeasureFns(length_fn, docs_fn, token_count_fn, id_fn)
        self.name, self.namespace = name, namespace
        self.settings = settings
        self.sources = {n: specs[n] for n in names}
        described = {n: s.describe() for n, s in self.sources.items()}
        self.config = fingerprint_of(settings, described, fns.describe())
        groups = [names[k:k + per] for k in range(0, len(names), per)]
        group_of = [k for k, g in enumerate(groups) for _ in g]
        self.loader_names = [f"{name}.loader{k}" for k in range(len(groups))]
        self.planner_name = f"{name}.planner"
        self.local = local
        if not local and not ray.is_initialized():
            raise LoaderError("youmu.ray needs a Ray connection: call ray.init(...) (or ray.init(address=...)) first, "
                              "or pass local=True")

        def make(k: int, suffix: str = "") -> Any:
            group = {n: self.sources[n] for n in groups[k]}
            args = (group, world)
            kwargs: dict[str, Any] = {"measure": fns, "cache_rows": cache_rows, "defer_errors": True}
            if local:
                return SourceLoader(group, world, measure=fns, cache_rows=cache_rows)
            opts = {**_ACTOR_DEFAULTS, **dict(loader_options or {}), "name": self.loader_names[k] + suffix,
                    "namespace": namespace, "get_if_exists": True}
            if detached:
                opts["lifetime"] = "detached"
            return ray.remote(SourceLoader).options(**opts).remote(*args, **kwargs)

        self.loaders: list[Actor] = []
        for k in range(len(groups)):
            if local:
                self.loaders.append(Actor.local(self.loader_names[k], make(k), kind="source loader"))
                continue
            names_k = [self.loader_names[k]] + ([self.loader_names[k] + ".standby"] if standby else [])
            handles = [make(k)] + ([make(k, ".standby")] if standby else [])
            self.loaders.append(Actor(self.loader_names[k], names_k, kind="source loader", namespace=namespace,
                                      hedge_after=hedge_after).attach(handles))
        # what a resume on another topology must find unchanged (youmu.ray.merge)
        data = fingerprint({"sources": described, "measure": fns.describe()})
        self.deployment = Deployment(name, tuple(names), world, settings.num_microbatches, None, self.loaders,
                                     group_of, self.config, timeout, collate_fn, settings.portable(), data)
        if local:
            planner = StepPlanner(settings, self.loaders, group_of, timeout=timeout, config=self.config)
            self.deployment.planner = Actor.local(self.planner_name, planner, kind="step planner")
            return
        popts = {**_ACTOR_DEFAULTS, **dict(planner_options or {}), "name": self.planner_name,
                 "namespace": namespace, "get_if_exists": True}
        if detached:
            popts["lifetime"] = "detached"
        # the planner keeps the deployment (without its own handle) for connect()
        handle = ray.remote(StepPlanner).options(**popts).remote(settings, self.loaders, group_of, timeout=timeout,
                                                                 config=self.config, deployment=self.deployment)
        self.deployment.planner = Actor(self.planner_name, [self.planner_name], kind="step planner",
                                        namespace=namespace).attach([handle])
        try:
            self._wait_ready(timeout)
        except BaseException:
            # what was started goes, and its names with it: a deployment created again
            # (the path corrected) must not find these actors by name
            self.shutdown(wait=True)
            raise
        theirs = self.deployment.planner.call("fingerprint", timeout=2 * timeout)
        if theirs != self.config:
            raise InvalidArgumentError(
                f"a deployment named {name!r} (namespace {namespace!r}) already runs with other settings "
                "(plan settings, sources or measuring functions differ): pick another name= or shut it down")

    def _wait_ready(self, timeout: float) -> None:
        """Every actor answers (its indexes built), or a typed error naming the ones
        that do not (e.g. no node offers their resources)."""
        deadline = time.monotonic() + timeout
        pending = {}
        assert self.deployment.planner is not None
        for a in [*self.loaders, self.deployment.planner]:
            for n, h in zip(a.replica_names, a.replicas):
                pending[h.ping.remote()] = n
        left = list(pending)
        while left:
            ready, left = ray.wait(left, num_returns=len(left), timeout=max(deadline - time.monotonic(), 0.0))
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    if isinstance(e.cause, YoumuError):
                        raise e.cause from None  # the source's own error: YoumuIOError, ColumnNotFoundError, ...
                    raise LoaderError(f"{pending[ref]} failed to start: {e}") from None
                except ray.exceptions.RayActorError as e:
                    raise LoaderError(f"{pending[ref]} failed to start: {e}") from None
            if left and time.monotonic() >= deadline:
                names = sorted(pending[r] for r in left)
                raise LoaderUnavailableError(f"actors {names} did not start within {timeout:g} s (can a node "
                                             "offer their resources?)", actor=names[0])

    # -- clients ----------------------------------------------------------------------------
    def client(self, rank: int, *, prefetch: int = 2, steps_per_call: int = 2) -> RayBalancedLoader:
        """Rank ``rank``'s :class:`~youmu.ray.RayBalancedLoader` (call it in that rank's
        training process)."""
        return RayBalancedLoader(self.deployment, rank, prefetch=prefetch, steps_per_call=steps_per_call)

    @staticmethod
    def connect(name: str = "youmu", namespace: str = "youmu", *, timeout: float = 60.0) -> Deployment:
        """The :class:`~youmu.ray.client.Deployment` of a running deployment, found by
        name (after ``ray.init(address=...)``); ``RayBalancedLoader(deployment, rank)``
        is then rank ``rank``'s client."""
        if not ray.is_initialized():
            # ray.get_actor would start a local cluster, where no deployment can be
            raise LoaderError("Ray is not initialised: call ray.init(address=...) to join the cluster that runs "
                              f"the deployment {name!r}")
        try:
            handle = ray.get_actor(f"{name}.planner", namespace=namespace)
        except ValueError:
            raise InvalidArgumentError(f"no youmu.ray deployment named {name!r} in namespace {namespace!r}") from None
        planner = Actor(f"{name}.planner", [f"{name}.planner"], kind="step planner", namespace=namespace)
        planner.attach([handle])
        d: Deployment = planner.call("deployment", timeout=timeout)
        d.planner = planner
        return d

    # -- the actors ---------------------------------------------------------------------------
    def actors(self) -> dict[str, Any]:
        """``{actor name: handle}`` of every actor (standbys included), e.g. to kill one."""
        assert self.deployment.planner is not None
        out = {self.planner_name: self.deployment.planner.replicas[0]}
        for a in self.loaders:
            out.update(zip(a.replica_names, a.replicas))
        return out

    def stats(self) -> dict[str, Any]:
        """Every actor's counters (rows read, cache, restarts seen by the planner)."""
        if self.local:
            return {a.name: a.replicas[0].stats() for a in self.loaders}
        out = {}
        for name, h in self.actors().items():
            out[name] = ray.get((h.ping if name == self.planner_name else h.stats).remote(), timeout=60)
        return out

    def shutdown(self, wait: bool = False) -> None:
        """Stop every actor of the deployment (for good: no restart); with ``wait``,
        until their names are free (at most 30 s)."""
        if self.local:
            return
        actors = self.actors()
        for h in actors.values():
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        deadline = time.monotonic() + 30.0
        for n in actors if wait else ():
            while time.monotonic() < deadline:
                try:
                    ray.get_actor(n, namespace=self.namespace)
                except ValueError:
                    break
                time.sleep(0.05)
