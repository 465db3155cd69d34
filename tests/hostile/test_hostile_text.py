"""The hostile user, text and chat family: bad text and chat rows, bad templates, rows
over ``cutoff_len`` and tokenizers that cannot reach worker processes come back as
typed errors naming the column, the Parquet file and the row (or the fix) — never
wrong ids, a silent skip or an opaque pickling failure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from parquet_fixtures import write_columns
from textutil import (
    CHATML,
    CHATML_PUBLISHED,
    CHATML_TRAINING,
    bpe_tokenizer,
    chat_tokenizer,
    ultrachat,
    write_chats,
    write_texts,
)
from torch.utils.data import DataLoader

from youmu.errors import ArgumentTypeError, ColumnNotFoundError, InvalidArgumentError, TextError
from youmu.text import ChatTemplate, Tokenize
from youmu.torch import YoumuDataset


def _first_error(ds) -> TextError:
    with pytest.raises(TextError) as e:
        list(ds)
    return e.value


def test_a_null_text_names_its_file_and_row(tmp_path: Path) -> None:
    path = write_texts(tmp_path / "t.parquet", ["a", "b", "c", None, "e"], row_group_size=2)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=Tokenize(bpe_tokenizer())))
    assert (err.column, err.file, err.row, err.position) == ("text", str(path), 3, 3)
    assert "text is null" in str(err) and "row 3" in str(err) and "t.parquet" in str(err)


def test_a_null_text_is_named_through_dataloader_workers_after_the_rows_before_it(tmp_path: Path) -> None:
    path = write_texts(tmp_path / "t.parquet", ["a", "b", "c", None, "e"], row_group_size=2)
    ds = YoumuDataset(path, shuffle="none", output="numpy", transform=Tokenize(bpe_tokenizer()))
    got = []
    with pytest.raises(TextError) as e:
        for x in DataLoader(ds, batch_size=None, num_workers=1):
            got.append(x["input_ids"].tolist())
    assert (e.value.column, e.value.file, e.value.row) == ("text", str(path), 3)
    assert got == [bpe_tokenizer().encode(t).ids for t in "abc"]


def test_a_null_text_is_located_in_a_shuffled_stream(tmp_path: Path) -> None:
    texts = [f"row {i}" for i in range(50)]
    texts[37] = None
    path = write_texts(tmp_path / "t.parquet", texts, row_group_size=5)
    err = _first_error(YoumuDataset(path, shuffle="page", buffer_size=10, seed=1,
                                    transform=Tokenize(bpe_tokenizer(), batch_rows=3)))
    assert (err.file, err.row) == (str(path), 37)


@pytest.mark.parametrize("values, typ", [([1, 2], pa.int64()), ([b"a", b"b"], pa.binary()),
                                         ([["a"], ["b"]], pa.list_(pa.string()))])
def test_a_text_column_that_is_not_strings_is_refused(tmp_path: Path, values, typ) -> None:
    write_columns(tmp_path / "t.parquet", {"text": pa.array(values, type=typ)})
    for transform in (Tokenize(bpe_tokenizer()), Tokenize(bpe_tokenizer(), on_error="skip")):
        err = _first_error(YoumuDataset(tmp_path / "t.parquet", transform=transform))
        assert err.column == "text" and "not strings" in str(err)  # a wrong column: no policy skips it
        assert err.file == str(tmp_path / "t.parquet") and "t.parquet" in str(err)


def test_a_missing_text_column_names_the_columns_there_are(tmp_path: Path) -> None:
    path = write_texts(tmp_path / "t.parquet", ["a"])
    with pytest.raises(ColumnNotFoundError, match="'body'.*\\['text'\\]"):
        list(YoumuDataset(path, transform=Tokenize(bpe_tokenizer(), "body")))


@pytest.mark.parametrize("bad, why", [
    ({"content": "hi"}, "has no role"),
    ({"role": None, "content": "hi"}, "has no role"),
    ({"role": "narrator", "content": "hi"}, "role 'narrator'"),
    ({"role": "user", "content": None}, "content must be a string"),
])
def test_a_bad_message_names_the_message_file_and_row(tmp_path: Path, bad, why: str) -> None:
    convs = ultrachat(6)
    bad = {"role": bad.get("role"), "content": bad.get("content")}
    convs[4] = [convs[4][0], bad] if convs[4][0]["role"] != "system" else [convs[4][1], bad]
    path = write_chats(tmp_path / "c.parquet", convs, row_group_size=2)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(chat_tokenizer())))
    assert why in str(err)
    assert (err.column, err.message, err.file, err.row) == ("messages", 1, str(path), 4)


def test_a_message_whose_two_layouts_disagree_names_its_file_and_row_and_is_skipped_when_asked(
        tmp_path: Path) -> None:
    # a file mixing the two message layouts: Arrow gives every message all four keys, one
    # pair null; in row 3 both pairs are set and disagree (the text and vision parsers once
    # read such a message opposite ways: as the user's prompt, and as the model's answer)
    convs = [[{"role": "user", "content": f"q{i}", "from": None, "value": None},
              {"role": None, "content": None, "from": "gpt", "value": f"a{i}"}] for i in range(6)]
    convs[3][1] = {"role": "user", "content": "q3 again", "from": "gpt", "value": "a3"}
    path = write_chats(tmp_path / "c.parquet", convs, row_group_size=2)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(chat_tokenizer())))
    assert "'role'='user' and 'from'='gpt'" in str(err) and "disagree" in str(err)
    assert (err.column, err.message, err.file, err.row) == ("messages", 1, str(path), 3)
    ds = YoumuDataset(path, shuffle="none", transform=ChatTemplate(chat_tokenizer(), on_error="skip"))
    samples = list(ds)
    assert [int(x["id"]) for x in samples] == [0, 1, 2, 4, 5]
    assert [r["row"] for x in samples for r in x["skipped"]] == [3]


@pytest.mark.parametrize("value, why", [(None, "conversation is null"), ([], "has no messages")])
def test_a_null_or_empty_conversation_is_refused(value, why: str) -> None:
    t = pa.table({"messages": pa.array([ultrachat(1)[0], value],
                                       type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))})
    with pytest.raises(TextError, match=why) as e:
        ChatTemplate(chat_tokenizer())(t)
    assert e.value.batch_row == 1


def test_a_template_that_raises_names_the_row(tmp_path: Path) -> None:
    template = ("{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
                "{{ raise_exception('a system turn must come first') }}{% endif %}"
                "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{% endgeneration %}"
                "{% else %}{{ m['content'] }}{% endif %}{% endfor %}")
    convs = [[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] for _ in range(5)]
    convs[2] = [{"role": "user", "content": "a"}, {"role": "system", "content": "late"}]
    path = write_chats(tmp_path / "c.parquet", convs)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(chat_tokenizer(template))))
    assert "a system turn must come first" in str(err) and (err.file, err.row) == (str(path), 2)


def test_a_row_over_cutoff_len_is_refused_when_asked(tmp_path: Path) -> None:
    tok = chat_tokenizer()
    convs = ultrachat(10)
    cutoff = max(len(tok.apply_chat_template(c)["input_ids"]) for c in convs)
    convs[6] = [{"role": "user", "content": "long " * cutoff}, {"role": "assistant", "content": "ok"}]
    path = write_chats(tmp_path / "c.parquet", convs, row_group_size=3)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(tok, cutoff_len=cutoff,
                                                                                  overflow="raise")))
    assert f"over cutoff_len={cutoff}" in str(err) and (err.file, err.row) == (str(path), 6)




def _labels(template: str, convs) -> list[list[int]]:
    out, _ = ChatTemplate(chat_tokenizer(template))(pa.table({"messages": convs}))
    return out.column("labels").to_pylist()


@pytest.mark.parametrize("dead", [
    "{#- a training template: answers are {% generation %} blocks -#}\n",  # TRL's header comments
    "{% if false %}{% generation %}{% endgeneration %}{% endif %}",  # a block no row can reach
    "{{ '{% generation %}' if false else '' }}",  # the tag in a string
])
def test_a_generation_tag_that_can_never_run_is_no_block(dead: str) -> None:
    # the text search saw a tag and every label came out -100; the parsed template has none,
    # so the answers are found turn by turn, as the tagged template marks them
    convs = ultrachat(8)
    assert not ChatTemplate(chat_tokenizer(dead + CHATML_PUBLISHED)).tagged
    labels = _labels(dead + CHATML_PUBLISHED, convs)
    assert labels == _labels(CHATML_TRAINING, convs) and all(any(v != -100 for v in row) for row in labels)


def test_a_generation_block_this_row_never_reaches_names_the_row(tmp_path: Path) -> None:
    # the block is only in a branch for a role this data does not use: 0 labels is an error, not a sample
    template = CHATML.replace("{% if m['role'] == 'assistant' %}", "{% if m['role'] == 'bot' %}")
    convs = ultrachat(6)
    path = write_chats(tmp_path / "c.parquet", convs, row_group_size=3)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(chat_tokenizer(template))))
    assert "0 labels" in str(err) and "never run" in str(err)
    assert (err.column, err.file, err.row) == ("messages", str(path), 0)


@pytest.mark.parametrize("template", [CHATML, CHATML_PUBLISHED], ids=["tagged", "published"])
def test_a_chat_with_no_assistant_turn_names_its_row(tmp_path: Path, template: str) -> None:
    convs = ultrachat(7)
    convs[5] = [m for m in convs[5] if m["role"] != "assistant"]
    path = write_chats(tmp_path / "c.parquet", convs, row_group_size=2)
    err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(chat_tokenizer(template))))
    assert "no assistant turn" in str(err) and "0 labels" in str(err)
    assert (err.column, err.file, err.row) == ("messages", str(path), 5)
    # on_error="skip": the row is left out and reported, the rest of its batch kept
    out, keep, skipped = ChatTemplate(chat_tokenizer(template), on_error="skip")(pa.table({"messages": convs}))
    assert keep.tolist() == [True] * 5 + [False, True]
    assert [(e.batch_row, "no assistant turn" in e.reason) for e in skipped] == [(5, True)]


def test_an_answer_the_template_renders_otherwise_when_followed_names_its_message() -> None:
    # the last answer shouted, earlier ones not: an earlier answer's text is nowhere to be
    # found in the whole rendering, so its tokens cannot be told, and the row says so
    shout = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
             "{{ m['content'] | upper if loop.last and LAST else m['content'] }}{{ '!<|im_end|>\\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    one = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    conv = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "abc"},
            {"role": "user", "content": "r"}, {"role": "assistant", "content": "def"}]
    tok = chat_tokenizer(shout.replace("LAST", "m['role'] == 'assistant'"))
    with pytest.raises(TextError, match="cannot tell which tokens") as e:
        ChatTemplate(tok)(pa.table({"messages": [one, conv]}))
    assert (e.value.message, e.value.batch_row) == (1, 1)
    # nor is a prompt the template renders otherwise before an answer labelled
    with pytest.raises(TextError, match="cannot tell which tokens") as e:
        ChatTemplate(chat_tokenizer(shout.replace("LAST", "m['role'] == 'user'")))(pa.table({"messages": [one]}))
    assert (e.value.message, e.value.batch_row) == (1, 0)


def test_a_template_that_does_not_parse_is_refused_up_front() -> None:
    with pytest.raises(InvalidArgumentError, match="does not parse"):
        ChatTemplate(chat_tokenizer("{% for m in messages %}{{ m['content'] }}"))


def test_a_tokenizer_without_a_chat_template_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="chat template"):
        ChatTemplate(chat_tokenizer(None))
    with pytest.raises(ArgumentTypeError, match="PreTrainedTokenizerFast"):
        ChatTemplate(bpe_tokenizer())


@pytest.mark.parametrize("bad", [None, 3, object()])
def test_something_that_is_not_a_tokenizer_is_refused(bad) -> None:
    with pytest.raises(ArgumentTypeError, match="tokenizer must be"):
        Tokenize(bad)


@pytest.mark.parametrize("kw", [{"cutoff_len": 0}, {"overflow": "wrap"}, {"batch_rows": 0}])
def test_bad_chat_settings_are_named(kw) -> None:
    with pytest.raises((InvalidArgumentError, ArgumentTypeError), match=next(iter(kw))):
        ChatTemplate(chat_tokenizer(), **kw)


def test_a_tokenizer_that_cannot_be_pickled_names_the_fix_for_spawned_workers(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, pre_tokenizers

    class Whole:  # a custom Python pre-tokenizer: tokenizers refuses to pickle it
        def pre_tokenize(self, pretok):
            pretok.split(lambda i, s: [s])

    tok = Tokenizer.from_str(bpe_tokenizer().to_str())
    tok.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(Whole())
    path = write_texts(tmp_path / "t.parquet", ["a", "b"])
    ds = YoumuDataset(path, shuffle="none", transform=Tokenize(tok))
    assert len(list(DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="fork"))) == 2
    with pytest.raises(ArgumentTypeError, match=r"cannot be pickled.*path of a saved copy.*fork"):
        list(DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn"))


def test_a_batched_transform_that_returns_the_wrong_rows_is_named(tmp_path: Path) -> None:
    class Halves:
        batched = True

        def __call__(self, table):
            return table.slice(0, table.num_rows // 2)

    path = write_texts(tmp_path / "t.parquet", ["a", "b", "c", "d"])
    with pytest.raises(ArgumentTypeError, match="Halves returned 2 rows for 4"):
        list(YoumuDataset(path, transform=Halves()))


class _Ids:
    """A tokenizer as a user may wrap one (called on a list of texts, as transformers'
    are) that returns whatever ids it is given."""

    def __init__(self, row) -> None:
        self.row = row

    def convert_tokens_to_ids(self, token):
        return 0

    def __call__(self, texts, **kwargs):
        return {"input_ids": [self.row(t) for t in texts]}


@pytest.mark.parametrize("row", [lambda t: [1.7, 2.2], lambda t: [1, 2.0], lambda t: np.array([1.5, 2.5]),
                                 lambda t: ["1", "2"], lambda t: [1, 2**64]], ids=["floats", "a float",
                                                                                    "float array", "strings", "huge"])
def test_token_ids_that_are_not_integers_are_refused_not_cut(tmp_path: Path, row) -> None:
    path = write_texts(tmp_path / "t.parquet", ["a", "b", "c"])
    with pytest.raises(ArgumentTypeError, match="token id.*(integer|int64)"):
        list(YoumuDataset(path, shuffle="none", transform=Tokenize(_Ids(row))))
    with pytest.raises(ArgumentTypeError, match="token id.*(integer|int64)"):  # a broken tokenizer is no bad row
        list(YoumuDataset(path, shuffle="none", transform=Tokenize(_Ids(row), on_error="skip")))


def test_a_tokenizer_returning_no_ids_for_a_row_names_the_row(tmp_path: Path) -> None:
    path = write_texts(tmp_path / "t.parquet", ["a", "b", "none here", "d"], row_group_size=2)
    tok = _Ids(lambda t: None if t == "none here" else [1, 2])
    err = _first_error(YoumuDataset(path, shuffle="none", transform=Tokenize(tok)))
    assert (err.column, err.file, err.row) == ("text", str(path), 2) and "NoneType" in str(err)
    # and skipped with the policy, its neighbours tokenized
    got = list(YoumuDataset(path, shuffle="none", output="python", transform=Tokenize(tok, on_error="skip")))
    assert [g["input_ids"] for g in got] == [[1, 2]] * 3 and [r["row"] for g in got for r in g["skipped"]] == [2]


def _lying_chat(ids):
    """The real chat tokenizer, whose batch templating returns ``ids(rows)`` as input_ids."""
    tok = chat_tokenizer()
    real = tok.apply_chat_template

    def apply(conversations, **kwargs):
        out = real(conversations, **kwargs)
        if kwargs.get("tokenize", True) and isinstance(conversations[0], list):
            out = {"input_ids": ids(out["input_ids"]), "assistant_masks": out["assistant_masks"]}
        return out

    tok.apply_chat_template = apply
    return tok


def test_chat_ids_that_are_not_integers_are_refused_not_cut(tmp_path: Path) -> None:
    path = write_chats(tmp_path / "c.parquet", ultrachat(4))
    tok = _lying_chat(lambda rows: [[i + 0.7 for i in r] for r in rows])
    with pytest.raises(ArgumentTypeError, match="ChatTemplate.*token id .*float"):
        list(YoumuDataset(path, shuffle="none", transform=ChatTemplate(tok)))


class _Huge:
    """A row of ids claiming 2**31 of them (a tokenizer that lies about its length)."""

    def __len__(self) -> int:
        return 2**31

    def __iter__(self):
        raise AssertionError("the ids were copied before their count was checked")


def test_a_chat_row_claiming_2_to_the_31_tokens_is_refused_before_allocating(tmp_path: Path) -> None:
    import tracemalloc

    path = write_chats(tmp_path / "c.parquet", ultrachat(4))
    tok = _lying_chat(lambda rows: [_Huge() if i == 1 else r for i, r in enumerate(rows)])
    tracemalloc.start()
    try:
        err = _first_error(YoumuDataset(path, shuffle="none", transform=ChatTemplate(tok)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(2**31) in str(err) and (err.file, err.row) == (str(path), 1)
    assert peak < 1 << 30


@pytest.mark.parametrize("encode", [lambda text: [1.7, 2.2], lambda text: None], ids=["floats", "none"])
def test_a_vision_tokenizer_returning_ids_that_are_not_integers_is_refused(encode) -> None:
    from youmu.vision import VisionTransform

    class Tok:
        image_token_id = 9

        def encode(self, text):
            return encode(text)

    with pytest.raises(ArgumentTypeError, match="encode.*(token id 1.7|NoneType)"):
        VisionTransform(Tok(), text_column="caption", pixels=False)({"image": None, "caption": "a cat"})


@pytest.mark.parametrize("where", ["path", "absolute", "dotted", "json", "nested"])
def test_a_tokenizer_path_that_does_not_exist_is_named_at_once_without_the_network(tmp_path: Path, monkeypatch,
                                                                                   where: str) -> None:
    import time

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a lookup would fail here, not wait on the Hub
    missing = {"path": tmp_path / "tok", "absolute": str(tmp_path / "tok"), "dotted": "./no-such-tokenizer",
               "json": "no-such/tokenizer.json", "nested": "a/b/c/tokenizer"}[where]
    t0 = time.monotonic()
    for make in (Tokenize, ChatTemplate):
        with pytest.raises(InvalidArgumentError, match=r"tokenizer path .*does not exist") as e:
            make(missing)
        assert str(missing) in str(e.value)
    assert time.monotonic() - t0 < 10


def test_data_given_as_the_tokenizer_path_is_named(tmp_path: Path) -> None:
    data = write_texts(tmp_path / "train.parquet", ["a", "b"])
    with pytest.raises(InvalidArgumentError, match=r"train\.parquet.* is a Parquet file, not a tokenizer"):
        ChatTemplate(data)
    with pytest.raises(InvalidArgumentError, match=r"is a Parquet file, not a tokenizer"):
        list(YoumuDataset(data, transform=Tokenize(str(data))))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgumentError, match=r"directory .*empty.* holds no tokenizer"):
        ChatTemplate(tmp_path / "empty")
    (tmp_path / "bad.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(InvalidArgumentError, match=r"bad\.json.* not a tokenizer\.json"):
        list(YoumuDataset(data, transform=Tokenize(tmp_path / "bad.json")))
