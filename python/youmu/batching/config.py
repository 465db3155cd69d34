"""A ``DynamicBatchLoader``'s settings, validated once and frozen: :class:`LoaderConfig`.

The loader builds its config in ``__init__`` (every argument checked through
:mod:`youmu._internal.args`, before the collective that creates the loader's channel, so a bad
argument fails on the rank that passed it instead of leaving the others in a
collective). Each epoch then iterates under the config as it was at ``iter()``: the
aligner thread holds the config, never the loader, so a loader the program drops
mid-epoch is garbage-collected and its finaliser can close the epoch.

The config also carries what is derived from the settings alone: the fingerprint
every rank must share (checked in the handshake, saved in states) and the settings a
state names (``resume_settings``); the state's format is :mod:`youmu.batching.state`'s.

Example:
    >>> from youmu.distributed import GlooChannel
    >>> cfg = LoaderConfig.build(dict(dataset=[{"n": 3}] * 10, token_budget=64, length_fn=len),
    ...                          GlooChannel.local())
    >>> cfg.kind, cfg.size, cfg.pool_size, cfg.max_outstanding
    ('map', 10, 1024, 2048)
    >>> cfg.replace(pool_size=16).max_outstanding       # resolved defaults stay resolved
    2048
    >>> LoaderConfig.build(dict(dataset=[], token_budget=64, length_fn=len, timeout=float("inf")),
    ...                    GlooChannel.local())
    Traceback (most recent call last):
    ...
    youmu.errors.InvalidArgumentError: timeout must be finite, got inf
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from youmu._internal.args import (
    bool_arg,
    callable_arg,
    choice_arg,
    float_arg,
    int_arg,
    opt_int_arg,
    seconds_arg,
    seed_arg,
    workers_arg,
)
from youmu.batching.algo.loss import LOSS_SCALING_MODES
from youmu.distributed.channel import DEFAULT_TIMEOUT, GlooChannel
from youmu.distributed.fingerprint import fingerprint
from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.state.contract import data_fingerprint

__all__ = ["LoaderConfig", "UNEVEN_MODES", "DEFAULTS", "stateless_message"]

#: Join mode's ways to end a rank whose data ran out before its peers'.
UNEVEN_MODES = ("stop", "pad")


def _keyword(default: Any = dataclasses.MISSING) -> dict[str, Any]:
    """The mark of a :class:`LoaderConfig` field that is a ``DynamicBatchLoader``
    keyword, with the keyword's ``default`` (none: the argument is required). The field
    holds the setting checked and resolved (:meth:`LoaderConfig.check`), so its type may
    be narrower than the keyword's (``data_timeout=None`` is the ``timeout``)."""
    return {"setting": default}


@dataclass(frozen=True, eq=False)
class LoaderConfig:
    """Every setting of a ``DynamicBatchLoader`` (see its docstring for each one), with
    defaults resolved (``token_count_fn``, ``data_timeout``, ``max_outstanding``), plus
    the channel, the dataset's kind (``"map"`` or ``"iterable"``) and size (map-style),
    and the settings' :attr:`fingerprint`. Build one with :meth:`build`."""

    dataset: Any = field(metadata=_keyword())
    token_budget: int = field(metadata=_keyword())
    length_fn: Callable[[Any], int] = field(metadata=_keyword())
    collate_fn: Callable[[list[Any]], Any] | None = field(metadata=_keyword(None))
    token_count_fn: Callable[[Any], int] = field(metadata=_keyword(None))
    pool_size: int = field(metadata=_keyword(1024))
    num_workers: int = field(metadata=_keyword(2))
    prefetch_factor: int | None = field(metadata=_keyword(None))
    join: bool = field(metadata=_keyword(True))
    loss_scaling: str = field(metadata=_keyword("exact"))
    timeout: float = field(metadata=_keyword(DEFAULT_TIMEOUT))
    data_timeout: float = field(metadata=_keyword(None))
    shuffle: bool = field(metadata=_keyword(True))
    seed: int = field(metadata=_keyword(0))
    quota: int | None = field(metadata=_keyword(None))
    max_outstanding: int = field(metadata=_keyword(None))
    shuffle_steps: bool = field(metadata=_keyword(True))
    uneven: str = field(metadata=_keyword("stop"))
    pad_batch: Callable[[], Any] | None = field(metadata=_keyword(None))
    callback: Callable[..., None] | None = field(metadata=_keyword(None))
    worker_init_fn: Callable[[int], None] | None = field(metadata=_keyword(None))
    multiprocessing_context: Any = field(metadata=_keyword(None))
    heartbeat: float = field(metadata=_keyword(1.0))
    pad_sampler: bool = field(metadata=_keyword(False))
    encoder_budget: int | None = field(metadata=_keyword(None))
    encoder_fn: Callable[[Any], int] | None = field(metadata=_keyword(None))
    channel: GlooChannel
    kind: str
    size: int | None
    fingerprint: int

    # -- the declaration ------------------------------------------------------------------
    @classmethod
    def keywords(cls) -> dict[str, Any]:
        """The loader's keywords as the fields above declare them, with their defaults
        (a required one's: ``dataclasses.MISSING``) — the one declaration the loader's
        signature agrees with (``tests/promises/test_settings_boundary.py`` walks it).

        >>> list(LoaderConfig.keywords())[:4]
        ['dataset', 'token_budget', 'length_fn', 'collate_fn']
        """
        return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}

    @classmethod
    def pick(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """The loader's settings among its arguments ``given`` (its ``locals()``)."""
        return {k: given[k] for k in cls.keywords() if k in given}

    # -- construction ---------------------------------------------------------------------
    @staticmethod
    def check(arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The settings ``arguments`` describe (the loader's keyword arguments, defaults
        filled in), validated and resolved, plus ``kind`` and ``size``. Raises
        :class:`~youmu.errors.ArgumentTypeError` or
        :class:`~youmu.errors.InvalidArgumentError` naming the first bad argument.
        Nothing collective happens here."""
        a = {**DEFAULTS, **arguments}
        s: dict[str, Any] = {}
        s["token_budget"] = int_arg("token_budget", a["token_budget"], minimum=1)
        s["length_fn"] = callable_arg("length_fn", a["length_fn"])
        s["collate_fn"] = callable_arg("collate_fn", a["collate_fn"], optional=True)
        token_count_fn = callable_arg("token_count_fn", a["token_count_fn"], optional=True)
        s["token_count_fn"] = token_count_fn if token_count_fn is not None else s["length_fn"]
        s["pool_size"] = int_arg("pool_size", a["pool_size"], minimum=1)
        s["num_workers"] = workers_arg(a["num_workers"])
        s["prefetch_factor"] = opt_int_arg("prefetch_factor", a["prefetch_factor"], minimum=1)
        if s["prefetch_factor"] is not None and s["num_workers"] == 0:
            raise InvalidArgumentError("prefetch_factor needs num_workers > 0")
        s["join"] = bool_arg("join", a["join"])
        s["loss_scaling"] = choice_arg("loss_scaling", a["loss_scaling"], LOSS_SCALING_MODES)
        s["uneven"] = choice_arg("uneven", a["uneven"], UNEVEN_MODES)
        s["timeout"] = seconds_arg("timeout", a["timeout"])
        data_timeout = a["data_timeout"]
        s["data_timeout"] = s["timeout"] if data_timeout is None else seconds_arg("data_timeout", data_timeout)
        s["shuffle"] = bool_arg("shuffle", a["shuffle"])
        s["shuffle_steps"] = bool_arg("shuffle_steps", a["shuffle_steps"])
        s["pad_sampler"] = bool_arg("pad_sampler", a["pad_sampler"])
        s["seed"] = seed_arg(a["seed"])
        s["heartbeat"] = float_arg("heartbeat", a["heartbeat"], positive=True)
        if not s["heartbeat"] < s["timeout"]:
            raise InvalidArgumentError(f"heartbeat must be in (0, timeout={s['timeout']:g}), got {s['heartbeat']!r}")
        max_outstanding = opt_int_arg("max_outstanding", a["max_outstanding"], minimum=1)
        s["max_outstanding"] = 2 * s["pool_size"] if max_outstanding is None else max_outstanding
        if s["max_outstanding"] < s["pool_size"]:
            raise InvalidArgumentError(
                f"max_outstanding ({s['max_outstanding']}) must be >= pool_size ({s['pool_size']}): "
                "a round needs a full buffer of credits"
            )
        for name in ("pad_batch", "callback", "worker_init_fn"):
            s[name] = callable_arg(name, a[name], optional=True)
        s["encoder_budget"] = opt_int_arg("encoder_budget", a["encoder_budget"], minimum=1)
        s["encoder_fn"] = callable_arg("encoder_fn", a["encoder_fn"], optional=True)
        if (s["encoder_budget"] is None) != (s["encoder_fn"] is None):
            raise InvalidArgumentError(
                "pass encoder_budget= (patches or images per batch) and encoder_fn= (that count per sample) together"
            )
        s["multiprocessing_context"] = a["multiprocessing_context"]
        s["dataset"] = dataset = a["dataset"]
        s["kind"] = kind = _kind_of(dataset)
        s["size"] = len(dataset) if kind == "map" else None
        quota = a["quota"]
        if quota is not None:
            int_arg("quota", quota)
        if not s["join"] and kind != "map" and quota is None:
            raise InvalidArgumentError(
                "non-join mode chains passes until a global sample quota: pass quota=N with an iterable dataset "
                "(its len(), if any, is usually per rank)"
            )
        if quota is not None:
            if s["join"]:
                raise InvalidArgumentError(
                    "quota applies to non-join mode only (join mode emits every sample exactly once)"
                )
            quota = int_arg("quota", quota, minimum=1)
        s["quota"] = quota
        return s

    @classmethod
    def build(cls, arguments: Mapping[str, Any], channel: GlooChannel) -> LoaderConfig:
        """The config of a loader with these keyword ``arguments`` exchanging on
        ``channel`` (see :meth:`check`)."""
        return cls.from_settings(cls.check(arguments), channel)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], channel: GlooChannel) -> LoaderConfig:
        """The config of settings :meth:`check` returned, exchanging on ``channel``."""
        return cls(**settings, channel=channel, fingerprint=_fingerprint(settings, channel.world_size))

    def replace(self, **changes: Any) -> LoaderConfig:
        """A config with some settings changed, validated like the loader's arguments
        (the kind, size and fingerprint follow the new settings)."""
        derived = ("channel", "kind", "size", "fingerprint")
        for name in changes:
            if name in derived or name not in self.__dataclass_fields__:
                raise InvalidArgumentError(f"{name!r} is not a setting of DynamicBatchLoader")
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in derived}
        return self.from_settings(self.check({**current, **changes}), self.channel)

    def current(self) -> LoaderConfig:
        """This config, or a rebuilt one when the map-style dataset changed its size
        since (a list grown in place): its sampler and fingerprint follow ``len()``."""
        if self.kind == "map" and len(self.dataset) != self.size:
            return self.replace()
        return self

    # -- derived ----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.channel.rank

    @property
    def world_size(self) -> int:
        return self.channel.world_size

    @functools.cached_property
    def resume_settings(self) -> dict[str, Any]:
        """The settings a state names in plain values (``settings``), so that
        :func:`youmu.merge_states` compares them across ranks and a loader of another
        world size checks them field by field; ``data`` fingerprints a map-style
        dataset (an iterable one's own state carries its fingerprint)."""
        return {
            "kind": self.kind, "n": self.size, "data": data_fingerprint(self.dataset) if self.kind == "map" else None,
            "seed": self.seed, "shuffle": self.shuffle, "join": self.join, "pad_sampler": self.pad_sampler,
            "shuffle_steps": self.shuffle_steps, "loss_scaling": self.loss_scaling, "uneven": self.uneven,
            "encoder_budget": self.encoder_budget, "quota": self.quota, "token_budget": self.token_budget,
            "pool_size": self.pool_size,
        }



#: ``DynamicBatchLoader``'s keyword defaults (the settings a config is built from), as
#: :class:`LoaderConfig` declares them.
DEFAULTS: dict[str, Any] = {k: v for k, v in LoaderConfig.keywords().items() if v is not dataclasses.MISSING}

def _kind_of(dataset: Any) -> str:
    """``"map"`` (``len`` and ``[i]``) or ``"iterable"`` (a torch ``IterableDataset``,
    or anything else with ``__iter__``)."""
    from torch.utils.data import IterableDataset

    if not isinstance(dataset, IterableDataset) and hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return "map"
    if not hasattr(dataset, "__iter__"):
        raise ArgumentTypeError(
            f"dataset must be map-style (len + __getitem__) or iterable, got {type(dataset).__name__}"
        )
    return "iterable"


def _fingerprint(s: Mapping[str, Any], world_size: int) -> int:
    """The settings every rank must share. Saved states carry this value, so its keys
    and values must stay as they are: any change refuses every state saved before
    (so the second budget enters only when it is set)."""
    second = {} if s["encoder_budget"] is None else {"encoder_budget": s["encoder_budget"]}
    return fingerprint(
        {
            **second,
            "token_budget": s["token_budget"],
            # the grouping pool's size, under the key states were first saved with
            "buffer_size": s["pool_size"],
            "join": s["join"],
            "loss_scaling": s["loss_scaling"],
            "shuffle": s["shuffle"],
            "seed": s["seed"],
            "quota": s["quota"],
            "shuffle_steps": s["shuffle_steps"],
            "uneven": s["uneven"],
            "pad_sampler": s["pad_sampler"],
            "kind": s["kind"],
            "n": s["size"],
            "world_size": world_size,
        }
    )


def stateless_message(dataset: Any) -> str:
    """Why a ``DynamicBatchLoader`` over ``dataset`` (iterable, without ``state_dict``)
    has no mid-epoch state, and what gives it one."""
    return (
        f"a mid-epoch state of a DynamicBatchLoader over an iterable dataset needs the dataset's own "
        f"state_dict()/load_state_dict() (e.g. YoumuDataset); {type(dataset).__name__} has none: give it those "
        "methods (with DataLoader workers, each worker's copy saves and loads its own), or use a map-style dataset"
    )

