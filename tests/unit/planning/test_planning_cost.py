"""Cost models: MegaScale-Data's 1.16 example, the FLOPs accounting, calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from youmu.planning import PRESETS, CostModel, ModelConfig, attention_cost
from youmu.planning.engine.cost import as_csr


def test_paper_example_30_70_vs_50_50_is_1_16() -> None:
    # MegaScale-Data §1: "a complete sequence composed of 30-token and 70-token
    # subsequences incurs 16% more computation than two 50-token subsequences"
    for cfg in [None, "llama-12b", "vit-2b", ModelConfig(hidden=64, num_layers=1, causal=False)]:
        model = CostModel.from_config(cfg)
        quad, lin, const = model.terms([[30, 70], [50, 50]])
        assert quad[0] / quad[1] == pytest.approx(1.16, abs=1e-12)
        assert lin[0] == lin[1] and const[0] == const[1]  # same tokens: same linear part
        total = attention_cost([[30, 70], [50, 50]], cfg)
        assert total[0] > total[1]
    assert CostModel(a=1.0)([[30, 70], [50, 50]]).tolist() == [5800.0, 5000.0]


def test_flops_formula_by_hand() -> None:
    # h=8, f=32 (plain MLP), 2 heads, 1 layer, vocab 10, forward only, full attention
    cfg = ModelConfig(hidden=8, num_layers=1, num_heads=2, ffn_hidden=32, gated=False, vocab_size=10,
                      causal=False, training=False)
    m = CostModel.from_config(cfg)
    s = 5
    proj = 2 * s * (4 * 8 * 8)           # Q, K, V, O
    mlp = 2 * s * (2 * 8 * 32)           # up + down
    attn = 4 * 8 * s * s                 # QK^T + AV
    head = 2 * s * 8 * 10
    assert m([[s]])[0] == proj + mlp + attn + head


def test_config_knobs_move_the_right_terms() -> None:
    base = ModelConfig(hidden=256, num_layers=4, num_heads=8)
    b = CostModel.from_config(base)
    causal_off = CostModel.from_config(ModelConfig(hidden=256, num_layers=4, num_heads=8, causal=False))
    assert causal_off.a == 2 * b.a and causal_off.b == b.b
    gqa = CostModel.from_config(ModelConfig(hidden=256, num_layers=4, num_heads=8, num_kv_heads=2))
    assert gqa.b < b.b and gqa.a == b.a
    moe = CostModel.from_config(ModelConfig(hidden=256, num_layers=4, num_heads=8, experts_per_token=2))
    assert moe.b > b.b and moe.a == b.a
    fwd = CostModel.from_config(ModelConfig(hidden=256, num_layers=4, num_heads=8, training=False))
    assert b.a == pytest.approx(3 * fwd.a) and b.b == pytest.approx(3 * fwd.b)
    assert base.ffn == 768  # 8h/3 = 682.7 rounded up to a multiple of 256


def test_presets_follow_table_1() -> None:
    t1 = {"vit-1b": (39, 16, 1408), "vit-2b": (48, 16, 1664), "llama-12b": (45, 36, 4608),
          "tmoe-25b": (42, 16, 2048), "mixtral-8x7b": (32, 32, 4096)}
    for name, (layers, heads, hidden) in t1.items():
        cfg = ModelConfig.preset(name)
        assert (cfg.num_layers, cfg.num_heads, cfg.hidden) == (layers, heads, hidden)
    assert ModelConfig.preset("tmoe-25b").experts_per_token == 2
    assert set(PRESETS) == set(t1)
    with pytest.raises(ValueError, match="unknown preset"):
        ModelConfig.preset("gpt-5")


def test_inputs_and_errors() -> None:
    assert attention_cost([[7]]).shape == (1,)
    assert attention_cost([]).shape == (0,)
    assert attention_cost([[]]).tolist() == [0.0]  # an empty sequence costs nothing (c = 0)
    with pytest.raises(TypeError, match=r"\[\[l\]\]"):
        attention_cost([30, 70])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=">= 0"):
        attention_cost([[-1]])
    with pytest.raises(ValueError):
        ModelConfig(hidden=0)
    with pytest.raises(ValueError):
        ModelConfig(num_heads=8, num_kv_heads=16)
    with pytest.raises(ValueError):
        CostModel(a=-1.0)
    lengths, offsets = as_csr([[1, 2], [], [3]])
    assert lengths.tolist() == [1, 2, 3] and offsets.tolist() == [0, 2, 2, 3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), min_size=1, max_size=6))
def test_cost_is_additive_over_documents_and_convex(seqs: list[list[int]]) -> None:
    m = CostModel.from_config("llama-12b")
    packed = m(seqs)
    alone = np.array([sum(m([[d] for d in s])) for s in seqs])
    np.testing.assert_allclose(packed, alone, rtol=1e-12)  # c = 0: a pack costs its documents
    # merging all documents of a sequence into one never costs less (Σl² <= (Σl)²)
    merged = m([[sum(s)] for s in seqs])
    assert (merged >= packed - 1e-6 * np.abs(packed)).all()


def test_fit_recovers_coefficients_with_noise() -> None:
    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(16, 2048, size=rng.integers(1, 6))) for _ in range(80)]
    truth = CostModel(a=3e-7, b=2e-4, c=5e-3)
    times = truth(seqs) * rng.normal(1.0, 0.01, size=len(seqs))
    fit = CostModel.fit(seqs, times)
    assert fit.a == pytest.approx(truth.a, rel=0.05)
    assert fit.b == pytest.approx(truth.b, rel=0.05)
    assert fit.r2 is not None and fit.r2 > 0.99
    assert fit.mape is not None and fit.mape < 0.03
    assert fit.source == "fit"


def test_fit_keeps_coefficients_non_negative() -> None:
    # purely linear data with a negative intercept pull: the constrained fit drops c
    seqs = [[n] for n in (10, 20, 40, 80, 160)]
    times = [2.0 * n - 5.0 for n in (10, 20, 40, 80, 160)]
    fit = CostModel.fit(seqs, times)
    assert fit.a >= 0 and fit.b >= 0 and fit.c >= 0
    assert fit.r2 is not None and fit.r2 > 0.98
    with pytest.raises(ValueError, match="at least 3"):
        CostModel.fit([[1], [2]], [1.0, 2.0])
    with pytest.raises(ValueError, match="times"):
        CostModel.fit([[1], [2], [3]], [1.0, 2.0])


def test_scaled_and_lengths() -> None:
    m = CostModel(a=2.0, b=3.0, c=1.0)
    assert m.of_lengths([0, 2]).tolist() == [1.0, 15.0]
    assert m.scaled(0.5)([[2]])[0] == pytest.approx(7.5)
    assert not math.isnan(m.of_lengths([5])[0])
