"""Chat layouts (:mod:`youmu.text.layouts`): one parser reads a row's conversation for
both chat transforms. ``ChatTemplate`` (text) and ``VisionTransform`` (images) read
every layout the same way — they once read the keys in opposite order, so a message
carrying both layouts trained as a prompt in one and as an answer in the other —, a
message whose two layouts disagree is refused by both, and a new layout is one
object, registered or passed as ``layout=``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from textutil import chat_tokenizer

import youmu
from youmu.text import DEFAULT_ROLES, ChatTemplate, conversation_of
from youmu.text.layouts import LAYOUTS, Layout, MessageLayout, read_conversation, register
from youmu.vision import ByteTokenizer, tokenize_chat

#: The same two-turn conversation as each layout stores it. "arrow" is what a Parquet
#: file mixing the two message layouts gives: every key on every message, one pair null.
STORED: dict[str, list[dict[str, Any]]] = {
    "openai": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello"}],
    "sharegpt": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                 {"from": "gpt", "value": "Hello"}],
    "arrow": [{"role": "system", "content": "Be brief.", "from": None, "value": None},
              {"role": None, "content": None, "from": "human", "value": "Hi"},
              {"role": "assistant", "content": "Hello", "from": None, "value": None}],
    "both, agreeing": [{"role": "system", "content": "Be brief.", "from": "system", "value": "Be brief."},
                       {"role": "user", "content": "Hi", "from": "human", "value": "Hi"},
                       {"role": "assistant", "content": "Hello", "from": "gpt", "value": "Hello"}],
}
READ = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}]


def _ids(conversation: list[dict[str, str]]) -> list[int]:
    """What ``transformers`` gives for ``conversation`` on its own."""
    return list(chat_tokenizer().apply_chat_template(conversation, tokenize=True, return_dict=True)["input_ids"])


def _vision_read(value: Any) -> list[dict[str, str]]:
    """The conversation ``VisionTransform``'s template read from ``value``: its ChatML
    rendering (byte tokenizer, no default system turn) parsed back into messages."""
    tok = ByteTokenizer()
    text = tok.decode(tokenize_chat(value, [], tok, system=None)["input_ids"])
    turns = [t for t in text.split("<|im_end|>\n") if t]
    return [dict(zip(("role", "content"), t.removeprefix("<|im_start|>").split("\n", 1))) for t in turns]


@pytest.mark.parametrize("stored", sorted(STORED))
def test_text_and_vision_read_every_layout_as_the_same_conversation(stored: str) -> None:
    assert conversation_of(STORED[stored], DEFAULT_ROLES) == READ
    assert _vision_read(STORED[stored]) == READ
    table = pa.table({"messages": [STORED[stored]]})
    sample, _ = ChatTemplate(chat_tokenizer())(table)
    assert sample.num_rows == 1


def test_a_message_whose_two_layouts_disagree_is_refused_by_both_transforms() -> None:
    # role/content say the user asked; from/value say the model answered something else
    torn = [{"role": "user", "content": "Hi", "from": "gpt", "value": "Hello"}]
    with pytest.raises(youmu.TextError, match="'role'='user' and 'from'='gpt'"):
        conversation_of(torn, DEFAULT_ROLES)
    with pytest.raises(youmu.ImageError, match="disagree"):
        _vision_read(torn)
    # same speaker, different words: still two conversations
    with pytest.raises(youmu.TextError, match="'content'='Hi' and 'value'='Hello'"):
        conversation_of([{"role": "user", "content": "Hi", "from": "human", "value": "Hello"}], DEFAULT_ROLES)


def test_one_layout_named_reads_its_keys_only() -> None:
    torn = [{"role": "user", "content": "Hi", "from": "gpt", "value": "Hello"}]
    assert read_conversation(LAYOUTS["openai"], {"m": torn}, "m") == [{"role": "user", "content": "Hi"}]
    assert read_conversation(LAYOUTS["sharegpt"], {"m": torn}, "m") == [{"role": "assistant", "content": "Hello"}]
    tok = ByteTokenizer()
    ids = tokenize_chat(torn, [], tok, system=None, layout=LAYOUTS["sharegpt"])["input_ids"]
    assert tok.decode(ids) == "<|im_start|>assistant\nHello<|im_end|>\n"


def test_a_new_layout_is_one_object_read_by_both_transforms() -> None:
    speaker = MessageLayout("speaker-test", "speaker", "text", {"user": "user", "bot": "assistant"})
    rows = [[{"speaker": "user", "text": "Hi"}, {"speaker": "bot", "text": "Hello"}]]
    want = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert read_conversation(speaker, {"chat": rows[0]}, "chat") == want
    sample, _ = ChatTemplate(chat_tokenizer(), "chat", layout=speaker)(pa.table({"chat": rows}))
    assert sample.column("input_ids").to_pylist()[0] == _ids(want)
    try:  # registered, it is read by name and by transforms given no layout
        register(speaker)
        assert ChatTemplate(chat_tokenizer(), "chat", layout="speaker-test").layout is speaker
        assert conversation_of(rows[0], {"user": "user", "bot": "assistant"}) == want
    finally:
        LAYOUTS.pop("speaker-test")
    with pytest.raises(youmu.TextError, match="no role"):
        conversation_of(rows[0], DEFAULT_ROLES)


def test_alpaca_rows_are_one_user_turn_and_the_answer() -> None:
    table = pa.table({"instruction": ["Add", "Greet"], "input": ["1 2", None], "output": ["3", "Hello"],
                      "id": [7, 8]})
    sample, _ = ChatTemplate(chat_tokenizer(), layout="alpaca")(table)
    want = [[{"role": "user", "content": "Add\n1 2"}, {"role": "assistant", "content": "3"}],
            [{"role": "user", "content": "Greet"}, {"role": "assistant", "content": "Hello"}]]
    assert sample.column("input_ids").to_pylist() == [_ids(c) for c in want]
    assert sample.column("id").to_pylist() == [7, 8]  # the layout's columns consumed, the rest kept
    assert "instruction" not in sample.column_names


def test_layout_arguments_are_checked() -> None:
    with pytest.raises(youmu.InvalidArgumentError, match="layout must be one of"):
        ChatTemplate(chat_tokenizer(), layout="llama")
    with pytest.raises(youmu.ArgumentTypeError, match="layout must be"):
        ChatTemplate(chat_tokenizer(), layout=3)  # type: ignore[arg-type]
    with pytest.raises(youmu.InvalidArgumentError, match="already registered"):
        register(MessageLayout("openai", "role", "content"))
    with pytest.raises(youmu.ArgumentTypeError):
        register(Layout())


def test_vision_reads_alpaca_columns_as_chat_template_does() -> None:
    import io

    from PIL import Image

    from youmu.vision import VisionTransform

    buf = io.BytesIO()
    Image.fromarray(np.full((28, 28, 3), 9, np.uint8)).save(buf, "PNG")
    row = {"image": {"bytes": buf.getvalue(), "path": "a.png"}, "instruction": "Name it", "input": None,
           "output": "A square."}
    tok = ByteTokenizer()
    out = VisionTransform(tok, layout="alpaca", pixels=False, system=None)(row)
    text = tok.decode([int(i) for i in out["input_ids"]])
    assert text.startswith("<|im_start|>user\n<|vision_start|>") and text.endswith(
        "<|vision_end|>Name it<|im_end|>\n<|im_start|>assistant\nA square.<|im_end|>\n")
    assert VisionTransform(tok, layout="alpaca").required_columns == ("image", "instruction", "output")
