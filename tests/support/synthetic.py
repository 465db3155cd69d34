"""Synthetic length distributions for audits, tests and what-if simulations. Pure.

Bench and test support, not part of the installed package (``bench_odb.py`` and the
dynamic-batching tests draw their lengths here).

The six correctness-audit distributions of ODB, App. I (1000 samples each) and three
length proxies of ODB's real datasets (fitted to the statistics of ODB, Table 10). ODB
gives no ranges for ``longtail`` and ``bimodal``; the values here are assumptions (90% U[32,256] + 10% U[1024,2048];
50% U[64,256] + 50% U[1024,2048]).

Example:
    >>> lengths = synthetic_lengths("all-short", 5, seed=0)
    >>> len(lengths), all(32 <= n <= 64 for n in lengths)
    (5, True)
"""

from __future__ import annotations

import math
import random

from youmu.errors import InvalidArgumentError

__all__ = ["AUDIT_DISTRIBUTIONS", "PROXIES", "synthetic_lengths", "proxy_lengths"]

#: The six audit distributions of ODB, App. I (``longtail``/``bimodal`` ranges assumed).
AUDIT_DISTRIBUTIONS = ("uniform-narrow", "uniform-wide", "longtail", "bimodal", "all-long", "all-short")

#: Length proxies of ODB's datasets: (log-normal or gamma parameters, truncation, N).
PROXIES = {
    "ultrachat": ("lognormal", math.log(1104), 0.43, 16, 4471, 197_472),
    "llava": ("gamma", 11.9, 508 / 11.9, 16, 1260, 149_826),
    "sharegpt4o": ("lognormal", math.log(977), 0.934, 16, 12110, 54_424),
}


def synthetic_lengths(name: str, n: int, seed: int = 0) -> list[int]:
    """``n`` integer lengths from one of :data:`AUDIT_DISTRIBUTIONS`."""
    rng = random.Random(f"{name}:{seed}")
    if name == "uniform-narrow":
        return [rng.randint(64, 512) for _ in range(n)]
    if name == "uniform-wide":
        return [rng.randint(64, 2048) for _ in range(n)]
    if name == "longtail":
        return [rng.randint(1024, 2048) if rng.random() < 0.1 else rng.randint(32, 256) for _ in range(n)]
    if name == "bimodal":
        return [rng.randint(1024, 2048) if rng.random() < 0.5 else rng.randint(64, 256) for _ in range(n)]
    if name == "all-long":
        return [rng.randint(1800, 2048) for _ in range(n)]
    if name == "all-short":
        return [rng.randint(32, 64) for _ in range(n)]
    raise InvalidArgumentError(f"unknown distribution {name!r}; choose from {AUDIT_DISTRIBUTIONS}")


def proxy_lengths(name: str, n: int | None = None, seed: int = 0) -> list[int]:
    """Lengths drawn from a dataset proxy of :data:`PROXIES` (``n`` defaults to the
    train-split size in ODB), rejection-sampled into the observed range.

    >>> ls = proxy_lengths("sharegpt4o", 1000)
    >>> min(ls) >= 16 and max(ls) <= 12110
    True
    """
    if name not in PROXIES:
        raise InvalidArgumentError(f"unknown proxy {name!r}; choose from {sorted(PROXIES)}")
    kind, a, b, lo, hi, default_n = PROXIES[name]
    count = default_n if n is None else n
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < count:
        x = math.exp(rng.gauss(a, b)) if kind == "lognormal" else rng.gammavariate(a, b)
        v = int(round(x))
        if lo <= v <= hi:
            out.append(v)
    return out
