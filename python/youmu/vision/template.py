"""Chat-template and tokenize an image-text row, with each image expanded to its
visual tokens.

Rows come as LLaVA dumps store them (``conversations``: a list of
``{"from": "human"|"gpt"|"system", "value": ...}`` with ``<image>`` placeholders), as
chat datasets do (``messages``: ``{"role", "content"}``), in any other layout of
:mod:`youmu.text.layouts` — read as :class:`~youmu.text.ChatTemplate` reads them — or
as a plain caption string (the image, then the caption as the answer). The template is Qwen2-VL's ChatML: every
image becomes ``<|vision_start|>`` + ``backbone_tokens × <|image_pad|>`` +
``<|vision_end|>``, so the token count is the sample's true backbone length.

The tokenizer is passed in: anything with ``encode(text) -> list[int]`` (a Hugging
Face tokenizer with the Qwen2-VL special tokens, or :class:`ByteTokenizer`, a
byte-level tokenizer for tests and offline demos). A fast tokenizer whose own
``chat_template`` marks the assistant's answers with ``{% generation %}`` is applied
the way text chats are (:class:`youmu.text.ChatTemplate`): its template renders the
turns, each image as ``<|vision_start|><|image_pad|><|vision_end|>``, ``transformers``
marks the assistant's tokens, and each pad is then expanded to the image's tokens.

Example:
    >>> from youmu.vision import ByteTokenizer, tokenize_chat
    >>> tok = ByteTokenizer()
    >>> out = tokenize_chat([{"from": "human", "value": "<image>\\nWhat?"}, {"from": "gpt", "value": "A cat."}],
    ...                     [4], tok, system=None)
    >>> out["input_ids"].count(tok.image_token_id), sum(x != -100 for x in out["labels"])
    (4, 7)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from youmu._internal.args import instance_arg, int_array
from youmu.errors import ArgumentTypeError, ImageError, InvalidArgumentError, TextError
from youmu.text.chat import assistant_labels, generation_template, template_one
from youmu.text.layouts import IMAGE_PLACEHOLDER, Layout, any_messages, read_conversation
from youmu.text.tokenizer import flat_ids

__all__ = ["SPECIAL_TOKENS", "DEFAULT_SYSTEM", "ByteTokenizer", "tokenize_chat"]

#: Qwen2-VL's special tokens the template uses.
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                  "<|endoftext|>")
DEFAULT_SYSTEM = "You are a helpful assistant."
#: labels of tokens the loss ignores (prompt, template, images)
IGNORE = -100


class ByteTokenizer:
    """UTF-8 bytes as ids 0–255, Qwen2-VL's special tokens as 256 onwards.

    >>> t = ByteTokenizer()
    >>> t.encode("<|im_start|>hi")
    [256, 104, 105]
    >>> t.decode(t.encode("<|im_start|>hi"))
    '<|im_start|>hi'
    """

    def __init__(self, specials: Sequence[str] = SPECIAL_TOKENS) -> None:
        self.specials = {s: 256 + i for i, s in enumerate(specials)}
        self._names = {i: s for s, i in self.specials.items()}
        self._split = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")")
        self.vocab_size = 256 + len(self.specials)

    @property
    def image_token_id(self) -> int:
        return self.specials["<|image_pad|>"]

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.specials[token]

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for part in self._split.split(instance_arg("text", text, str, "a str")):
            if part in self.specials:
                out.append(self.specials[part])
            elif part:
                out.extend(part.encode("utf-8"))
        return out

    def decode(self, ids: Sequence[int]) -> str:
        out, raw = [], bytearray()
        for i in int_array(ids, "ids").tolist():
            if not 0 <= i < self.vocab_size:
                raise InvalidArgumentError(f"ids must be token ids in range(0, {self.vocab_size}), got {i}")
            if i in self._names:
                out.append(raw.decode("utf-8", "replace") + self._names[i])
                raw = bytearray()
            else:
                raw.append(i)
        return "".join(out) + raw.decode("utf-8", "replace")


def _encoder(tokenizer: Any):
    enc = getattr(tokenizer, "encode", None)
    if enc is None and callable(tokenizer):
        enc = tokenizer
    if enc is None:
        raise ArgumentTypeError(f"tokenizer must have encode(text) -> list[int], got {type(tokenizer).__name__}")
    try:  # Hugging Face tokenizers add BOS/EOS unless told not to; the template has its own
        enc("", add_special_tokens=False)
        return lambda text: _ids(enc(text, add_special_tokens=False))
    except TypeError:
        return lambda text: _ids(enc(text))


def _ids(ids: Any) -> list[int]:
    """What the tokenizer's ``encode`` returned, if it is a list of integer ids (an id
    ``1.7`` is refused, never cut to ``1`` by the int64 arrays made of it)."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise ArgumentTypeError(f"the tokenizer's encode(text) returned {type(ids).__name__}, not a list of token ids")
    return flat_ids([ids], len(ids), "the tokenizer's encode(text)").tolist()


def image_token_id(tokenizer: Any) -> int:
    """The id of ``<|image_pad|>`` in ``tokenizer``."""
    tid = getattr(tokenizer, "image_token_id", None)
    if isinstance(tid, int):
        return tid
    ids = _encoder(tokenizer)("<|image_pad|>")
    if len(ids) != 1:
        raise ArgumentTypeError("the tokenizer does not know the special token <|image_pad|>")
    return int(ids[0])


def _turns(text: Any, layout: Layout | None = None) -> list[tuple[str, str]]:
    """(role, content) turns of a row's text: a caption, ``None`` or a list of messages
    read as :class:`~youmu.text.ChatTemplate` reads them (:mod:`youmu.text.layouts`),
    typed image parts as :data:`IMAGE_PLACEHOLDER`."""
    if isinstance(text, str):  # a caption: the images (placed below), then the caption as the answer
        return [("user", ""), ("assistant", text)]
    if text is None:
        return [("user", "")]
    try:
        messages = read_conversation(layout or any_messages(), {"text": text}, "text", images=True)
    except TextError as e:
        where = "" if e.message is None else f" (message {e.message})"
        raise ImageError(f"{e.reason}{where}") from None
    return [(m["role"], m["content"]) for m in messages]


def tokenize_chat(text: Any, image_tokens: Sequence[int], tokenizer: Any, *,
                  system: str | None = DEFAULT_SYSTEM, layout: Layout | None = None) -> dict[str, list[int]]:
    """``{"input_ids", "labels"}`` of a row: its turns in Qwen2-VL's template, the i-th
    ``<image>`` expanded to ``image_tokens[i]`` pad tokens, labels ``-100`` except on
    the assistant's answers (and their ``<|im_end|>``). Images without a placeholder
    go before the first user turn's text; more placeholders than images is an
    :class:`~youmu.errors.ImageError`. ``layout``: how ``text``'s messages are stored
    (default: any registered message layout, :mod:`youmu.text.layouts`).
    """
    enc = _encoder(tokenizer)
    pad = image_token_id(tokenizer)
    turns = _turns(text, layout)
    placed = sum(c.count(IMAGE_PLACEHOLDER) for _, c in turns)
    if placed > len(image_tokens):
        raise ImageError(f"the text has {placed} {IMAGE_PLACEHOLDER} placeholders for {len(image_tokens)} images")
    if placed < len(image_tokens):
        first = next((i for i, (r, _) in enumerate(turns) if r == "user"), None)
        missing = IMAGE_PLACEHOLDER * (len(image_tokens) - placed)
        if first is None:
            turns.insert(0, ("user", missing))
        else:
            turns[first] = ("user", missing + turns[first][1])
    if system is not None and not any(r == "system" for r, _ in turns):
        turns.insert(0, ("system", system))
    if generation_template(tokenizer):
        return _by_template(turns, image_tokens, tokenizer, pad)
    ids: list[int] = []
    labels: list[int] = []
    images = iter(image_tokens)

    def add(piece: list[int], learn: bool) -> None:
        ids.extend(piece)
        labels.extend(piece if learn else [IGNORE] * len(piece))

    for role, content in turns:
        add(enc(f"<|im_start|>{role}\n"), False)
        learn = role == "assistant"
        for k, part in enumerate(content.split(IMAGE_PLACEHOLDER)):
            if k:
                add(enc("<|vision_start|>") + [pad] * int(next(images)) + enc("<|vision_end|>"), False)
            if part:
                add(enc(part), learn)
        add(enc("<|im_end|>"), learn)
        add(enc("\n"), False)
    return {"input_ids": ids, "labels": labels}


def _by_template(turns: list[tuple[str, str]], image_tokens: Sequence[int], tokenizer: Any,
                 pad: int) -> dict[str, list[int]]:
    """The turns through the tokenizer's own chat template (labels from ``transformers``'
    assistant mask), each image's single pad token then expanded to its tokens."""
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    messages = [{"role": r, "content": c.replace(IMAGE_PLACEHOLDER, vision)} for r, c in turns]
    try:
        ids, mask = template_one(tokenizer, messages)
    except TextError as e:
        raise ImageError(e.reason) from e
    tids, tlabels = assistant_labels(ids, mask, None)
    at = [i for i, t in enumerate(tids.tolist()) if t == pad]
    if len(at) != len(image_tokens):
        raise ImageError(f"the chat template rendered {len(at)} <|image_pad|> tokens for {len(image_tokens)} images")
    out_ids: list[int] = []
    out_labels: list[int] = []
    prev = 0
    for k, i in enumerate(at):
        out_ids += tids[prev:i].tolist() + [pad] * int(image_tokens[k])
        out_labels += tlabels[prev:i].tolist() + [IGNORE] * int(image_tokens[k])
        prev = i + 1
    out_ids += tids[prev:].tolist()
    out_labels += tlabels[prev:].tolist()
    return {"input_ids": out_ids, "labels": out_labels}
