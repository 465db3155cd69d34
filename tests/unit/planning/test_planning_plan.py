"""The declarative plan: metadata, mix/distribute/cost/balance, determinism, and exact
gradients under re-assignment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workloads import arrival_assignment, coyo_like

from youmu.errors import PlanError
from youmu.planning import Mesh, MixingSchedule, Planner, SampleMeta, gather_metadata

ROOT = Path(__file__).resolve().parents[3]


def _meta(n: int = 96, seed: int = 0, sources: int = 1) -> SampleMeta:
    w = coyo_like(n, seed=seed)
    rng = np.random.default_rng(seed)
    return SampleMeta.build(ids=np.arange(n) * 7 + 3, lengths=w.backbone,
                            sources=rng.integers(0, sources, size=n), origin=rng.integers(0, 4, size=n))


# -- metadata -----------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5000), min_size=0, max_size=4), min_size=0, max_size=20), st.data())
def test_meta_encode_take_concat_roundtrip(docs: list[list[int]], data: st.DataObject) -> None:
    n = len(docs)
    m = SampleMeta.build(ids=range(100, 100 + n), docs=docs, sources=[i % 3 for i in range(n)],
                         tokens=[max(sum(d) - 1, 0) for d in docs], origin=1)
    back = SampleMeta.decode(m.encode(), origin=1)
    for f in ("ids", "sources", "doc_lengths", "doc_offsets", "tokens", "origin"):
        assert np.array_equal(getattr(back, f), getattr(m, f))
    rows = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n)) if n else []
    sub = m.take(rows)
    assert [sub.docs(i) for i in range(len(sub))] == [docs[r] for r in rows]
    both = SampleMeta.concat([m, sub])
    assert both.seqs() == docs + [docs[r] for r in rows]


def test_meta_errors() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        SampleMeta.build(ids=[1], lengths=[1], docs=[[1]])
    with pytest.raises(ValueError, match="unique"):
        SampleMeta.build(ids=[1, 1], lengths=[1, 2])
    with pytest.raises(ValueError, match="lengths"):
        SampleMeta.build(ids=[1, 2], lengths=[1])


def test_mesh_buckets() -> None:
    mesh = Mesh(dp=3, cp=2, tp=4, pp=2)
    assert mesh.world_size == 48
    dp_of = [mesh.bucket_of(r, "DP") for r in range(48)]
    assert sorted(set(dp_of)) == [0, 1, 2] and all(dp_of.count(b) == 16 for b in range(3))
    cp_of = [mesh.bucket_of(r, "CP") for r in range(48)]
    assert sorted(set(cp_of)) == list(range(6))
    assert mesh.bucket_of(0, "CP") == mesh.bucket_of(3, "CP") != mesh.bucket_of(4, "CP")  # TP shares data
    assert [mesh.bucket_of(r, "WORLD") for r in range(48)] == list(range(48))
    p = Planner().distribute(axis="CP", mesh=mesh, num_microbatches=2)
    assert p.num_buckets == 6
    with pytest.raises(ValueError):
        mesh.num_buckets("TP")


# -- the pipeline --------------------------------------------------------------------------------
def test_mix_selects_schedule_counts_fifo_and_random() -> None:
    meta = _meta(200, sources=3)
    sched = MixingSchedule({"a": 0.5, "b": 0.3, "c": 0.2})
    base = Planner(seed=5).distribute(4, num_microbatches=2).cost("llama-12b").balance("greedy")
    fifo = base.mix(sched, global_batch_size=40).plan(3, meta)
    want = sched.counts(3, 40)
    for s, name in enumerate(("a", "b", "c")):
        cand = np.nonzero(meta.sources == s)[0]
        chosen = fifo.selected[meta.sources[fifo.selected] == s]
        assert chosen.tolist() == cand[: want[name]].tolist()  # buffer order
    assert fifo.unselected.size == 160
    assert (fifo.buckets[fifo.unselected] == -1).all()
    rnd = base.mix(sched, global_batch_size=40, select="random")
    a, b = rnd.plan(3, meta), rnd.plan(4, meta)
    assert a.fingerprint == rnd.plan(3, meta).fingerprint
    assert not np.array_equal(a.selected, b.selected)
    with pytest.raises(PlanError, match="buffered"):
        base.mix(sched, global_batch_size=500).plan(0, meta)


def test_plan_fields_loss_scales_and_capacity() -> None:
    meta = _meta(128)
    plan = (Planner().distribute(4, num_microbatches=4, capacity=6000).cost("llama-12b").balance("kk")
            .plan(0, meta))
    placed = plan.buckets >= 0
    assert placed.sum() + plan.deferred.size == len(meta)
    sizes = np.zeros((4, 4))
    np.add.at(sizes, (plan.buckets[placed], plan.bins[placed]), meta.sizes[placed])
    assert sizes.max() <= 6000
    scales = [plan.loss_scale(b, j) for b in range(4) for j in range(4)]
    assert sum(scales) == pytest.approx(4.0)  # Σ W·t/T = W
    ids = sorted(i for b in range(4) for mb in plan.ids(b) for i in mb)
    assert ids == sorted(meta.ids[placed].tolist())
    assert plan.stats.bin_max_over_min < 1.1


def test_planner_is_immutable_and_validates() -> None:
    p = Planner()
    q = p.distribute(2)
    assert p.num_buckets is None and q.num_buckets == 2
    with pytest.raises(ValueError, match="distribute"):
        p.plan(0, _meta(4))
    with pytest.raises(ValueError, match="interleave"):
        q.balance("interleave")
    with pytest.raises(TypeError):
        q.cost(42)
    with pytest.raises(ValueError, match="group_size"):
        Planner().distribute(4, group_size=3)


def test_plans_identical_across_ranks_and_processes() -> None:
    """Every rank plans from the same gathered metadata; a separate interpreter (another
    hash seed, as another rank or a restarted run would be) must produce the same plans."""
    code = (
        "import json, sys\n"
        "sys.path.insert(0, 'python'); sys.path.insert(0, 'tests/support'); sys.path.insert(0, 'tests/unit/planning')\n"
        "from test_planning_plan import _fingerprints\n"
        "print(json.dumps(_fingerprints()))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT / "python"))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == _fingerprints()


def _fingerprints() -> list[str]:
    sched = MixingSchedule([(0, {"a": 1, "b": 1}), (3, {"a": 1, "b": 3, "c": 1})])
    planner = (Planner(seed=11).mix(sched, global_batch_size=64, select="random")
               .distribute(4, num_microbatches=2, capacity=8192).cost("llama-12b").balance("kk"))
    return [planner.plan(step, _meta(300, seed=step, sources=3)).fingerprint for step in range(6)]


def test_gather_metadata_local_channel() -> None:
    pytest.importorskip("torch")
    from youmu.distributed import GlooChannel

    meta = _meta(10)
    got = gather_metadata(GlooChannel.local(), meta)
    assert got.ids.tolist() == meta.ids.tolist() and (got.origin == 0).all()


# -- exact gradients ------------------------------------------------------------------------------
def _ddp_gradient(model, samples, assignment, n: int, m: int, scales) -> np.ndarray:
    """What DDP with gradient accumulation computes: each rank sums the gradients of
    its micro-batches' scaled mean losses; the all-reduce averages over ranks."""
    import torch

    total = None
    for r in range(n):
        for j in range(m):
            rows = [i for i, a in enumerate(assignment) if a == (r, j)]
            if not rows:
                continue
            model.zero_grad()
            logits = torch.cat([model(samples[i][0]) for i in rows])
            target = torch.cat([samples[i][1] for i in rows])
            loss = torch.nn.functional.cross_entropy(logits, target) * scales(r, j, rows)
            loss.backward()
            g = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().numpy()
            total = g if total is None else total + g
    return total / n


def test_reorder_only_keeps_the_summed_gradient() -> None:
    torch = pytest.importorskip("torch")
    from youmu.planning.engine.balance import balance
    torch.manual_seed(0)
    vocab, n, m = 40, 4, 3
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(2, 12, size=40), rng.integers(60, 200, size=8)])
    rng.shuffle(lengths)
    samples = [(torch.from_numpy(rng.integers(0, vocab, size=k)), torch.from_numpy(rng.integers(0, vocab, size=k)))
               for k in lengths]
    T = int(lengths.sum())

    def exact(r, j, rows):  # W · t_rj / T
        return n * sum(int(lengths[i]) for i in rows) / T

    # unbalanced: arrival order, n*m formed micro-batches
    before = arrival_assignment(len(samples), n, m)
    units = [[i for i, a in enumerate(before) if a == (r, j)] for r in range(n) for j in range(m)]
    unit_cost = np.array([sum(float(lengths[i]) ** 2 for i in u) for u in units])
    placed = balance(unit_cost, n, m, "kk", reorder_only=True)
    after = [None] * len(samples)
    for u, slot in zip(units, placed):
        for i in u:
            after[i] = slot
    assert after != before  # the placement really moved micro-batches

    reference = _ddp_gradient(model, samples, [(0, 0)] * len(samples), 1, 1, lambda r, j, rows: 1.0)
    g_before = _ddp_gradient(model, samples, before, n, m, exact)
    g_after = _ddp_gradient(model, samples, after, n, m, exact)
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    assert rel(g_before, reference) <= 1e-6
    assert rel(g_after, g_before) <= 1e-6

    # sample-level re-balancing changes the micro-batches but not the global batch
    full = balance(lengths.astype(float) ** 2, n, m, "greedy")
    assert rel(_ddp_gradient(model, samples, full, n, m, exact), reference) <= 1e-6

    # negative controls: the usual "mean loss / m" weighting is not the per-token mean,
    # and sample-level re-balancing changes what it computes (the exact scaling does not)
    naive = lambda r, j, rows: 1.0 / m  # noqa: E731
    g_naive = _ddp_gradient(model, samples, before, n, m, naive)
    assert rel(g_naive, reference) > 1e-3
    assert rel(_ddp_gradient(model, samples, full, n, m, naive), g_naive) > 1e-3
