"""Shared pieces of the trainer-integration tests (tests/integrations/test_trainer_*.py): a tiny data
set, a tiny model with the Hugging Face calling convention that records the sample ids it
was fed, the reference gradient of ODB's exact loss scale, and helpers for the spawned
ranks (see batching_mp.run_world). Module level so that spawned children import it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from youmu.torch import lm_collate

VOCAB = 40
N = 48  # samples: a multiple of 2 ranks x 4 per batch, so every sample is trained once


def sample(i: int) -> dict[str, Any]:
    n = 2 + (i * 7) % 13  # lengths 2..14, varied so dynamic batches differ in shape
    ids = torch.tensor([(i * 3 + k) % VOCAB for k in range(n)])
    return {"id": i, "src": "ab"[(i // 2) % 2], "input_ids": ids, "labels": (ids * 7 + 3) % VOCAB}


def dataset(n: int = N) -> list[dict[str, Any]]:
    return [sample(i) for i in range(n)]


def length(s: dict[str, Any]) -> int:
    return int(s["input_ids"].shape[0])


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return lm_collate(samples)  # "src" stays a list of names: the mixture shares


class TinyLM(torch.nn.Module):
    """``model(input_ids=..., labels=...)["loss"]``: the mean per-token cross-entropy over
    the label tokens (what ODB's loss scale expects). Records the ids and inputs it saw."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.Parameter(torch.randn(VOCAB, 8, generator=g) * 0.3)
        self.out = torch.nn.Parameter(torch.randn(8, VOCAB, generator=g) * 0.3)
        self.seen: list[int] = []
        self.batches: list[dict[str, torch.Tensor]] = []

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, id: Any = None,
                attention_mask: Any = None, **kwargs: Any) -> dict[str, torch.Tensor]:
        if self.training and id is not None:
            self.seen.extend(int(i) for i in id)
            self.batches.append({"input_ids": input_ids.clone(), "labels": labels.clone()})
        logits = self.emb[input_ids] @ self.out
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                                                            ignore_index=-100)
        return out


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def reference_grad(batches: list[dict[str, torch.Tensor]], seed: int = 0) -> list[torch.Tensor]:
    """The gradient of the per-token mean loss over every sample of ``batches`` (all
    ranks' batches of one step), in one process: what DDP with ODB's loss scale must give."""
    model = TinyLM(seed)
    total = sum(int((b["labels"] != -100).sum()) for b in batches)
    loss = 0
    for b in batches:
        logits = model.emb[b["input_ids"]] @ model.out
        loss = loss + torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), b["labels"].reshape(-1),
                                                        ignore_index=-100, reduction="sum")
    (loss / total).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def write_corpus(path: str, rows: int, first: int = 0) -> None:
    """A Parquet corpus of ``rows`` rows ``id``, ``input_ids`` whose token ``t`` of row
    ``r`` is ``r * 1000 + t`` (every token unique), in pages of a few rows."""
    from parquet_fixtures import write_unique_tokens

    ids = range(first, first + rows)
    write_unique_tokens(path, ids, [1 + r % 7 for r in ids], data_page_size=64, write_page_index=True, row_group_size=8)


def torchrun_env(rank: int, world: int) -> None:
    """What torchrun sets: trainers then run DDP over the process group already up."""
    import os

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29500"))


def gather(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def grads_match(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got, want))
