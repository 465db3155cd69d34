"""Last-mile preprocessing in the loader: raw ``text`` rows tokenized (with a chat-style
template) inside DataLoader workers, then packed. Copy this.

    python examples/custom_transform.py demo-out/corpus/stdlib.json --tokenizer demo-out/corpus/tokenizer.json

The transform runs per row in the worker; returning ``None`` drops a row (filtering)
without disturbing exactly-once accounting or resume positions.
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader

from youmu.torch import YoumuDataset, collate_packed, pack


class ChatTokenize:
    """Picklable transform: wrap the text in a template and tokenize it."""

    def __init__(self, tokenizer_path: str, min_chars: int = 20) -> None:
        self.path, self.min_chars, self._tok = tokenizer_path, min_chars, None

    def __call__(self, row: dict) -> dict | None:
        if self._tok is None:  # load lazily, once per worker process
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(self.path)
        text = row["text"]
        if len(text) < self.min_chars:
            return None  # filtered out
        ids = self._tok.encode(f"<|user|>\nExplain this file.\n<|assistant|>\n{text}").ids
        return {"input_ids": torch.tensor(ids, dtype=torch.int32)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--batches", type=int, default=5)
    a = ap.parse_args()
    ds = YoumuDataset(a.data, columns=["text"], shuffle="page", output="python", transform=ChatTokenize(a.tokenizer))
    loader = DataLoader(pack(ds, seq_len=512), batch_size=8, num_workers=2, collate_fn=collate_packed)
    for i, batch in enumerate(loader):
        print(f"batch {i}: {tuple(batch['input_ids'].shape)}, {len(batch['cu_seqlens']) - 1} document pieces")
        if i + 1 == a.batches:
            break


if __name__ == "__main__":
    main()
