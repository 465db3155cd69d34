"""The plan's settings: everything that decides which samples go to which (rank,
micro-batch) each step — one object, checked once, fingerprinted once, turned into a
:class:`~youmu.planning.engine.planner.Planner` once.

Both deployments of the planning layer take it: the in-process
:class:`~youmu.planning.BalancedLoader` (which builds it from its keywords, or takes
one with ``settings=``) and the Ray deployment :class:`youmu.ray.RayLoaders` (the same
keywords forwarded here, or ``settings=``). A bad setting is refused here, with the
same :mod:`youmu.errors` class and message whichever deployment was given it.

What is *not* a plan setting stays with each deployment: the measuring functions
(``length_fn``, ``docs_fn``, ...: they run where the samples are), ``collate_fn``,
prefetch depth, timeouts, the resume mode, actor placement.

The world size may be left open (``world_size=None``) while the ranks are not known
yet — ``BalancedLoader`` checks its arguments before it creates its Gloo channel —
and fixed with :meth:`PlanSettings.on`.

Example:
    >>> s = PlanSettings.make(names=["web", "code"], world_size=2, num_microbatches=2, global_batch_size=8,
    ...                       schedule={"web": 3, "code": 1})
    >>> s.names, s.planner().num_buckets
    (('web', 'code'), 2)
    >>> s.fingerprint() == s.on(2).fingerprint() != PlanSettings.make(
    ...     names=["web", "code"], world_size=2, num_microbatches=2, global_batch_size=16,
    ...     schedule={"web": 3, "code": 1}).fingerprint()
    True
    >>> PlanSettings.make(names=["default"], world_size=2, num_microbatches=1, global_batch_size=4, method="best")
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: method must be one of ('greedy', 'kk', 'interleave'), got 'best'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from youmu._internal.args import bool_arg, choice_arg, int_arg, opt_int_arg, seed_arg
from youmu.distributed import describe
from youmu.errors import ArgumentTypeError, InvalidArgumentError, LoaderError
from youmu.planning.engine.balance import METHODS
from youmu.planning.engine.metrics import check_slots
from youmu.planning.engine.planner import ENCODER_BALANCES, Planner
from youmu.planning.engine.sample_cost import cost_function, encoder_cost_function
from youmu.planning.engine.schedule import MixingSchedule, MixtureSchedule
from youmu.planning.state.checkpoint import config_fingerprint, json_leaves
from youmu.planning.steps.rank_sources import resolve_sources

__all__ = ["PlanSettings", "MAX_MICROBATCHES"]

#: the most micro-batches one rank takes per step: every slot is yielded with its own
#: :class:`~youmu.planning.MicroBatchInfo` (an empty one repeats a batch), so memory per
#: step grows with it
MAX_MICROBATCHES = 1 << 16


@dataclass(frozen=True)
class PlanSettings:
    """The settings that decide the plans (see the module doc); build it with
    :meth:`make` (or :meth:`resolve`, which also resolves a loader's source).

    Fields are the settings as given, not normalised: they enter :meth:`fingerprint`
    as they did when states were first saved.

    >>> s = PlanSettings.make(names=["default"], world_size=None, num_microbatches=1, global_batch_size=4)
    >>> s.world_size, s.on(2).planner().num_buckets
    (None, 2)
    """

    names: tuple[str, ...]
    world_size: int | None
    num_microbatches: int
    global_batch_size: int | None = None
    token_budget: int | None = None
    capacity: int | None = None
    cost: Any = None
    method: str = "greedy"
    reorder_only: bool = False
    placement: str | None = None
    schedule: MixingSchedule | MixtureSchedule | None = None
    group_size: int | None = None
    seed: int = 0
    drop_last: bool = False
    encoder_cost: Any = None
    encoder_balance: str = "colocated"

    @classmethod
    def keywords(cls) -> dict[str, Any]:
        """The plan's settings as a loader's keywords, with their defaults: the fields
        after ``names`` and ``world_size`` (``num_microbatches`` has none: ``None``). The
        one declaration the loaders' signatures agree with (a test walks them).

        >>> list(PlanSettings.keywords())[:3]
        ['num_microbatches', 'global_batch_size', 'token_budget']
        """
        return {f.name: (None if f.default is dataclasses.MISSING else f.default)
                for f in dataclasses.fields(cls) if f.name not in ("names", "world_size")}

    @classmethod
    def pick(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """The plan keywords among a loader's arguments ``given`` (its ``locals()``)."""
        return {k: given[k] for k in cls.keywords() if k in given}

    @classmethod
    def resolve(cls, source: Iterable[Any] | Mapping[str, Iterable[Any]], *, world_size: int | None,
                **settings: Any) -> tuple[PlanSettings, dict[str, Any]]:
        """Check every setting and resolve a loader's ``source`` (one stream, or
        ``{name: stream}`` mixed by ``schedule``) against them; return the settings and
        ``{name: stream}`` in schedule order."""
        defaults = cls.keywords()
        unknown = set(settings) - set(defaults)
        if unknown:
            raise InvalidArgumentError(f"unknown plan settings {sorted(unknown)}")
        given = {**defaults, **settings}
        num_microbatches, global_batch_size, token_budget = (given["num_microbatches"], given["global_batch_size"],
                                                             given["token_budget"])
        capacity, cost, method, placement = given["capacity"], given["cost"], given["method"], given["placement"]
        reorder_only, schedule, group_size, seed = (given["reorder_only"], given["schedule"], given["group_size"],
                                                    given["seed"])
        drop_last, encoder_cost, encoder_balance = given["drop_last"], given["encoder_cost"], given["encoder_balance"]
        if world_size is not None:
            world_size = int_arg("world_size", world_size, minimum=1)
        int_arg("num_microbatches", num_microbatches, minimum=1, maximum=MAX_MICROBATCHES)
        if world_size is not None:
            check_slots(world_size, num_microbatches, ("world_size", "num_microbatches"))
        reorder_only = bool_arg("reorder_only", reorder_only)
        drop_last = bool_arg("drop_last", drop_last)
        seed_arg(seed)
        choice_arg("method", method, METHODS)
        if placement is not None:
            choice_arg("placement", placement, METHODS)
        for name, v in (("global_batch_size", global_batch_size), ("token_budget", token_budget),
                        ("capacity", capacity), ("group_size", group_size)):
            opt_int_arg(name, v, minimum=1)
        if encoder_cost is not None and (reorder_only or group_size is not None):
            raise InvalidArgumentError("encoder_cost balances samples: not with reorder_only or group_size")
        choice_arg("encoder_balance", encoder_balance, ENCODER_BALANCES)
        if encoder_balance != "colocated" and encoder_cost is None:
            raise InvalidArgumentError(f"encoder_balance={encoder_balance!r} places images: it needs encoder_cost=")
        # the cost models are checked now, not at the first step
        cost_function(cost)
        if encoder_cost is not None:
            encoder_cost_function(encoder_cost)
        names, sources, sched = resolve_sources(source, schedule=schedule, global_batch_size=global_batch_size,
                                                token_budget=token_budget, reorder_only=reorder_only)
        s = cls(tuple(names), world_size, num_microbatches, global_batch_size, token_budget, capacity, cost, method,
                reorder_only, placement, sched, group_size, seed, drop_last, encoder_cost, encoder_balance)
        # what ties the settings together is checked now (Planner._from_checked), not at the first step;
        # with the world size still open, over one group of ranks (a group divides the world, not 1)
        s._chain(world_size if world_size is not None else group_size or 1)  # cached: the loader's planner
        return s, sources

    @classmethod
    def make(cls, *, names: Sequence[str], world_size: int | None, num_microbatches: int,
             **settings: Any) -> PlanSettings:
        """The settings for sources named ``names`` (``["default"]`` with no schedule:
        one stream), checked as :meth:`resolve` checks a loader's. ``settings``: the
        other fields, by keyword."""
        names = [str(n) for n in names]
        if not names:
            raise InvalidArgumentError("names is empty: a plan needs at least one source")
        single = names == ["default"] and settings.get("schedule") is None
        placeholder: Any = [] if single else {n: [] for n in names}
        return cls.resolve(placeholder, world_size=world_size, num_microbatches=num_microbatches, **settings)[0]

    @classmethod
    def settings_or_keywords(cls, settings: Any, **given: Any) -> dict[str, Any]:
        """A loader's plan settings, given either as one ``settings=`` object or as
        keywords (whose defaults are those of the fields): the keywords for
        :meth:`resolve`. Passing both is an :class:`~youmu.errors.InvalidArgumentError`.

        >>> s = PlanSettings.make(names=["default"], world_size=None, num_microbatches=2, global_batch_size=4)
        >>> PlanSettings.settings_or_keywords(s, num_microbatches=None, seed=0)["num_microbatches"]
        2
        >>> PlanSettings.settings_or_keywords(s, num_microbatches=2)
        Traceback (most recent call last):
        ...
        youmu.errors.InvalidArgumentError: pass the plan's settings once: settings= or ['num_microbatches'], not both
        """
        if settings is None:
            return given
        if not isinstance(settings, cls):
            raise ArgumentTypeError(f"settings must be a youmu.planning.PlanSettings, got {type(settings).__name__}")
        defaults = cls.keywords()  # num_microbatches: required as a keyword, absent next to settings=
        changed = [k for k, v in given.items() if v is not defaults[k] and v != defaults[k]]
        if changed:
            raise InvalidArgumentError(f"pass the plan's settings once: settings= or {changed}, not both")
        return {f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)
                if f.name not in ("names", "world_size")}

    def on(self, world_size: int) -> PlanSettings:
        """These settings over ``world_size`` ranks (checked against the grid of
        micro-batches)."""
        n = int_arg("world_size", world_size, minimum=1)
        check_slots(n, self.num_microbatches, ("world_size", "num_microbatches"))  # num_microbatches: checked
        on = dataclasses.replace(self, world_size=n)
        for key, chain in self.__dict__.items():  # planners already built: the same settings
            if key.startswith("_planner_"):
                object.__setattr__(on, key, chain)
        return on

    def _chain(self, world_size: int) -> Planner:
        """The planner chain over ``world_size`` ranks, built once per settings object
        and world size (settings are frozen, planners immutable)."""
        key = f"_planner_{world_size}"
        cached = self.__dict__.get(key)
        if cached is None:
            cached = self._build(world_size)
            object.__setattr__(self, key, cached)
        return cached

    def _build(self, world_size: int) -> Planner:
        # each setting was checked by resolve: the stages' checks are not run again
        return Planner._from_checked(
            seed=self.seed, num_buckets=world_size, num_bins=self.num_microbatches, capacity=self.capacity,
            group_size=self.group_size, cost_fn=self.cost, method=self.method, reorder_only=self.reorder_only,
            on_overflow="defer", placement=self.placement, encoder_cost_fn=self.encoder_cost,
            # None: colocated, the setting's value before hybrid existed (config fingerprints)
            encoder_balance=(None if self.encoder_cost is None or self.encoder_balance == "colocated"
                             else self.encoder_balance))

    def _ranks(self) -> int:
        if self.world_size is None:
            raise LoaderError("these PlanSettings have no world size yet: use settings.on(world_size)")
        return self.world_size

    def planner(self) -> Planner:
        """The planner chain ``mix → distribute → cost → balance`` of these settings."""
        return self._chain(self._ranks())

    def portable(self) -> dict[str, Any]:
        """The settings a resume on another topology keeps, by value (saved in every
        state as ``settings``; a merged state loaded under others is refused naming
        the field): everything but the world size, ``num_microbatches``,
        ``global_batch_size`` / ``token_budget`` and the schedule, which may change at
        a resume from :func:`youmu.merge_states`.

        >>> s = PlanSettings.make(names=["web", "code"], world_size=2, num_microbatches=1, global_batch_size=4,
        ...                       schedule={"web": 1, "code": 1}, capacity=512)
        >>> s.portable()["sources"], s.portable()["capacity"], "global_batch_size" in s.portable()
        (['code', 'web'], 512, False)
        """
        planner = self._chain(1)
        return json_leaves({
            "sources": sorted(self.names), "capacity": self.capacity, "cost": describe(planner.cost_fn),
            "method": self.method, "reorder_only": self.reorder_only, "placement": self.placement,
            "group_size": self.group_size, "seed": self.seed, "drop_last": self.drop_last,
            "encoder_cost": None if planner.encoder_cost_fn is None else describe(planner.encoder_cost_fn),
        })

    def fingerprint(self) -> int:
        """63-bit hash of the settings (``BalancedLoader.config_fingerprint``): a state
        saved under other settings would silently change every later plan, so loaders
        refuse it and ranks compare it when they start."""
        return config_fingerprint(self.planner(), global_batch_size=self.global_batch_size,
                                  token_budget=self.token_budget, schedule=self.schedule, sources=list(self.names),
                                  reorder_only=self.reorder_only, drop_last=self.drop_last,
                                  world_size=self._ranks())
