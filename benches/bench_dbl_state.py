"""The size of a ``DynamicBatchLoader`` state over chats templated online (the README's
SFT recipe): bytes per rank per checkpoint, as youmu's JSON state file and pickled.

    python benches/bench_dbl_state.py [--chats 3000] [--pool 256] [--workers 2] [--every 7] [--steps 70]

``--chats`` UltraChat-layout chats (the text tests' generator, ``tests/support/textutil.py``) are
written once to ``/tmp/youmu-bench-dbl-state/``, read by ``YoumuDataset(transform=
ChatTemplate(tok))`` (the examples' tagged ChatML BPE, no download) and batched by
``DynamicBatchLoader(pool_size=--pool, num_workers=--workers)``; every ``--every``
steps the loader's ``state_dict()`` is encoded. Printed: the median and largest JSON
bytes, the median pickled bytes, the JSON bytes without the pool's samples, and the
tokens of the samples the state carries (the round's undelivered steps and its
overflow: bounded by the pool, not by the epoch).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the text tests' chats and tokenizer


def main() -> None:
    from textutil import chat_tokenizer, ultrachat, write_chats

    from youmu.batching import DynamicBatchLoader, label_token_count
    from youmu.state.files import dumps
    from youmu.text import ChatTemplate
    from youmu.torch import YoumuDataset, lm_collate

    p = argparse.ArgumentParser()
    p.add_argument("--chats", type=int, default=3000)
    p.add_argument("--pool", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--every", type=int, default=7)
    p.add_argument("--steps", type=int, default=70)
    a = p.parse_args()
    path = Path(f"/tmp/youmu-bench-dbl-state/chats-{a.chats}.parquet")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_chats(path, ultrachat(a.chats, seed=1), row_group_size=64)
    ds = YoumuDataset(str(path), columns=["id", "messages"], seed=3,
                      transform=ChatTemplate(chat_tokenizer(), cutoff_len=1024))
    loader = DynamicBatchLoader(ds, token_budget=4096, length_fn=lambda s: len(s["input_ids"]),
                                token_count_fn=label_token_count(), collate_fn=lm_collate, pool_size=a.pool,
                                num_workers=a.workers, timeout=60, heartbeat=0.1)
    as_json, pickled, bare, tokens = [], [], [], []
    for n, _ in enumerate(loader, 1):
        if n % a.every == 0:
            st = loader.state_dict()
            as_json.append(len(dumps(st)))
            pickled.append(len(pickle.dumps(st)))
            bare.append(len(dumps({**st, "payloads": {}})))
            tokens.append(sum(len((s.get("fields") or s)["input_ids"]) for s, *_ in st["payloads"].values()))
        if n >= a.steps:
            break
    loader.close()
    print(f"workers={a.workers} pool={a.pool}: JSON median {statistics.median(as_json):.0f} B, max {max(as_json)} B; "
          f"pickled median {statistics.median(pickled):.0f} B; without the pool's samples "
          f"{statistics.median(bare):.0f} B; carried tokens median {statistics.median(tokens):.0f}")


if __name__ == "__main__":
    main()
