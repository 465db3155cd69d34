"""Text and chat Parquet as published, tokenized online in the DataLoader workers, a
page's rows at a time: :class:`Tokenize` for pretraining text (FineWeb, DCLM: a
``text`` column; into :func:`youmu.torch.pack`), :class:`ChatTemplate` for chat and
SFT sets (UltraChat's ``messages``, ShareGPT's ``conversations``; into
``DynamicBatchLoader`` or ``BalancedLoader``) with the tokenizer's own chat template,
assistant-only labels and LLaMA-Factory's ``cutoff_len``.

Both are batched transforms (:mod:`youmu.streams.batched`) of a
:class:`~youmu.torch.YoumuDataset`; the stream's state keeps counting rows, so a
resume is exact. ``tokenizers`` and ``transformers`` are imported only when a
tokenizer is loaded from a path, never by ``import youmu``.

Example:
    >>> import pyarrow as pa
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from youmu.text import Tokenize
    >>> tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    >>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> Tokenize(tok)(pa.table({"text": ["a b", "b"]})).column("input_ids").to_pylist()
    [[0, 1], [1]]
"""

from youmu.text.chat import (
    DEFAULT_ROLES,
    IGNORE_INDEX,
    OVERFLOW,
    ChatTemplate,
    assistant_labels,
    conversation_of,
    generation_template,
    template_one,
)
from youmu.text.cutoff import infer_seqlen, keep_lengths, turn_pairs
from youmu.text.tokenize import Tokenize, text_values
from youmu.text.tokenizer import TokenizerRef, encode_texts, token_column

__all__ = [
    "ChatTemplate",
    "DEFAULT_ROLES",
    "IGNORE_INDEX",
    "OVERFLOW",
    "assistant_labels",
    "conversation_of",
    "generation_template",
    "template_one",
    "infer_seqlen",
    "keep_lengths",
    "turn_pairs",
    "Tokenize",
    "text_values",
    "TokenizerRef",
    "encode_texts",
    "token_column",
]
