"""A controlled replay of the VLM demo (``examples/vlm_demo.py``) in one process: the
demo's model and data, with the optimizer updates of each arm built here, so that one
thing changes at a time. Arms (comma-separated, after the seed):

* ``fixed`` — fixed batches of 8 per rank × 2 ranks, shuffled with the data seed;
* ``fixed_o2`` — the same rule with another shuffle order (seed + 100): the spread that
  sample order alone gives;
* ``acc`` — ODB's steps (``simulate_ranks`` with the demo's budgets: 512 backbone tokens,
  1,024 patches, pool 128) closed into updates by ``TokenUpdates``' rule at the fixed
  arm's caption tokens per update, as the demo trains;
* ``acc_randcomp`` — ODB's update sizes filled with samples drawn at random (composition
  changed, sizes kept);
* ``acc_shuffled`` — ODB's updates in random order; ``acc_mixed`` — samples shuffled
  across 8 consecutive updates;
* ``equal`` — no training: an ODB batch's summed loss against its samples run one by one
  (a padding or mask bug would show here).

Each arm prints its held-out loss per caption token (300 rows drawn with seed + 1) and
its seconds; the first lines describe the updates (caption tokens, samples and backbone
length CV within an update).

    python benches/vlm_replay.py 0 fixed,fixed_o2,acc,acc_randcomp --out /tmp/vlm_replay
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import vlm_demo as V  # noqa: E402

from youmu.batching.algo.sampling import rank_indices  # noqa: E402
from youmu.batching.algo.simulation import simulate_ranks  # noqa: E402

W = 2


def _data(out: Path, rows: int, seed: int) -> tuple[list[Any], list[Any]]:
    cache = out / "samples.pkl"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    p = V.make_dataset(out / "train.parquet", rows, seed)
    h = V.make_dataset(out / "held.parquet", 300, seed + 1)
    train = [V.VLMRows(str(p))[i] for i in range(rows)]
    held = [V.VLMRows(str(h))[i] for i in range(300)]
    cache.write_bytes(pickle.dumps((train, held)))
    return train, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("seed", type=int)
    ap.add_argument("arms")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--pool", type=int, default=128)
    ap.add_argument("--out", default="/tmp/vlm_replay")
    a = ap.parse_args()
    torch.set_num_threads(1)
    seed, rows = a.seed, a.rows
    out = Path(a.out) / f"s{seed}_{rows}"
    out.mkdir(parents=True, exist_ok=True)
    train, held = _data(out, rows, seed)
    L = [V.backbone_len(s) for s in train]
    T = [V.loss_tokens(s) for s in train]
    P = [V.encoder_patches(s) for s in train]
    target = int(round(8 * W * np.mean(T[:256])))  # the demo's rule: the fixed arm's caption tokens per update
    idx = [rank_indices(rows, W, r, seed=seed, pad=False) for r in range(W)]
    sim = simulate_ranks([[L[i] for i in ix] for ix in idx], 512, a.pool, rank_tokens=[[T[i] for i in ix] for ix in idx],
                         rank_indices=idx, seed=seed, keep_trace=True, rank_extra=[[P[i] for i in ix] for ix in idx],
                         extra_budget=1024)
    steps = [[it.index for r in range(W) for it in sim.trace[r][k].items] for k in range(sim.steps)]

    def tok(u: list[int]) -> int:
        return sum(T[i] for i in u)

    acc: list[list[int]] = []
    cur: list[int] = []
    seen, boundary = 0, 1
    for st in steps:  # youmu.batching.TokenUpdates' rule
        cur, seen = cur + st, seen + tok(st)
        if seen >= boundary * target:
            boundary = seen // target + 1
            acc.append(cur)
            cur = []
    if cur:
        acc.append(cur)

    def perm(s: int) -> list[int]:
        return torch.randperm(rows, generator=torch.Generator().manual_seed(s)).tolist()

    def fixed(order: int) -> list[list[int]]:
        p = perm(order)
        return [p[k:k + 8 * W] for k in range(0, rows, 8 * W)]

    def sized(sizes: list[int], s: int) -> list[list[int]]:
        p, c, res = perm(s), 0, []
        for n in sizes:
            res.append(p[c:c + n])
            c += n
        return res

    rng = np.random.default_rng(seed + 11)
    mixed: list[list[int]] = []
    for b in range(0, len(acc), 8):
        block = acc[b:b + 8]
        pool = [i for u in block for i in u]
        rng.shuffle(pool)
        c = 0
        for u in block:
            mixed.append(pool[c:c + len(u)])
            c += len(u)
    arms = {"fixed": (fixed(seed), "rank"), "fixed_o2": (fixed(seed + 100), "rank"), "acc": (acc, "tok"),
            "acc_randcomp": (sized([len(u) for u in acc], seed + 7), "tok"),
            "acc_shuffled": ([acc[j] for j in rng.permutation(len(acc))], "tok"), "acc_mixed": (mixed, "tok")}
    for name in ("fixed", "acc", "acc_randcomp"):
        us = arms[name][0]
        tt, ns = np.array([tok(u) for u in us]), np.array([len(u) for u in us])
        cv = np.mean([np.std([L[i] for i in u]) / np.mean([L[i] for i in u]) for u in us])
        print(f"{name}: {len(us)} updates, caption tokens/update {tt.mean():.0f} (CV {tt.std() / tt.mean():.3f}), "
              f"samples/update {ns.mean():.1f} (CV {ns.std() / ns.mean():.3f}), backbone length CV within an "
              f"update {cv:.3f}", flush=True)

    def heldout(model: Any) -> float:
        total = n = 0.0
        with torch.no_grad():
            for k in range(0, len(held), 8):
                loss, t = model(V.collate(held[k:k + 8]))
                total, n = total + float(loss), n + t
        return total / n

    def fresh() -> Any:
        from youmu.vision import ByteTokenizer

        tk = ByteTokenizer()
        return V.TinyVLM(tk.vocab_size, tk.image_token_id)

    for arm in a.arms.split(","):
        if arm == "equal":
            model, worst = fresh(), 0.0
            with torch.no_grad():
                for u in acc[:5]:
                    together = float(model(V.collate([train[i] for i in u[:8]]))[0])
                    alone = sum(float(model(V.collate([train[i]]))[0]) for i in u[:8])
                    worst = max(worst, abs(together - alone) / alone)
            print(f"equal: worst relative difference, a batch against its samples alone: {worst:.2e}", flush=True)
            continue
        updates, norm = arms[arm]
        model = fresh()
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
        t0 = time.time()
        for u in updates:
            total = tok(u)
            # a sum of per-sample losses: how an update is split into batches does not change its gradient
            chunks = [u[k:k + 8] for k in range(0, len(u), 8)] if norm == "tok" else [u[:len(u) // 2], u[len(u) // 2:]]
            for b in chunks:
                if b:
                    loss, t = model(V.collate([train[i] for i in b]))
                    (loss * (1.0 / total if norm == "tok" else 1.0 / (max(t, 1) * W))).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        print(f"{arm}: held-out {heldout(model):.4f} per caption token, {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
