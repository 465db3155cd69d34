"""The text tests' tokenizers (the examples' recipe, ``examples/chat_tokenizer.py``,
trained on a small corpus with non-ASCII text; never downloaded) and writers of text
and chat Parquet."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
from parquet_fixtures import write_table

# one tokenizer recipe, the examples' (the SFT demo trains the same kind on its data)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from chat_tokenizer import CHATML, CHATML_PUBLISHED, SPECIALS, train_bpe  # noqa: E402
from chat_tokenizer import chat_tokenizer as wrap_chat  # noqa: E402

# the documentation's sample corpus and chats (examples/sample_data.py)
from sample_data import CORPUS, ultrachat  # noqa: E402

#: ChatML as TRL's training templates tag it: the answer, its <|im_end|> and the newline after it
CHATML_TRAINING = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}{% if m['role'] == 'assistant' %}"
                   "{% generation %}{{ m['content'] + '<|im_end|>\\n' }}{% endgeneration %}"
                   "{% else %}{{ m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

__all__ = ["CHATML", "CHATML_PUBLISHED", "CHATML_TRAINING", "SPECIALS", "CORPUS", "bpe_tokenizer", "chat_tokenizer", "write_texts", "write_chats",
           "ultrachat", "sharegpt"]


@functools.cache
def bpe_tokenizer() -> Any:
    """The examples' byte-level BPE (vocabulary 600) trained on :data:`CORPUS`."""
    return train_bpe(CORPUS, vocab_size=600)


def chat_tokenizer(template: str = CHATML) -> Any:
    """The BPE as a ``transformers`` fast tokenizer with ``template`` as its chat template."""
    return wrap_chat(bpe_tokenizer(), template)


def write_texts(path: Path, texts: list[Any], row_group_size: int = 16, **extra: list[Any]) -> Path:
    """``texts`` as a Parquet ``text`` column (plus ``extra`` columns)."""
    return write_table(path, pa.table({"text": pa.array(texts, type=pa.string()), **extra}), row_group_size=row_group_size)


def write_chats(path: Path, conversations: list[Any], column: str = "messages", row_group_size: int = 8) -> Path:
    """Conversations as a Parquet ``list<struct<...>>`` column (the fields of the first
    message: role/content for UltraChat, from/value for ShareGPT) plus an ``id``."""
    return write_table(path, pa.table({"id": list(range(len(conversations))), column: conversations}),
                       row_group_size=row_group_size)


def sharegpt(conversations: list[list[dict[str, str]]]) -> list[list[dict[str, str]]]:
    """The same conversations in ShareGPT's layout (from/value, human/gpt/system)."""
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    return [[{"from": names[m["role"]], "value": m["content"]} for m in c] for c in conversations]
