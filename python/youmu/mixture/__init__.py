"""Mixtures over any map-style datasets (``len`` + indexing), as pure index maps.

* :class:`FlatMixture` — the children concatenated under one global keyed permutation:
  behaves as if all data had been tokenized into one dataset, while every child keeps
  its own files. Over youmu Parquet sources it also exposes one page space
  (:meth:`FlatMixture.page_index`), so ``YoumuDataset(flat_mixture)`` streams it at
  page-shuffle speed.
* :class:`MixtureDataset` — weighted, block-deterministic mixing with an exact
  allocation: every positive weight is sampled at its exact long-run rate, however
  small; weight stages (curricula) switch at exact indices; finite children restart
  in a fresh order per pass or stop the mixture.

Both are pure functions of the index (``locate(i)`` needs no state), so resuming is
setting the index and every rank computes the same answer. The index math runs in
Rust (``youmu._core.FlatMap`` / ``MixtureMap``); these classes own the children and
fetch the items.

One module per idea: :mod:`~youmu.mixture.children` (what both share: the children and
the items behind an index), :mod:`~youmu.mixture.flat` (:class:`FlatMixture`),
:mod:`~youmu.mixture.weighted` (:class:`MixtureDataset`, its allocation and stages) and
:mod:`~youmu.mixture.mapstream` (a map-style dataset, a mixture above all, as a sharded,
resumable stream, torch-free: ``youmu.torch.MapStream`` adds torch's base class).

Example:
    >>> from youmu.mixture import FlatMixture, MixtureDataset
    >>> web, math, code = list(range(1000)), list(range(10)), list(range(300))
    >>> flat = FlatMixture({"math": math, "code": code}, seed=1)   # 310 items, shuffled
    >>> mix = MixtureDataset({"web": web, "rest": flat}, weights={"web": 0.9, "rest": 0.1},
    ...                      block_size=64, length=6400)
    >>> mix.counts(6400)
    {'web': 5760, 'rest': 640}
    >>> name, index = mix.locate(0)
"""

from __future__ import annotations

from youmu.mixture.flat import FlatMixture
from youmu.mixture.weighted import MixtureDataset, Stage

__all__ = ["FlatMixture", "MixtureDataset", "Stage"]
