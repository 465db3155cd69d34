"""``on_error="skip"`` of the text transforms (:class:`youmu.text.Tokenize`,
:class:`youmu.text.ChatTemplate`): a bad row is dropped without its good neighbours,
counted and reported where it is (file, row, stream position) in the ``"skipped"``
list of a delivered sample, the same rows in the same places on every run, through
DataLoader workers and across a resume; a pass in which no row is good is an error,
as :class:`youmu.vision.VisionTransform`'s skip policy has it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torchdata.stateful_dataloader as tdl
from textutil import bpe_tokenizer, chat_tokenizer, sharegpt, ultrachat, write_chats, write_texts
from torch.utils.data import DataLoader

import youmu
from youmu.errors import TextError
from youmu.text import ChatTemplate, Tokenize
from youmu.torch import YoumuDataset

N = 40
#: rows of the chat file that are bad, each a way published chat sets are odd
BAD_CHATS = {
    3: [{"role": "user", "content": None}, {"role": "assistant", "content": "x"}],  # a null content
    4: [{"role": "observation", "content": "tool said"}, {"role": "assistant", "content": "x"}],  # ShareGPT's tools
    17: None,  # a null conversation
    18: [{"role": "user", "content": "late"}, {"role": "assistant", "content": "x"},
         {"role": "system", "content": "a system turn the template refuses"}],
    39: [],  # no messages
}
#: a template that refuses a system turn after the first (as Gemma's refuses any)
STRICT = ("{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
          "{{ raise_exception('System role not supported') }}{% endif %}"
          "<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
          "<|im_end|>{% endgeneration %}{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}")


@pytest.fixture(scope="module")
def chats(tmp_path_factory) -> Path:
    convs = ultrachat(N, seed=3)
    for i, c in BAD_CHATS.items():
        convs[i] = c
    return write_chats(tmp_path_factory.mktemp("chats") / "c.parquet", convs, row_group_size=4)


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    rows = [f"text {i}" for i in range(N)]
    for i in BAD_TEXTS:
        rows[i] = None
    return write_texts(tmp_path_factory.mktemp("texts") / "t.parquet", rows, row_group_size=4, id=list(range(N)))


BAD_TEXTS = [0, 9, 10, 11, 31]


def _chat(**kw) -> ChatTemplate:
    return ChatTemplate(chat_tokenizer(STRICT), on_error="skip", batch_rows=8, **kw)


def _tokenize() -> Tokenize:
    return Tokenize(bpe_tokenizer(), on_error="skip", batch_rows=8)


def _ids_and_reports(samples) -> tuple[list[int], list[dict]]:
    return [int(s["id"]) for s in samples], [r for s in samples for r in s["skipped"]]


@pytest.mark.parametrize("shuffle", ["none", "page", "row"])
def test_bad_chats_are_skipped_and_reported_and_their_neighbours_kept(chats: Path, shuffle: str) -> None:
    ds = YoumuDataset(chats, shuffle=shuffle, seed=5, output="python", transform=_chat())
    samples = list(ds)
    ids, reports = _ids_and_reports(samples)
    assert sorted(ids) == [i for i in range(N) if i not in BAD_CHATS]
    assert sorted(r["row"] for r in reports) == sorted(BAD_CHATS)
    assert ds.skip_log.count == len(BAD_CHATS) and all(r["file"] == str(chats) for r in reports)
    why = {r["row"]: r for r in reports}
    assert "content must be a string" in why[3]["reason"] and why[3]["message"] == 0
    assert "'observation'" in why[4]["reason"] and why[4]["column"] == "messages"
    assert "conversation is null" in why[17]["reason"]
    assert "System role not supported" in why[18]["reason"]
    # a kept sample is exactly what the template gives that conversation alone
    tok = chat_tokenizer(STRICT)
    conv = ultrachat(N, seed=3)[1]
    one = next(s for s in samples if s["id"] == 1)
    assert one["input_ids"] == tok.apply_chat_template(conv)["input_ids"]
    # the same rows, reported at the same positions, on every run
    again = YoumuDataset(chats, shuffle=shuffle, seed=5, output="python", transform=_chat())
    assert [(r["position"], r["row"]) for r in _ids_and_reports(list(again))[1]] == \
        [(r["position"], r["row"]) for r in reports]


def test_sharegpt_rows_with_roles_not_mapped_are_skipped(tmp_path: Path) -> None:
    convs = sharegpt(ultrachat(12))
    convs[5] = [{"from": "human", "value": "call it"}, {"from": "function_call", "value": "{}"},
                {"from": "observation", "value": "42"}, {"from": "gpt", "value": "42"}]
    path = write_chats(tmp_path / "s.parquet", convs, column="conversations", row_group_size=4)
    ds = YoumuDataset(path, shuffle="none", output="python",
                      transform=ChatTemplate(chat_tokenizer(), "conversations", on_error="skip"))
    ids, reports = _ids_and_reports(list(ds))
    assert ids == [i for i in range(12) if i != 5]
    assert [(r["row"], r["message"]) for r in reports] == [(5, 1)] and "'function_call'" in reports[0]["reason"]


def test_null_texts_are_skipped_and_their_batch_neighbours_tokenized(texts: Path) -> None:
    ds = YoumuDataset(texts, shuffle="page", seed=2, output="python", transform=_tokenize())
    ids, reports = _ids_and_reports(list(ds))
    assert sorted(ids) == [i for i in range(N) if i not in BAD_TEXTS]
    assert sorted(r["row"] for r in reports) == BAD_TEXTS and {r["reason"] for r in reports} == {"text is null"}
    tok = bpe_tokenizer()
    for s in YoumuDataset(texts, shuffle="none", output="python", transform=_tokenize()):
        assert s["input_ids"] == tok.encode(f"text {s['id']}").ids


@pytest.mark.parametrize("which", ["chat", "text"])
def test_skips_through_two_dataloader_workers_are_each_reported_once(chats: Path, texts: Path, which: str) -> None:
    path, transform, bad = (chats, _chat(), BAD_CHATS) if which == "chat" else (texts, _tokenize(), BAD_TEXTS)
    ds = YoumuDataset(path, shuffle="page", seed=1, output="python", transform=transform)
    ids, reports = _ids_and_reports(list(DataLoader(ds, batch_size=None, num_workers=2)))
    assert sorted(ids) == [i for i in range(N) if i not in bad]
    assert sorted(r["row"] for r in reports) == sorted(bad)


@pytest.mark.parametrize("which", ["chat", "text"])
def test_a_resumed_stream_skips_and_reports_the_same_rows(chats: Path, texts: Path, which: str) -> None:
    path, make, bad = (chats, _chat, BAD_CHATS) if which == "chat" else (texts, _tokenize, BAD_TEXTS)

    def loader():
        ds = YoumuDataset(path, shuffle="page", seed=7, output="python", transform=make())
        return tdl.StatefulDataLoader(ds, batch_size=None, num_workers=2)

    whole = list(loader())
    first_run = loader()
    it = iter(first_run)
    first = [next(it) for _ in range(11)]
    state = first_run.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    ids, reports = _ids_and_reports(first + rest)
    assert sorted(ids) == [i for i in range(N) if i not in bad]
    assert sorted(r["row"] for r in reports) == sorted(bad)  # each once: none lost, none twice
    # and where the uninterrupted run reported them
    assert sorted((r["row"], r["position"]) for r in reports) == \
        sorted((r["row"], r["position"]) for r in _ids_and_reports(whole)[1])


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("which", ["chat", "text"])
def test_a_skip_policy_under_which_no_row_is_good_is_an_error(tmp_path: Path, which: str, workers: int) -> None:
    if which == "chat":
        path = write_chats(tmp_path / "c.parquet", [[{"role": "user", "content": None}]] * 12, row_group_size=4)
        transform = _chat()
    else:
        path = write_texts(tmp_path / "t.parquet", [None] * 12, row_group_size=4)
        transform = _tokenize()
    ds = YoumuDataset(path, shuffle="none", output="python", transform=transform)
    with pytest.raises(TextError, match=r"skipped all \d+ rows of this pass .* delivered none") as e:
        list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert e.value.file == str(path) and not e.value.skip


def test_the_default_still_raises_at_the_first_bad_row(chats: Path) -> None:
    ds = YoumuDataset(chats, shuffle="none", output="python", transform=ChatTemplate(chat_tokenizer(STRICT)))
    with pytest.raises(TextError) as e:
        list(ds)
    assert (e.value.file, e.value.row) == (str(chats), 3)
    with pytest.raises(youmu.InvalidArgumentError, match="on_error"):
        ChatTemplate(chat_tokenizer(), on_error="ignore")
    with pytest.raises(youmu.InvalidArgumentError, match="on_error"):
        Tokenize(bpe_tokenizer(), on_error="drop")


def test_rows_over_cutoff_len_refused_are_skipped_under_skip(tmp_path: Path) -> None:
    tok = chat_tokenizer()
    convs = ultrachat(10)
    cutoff = max(len(tok.apply_chat_template(c)["input_ids"]) for c in convs)
    convs[2] = convs[7] = [{"role": "user", "content": "long " * cutoff}, {"role": "assistant", "content": "ok"}]
    path = write_chats(tmp_path / "c.parquet", convs, row_group_size=5)
    ds = YoumuDataset(path, shuffle="none", output="python",
                      transform=ChatTemplate(tok, cutoff_len=cutoff, overflow="raise", on_error="skip"))
    ids, reports = _ids_and_reports(list(ds))
    assert ids == [i for i in range(10) if i not in (2, 7)]
    assert [r["row"] for r in reports] == [2, 7] and all("over cutoff_len" in r["reason"] for r in reports)


def test_a_padding_collate_gathers_a_batchs_reports_into_one_list(texts: Path) -> None:
    from youmu.torch import lm_collate

    ds = YoumuDataset(texts, shuffle="none", transform=_tokenize())
    batches = list(DataLoader(ds, batch_size=4, collate_fn=lm_collate))
    assert all(isinstance(b["skipped"], list) for b in batches)
    assert sorted(r["row"] for b in batches for r in b["skipped"]) == BAD_TEXTS
    assert sum(len(b["id"]) for b in batches) == N - len(BAD_TEXTS)


def test_packed_rows_resume_exactly_with_each_skipped_row_reported_once(tmp_path: Path) -> None:
    from youmu.torch import collate_packed, pack

    # a long row split over sequences, then skipped rows its position covers: a state
    # taken part-way through it must resume at that row, not at the rows skipped after it
    texts = ["the quick brown fox jumps over the lazy dog " * 3, None, "parquet pages", None, None,
             "tokenizers split text", "bpe merges", None]
    path = write_texts(tmp_path / "t.parquet", texts, row_group_size=2)

    def make():
        ds = YoumuDataset(path, shuffle="none", output="python", transform=_tokenize())
        return pack(ds, seq_len=8, pad_id=0)

    whole = list(make())
    assert sorted(r["row"] for s in whole for r in s["skipped"]) == [1, 3, 4, 7]
    assert collate_packed(whole[:3])["skipped"] == [r for s in whole[:3] for r in s["skipped"]]
    for k in range(1, len(whole)):
        first = make()
        it = iter(first)
        got = [next(it) for _ in range(k)]
        resumed = make()
        resumed.load_state_dict(first.state_dict())
        got += list(resumed)
        assert [s["input_ids"].tolist() for s in got] == [s["input_ids"].tolist() for s in whole], k
        assert sorted(r["row"] for s in got for r in s["skipped"]) == [1, 3, 4, 7], k


class _SkipEveryFifth:
    """A transform that skips the rows whose id is 3 mod 5 (reported as a skip policy's)."""

    reports_rows = True

    def __call__(self, row):
        if row["id"] % 5 == 3:
            raise TextError("bad row", column="input_ids", skip=True)
        return {**row, "skipped": []}


def test_packed_rows_with_skips_resized_across_jobs_deliver_every_token_once(tmp_path: Path) -> None:
    """Jobs of 2, 3, 1 and 4 ranks each resuming the last one's merged state: a row that
    an earlier job packed part of, its position covering rows skipped after it, gives
    the next job only the rest of its tokens."""
    import json
    import random

    import numpy as np
    from parquet_fixtures import unique_tokens_table, write_table

    from youmu.torch import pack

    rng = np.random.RandomState(3)
    table = unique_tokens_table(range(120), [rng.randint(1, 14) for _ in range(120)])
    write_table(tmp_path / "p.parquet", table, row_group_size=6)
    toks = table.column("input_ids").to_pylist()

    def make(r, w):
        ds = YoumuDataset(tmp_path / "p.parquet", buffer_size=12, seed=2, rank=r, world_size=w, output="python",
                          transform=_SkipEveryFifth())
        return pack(ds, seq_len=11, pad_id=-1)

    pick = random.Random(1)  # stops a job part-way through a row whose position covers skipped rows
    got: list[int] = []
    reported: list[int] = []
    state = None
    worlds = [2, 3, 1, 4]
    for j, w in enumerate(worlds):
        states = []
        for r in range(w):
            s = make(r, w)
            if state is not None:
                s.load_state_dict(json.loads(json.dumps(state)))
            it = iter(s)
            items = list(it) if j == len(worlds) - 1 else [x for _, x in zip(range(pick.randint(0, 12)), it)]
            got += [t for x in items for t in x["input_ids"].tolist() if t != -1]
            reported += [rep["row"] for x in items for rep in x["skipped"]]
            states.append(s.state_dict())
        state = youmu.merge_states(states)
    assert sorted(got) == sorted(t for r, row in enumerate(toks) if r % 5 != 3 for t in row)
    assert sorted(reported) == [r for r in range(120) if r % 5 == 3]
