"""Scenario of the elastic-resume tests of ``DynamicBatchLoader`` (spawned ranks import
it): one job of a chain — every rank loads the merged state of the job before (if
any), trains some steps, saves its state and stops."""

from __future__ import annotations

import pickle
from typing import Any

from batching_mp import TIMEOUT, make_loader, sample_len, sample_tok


def _youmu_loader(rank: int, world: int, cfg: dict[str, Any], channel: Any) -> Any:
    from youmu.batching import DynamicBatchLoader, label_token_count
    from youmu.torch import YoumuDataset

    if cfg.get("chat"):  # the SFT recipe: chats templated and tokenized in the DataLoader workers
        ds = sft_dataset(cfg["path"], rank, world)
        length, tokens = input_len, label_token_count()
    else:
        ds = YoumuDataset(cfg["path"], columns=["id", "len", "tok"], buffer_size=16, seed=3, rank=rank,
                          world_size=world, output="python")
        length, tokens = sample_len, sample_tok
    return DynamicBatchLoader(ds, token_budget=cfg.get("budget", 4096), length_fn=length,
                              token_count_fn=tokens, collate_fn=_ids, pool_size=cfg.get("buffer", 32),
                              num_workers=cfg.get("workers", 0), group=channel, timeout=TIMEOUT, heartbeat=0.2,
                              seed=cfg.get("seed", 0))


def sft_dataset(path: str, rank: int | None = None, world: int | None = None) -> Any:
    """The README's SFT dataset over the chats at ``path``: ``ChatTemplate`` with the
    examples' tagged ChatML tokenizer, in page mode, ``id`` kept (``rank``/``world``:
    by default torch.distributed's)."""
    from textutil import chat_tokenizer

    from youmu.text import ChatTemplate
    from youmu.torch import YoumuDataset

    return YoumuDataset(path, columns=["id", "messages"], buffer_size=16, seed=3, rank=rank, world_size=world,
                        transform=ChatTemplate(chat_tokenizer(), cutoff_len=256))


def input_len(s: dict[str, Any]) -> int:
    return len(s["input_ids"])


def _ids(samples: list[dict[str, Any]]) -> list[int]:
    return [int(s["id"]) for s in samples]


def job_scenario(rank: int, world: int, cfg: dict[str, Any], merged: Any, steps: int | None) -> dict[str, Any]:
    """Load ``merged`` (None: a fresh epoch), take ``steps`` steps (None: to the end),
    return the ids delivered, the step numbers and this rank's state."""
    from youmu.distributed import GlooChannel

    channel = GlooChannel.from_default_group(timeout=TIMEOUT)
    loader = _youmu_loader(rank, world, cfg, channel) if cfg.get("path") else make_loader(rank, world, cfg, channel)
    if merged is not None:
        loader.load_state_dict(pickle.loads(merged))  # as a checkpoint would
    it = iter(loader)
    ids: list[int] = []
    step_numbers: list[int] = []
    for batch, info in it:
        ids += batch
        step_numbers.append(info.step)
        if steps is not None and len(step_numbers) >= steps:
            break
    state = pickle.dumps(loader.state_dict())
    loader.close()
    assert it.wait_finished(TIMEOUT)
    return {"ids": ids, "steps": step_numbers, "state": state}
