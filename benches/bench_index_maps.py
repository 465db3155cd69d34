"""Batch index-map calls: ``Permutation.take``, ``FlatMap``/``MixtureMap.locate_many``
and ``MixtureMap.samples_many``, best of 15 calls per size.

Usage (alternate two builds by pointing at the folder holding each ``youmu`` package)::

    python benches/bench_index_maps.py python           # this tree's build
    python benches/bench_index_maps.py /tmp/other/python
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np


def best_ms(call: Callable[[], object], repeat: int = 15) -> float:
    """The fastest of ``repeat`` calls, in milliseconds (after one warm-up call)."""
    call()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main(python_dir: str) -> None:
    sys.path.insert(0, python_dir)
    import youmu._core as core

    print(core.__file__)
    perm = core.Permutation(10**9, seed=1)
    mixture = core.MixtureMap(["a", "b", "c"], [10**6, 37, 5 * 10**6], [(0, [0.5, 0.2, 0.3])], length=10**9)
    flat = core.FlatMap([10**6, 5 * 10**6], seed=3)
    for n in (20_000, 50_000, 1_000_000):
        ids = np.random.default_rng(0).integers(0, 10**6, n)
        calls: dict[str, Callable[[], object]] = {
            "Permutation.take": lambda: perm.take(ids),
            "MixtureMap.locate_many": lambda: mixture.locate_many(ids),
            "MixtureMap.samples_many": lambda: mixture.samples_many(ids),
            "FlatMap.locate_many": lambda: flat.locate_many(ids),
        }
        for name, call in calls.items():
            print(f"{name:26s} n={n:>8}: {best_ms(call):8.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "python")
