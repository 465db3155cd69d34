"""Optimizer updates of a set number of loss tokens from ODB's steps (``TokenUpdates``).

ODB sizes a step by its budget on padded tokens; where the loss counts other tokens (a
VLM's captions beside its image tokens, an SFT prompt's masked turns) the loss tokens
per step vary widely, and one update per step gives a step with one caption the
weight of one with twenty. ``TokenUpdates`` accumulates steps into updates of about a
set number of loss tokens: every rank closes an update at the same step, and the
accumulated gradient is the per-token mean over the update's tokens (Eq. 2 over the
update), as DDP would average it.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import numpy as np
import pytest
import torch
from batching_mp import LMDataset, TinyLM, lm_collate, lm_lengths, reference_grad, token_loss_sum

from youmu.batching import TokenUpdates, label_token_count, simulate, simulate_ranks
from youmu.batching.algo.loss import TOKEN_UPDATES_STATE
from youmu.errors import ArgumentTypeError, InvalidArgumentError


def _cv(xs: list[float]) -> float:
    return float(np.std(xs) / np.mean(xs))


def test_updates_even_out_the_loss_tokens_and_close_on_every_rank_together() -> None:
    # a VLM's shape: lengths (image + text tokens) spread 4..320, loss tokens (the
    # caption) about 60 whatever the image: ODB's steps hold 1 to ~30 captions
    rng = random.Random(0)
    lengths = [int(rng.uniform(4, 256)) + 64 for _ in range(1200)]
    tokens = [rng.randint(50, 70) for _ in lengths]
    res = simulate(lengths, world_size=2, token_budget=512, pool_size=128, tokens=tokens, keep_trace=True)
    per_step = [st.info.global_num_tokens for st in res.trace[0]]
    assert _cv(per_step) > 0.4  # what one update per step would average over
    target = 16 * 60
    closes, sizes = [], []
    for r in range(2):
        updates = TokenUpdates(target)
        pending, mine = 0.0, []
        for st in res.trace[r]:
            pending += st.info.global_num_tokens
            factor = updates.add(st.info)
            mine.append(factor is not None)
            if factor is not None:
                if r == 0:
                    sizes.append(pending)
                assert factor == pytest.approx(target / pending)
                pending = 0.0
        if pending:
            assert updates.flush() == pytest.approx(target / pending)
            if r == 0:
                sizes.append(pending)
        assert updates.flush() is None  # nothing left
        closes.append(mine)
    assert closes[0] == closes[1]  # the same steps close updates on both ranks
    assert _cv(sizes[:-1]) < 0.3 and _cv(sizes[:-1]) < _cv(per_step) / 2
    assert abs(np.mean(sizes) - target) < 0.25 * target
    assert sum(sizes) == sum(tokens)


def test_accumulated_gradient_is_the_per_token_mean_over_the_update() -> None:
    # two ranks' groups from the real round protocol; DDP's all-reduce is the mean of
    # the ranks' gradients of ``scaled_loss``; after ``add``'s factor the accumulated
    # gradient equals one process's per-token mean over every sample of the update
    lengths = lm_lengths("longtail", 60)
    ds = LMDataset(lengths)
    idx = [list(range(r, len(lengths), 2)) for r in range(2)]
    count = label_token_count()  # what the loss counts (masked prompt, shifted labels)
    tokens = [[count(ds[i]) for i in ix] for ix in idx]
    res = simulate_ranks([[lengths[i] for i in ix] for ix in idx], token_budget=40, pool_size=8,
                         rank_tokens=tokens, rank_indices=idx, keep_trace=True)
    assert res.steps >= 6
    target = int(sum(map(sum, tokens)) / 4)  # about 4 updates over the epoch
    updates = TokenUpdates(target)
    model = TinyLM()
    acc = torch.zeros(sum(p.numel() for p in model.parameters()), dtype=torch.float64)
    ids: list[int] = []
    checked = 0

    def check(factor: float) -> None:
        ref = reference_grad(ds, ids)
        assert float((acc * factor - ref).norm() / ref.norm()) < 1e-10

    for k in range(res.steps):
        grads = []
        for r in range(2):
            st = res.trace[r][k]
            model.zero_grad()
            if st.items:
                loss, _ = token_loss_sum(model, lm_collate([ds[it.index] for it in st.items]))
                updates.scaled_loss(loss, st.info).backward()
                grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
                ids.extend(it.index for it in st.items)
            else:
                grads.append(torch.zeros_like(acc))
        acc += torch.stack(grads).mean(0)  # DDP's average over the ranks
        factor = updates.add(res.trace[0][k].info)
        if factor is not None:
            check(factor)
            checked += 1
            acc.zero_()
            ids = []
    factor = updates.flush()
    if factor is not None:
        check(factor)
        checked += 1
    assert checked == updates.updates >= 3


def test_a_padding_step_adds_no_loss() -> None:
    st = simulate_ranks([[3, 3], [3]], token_budget=3, pool_size=2, keep_trace=True).trace[0][0]
    padding = dataclasses.replace(st.info, is_padding=True)
    updates = TokenUpdates(10)
    assert updates.scaled_loss(2.0, padding) == 0.0
    assert updates.scaled_loss(2.0, st.info) == pytest.approx(2.0 * 2 / 10)


@pytest.mark.parametrize("bad, error", [(0, InvalidArgumentError), (-5, InvalidArgumentError),
                                        (1.5, ArgumentTypeError), (True, ArgumentTypeError),
                                        ("100", ArgumentTypeError)])
def test_tokens_per_update_is_a_positive_int(bad, error) -> None:
    with pytest.raises(error, match="tokens_per_update"):
        TokenUpdates(bad)


def _vlm_steps(seed: int = 0) -> list[Any]:
    """Rank 0's step infos of a VLM-shaped epoch (loss tokens ~60 a sample, 1 to ~30 samples a step)."""
    rng = random.Random(seed)
    lengths = [int(rng.uniform(4, 256)) + 64 for _ in range(600)]
    tokens = [rng.randint(50, 70) for _ in lengths]
    res = simulate(lengths, world_size=2, token_budget=512, pool_size=128, tokens=tokens, keep_trace=True)
    return [st.info for st in res.trace[0]]


def _closing(updates: TokenUpdates, infos: list[Any]) -> list[tuple[int, float]]:
    """``(step, factor)`` of every update the steps close, the epoch's flush last (step -1)."""
    out = [(info.step, f) for info in infos if (f := updates.add(info)) is not None]
    if (f := updates.flush()) is not None:
        out.append((-1, f))
    return out


@pytest.mark.parametrize("cut", ["at a boundary", "mid-update"])
def test_a_resumed_token_updates_closes_the_uninterrupted_runs_updates(cut: str) -> None:
    """Saved after some steps and loaded into a fresh ``TokenUpdates`` (through JSON, as a
    checkpoint holds it), the rest of the epoch closes the same updates at the same steps
    with the same factors, and counts the same updates, as the run that never stopped."""
    infos = _vlm_steps()
    full = TokenUpdates(960)
    want = _closing(full, infos)
    assert len(want) >= 5
    first = TokenUpdates(960)
    k = 0
    while True:  # the third update's closing step, or the step after it
        k += 1
        if first.add(infos[k - 1]) is not None and first.updates == 3:
            break
    if cut == "mid-update":
        first.add(infos[k])
        k += 1
        assert not first.at_boundary
    else:
        assert first.at_boundary
    resumed = TokenUpdates(960)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert resumed.at_boundary == first.at_boundary
    got = _closing(resumed, infos[k:])
    assert got == [(s, f) for s, f in want if s == -1 or s >= k]
    assert resumed.updates == full.updates and resumed.state_dict() == full.state_dict()


def test_the_state_is_plain_data_and_keeps_its_format() -> None:
    updates = TokenUpdates(100)
    assert updates.state_dict() == {"format": "youmu.TokenUpdates/1", "tokens_per_update": 100, "tokens_seen": 0.0,
                                    "pending": 0.0, "updates": 0}
    assert list(updates.state_dict()) == ["format", *(f.name for f in TOKEN_UPDATES_STATE.fields)]
