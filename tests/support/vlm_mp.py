"""Multi-process scenarios of the VLM batching tests (tests/unit/batching/test_vlm_batching.py):
image-text samples whose visual-token counts differ wildly across ranks, a tiny
encoder + patch merger + LM, and ODB with a backbone budget and an encoder budget.

Scenario functions live at module level so that spawned children can import them;
the harness (hard timeouts) is tests/support/batching_mp.py's ``run_world``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from batching_mp import TIMEOUT

VOCAB = 19
PATCH_DIM = 4
MERGE = 4  # patches per backbone token (a 2x2 merger)


def sample_shapes(n: int, world: int) -> list[tuple[int, int, int]]:
    """``(rank, patches, text)`` per sample: rank ``r`` holds images about ``8^r``
    times larger than rank 0's (visual tokens differ ~10-500x across ranks), and the
    ranks hold different numbers of samples."""
    g = torch.Generator().manual_seed(7)
    out = []
    for i in range(n):
        r = i % world if i % 5 else 0  # rank 0 gets extra samples
        base = 2 * 8**r
        patches = MERGE * int(torch.randint(base, 3 * base + 1, (1,), generator=g))
        text = int(torch.randint(3, 12, (1,), generator=g))
        out.append((r, patches, text))
    return out


class VLMDataset(torch.utils.data.Dataset):
    """Deterministic image-text samples: ``patches`` (patch features), ``input_ids``
    and ``labels`` (the first ``i % 3`` text labels masked, as a prompt)."""

    def __init__(self, shapes: list[tuple[int, int, int]]) -> None:
        self.shapes = shapes

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, i: int) -> dict[str, Any]:
        _, p, t = self.shapes[i]
        g = torch.Generator().manual_seed(500 + i)
        ids = torch.randint(0, VOCAB, (t,), generator=g)
        labels = ids.clone()
        labels[: i % 3] = -100
        return {"id": i, "patches": torch.randn(p, PATCH_DIM, generator=g, dtype=torch.float64),
                "input_ids": ids, "labels": labels,
                "encoder_patches": p, "backbone_tokens": p // MERGE + t}


class RankVLM(torch.utils.data.IterableDataset):
    """Rank ``r``'s own samples (``sample_shapes``' rank column), in order."""

    def __init__(self, shapes: list[tuple[int, int, int]], rank: int) -> None:
        super().__init__()
        self.inner = VLMDataset(shapes)
        self.mine = [i for i, s in enumerate(shapes) if s[0] == rank]

    def __iter__(self):
        for i in self.mine:
            yield self.inner[i]


def backbone_len(s: dict[str, Any]) -> int:
    return int(s["backbone_tokens"])


def encoder_patches(s: dict[str, Any]) -> int:
    return int(s["encoder_patches"])


def label_tokens(s: dict[str, Any]) -> int:
    return int((s["labels"][1:] != -100).sum())


def keep(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return samples


def pad_batch() -> list[dict[str, Any]]:
    return [VLMDataset([(0, MERGE, 3)])[0]]


class TinyVLM(torch.nn.Module):
    """Patch embedding (the "ViT"), a 2x2 patch merger, and a one-layer LM head over
    [image tokens, text tokens]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patch = torch.nn.Linear(PATCH_DIM, 5).double()
        self.merge = torch.nn.Linear(5 * MERGE, 6).double()
        self.emb = torch.nn.Embedding(VOCAB, 6).double()
        self.out = torch.nn.Linear(6, VOCAB).double()

    def loss_sum(self, s: dict[str, Any]) -> torch.Tensor:
        v = torch.tanh(self.patch(s["patches"]))
        img = self.merge(v.reshape(-1, 5 * MERGE))
        h = torch.tanh(torch.cat([img, self.emb(s["input_ids"])]) + img.mean(0))
        logits = self.out(h[img.shape[0]:])  # text positions
        return torch.nn.functional.cross_entropy(logits[:-1], s["labels"][1:], ignore_index=-100, reduction="sum")


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def reference_grad(shapes: list[tuple[int, int, int]], ids: list[int]) -> torch.Tensor:
    """Single-process gradient of the per-token mean loss over the samples ``ids``."""
    ds = VLMDataset(shapes)
    model = TinyVLM()
    samples = [ds[i] for i in ids]
    total = sum(model.loss_sum(s) for s in samples)
    (total / sum(label_tokens(s) for s in samples)).backward()
    return flat_grad(model)


def odb_scenario(rank: int, world: int, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """ODB over this rank's image-text samples; per step: the ids, the patches and
    backbone lengths of the batch, and the gradient averaged over ranks (all-reduce / W,
    what DDP does) of ``mean loss × info.loss_scale``."""
    from youmu.batching import DynamicBatchLoader
    from youmu.distributed import GlooChannel

    shapes = sample_shapes(cfg["n"], world)
    loader = DynamicBatchLoader(
        RankVLM(shapes, rank), token_budget=cfg["token_budget"], length_fn=backbone_len, collate_fn=keep,
        token_count_fn=label_tokens, encoder_budget=cfg.get("encoder_budget"),
        encoder_fn=encoder_patches if cfg.get("encoder_budget") else None, pool_size=cfg["buffer"],
        num_workers=0, group=GlooChannel.from_default_group(timeout=TIMEOUT), timeout=TIMEOUT, heartbeat=0.2,
        uneven="pad", pad_batch=pad_batch,
    )
    model = TinyVLM()
    rows = []
    for batch, info in loader:
        model.zero_grad(set_to_none=False)
        t = sum(label_tokens(s) for s in batch)
        loss = sum(model.loss_sum(s) for s in batch)
        mean = loss / t if t > 0 else loss * 0.0
        (mean * info.loss_scale).backward()
        g = flat_grad(model)
        dist.all_reduce(g)
        rows.append({
            "step": info.step, "padding": info.is_padding, "ids": [] if info.is_padding else [s["id"] for s in batch],
            "patches": [encoder_patches(s) for s in batch], "lengths": [backbone_len(s) for s in batch],
            "grad": (g / world).tolist(), "T": info.global_num_tokens,
        })
    assert loader.wait_finished(TIMEOUT)
    return rows


def mismatch_scenario(rank: int, world: int) -> dict[str, Any]:
    """Only rank 1 sets the encoder budget: every rank must refuse, not hang."""
    from youmu.batching import DynamicBatchLoader
    from youmu.distributed import GlooChannel

    shapes = sample_shapes(20, world)
    kw: dict[str, Any] = dict(encoder_budget=512, encoder_fn=encoder_patches) if rank == 1 else {}
    steps = 0
    try:
        loader = DynamicBatchLoader(RankVLM(shapes, rank), token_budget=400, length_fn=backbone_len,
                                    collate_fn=keep, num_workers=0, pool_size=8, timeout=30, heartbeat=0.2,
                                    group=GlooChannel.from_default_group(timeout=30), **kw)
        for _ in loader:
            steps += 1
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"error": type(e).__name__, "message": str(e), "steps": steps}
    return {"error": None, "steps": steps}


def balanced_scenario(rank: int, world: int, store: Any) -> dict[str, Any]:
    """BalancedLoader with an encoder cost model over Gloo (tests/support/planning_mp.py's
    ``run_world``): rank 0 holds only small images, the last rank only large ones, so the
    images' patches must travel in the gathered metadata for the plan to balance them."""
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader

    shapes = sample_shapes(96, world)
    mine = [{"id": i, "input_ids": [0] * (p // MERGE + t), "encoder_patches": p}
            for i, (r, p, t) in enumerate(shapes) if r == rank]
    out: dict[str, Any] = {}
    for name, kw in (("plain", {}), ("encoder", {"encoder_cost": "vit-2b", "images_fn": encoder_patches})):
        chan = GlooChannel.from_store(store, rank, world, prefix=f"youmu/test/vlm/{name}", timeout=60)
        loader = BalancedLoader(iter(mine), num_microbatches=2, global_batch_size=12 * world, cost="llama-12b",
                                id_fn=lambda s: s["id"], channel=chan, prefetch=1, **kw)
        out[name] = [{"step": i.step, "mb": i.microbatch, "ids": [s["id"] for s in b] if not i.is_padding else [],
                      "patches": [s["encoder_patches"] for s in b] if not i.is_padding else [],
                      "scale": i.loss_scale, "enc": i.encoder_cost} for b, i in loader]
    return out


def hybrid_images(i: int, patches: int) -> list[int]:
    """Sample ``i``'s images' patches: one to three images sharing its patches."""
    n = 1 + i % 3
    return [max(1, patches // n)] * n


def split_images(s: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    return {k: v for k, v in s.items() if k != "pixels"}, s["pixels"]


def hybrid_scenario(rank: int, world: int, store: Any) -> dict[str, Any]:
    """BalancedLoader with ``encoder_balance`` "colocated" and "hybrid" over Gloo: the last
    rank holds the huge images. Per micro-batch: the backbone ids, and for "hybrid" the
    images this rank encodes (payloads tag their sample and index) and the routes."""
    from youmu.distributed import GlooChannel
    from youmu.planning import BalancedLoader, HybridBatch

    shapes = sample_shapes(60, world)
    mine = [{"id": i, "input_ids": [0] * (p // MERGE + t), "patches": hybrid_images(i, p),
             "pixels": [("pixels", i, k) for k in range(len(hybrid_images(i, p)))]}
            for i, (r, p, t) in enumerate(shapes) if r == rank]
    out: dict[str, Any] = {}
    for mode in ("colocated", "hybrid"):
        kw: dict[str, Any] = {"split_images_fn": split_images} if mode == "hybrid" else {}
        chan = GlooChannel.from_store(store, rank, world, prefix=f"youmu/test/vlm/hybrid/{mode}", timeout=60)
        loader = BalancedLoader(iter(mine), num_microbatches=2, global_batch_size=10 * world, cost="llama-12b",
                                id_fn=lambda s: s["id"], channel=chan, prefetch=1, encoder_cost="vit-2b",
                                images_fn=lambda s: s["patches"], encoder_balance=mode, **kw)
        rows = []
        for b, info in loader:
            row: dict[str, Any] = {"step": info.step, "mb": info.microbatch, "padding": info.is_padding,
                                   "method": info.method, "enc_cost": info.encoder_cost}
            if isinstance(b, HybridBatch):
                row.update(ids=[] if info.is_padding else [s["id"] for s in b.backbone],
                           pixels_left=any("pixels" in s for s in b.backbone), images=b.images,
                           encode=[list(e) for e in b.encode], receive=[list(e) for e in b.receive],
                           send_counts=b.send_counts(world), recv_counts=b.recv_counts(world),
                           recv_order=b.recv_order(),
                           encoded_patches=[shapes_patches(shapes, s, k) for _, s, k in b.encode])
            else:
                row.update(ids=[] if info.is_padding else [s["id"] for s in b],
                           encoded_patches=[] if info.is_padding else [p for s in b for p in s["patches"]])
            rows.append(row)
        out[mode] = rows
    return out


def shapes_patches(shapes: list[tuple[int, int, int]], i: int, k: int) -> int:
    return hybrid_images(i, shapes[i][1])[k]
