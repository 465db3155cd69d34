"""Mixing schedules: exact per-step counts, tracking of cumulative targets, mixtures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.planning import MixingSchedule, MixtureSchedule, as_schedule


def test_stages_and_constant() -> None:
    s = MixingSchedule([(0, {"web": 1.0}), (10, {"web": 3, "code": 1})])
    assert s.names == ["web", "code"]
    assert s.weights(9) == {"web": 1.0, "code": 0.0}
    assert s.weights(10) == {"web": 0.75, "code": 0.25}
    assert s.counts(0, 16) == {"web": 16, "code": 0}
    assert sum(s.counts(10, 16).values()) == 16
    c = MixingSchedule({"a": 1, "b": 1})
    assert [c.counts(k, 3)["a"] for k in range(4)] in ([2, 1, 2, 1], [1, 2, 1, 2])


def test_function_schedule_reads_the_step() -> None:
    s = MixingSchedule(lambda step: {"easy": 1.0, "hard": min(step / 100, 1.0)}, names=["easy", "hard"])
    assert s.counts(0, 10) == {"easy": 10, "hard": 0}
    assert s.weights(100) == {"easy": 0.5, "hard": 0.5}
    with pytest.raises(ValueError, match="unknown sources"):
        MixingSchedule(lambda step: {"x": 1.0}, names=["a"]).weights(0)


def test_tiny_weight_is_sampled_on_schedule() -> None:
    s = MixingSchedule({"big": 1.0 - 1e-4, "tiny": 1e-4})
    got = sum(s.counts(k, 512)["tiny"] for k in range(2000))
    assert abs(got - 2000 * 512 * 1e-4) <= 1  # 102.4 expected; per-step rounding gives 0


def _rebased_targets(s: MixingSchedule, steps: int, batch: int):
    """Yield (counts, realised, target) per step, the target re-homing a switched-off
    source's residual onto the active sources in proportion to their weights."""
    k = len(s.names)
    realised, target = np.zeros(k), np.zeros(k)
    for step in range(steps):
        w = s.weight_vector(step)
        off = w == 0
        if off.any():
            carry = (target - realised)[off].sum()
            target[off] = realised[off]
            target[~off] += carry * w[~off] / w[~off].sum()
        n = s.count_vector(step, batch)
        realised += n
        target += batch * w
        yield n, w, realised, target


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 40), st.integers(0, 2**31 - 1), st.booleans())
def test_counts_track_cumulative_targets(k: int, batch: int, seed: int, switch_off: bool) -> None:
    rng = np.random.default_rng(seed)
    table = rng.random((7, k)) ** 3
    if switch_off:
        table *= rng.random((7, k)) < 0.6
    table[:, 0] += 1e-3  # every step has some positive weight
    names = [f"s{i}" for i in range(k)]
    s = MixingSchedule(lambda step: dict(zip(names, table[step % 7].tolist())), names=names)
    for n, w, realised, target in _rebased_targets(s, 60, batch):
        assert n.sum() == batch and (n >= 0).all()
        assert (n[w == 0] == 0).all()  # a source at weight 0 gets nothing
        assert np.abs(realised - target).max() < 2


def test_switched_off_sources_do_not_pile_their_residuals_on_one_source() -> None:
    # Regression (CI failure, k=5, batch=1, seed=1): sources switching off while owed
    # a fraction of a sample left the active ones more than a whole sample off target
    # (1.09 against the re-homed target; 0.60 once residuals are re-homed).
    k = 5
    rng = np.random.default_rng(1)
    table = rng.random((7, k)) * (rng.random((7, k)) < 0.6)
    table[:, 0] += 1e-3
    names = [f"s{i}" for i in range(k)]
    s = MixingSchedule(lambda step: dict(zip(names, table[step % 7].tolist())), names=names)
    for _, _, realised, target in _rebased_targets(s, 60, 1):
        assert np.abs(realised - target).max() < 1


def test_constant_weights_stay_within_one_sample() -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        k = int(rng.integers(2, 9))
        w = rng.random(k) ** 3 + 1e-3
        s = MixingSchedule(dict(zip([f"s{i}" for i in range(k)], w.tolist())))
        batch = int(rng.integers(1, 33))
        for _, _, realised, target in _rebased_targets(s, 200, batch):
            assert np.abs(realised - target).max() < 1


def test_random_access_equals_sequential_across_checkpoints() -> None:
    s1 = MixingSchedule(lambda step: {"a": 1.0, "b": 0.37 + 0.3 * np.sin(step)}, names=["a", "b"])
    seq = [s1.counts(k, 7) for k in range(9000)]
    s2 = MixingSchedule(lambda step: {"a": 1.0, "b": 0.37 + 0.3 * np.sin(step)}, names=["a", "b"])
    for k in (8999, 4096, 4095, 0, 8193, 5000):
        assert s2.counts(k, 7) == seq[k]
    assert s2.totals(9000, 7) == {n: sum(c[n] for c in seq) for n in ("a", "b")}


def test_mixture_schedule_matches_the_dataset_exactly() -> None:
    pytest.importorskip("youmu._core")
    from youmu.mixture import MixtureDataset

    mix = MixtureDataset({"web": range(5000), "math": range(300), "code": range(900)},
                         [(0, {"web": 0.8, "math": 0.2}), (1000, {"web": 0.5, "math": 0.1, "code": 0.4})],
                         block_size=64, seed=3)
    batch = 48
    sched = MixtureSchedule(mix, batch)
    for step in (0, 5, 20, 21, 22, 40):
        lo, hi = step * batch, min((step + 1) * batch, len(mix))
        child, _ = mix.locate_many(np.arange(lo, hi))
        expected = np.bincount(child, minlength=3)
        assert sched.count_vector(step).tolist() == expected.tolist()
    assert sched.weights(0)["code"] == 0.0 and sched.weights(21)["code"] == pytest.approx(0.4)
    assert as_schedule(mix, batch).counts(3) == sched.counts(3)
    with pytest.raises(ValueError, match="batch size"):
        as_schedule(mix)
    with pytest.raises(ValueError, match="built for"):
        sched.counts(0, batch + 1)


def test_errors() -> None:
    with pytest.raises(ValueError, match="step 0"):
        MixingSchedule([(5, {"a": 1})])
    with pytest.raises(ValueError, match="increasing"):
        MixingSchedule([(0, {"a": 1}), (0, {"a": 2})])
    with pytest.raises(ValueError, match="positive"):
        MixingSchedule({"a": 0.0})
    with pytest.raises(ValueError, match=">= 0"):
        MixingSchedule({"a": -1.0, "b": 2.0})
    with pytest.raises(ValueError, match="batch_size"):
        MixingSchedule({"a": 1}).counts(0, 0)
    with pytest.raises(ValueError, match="step"):
        MixingSchedule({"a": 1}).counts(-1, 4)
