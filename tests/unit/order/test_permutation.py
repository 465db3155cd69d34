"""youmu.Permutation: a keyed bijection of range(n) for any n, O(1) memory."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import youmu


@given(n=st.integers(0, 3000), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 1000))
@settings(max_examples=150, deadline=None)
def test_is_a_bijection_with_an_inverse(n: int, seed: int, epoch: int) -> None:
    p = youmu.Permutation(n, seed=seed, epoch=epoch)
    out = p.take(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    assert (p.inverse_take(out) == np.arange(n)).all()
    assert (p.range(0, n) == out).all()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 97, 1024, 4096, 65_521, 65_536])
def test_special_sizes(n: int) -> None:
    p = youmu.Permutation(n, seed=3)
    assert len(p) == n
    assert sorted(p.take(np.arange(n)).tolist()) == list(range(n))


def test_huge_domain_by_sampling() -> None:
    n = 2**40 + 17
    p = youmu.Permutation(n, seed=1, purpose="pages")
    idx = np.random.default_rng(0).integers(0, n, 10_000)
    out = p.take(idx)
    assert (out < n).all() and (out >= 0).all()
    assert (p.inverse_take(out) == idx).all()
    assert len(np.unique(out)) == len(np.unique(idx))


def test_keyed_by_seed_epoch_and_purpose() -> None:
    base = youmu.Permutation(1000, seed=1, epoch=0, purpose="a").range()
    assert (youmu.Permutation(1000, seed=1, epoch=0, purpose="a").range() == base).all()
    for other in [
        youmu.Permutation(1000, seed=2, epoch=0, purpose="a"),
        youmu.Permutation(1000, seed=1, epoch=1, purpose="a"),
        youmu.Permutation(1000, seed=1, epoch=0, purpose="b"),
    ]:
        assert (other.range() != base).mean() > 0.9


def test_indexing_errors_and_pickling() -> None:
    p = youmu.Permutation(10, seed=5)
    assert p[-1] == p[9]
    with pytest.raises(IndexError):
        p[10]
    with pytest.raises(IndexError):
        p.take(np.array([0, 10]))
    with pytest.raises(IndexError):
        p.take([-1])
    q = pickle.loads(pickle.dumps(p))
    assert (q.range() == p.range()).all()
