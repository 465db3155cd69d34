"""Vision-language batching and balancing.

* ODB over image-text samples: a backbone token budget (padded area, ODB Eq. 1) plus a
  second budget on encoder patches (real units); on 2 and 3 Gloo ranks whose
  visual-token counts differ by two orders of magnitude: every sample once, equal
  step counts, and gradients equal to a single-process per-token mean (exact
  token-level loss scaling, ODB Eq. 2).
* MegaScale-Data's hybrid balance (encoder + backbone) against single-cost balancing
  on a skewed workload, and the colocated two-cost balancer.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from batching_mp import run_world
from hypothesis import given, settings
from hypothesis import strategies as st
from vlm_mp import balanced_scenario, mismatch_scenario, odb_scenario, reference_grad, sample_shapes
from workloads import navit_like

from youmu.batching import form_groups
from youmu.batching.algo.simulation import simulate_ranks
from youmu.errors import InvalidArgumentError
from youmu.planning import CostModel, balance_detailed
from youmu.planning.engine.hybrid import balance_colocated, balance_hybrid, module_imbalance


# ------------------------------------------------------------------------------------------
# grouping with a second budget (pure)
# ------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 900)), max_size=60),
       st.integers(1, 1000), st.integers(1, 1500))
def test_groups_respect_both_budgets(samples, budget, extra_budget) -> None:
    lengths = [n for n, _ in samples]
    extra = [e for _, e in samples]
    groups = form_groups(lengths, budget, extra, extra_budget)
    assert sorted(i for g in groups for i in g) == list(range(len(samples)))
    for g in groups:
        if len(g) > 1:
            assert len(g) * max(lengths[i] for i in g) <= budget
            assert sum(extra[i] for i in g) <= extra_budget
        assert [lengths[i] for i in g] == sorted(lengths[i] for i in g)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=60), st.integers(1, 1000))
def test_unbounded_second_budget_changes_nothing(lengths, budget) -> None:
    assert form_groups(lengths, budget, [1] * len(lengths), 10**9) == form_groups(lengths, budget)


def test_second_budget_closes_groups_early() -> None:
    # equal lengths: one group of 4 on the backbone budget alone; 2 + 2 by patches
    assert form_groups([10] * 5, 40) == [[0, 1, 2, 3], [4]]
    assert form_groups([10] * 5, 40, [500] * 5, 1000) == [[0, 1], [2, 3], [4]]
    with pytest.raises(InvalidArgumentError, match="extra"):
        form_groups([10], 40, [1], None)
    with pytest.raises(InvalidArgumentError, match="extra_budget"):
        form_groups([10], 40, [1], 0)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 4), st.integers(0, 2**31 - 1), st.sampled_from([4, 16, 64]))
def test_simulated_ranks_with_wildly_different_visual_counts(world, seed, buffer) -> None:
    rng = np.random.default_rng(seed)
    # rank r's images are ~8^r times larger; the ranks hold different sample counts
    patches = [list(rng.integers(4, 12, size=int(rng.integers(0, 40))) * 8**r) for r in range(world)]
    lengths = [[int(p) // 4 + int(rng.integers(3, 30)) for p in ps] for ps in patches]
    res = simulate_ranks(lengths, token_budget=600, pool_size=buffer, rank_extra=patches, extra_budget=2048,
                         keep_trace=True)
    for r in range(world):
        assert sorted(res.emitted_keys[r]) == list(range(len(lengths[r])))
        for step in res.trace[r]:
            if len(step.items) > 1:
                assert sum(it.extra for it in step.items) <= 2048
                assert step.info.padded_tokens <= 600


# ------------------------------------------------------------------------------------------
# ODB on real multimodal samples over Gloo
# ------------------------------------------------------------------------------------------
CFG = {"n": 120, "token_budget": 800, "encoder_budget": 3072, "buffer": 32}


@pytest.fixture(scope="module", params=[2, 3])
def odb_world(request):
    world = request.param
    return world, run_world(odb_scenario, world, CFG, timeout=150)


def test_odb_multimodal_every_sample_once_equal_steps(odb_world) -> None:
    world, per_rank = odb_world
    shapes = sample_shapes(CFG["n"], world)
    assert len({len(rows) for rows in per_rank}) == 1  # uneven="pad": the same step count everywhere
    seen = [i for rows in per_rank for row in rows for i in row["ids"]]
    assert sorted(seen) == list(range(CFG["n"]))
    # the visual-token counts really differ across ranks
    med = [np.median([shapes[i][1] for i in range(CFG["n"]) if shapes[i][0] == r]) for r in range(world)]
    assert max(med) / min(med) > 8 ** (world - 1) / 2


def test_odb_multimodal_budgets(odb_world) -> None:
    _, per_rank = odb_world
    multi = 0
    for rows in per_rank:
        for row in rows:
            if len(row["ids"]) > 1:
                multi += 1
                assert len(row["lengths"]) * max(row["lengths"]) <= CFG["token_budget"]
                assert sum(row["patches"]) <= CFG["encoder_budget"]
    assert multi >= 5  # the budgets were exercised by real groups


def test_odb_multimodal_exact_loss_scale(odb_world) -> None:
    world, per_rank = odb_world
    shapes = sample_shapes(CFG["n"], world)
    for k in range(len(per_rank[0])):
        rows = [rows[k] for rows in per_rank]
        assert len({r["step"] for r in rows}) == 1
        grads = {tuple(np.round(r["grad"], 12)) for r in rows}
        assert len(grads) == 1  # the all-reduced gradient is the same on every rank
        ids = [i for r in rows for i in r["ids"]]
        if not ids:
            continue
        ref = reference_grad(shapes, ids)
        assert torch.allclose(torch.tensor(rows[0]["grad"], dtype=torch.float64), ref, rtol=1e-9, atol=1e-12), k


def test_encoder_budget_on_one_rank_only_is_refused_not_a_hang() -> None:
    for r in run_world(mismatch_scenario, 2, timeout=120):
        assert r["error"] == "LoaderError" and "settings" in r["message"] and r["steps"] == 0, r


# ------------------------------------------------------------------------------------------
# encoder + backbone balancing (MegaScale-Data hybrid balance)
# ------------------------------------------------------------------------------------------
VIT = CostModel.from_config("vit-2b")
LLM = CostModel.from_config("llama-12b")


def _workload(n: int, seed: int):
    w = navit_like(n, seed=seed, patch_merge=4, text_median=60.0)
    return w, LLM.of_lengths(w.backbone), VIT.of_lengths(w.patches)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hybrid_balances_both_modules_better_than_single_cost(seed) -> None:
    n_ranks, m = 8, 4
    w, bb, enc = _workload(256, seed)
    # single-cost balancers: each leaves the other module to chance
    by_bb = balance_detailed(bb, n_ranks, m).assignment
    by_enc = balance_detailed(enc, n_ranks, m).assignment
    bb_only = module_imbalance(bb, enc, by_bb, n_ranks, m)
    enc_only = module_imbalance(bb, enc, by_enc, n_ranks, m)

    hyb = balance_hybrid(bb, [[p] for p in enc], n_ranks, m)
    assert hyb.backbone.stats.bucket_max_over_mean <= bb_only[0].bucket_max_over_mean + 1e-12
    assert hyb.backbone.stats.bucket_max_over_mean < enc_only[0].bucket_max_over_mean
    assert hyb.encoder.bucket_max_over_mean < bb_only[1].bucket_max_over_mean
    assert hyb.encoder.step_time < bb_only[1].step_time
    # MegaScale-Data §7.3 compares hybrid balance with backbone balance (Fig. 13)
    assert hyb.step_time < bb_only[0].step_time + bb_only[1].step_time

    col = balance_colocated(bb, enc, n_ranks, m)
    assert col.backbone.bucket_max_over_mean < enc_only[0].bucket_max_over_mean
    assert col.encoder.bucket_max_over_mean < bb_only[1].bucket_max_over_mean
    assert col.step_time < min(bb_only[0].step_time + bb_only[1].step_time,
                               enc_only[0].step_time + enc_only[1].step_time)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3000), st.lists(st.integers(1, 5000), max_size=3)), max_size=80),
       st.integers(1, 6), st.integers(1, 4), st.sampled_from(["greedy", "kk"]))
def test_hybrid_places_every_image_once_and_is_deterministic(samples, n, m, method) -> None:
    bb = LLM.of_lengths([t for t, _ in samples])
    images = [VIT.of_lengths(ps).tolist() for _, ps in samples]
    a = balance_hybrid(bb, images, n, m, method=method)
    b = balance_hybrid(bb, images, n, m, method=method)
    assert np.array_equal(a.image_rank, b.image_rank) and a.routes() == b.routes()
    n_images = sum(len(ps) for _, ps in samples)
    routes = a.routes()
    assert sorted(r[0] for r in routes) == list(range(n_images))
    for img, e, r, j in routes:
        s = int(a.image_sample[img])
        assert (a.backbone.buckets[s], a.backbone.bins[s]) == (r, j) and 0 <= e < n
    total = sum(sum(x) for x in images)
    assert a.encoder.bin_costs.sum() == pytest.approx(total)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(0, 5000)), max_size=80),
       st.integers(1, 5), st.integers(1, 4))
def test_colocated_capacity_and_determinism(samples, n, m) -> None:
    sizes = [t for t, _ in samples]
    bb, enc = LLM.of_lengths(sizes), VIT.of_lengths([p for _, p in samples])
    a = balance_colocated(bb, enc, n, m, capacity=512, sizes=sizes, on_overflow="defer")
    b = balance_colocated(bb, enc, n, m, capacity=512, sizes=sizes, on_overflow="defer")
    assert a.assignment == b.assignment
    load = np.zeros((n, m))
    for i, (s, slot) in enumerate(zip(sizes, a.assignment)):
        assert (slot is None) == (i in a.deferred.tolist())
        if slot is not None:
            load[slot] += s
    assert load.max(initial=0) <= 512
    if sum(sizes) <= 512:
        assert a.deferred.size == 0


# ------------------------------------------------------------------------------------------
# the planner and BalancedLoader with an encoder cost model
# ------------------------------------------------------------------------------------------
def test_sample_meta_carries_images_over_the_wire() -> None:
    from youmu.planning import SampleMeta

    a = SampleMeta.build(ids=[0, 1], lengths=[5, 6], images=[[16, 64], []], origin=0)
    b = SampleMeta.build(ids=[2], lengths=[7], origin=1)  # a text-only rank
    both = SampleMeta.concat([SampleMeta.decode(a.encode(), 0), SampleMeta.decode(b.encode(), 1)])
    assert both.image_lists() == [[16, 64], [], []]
    assert both.take([2, 0]).image_lists() == [[], [16, 64]]
    assert SampleMeta.decode(b.encode()).image_patches is None  # text-only wire format unchanged
    with pytest.raises(InvalidArgumentError, match="image"):
        SampleMeta.decode(np.concatenate([a.encode(), [5]]))


def test_planner_encoder_balances_both_modules() -> None:
    from youmu.planning import Planner, SampleMeta

    w, bb, enc = _workload(128, 3)
    meta = SampleMeta.build(ids=range(len(w)), lengths=w.backbone, images=[[int(p)] for p in w.patches])
    base = Planner().distribute(4, num_microbatches=2).cost("llama-12b")
    plain = base.plan(0, meta)
    both = base.encoder("vit-2b").plan(0, meta)
    assert both.method == "colocated" and both.encoder_stats is not None
    assert np.allclose(both.encoder_costs, enc)
    plain_enc = module_imbalance(bb, enc, list(zip(plain.buckets, plain.bins)), 4, 2)[1]
    assert both.encoder_stats.bucket_max_over_mean < plain_enc.bucket_max_over_mean
    assert both.stats.bucket_max_over_mean < 1.25


def test_balanced_loader_with_encoder_cost() -> None:
    from youmu.planning import BalancedLoader

    w, _, enc = _workload(96, 4)
    data = [{"id": i, "input_ids": [0] * int(n), "encoder_patches": int(p)}
            for i, (n, p) in enumerate(zip(w.backbone, w.patches))]

    def run(**kw):
        loader = BalancedLoader(data, num_microbatches=4, global_batch_size=48, cost="llama-12b", prefetch=0,
                                id_fn=lambda s: s["id"], **kw)
        out = list(loader)
        return out, loader

    plain, _ = run()
    both, loader = run(encoder_cost="vit-2b", images_fn=lambda s: s["encoder_patches"])
    assert sorted(s["id"] for b, _ in both for s in b) == list(range(96))  # every sample once
    for items in (plain, both):
        # exact loss scales: the per-token weights sum to one per step
        for step in {i.step for _, i in items}:
            assert sum(i.loss_scale for _, i in items if i.step == step) == pytest.approx(1.0)

    def spread(items):  # encoder cost per micro-batch, max/mean over a step
        out = []
        for step in sorted({i.step for _, i in items}):
            c = [sum(enc[s["id"]] for s in b) for b, i in items if i.step == step]
            out.append(max(c) / np.mean(c))
        return max(out)

    assert spread(both) < spread(plain)
    assert all(i.encoder_cost > 0 for _, i in both) and all(i.encoder_cost == 0 for _, i in plain)
    # a saved state carries the images of held samples and resumes
    st = loader.state_dict()
    assert st["config"] != BalancedLoader(data, num_microbatches=4, global_batch_size=48,
                                          cost="llama-12b").config_fingerprint()
    with pytest.raises(InvalidArgumentError, match="together"):
        BalancedLoader(data, num_microbatches=4, global_batch_size=48, encoder_cost="vit-1b")


def test_bad_arguments_get_typed_errors_naming_them() -> None:
    from youmu.errors import ArgumentTypeError, CapacityError
    from youmu.planning import BalancedLoader

    cases = [
        (lambda: balance_hybrid([1], "abc", 1), ArgumentTypeError, "image_costs"),
        (lambda: balance_hybrid([1], [[None]], 1), ArgumentTypeError, "image_costs"),
        (lambda: balance_hybrid([1], [[-1.0]], 1), InvalidArgumentError, "image_costs"),
        (lambda: balance_hybrid([1], [[1], [2]], 1), InvalidArgumentError, "image_costs"),
        (lambda: balance_hybrid([1], [[1]], 1, num_encoder_ranks=0), InvalidArgumentError, "num_encoder_ranks"),
        (lambda: balance_colocated([1, 2], [1], 1), InvalidArgumentError, "encoder_costs"),
        (lambda: balance_colocated([1], [1], 1, capacity=4), InvalidArgumentError, "sizes"),
        (lambda: balance_colocated([1], [1], 1, capacity=4, sizes=[9]), CapacityError, "capacity"),
        (lambda: balance_colocated([float("nan")], [1], 1), InvalidArgumentError, "backbone_costs"),
    ]
    for fn, exc, name in cases:
        with pytest.raises(exc, match=name):
            fn()
    loader = BalancedLoader([{"input_ids": [1, 2]}], num_microbatches=1, global_batch_size=1, prefetch=0,
                            encoder_cost="vit-1b", images_fn=lambda s: "many")
    with pytest.raises(ArgumentTypeError, match="images_fn"):
        list(loader)


def test_balanced_loader_with_encoder_cost_over_gloo() -> None:
    import planning_mp

    world = 2
    res = planning_mp.run_world(balanced_scenario, world, timeout=150)
    assert all(status == "ok" for status, _ in res), res
    per_rank = [r for _, r in res]
    vit = CostModel.from_config("vit-2b")
    spreads = {}
    for name in ("plain", "encoder"):
        ids = sorted(i for r in per_rank for row in r[name] for i in row["ids"])
        assert ids == list(range(96))  # every sample once, wherever it was read
        steps = sorted({row["step"] for row in per_rank[0][name]})
        worst = 1.0
        for step in steps:
            rows = [row for r in per_rank for row in r[name] if row["step"] == step]
            assert sum(row["scale"] for row in rows) == pytest.approx(world)  # W·t/T over every micro-batch
            rank_enc = [sum(float(vit.of_lengths(row["patches"]).sum()) for row in r[name] if row["step"] == step)
                        for r in per_rank]
            worst = max(worst, max(rank_enc) / np.mean(rank_enc))
        spreads[name] = worst
    # the plain plan leaves rank 1 with the large images; the encoder-aware one evens them
    assert spreads["encoder"] < spreads["plain"]
    assert spreads["encoder"] < 1.5


@pytest.mark.parametrize("world", [2, 3])
def test_balanced_loader_hybrid_balance_over_gloo(world) -> None:
    """MegaScale-Data's hybrid balance end to end: every image encoded exactly once,
    its payload delivered to its encoder rank, every backbone sample told where each
    of its images' features comes from (the all-to-all's routes agree on both sides),
    and the encoder's work more even over the ranks than colocated encoding when the
    last rank reads all the huge images."""
    import planning_mp
    from vlm_mp import hybrid_images, hybrid_scenario

    res = planning_mp.run_world(hybrid_scenario, world, timeout=200)
    assert all(status == "ok" for status, _ in res), res
    per_rank = [r for _, r in res]
    shapes = sample_shapes(60, world)
    everything = {(i, k) for i, (_, p, _) in enumerate(shapes) for k in range(len(hybrid_images(i, p)))}
    vit = CostModel.from_config("vit-2b")
    worst = {}
    for mode in ("colocated", "hybrid"):
        rows = [(r, row) for r, rr in enumerate(per_rank) for row in rr[mode]]
        assert sorted(i for _, row in rows for i in row["ids"]) == list(range(60))  # every sample once
        assert {row["method"] for _, row in rows} == {mode}
        waits, ideal = 0.0, 0.0
        for key in sorted({(row["step"], row["mb"]) for _, row in rows}):
            at = {r: row for r, row in rows if (row["step"], row["mb"]) == key}
            assert sorted(at) == list(range(world))  # every rank runs every slot
            cost = [float(vit.of_lengths(at[r]["encoded_patches"]).sum()) for r in range(world)]
            # the slot's encoder phase ends when its slowest rank is done (the
            # all-to-all synchronises the ranks at every micro-batch)
            waits, ideal = waits + max(cost), ideal + float(np.mean(cost))
            if mode == "hybrid":
                assert [at[r]["enc_cost"] for r in range(world)] == pytest.approx(cost)  # what info reports
        worst[mode] = waits / ideal
    # hybrid: each image encoded once, with its own payload
    encoded = [(s, k) for r, rr in enumerate(per_rank) for row in rr["hybrid"] for _, s, k in row["encode"]]
    assert sorted(encoded) == sorted(everything)
    for rr in per_rank:
        for row in rr["hybrid"]:
            assert row["images"] == [("pixels", s, k) for _, s, k in row["encode"]]
            assert not row["pixels_left"]  # the backbone part travels without its images
    # routes: simulate the trainer's all-to-all of features for every slot
    for key in sorted({(row["step"], row["mb"]) for row in per_rank[0]["hybrid"]}):
        at = [next(row for row in rr["hybrid"] if (row["step"], row["mb"]) == key) for rr in per_rank]
        for r in range(world):
            want = [(s, k) for s in at[r]["ids"] for k in range(len(hybrid_images(s, shapes[s][1])))]
            assert [(s, k) for s, k, _ in at[r]["receive"]] == want  # each image of each backbone sample
            # what the encoder ranks send r, in all-to-all order (by encoder rank)
            delivered = [(s, k) for e in range(world) for o, s, k in at[e]["encode"] if o == r]
            assert len(delivered) == sum(at[r]["recv_counts"])
            assert [at[e]["send_counts"][r] for e in range(world)] == at[r]["recv_counts"]
            placed: list = [None] * len(delivered)
            for got, idx in zip(delivered, at[r]["recv_order"]):
                placed[idx] = got
            assert placed == want  # every feature lands where the backbone expects it
            for s, k, e in at[r]["receive"]:
                assert [r, s, k] in at[e]["encode"]  # from exactly the rank that encodes it
    assert worst["hybrid"] < worst["colocated"], worst
    assert worst["hybrid"] < 1.25, worst


def test_hybrid_balance_arguments_get_typed_errors() -> None:
    from youmu.errors import ArgumentTypeError
    from youmu.planning import BalancedLoader

    data = [{"input_ids": [1, 2], "p": [16, 16], "px": ["a", "b"]}]
    kw: dict = dict(num_microbatches=1, global_batch_size=1, prefetch=0)
    vlm: dict = dict(encoder_cost="vit-1b", images_fn=lambda s: s["p"])
    with pytest.raises(InvalidArgumentError, match="split_images_fn"):
        BalancedLoader(data, encoder_balance="hybrid", **vlm, **kw)
    with pytest.raises(InvalidArgumentError, match="split_images_fn"):
        BalancedLoader(data, split_images_fn=lambda s: (s, []), **vlm, **kw)
    with pytest.raises(InvalidArgumentError, match="encoder_cost"):
        BalancedLoader(data, encoder_balance="hybrid", split_images_fn=lambda s: (s, []), **kw)
    with pytest.raises(InvalidArgumentError, match="encoder_balance"):
        BalancedLoader(data, encoder_balance="world", **vlm, **kw)
    with pytest.raises(ArgumentTypeError, match="split_images_fn"):
        BalancedLoader(data, encoder_balance="hybrid", split_images_fn="px", **vlm, **kw)
    for split, exc in ((lambda s: (s, ["a"]), InvalidArgumentError), (lambda s: s, ArgumentTypeError),
                       (lambda s: (s, "ab"), ArgumentTypeError)):
        loader = BalancedLoader(data, encoder_balance="hybrid", split_images_fn=split, **vlm, **kw)
        with pytest.raises(exc, match="split_images_fn"):
            list(loader)
    # one process: the batch carries both images, encoded here, and their routes
    (batch, info), = BalancedLoader(data, encoder_balance="hybrid", split_images_fn=lambda s: (s["input_ids"], s["px"]),
                                    **vlm, **kw)
    assert (batch.backbone, batch.images, batch.encode, batch.receive) == (
        [[1, 2]], ["a", "b"], ((0, 0, 0), (0, 0, 1)), ((0, 0, 0), (0, 1, 0)))
    assert info.method == "hybrid" and info.encoder_cost > 0
