"""Resume: (k steps, state_dict, fresh loader, load_state_dict, rest) equals the
uninterrupted epoch, step for step, on every rank (W=3)."""

from __future__ import annotations

import pytest
from batching_mp import resume_scenario, run_world

CASES = [
    (dict(dist="uniform-wide"), 7),  # map-style, join
    (dict(dist="bimodal", join=False), 11),  # map-style, non-join
    (dict(dist="longtail", iterable=True, stateful=True, empty_last=True), 40),  # a rank is already done
    (dict(dist="bimodal", iterable=True, stateful=True, empty_last=True, uneven="pad"), 25),  # filler steps
    (dict(dist="all-short", workers=2), 2),  # map-style with DataLoader workers
]


def _resume_all(rank: int, world: int, cases: list) -> list:
    return [resume_scenario(rank, world, cfg, k) for cfg, k in cases]


@pytest.fixture(scope="module")
def results():
    return run_world(_resume_all_entry, 3, CASES, timeout=200)


def _resume_all_entry(rank: int, world: int, cases: list) -> list:  # module level: picklable
    return _resume_all(rank, world, cases)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("k", range(len(CASES)))
def test_resume_equals_uninterrupted(results, k: int) -> None:
    cfg, stop_after = CASES[k]
    saw_done = saw_replay = False
    for rank, per_case in enumerate(results):
        r = per_case[k]
        assert r["first"] + r["rest"] == r["full"], f"rank {rank}: resumed run differs ({cfg})"
        assert len(r["first"]) <= stop_after
        saw_done |= r["done"]
        saw_replay |= r["replay"] > 0
    if cfg.get("iterable") and cfg.get("uneven") != "pad":
        assert saw_done, "the case should checkpoint a rank that already finished"
    assert saw_replay or k == 4, "the checkpoint should fall inside a round"
