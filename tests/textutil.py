"""Tokenizers built here, never downloaded: a byte-level BPE trained with ``tokenizers``
on a small corpus (BOS/EOS from its post-processor), and the same wrapped as a
``transformers.PreTrainedTokenizerFast`` with a ChatML chat template whose assistant
answers are ``{% generation %}`` blocks; plus writers of text and chat Parquet."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SPECIALS = ["<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]

#: ChatML, as Qwen's templates write it, with the assistant's answer and its end token
#: in {% generation %} so transformers can mark them.
CHATML = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}"
    "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Parquet pages are the unit youmu shuffles and reads.",
    "Tokenizers split text into pieces; BPE merges frequent pairs.",
    "Ünïcödé text, 中文文本, emoji 🙂 and tabs\tand newlines\n.",
    "User: how do I train a model? Assistant: start with the data.",
] * 40


@functools.cache
def bpe_tokenizer() -> Any:
    """A byte-level BPE (vocabulary 600) whose post-processor adds ``<s>`` … ``</s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    return tok


def chat_tokenizer(template: str = CHATML) -> Any:
    """The BPE as a ``transformers`` fast tokenizer with ``template`` as its chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=bpe_tokenizer(), bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", chat_template=template)


def write_texts(path: Path, texts: list[Any], row_group_size: int = 16, **extra: list[Any]) -> Path:
    """``texts`` as a Parquet ``text`` column (plus ``extra`` columns)."""
    pq.write_table(pa.table({"text": pa.array(texts, type=pa.string()), **extra}), path,
                   row_group_size=row_group_size)
    return path


def write_chats(path: Path, conversations: list[Any], column: str = "messages", row_group_size: int = 8) -> Path:
    """Conversations as a Parquet ``list<struct<...>>`` column (the fields of the first
    message: role/content for UltraChat, from/value for ShareGPT) plus an ``id``."""
    pq.write_table(pa.table({"id": list(range(len(conversations))), column: conversations}), path,
                   row_group_size=row_group_size)
    return path


def ultrachat(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` conversations in UltraChat's layout: some with a system turn, 1–4 exchanges."""
    import random

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        conv = [{"role": "system", "content": f"You are assistant {i}."}] if i % 3 == 0 else []
        for t in range(rnd.randint(1, 4)):
            conv.append({"role": "user", "content": " ".join(rnd.choices(CORPUS[:5], k=rnd.randint(1, 3))) + f" {t}"})
            conv.append({"role": "assistant", "content": " ".join(rnd.choices(CORPUS[:5], k=rnd.randint(1, 5)))})
        out.append(conv)
    return out


def sharegpt(conversations: list[list[dict[str, str]]]) -> list[list[dict[str, str]]]:
    """The same conversations in ShareGPT's layout (from/value, human/gpt/system)."""
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    return [[{"from": names[m["role"]], "value": m["content"]} for m in c] for c in conversations]
