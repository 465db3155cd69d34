"""Text and chat Parquet tokenized online: token ids are what the tokenizer gives for
each text on its own, chat labels are exactly the tokens ``transformers`` marks as the
assistant's, ``cutoff_len`` cuts as LLaMA-Factory cuts, and a stream tokenized in
DataLoader workers resumes exactly (its state counts rows)."""

from __future__ import annotations

import itertools
import pickle
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textutil import CHATML, bpe_tokenizer, chat_tokenizer, sharegpt, ultrachat, write_chats, write_texts
from torch.utils.data import DataLoader

from youmu.text import ChatTemplate, Tokenize, infer_seqlen
from youmu.torch import YoumuDataset, pack

TEXTS = st.lists(st.text(max_size=300) | st.sampled_from(["", " ", "\n", "🙂" * 50, "中文" * 100]), max_size=40)


def _ids(ds) -> list[list[int]]:
    return [np.asarray(x["input_ids"]).tolist() for x in ds]


# -- token ids -------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(texts=TEXTS)
def test_token_ids_equal_the_tokenizer_called_on_each_text(texts: list[str]) -> None:
    tok = bpe_tokenizer()
    out = Tokenize(tok, batch_rows=7)(pa.table({"text": pa.array(texts, type=pa.string())}))
    assert out.column("input_ids").to_pylist() == [tok.encode(t).ids for t in texts]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=TEXTS.filter(bool))
def test_a_stream_of_text_parquet_yields_the_tokenizers_ids_row_by_row(tmp_path: Path, texts: list[str]) -> None:
    path = write_texts(tmp_path / "t.parquet", texts, row_group_size=5)
    tok = bpe_tokenizer()
    ds = YoumuDataset(path, columns=["text"], shuffle="none", output="numpy", transform=Tokenize(tok, batch_rows=3))
    assert _ids(ds) == [e.ids for e in tok.encode_batch(texts)]


def test_huge_and_non_ascii_texts_are_tokenized_whole(tmp_path: Path) -> None:
    tok = bpe_tokenizer()
    texts = ["", "x" * (1 << 20), "Grüße, 世界 🙂 " * 20_000, "\x00\ufffd\u200b"]
    ds = YoumuDataset(write_texts(tmp_path / "t.parquet", texts), columns=["text"], shuffle="none",
                      output="numpy", transform=Tokenize(tok))
    assert _ids(ds) == [tok.encode(t).ids for t in texts]


def test_a_transformers_tokenizer_gives_what_calling_it_gives(tmp_path: Path) -> None:
    fast = chat_tokenizer()
    texts = ["hello there", "", "Ünïcödé 中文", "the lazy dog " * 500]
    ds = YoumuDataset(write_texts(tmp_path / "t.parquet", texts), columns=["text"], shuffle="none",
                      output="numpy", transform=Tokenize(fast))
    assert _ids(ds) == fast(texts)["input_ids"]
    plain = YoumuDataset(write_texts(tmp_path / "u.parquet", texts), columns=["text"], shuffle="none",
                         output="numpy", transform=Tokenize(fast, add_special_tokens=False))
    assert _ids(plain) == fast(texts, add_special_tokens=False)["input_ids"]


def test_bos_and_eos_are_the_tokenizers_own() -> None:
    tok = bpe_tokenizer()
    ids = Tokenize(tok)(pa.table({"text": ["", "dog"]})).column("input_ids").to_pylist()
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    assert ids[0] == [bos, eos] and ids[1][0] == bos and ids[1][-1] == eos
    bare = Tokenize(tok, add_special_tokens=False)(pa.table({"text": ["dog"]})).column("input_ids").to_pylist()
    assert bare == [ids[1][1:-1]]


def test_other_columns_travel_with_the_ids(tmp_path: Path) -> None:
    path = write_texts(tmp_path / "t.parquet", ["a", "b", "c"], id=[10, 11, 12])
    ds = YoumuDataset(path, shuffle="none", output="python", transform=Tokenize(bpe_tokenizer()))
    rows = list(ds)
    assert [r["id"] for r in rows] == [10, 11, 12] and all(set(r) == {"id", "input_ids"} for r in rows)


def test_a_tokenizer_path_is_loaded_in_each_process(tmp_path: Path) -> None:
    tok = bpe_tokenizer()
    tok.save(str(tmp_path / "tokenizer.json"))
    fast = chat_tokenizer()
    fast.save_pretrained(tmp_path / "hf")
    texts = ["one", "two three"]
    for ref, want in ((tmp_path / "tokenizer.json", [tok.encode(t).ids for t in texts]),
                      (str(tmp_path / "hf"), fast(texts)["input_ids"])):
        t = Tokenize(ref)
        clone = pickle.loads(pickle.dumps(t))
        assert clone.tokenizer._tok is None  # not pickled: loaded where it is used
        assert clone(pa.table({"text": texts})).column("input_ids").to_pylist() == want


class _CountingTokenizer:
    """A tokenizers-like tokenizer that counts how often it is serialised."""

    pickled = 0

    def encode_batch(self, texts, add_special_tokens=True):  # pragma: no cover - never called
        raise AssertionError

    def to_str(self) -> str:
        return "{}"

    def __getstate__(self) -> dict:
        type(self).pickled += 1
        return {}


def test_a_tokenizer_is_serialised_once_per_pickle_of_its_transform() -> None:
    # spawn workers receive the transform pickled (once per worker start): a large
    # vocabulary's tokenizer costs a noticeable time to serialise, so not twice
    _CountingTokenizer.pickled = 0
    clone = pickle.loads(pickle.dumps(Tokenize(_CountingTokenizer())))
    assert isinstance(clone.tokenizer.get(), _CountingTokenizer)
    assert _CountingTokenizer.pickled == 1


# -- into pack, through DataLoader workers, resumed ----------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    import random

    rnd = random.Random(3)
    texts = [" ".join(rnd.choices(["fox", "dog", "Parquet", "页面", "🙂", "tokens", "the"], k=rnd.randint(0, 40)))
             for _ in range(300)]
    return write_texts(tmp_path_factory.mktemp("c") / "c.parquet", texts, row_group_size=20), texts


def _dataset(path: Path, **kw) -> YoumuDataset:
    return YoumuDataset(path, columns=["text"], buffer_size=60, seed=4, transform=Tokenize(bpe_tokenizer()), **kw)


def test_packing_online_tokens_equals_packing_the_tokenized_rows(corpus) -> None:
    path, texts = corpus
    tok = bpe_tokenizer()
    ds = _dataset(path, shuffle="none")
    packed = [x["input_ids"].tolist() for x in pack(ds, seq_len=64, eos_id=1)]
    flat = list(itertools.chain.from_iterable(tok.encode(t).ids + [1] for t in texts))
    assert packed == [flat[i:i + 64] for i in range(0, len(flat) - 63, 64)]


def _stateful(ds, workers: int):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(ds, batch_size=None, num_workers=workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_with_tokenization_in_workers_is_exact(corpus, workers: int) -> None:
    path, _ = corpus
    full = [x["input_ids"].tolist() for x in _stateful(_dataset(path), workers)]
    first = _stateful(_dataset(path), workers)
    it = iter(first)
    head = [next(it)["input_ids"].tolist() for _ in range(77)]
    state = first.state_dict()
    del it
    again = _stateful(_dataset(path), workers)
    again.load_state_dict(state)
    assert head + [x["input_ids"].tolist() for x in again] == full


def test_packed_online_tokens_resume_exactly_in_workers(corpus) -> None:
    path, _ = corpus
    full = [x["input_ids"].tolist() for x in _stateful(pack(_dataset(path), seq_len=48, eos_id=1), 2)]
    first = _stateful(pack(_dataset(path), seq_len=48, eos_id=1), 2)
    it = iter(first)
    head = [next(it)["input_ids"].tolist() for _ in range(13)]
    state = first.state_dict()
    del it
    again = _stateful(pack(_dataset(path), seq_len=48, eos_id=1), 2)
    again.load_state_dict(state)
    assert head + [x["input_ids"].tolist() for x in again] == full


def test_the_state_counts_rows_not_tokens(corpus) -> None:
    path, texts = corpus
    ds = _dataset(path, shuffle="none")
    it = iter(ds)
    for _ in range(10):
        next(it)
    assert ds.state_dict()["positions"] == {0: 10}
    assert len(ds) == len(texts)


class _CountedTokenize(Tokenize):
    """``Tokenize``, noting the rows of each call."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.calls: list[int] = []

    def __call__(self, table: pa.Table) -> pa.Table:
        self.calls.append(table.num_rows)
        return super().__call__(table)


def test_the_first_sample_waits_for_a_few_rows_not_a_window(tmp_path: Path) -> None:
    """A pass's first call of a batched transform gets FIRST_ROWS rows and each next
    one twice as many up to batch_rows, so a trainer's first step waits for a few rows'
    tokenization, not a whole window's; the ids are the same, and a resumed pass ramps
    up again from the row it resumes at."""
    from youmu.streams.batched import FIRST_ROWS

    texts = [f"row {i} " + "the fox " * (i % 9) for i in range(600)]
    path = write_texts(tmp_path / "t.parquet", texts, row_group_size=300)
    tok = bpe_tokenizer()

    def dataset() -> tuple[YoumuDataset, _CountedTokenize]:
        t = _CountedTokenize(tok, batch_rows=100)
        return YoumuDataset(path, columns=["text"], shuffle="none", output="numpy", transform=t), t

    ds, counted = dataset()
    assert _ids(ds) == [e.ids for e in tok.encode_batch(texts)]
    assert counted.calls[:4] == [FIRST_ROWS, 2 * FIRST_ROWS, 4 * FIRST_ROWS, 100] and max(counted.calls) == 100
    assert sum(counted.calls) == len(texts)
    first, _ = dataset()
    it = iter(first)
    head = [next(it)["input_ids"].tolist() for _ in range(250)]
    state = first.state_dict()
    again, counted = dataset()
    again.load_state_dict(state)
    assert head + _ids(again) == [e.ids for e in tok.encode_batch(texts)]
    assert counted.calls[:2] == [FIRST_ROWS, 2 * FIRST_ROWS] and sum(counted.calls) == len(texts) - 250


# -- chat templates --------------------------------------------------------------------
def _reference(tok, conversations) -> list[tuple[list[int], list[int]]]:
    """What transformers gives for each conversation on its own: ids and labels from
    its assistant mask."""
    out = []
    for conv in conversations:
        enc = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids, mask = enc["input_ids"], enc["assistant_masks"]
        out.append((ids, [i if m else -100 for i, m in zip(ids, mask)]))
    return out


@pytest.mark.parametrize("layout", ["messages", "conversations"])
def test_chat_labels_are_the_tokens_transformers_marks_as_the_assistants(tmp_path: Path, layout: str) -> None:
    tok = chat_tokenizer()
    convs = ultrachat(40)
    stored = convs if layout == "messages" else sharegpt(convs)
    path = write_chats(tmp_path / "c.parquet", stored, column=layout)
    ds = YoumuDataset(path, shuffle="none", output="numpy", transform=ChatTemplate(tok, column=layout, batch_rows=16))
    got = [(x["input_ids"].tolist(), x["labels"].tolist()) for x in ds]
    assert got == _reference(tok, convs)
    assert all(any(v != -100 for v in labels) for _, labels in got)  # every conversation has an answer to learn
    assert [x["id"] for x in ds] == list(range(40))


MESSAGES = st.lists(
    st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=80)), min_size=1, max_size=8
).map(lambda turns: [{"role": r, "content": c} for r, c in turns]
       # a chat with no answer is an error (nothing to learn), tests/hostile/test_hostile_text.py
       + ([] if any(r == "assistant" for r, _ in turns) else [{"role": "assistant", "content": ""}]))


@settings(max_examples=40, deadline=None)
@given(convs=st.lists(MESSAGES, min_size=1, max_size=6))
def test_chat_labels_match_transformers_on_any_conversation(convs) -> None:
    tok = chat_tokenizer()
    t = pa.table({"messages": convs})
    out, keep = ChatTemplate(tok, batch_rows=4)(t)
    assert keep.all()
    got = list(zip(out.column("input_ids").to_pylist(), out.column("labels").to_pylist()))
    assert got == _reference(tok, convs)


def _llamafactory(pairs: list[tuple[list[int], list[int]]], cutoff_len: int) -> tuple[list[int], list[int]]:
    """LLaMA-Factory's supervised example encoding, transcribed: (source, target) turn
    pairs kept while the budget lasts, each cut by infer_seqlen (no efficient_eos, no
    mask_history, train_on_prompt off)."""
    input_ids, labels, total = [], [], 0
    for source_ids, target_ids in pairs:
        if total >= cutoff_len:
            break
        source_len, target_len = infer_seqlen(len(source_ids), len(target_ids), cutoff_len - total)
        source_ids, target_ids = source_ids[:source_len], target_ids[:target_len]
        total += source_len + target_len
        input_ids += source_ids + target_ids
        labels += [-100] * source_len + target_ids
    return input_ids, labels


def _pairs(ids: list[int], labels: list[int]) -> list[tuple[list[int], list[int]]]:
    pairs, source, target = [], [], []
    for i, lab in zip(ids, labels):
        if lab == -100 and target:
            pairs.append((source, target))
            source, target = [], []
        (source if lab == -100 else target).append(i)
    if source or target:
        pairs.append((source, target))
    return pairs


@pytest.mark.parametrize("cutoff_len", [1, 7, 40, 100, 333])
def test_cutoff_len_cuts_turn_by_turn_as_llamafactory(cutoff_len: int) -> None:
    tok = chat_tokenizer()
    convs = ultrachat(30, seed=cutoff_len)
    out, keep = ChatTemplate(tok, cutoff_len=cutoff_len)(pa.table({"messages": convs}))
    assert keep.all()
    for (ids, labels), got_ids, got_labels in zip(_reference(tok, convs), out.column("input_ids").to_pylist(),
                                                  out.column("labels").to_pylist()):
        want = (ids, labels) if len(ids) <= cutoff_len else _llamafactory(_pairs(ids, labels), cutoff_len)
        assert (got_ids, got_labels) == want
        assert len(got_ids) <= cutoff_len


def test_cutoff_len_overflow_drop_leaves_the_row_out_and_counts_it(tmp_path: Path) -> None:
    tok = chat_tokenizer()
    convs = ultrachat(20)
    lengths = [len(ids) for ids, _ in _reference(tok, convs)]
    cutoff = int(np.median(lengths))
    path = write_chats(tmp_path / "c.parquet", convs)
    ds = YoumuDataset(path, shuffle="none", output="numpy", transform=ChatTemplate(tok, cutoff_len=cutoff,
                                                                                   overflow="drop"))
    assert [int(x["id"]) for x in ds] == [i for i, n in enumerate(lengths) if n <= cutoff]
    it = iter(ds)
    list(it)
    assert ds.state_dict()["positions"] == {0: 20}


def test_chat_samples_feed_the_dynamic_batch_loader_each_once(tmp_path: Path) -> None:
    from youmu.batching import DynamicBatchLoader
    from youmu.batching.algo.loss import label_token_count

    tok = chat_tokenizer()
    convs = ultrachat(64)
    path = write_chats(tmp_path / "c.parquet", convs)
    ds = YoumuDataset(path, output="numpy", buffer_size=16, transform=ChatTemplate(tok, cutoff_len=256))
    loader = DynamicBatchLoader(ds, token_budget=512, length_fn=lambda s: len(s["input_ids"]),
                                token_count_fn=label_token_count(), pool_size=16, num_workers=2)
    seen = [int(s["id"]) for batch, _ in loader for s in batch]
    assert sorted(seen) == list(range(64))


def _chat_packed(path: Path, **kw):
    ds = YoumuDataset(path, columns=["messages"], shuffle="none", transform=ChatTemplate(chat_tokenizer()))
    return pack(ds, seq_len=40, label_column="labels", **kw)


def test_packing_chat_samples_keeps_each_label_on_its_token(tmp_path: Path) -> None:
    convs = ultrachat(30, seed=5)
    path = write_chats(tmp_path / "c.parquet", convs)
    ref = _reference(chat_tokenizer(), convs)
    seqs = list(_chat_packed(path, pad_id=2))
    ids = np.concatenate([x["input_ids"].numpy() for x in seqs])
    labels = np.concatenate([x["labels"].numpy() for x in seqs])
    flat_ids = list(itertools.chain.from_iterable(i for i, _ in ref))
    flat_labels = np.array(list(itertools.chain.from_iterable(lab for _, lab in ref)))
    n = len(flat_ids)
    assert ids[:n].tolist() == flat_ids and set(ids[n:].tolist()) <= {2}
    # every piece's first token is unlearnt (a shifted loss would predict it from the
    # document before); every other label is the row's own, the padding's -100
    starts = np.concatenate([x["cu_seqlens"][:-1].numpy() + k * 40 for k, x in enumerate(seqs)])
    expect = np.concatenate([flat_labels, np.full(len(ids) - n, -100)])
    expect[starts] = -100
    assert labels.tolist() == expect.tolist()
    assert (flat_labels != -100).sum() > (labels != -100).sum() > 0


def test_packed_chat_labels_resume_exactly_in_workers(tmp_path: Path) -> None:
    path = write_chats(tmp_path / "c.parquet", ultrachat(40, seed=6))

    def items(loader):
        return [(x["input_ids"].tolist(), x["labels"].tolist()) for x in loader]

    full = items(_stateful(_chat_packed(path), 2))
    first = _stateful(_chat_packed(path), 2)
    it = iter(first)
    head = [(x["input_ids"].tolist(), x["labels"].tolist()) for x in itertools.islice(it, 9)]
    state = first.state_dict()
    del it
    again = _stateful(_chat_packed(path), 2)
    again.load_state_dict(state)
    assert head + items(again) == full


def test_chat_samples_feed_the_balanced_loader(tmp_path: Path) -> None:
    from youmu.planning import BalancedLoader

    tok = chat_tokenizer()
    path = write_chats(tmp_path / "c.parquet", ultrachat(48))
    ds = YoumuDataset(path, output="numpy", buffer_size=16, transform=ChatTemplate(tok))
    loader = BalancedLoader(ds, num_microbatches=2, global_batch_size=8, length_fn=lambda s: len(s["input_ids"]),
                            collate_fn=list)
    seen = [int(s["id"]) for mb, _ in loader for s in mb if not _.is_padding]
    assert sorted(seen) == list(range(48))


def test_workers_started_by_spawn_load_a_tokenizer_path(tmp_path: Path, corpus) -> None:
    path, texts = corpus
    tok = bpe_tokenizer()
    tok.save(str(tmp_path / "tokenizer.json"))
    ds = YoumuDataset(path, columns=["text"], shuffle="none", output="numpy",
                      transform=Tokenize(tmp_path / "tokenizer.json"))
    dl = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert [x["input_ids"].tolist() for x in dl] == [tok.encode(t).ids for t in texts]


# -- image-text chats take the same path ----------------------------------------------------
def test_image_text_chats_take_the_tokenizers_chat_template_as_text_chats_do() -> None:
    from youmu.vision import tokenize_chat

    tok = chat_tokenizer("{{ bos_token }}" + CHATML)  # the template's own BOS, which a hand-made ChatML lacks
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    conv = [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A cat."},
            {"from": "human", "value": "And <image>?"}, {"from": "gpt", "value": "A dog."}]
    out = tokenize_chat(conv, [5, 3], tok, system=None)
    assert out["input_ids"].count(pad) == 8
    assert all(lab == -100 for i, lab in zip(out["input_ids"], out["labels"]) if i == pad)
    # each image's pads collapsed to one: what transformers gives for the same chat
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    messages = [{"role": "user", "content": vision + "\nWhat is it?"}, {"role": "assistant", "content": "A cat."},
                {"role": "user", "content": f"And {vision}?"}, {"role": "assistant", "content": "A dog."}]
    collapsed = [(i, lab) for k, (i, lab) in enumerate(zip(out["input_ids"], out["labels"]))
                 if not (i == pad and k and out["input_ids"][k - 1] == pad)]
    ids, labels = _reference(tok, [messages])[0]
    assert collapsed == list(zip(ids, labels)) and ids[0] == tok.bos_token_id
    # a chat without images is the text path's sample
    text_only = [m for m in conv if "<image>" not in m["value"]] + [{"from": "human", "value": "bye"}]
    sample, _ = ChatTemplate(tok, column="conversations")(pa.table({"conversations": [text_only]}))
    got = tokenize_chat(text_only, [], tok, system=None)
    assert [got["input_ids"], got["labels"]] == [sample.column("input_ids")[0].as_py(), sample.column("labels")[0].as_py()]


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.lists(st.tuples(st.integers(0, 2**40), st.booleans()), max_size=30), max_size=12),
       cutoff_len=st.none() | st.integers(1, 40))
def test_batch_labels_equal_each_rows_labels_cut_alone(rows, cutoff_len) -> None:
    from youmu.text.chat import assistant_label_columns, assistant_labels

    ids = [[i for i, _ in r] for r in rows]
    masks = [[int(m) for _, m in r] for r in rows]
    got_ids, got_labels, lengths = assistant_label_columns(ids, masks, cutoff_len)
    want = [assistant_labels(i, m, cutoff_len) for i, m in zip(ids, masks)]
    assert got_ids.to_pylist() == [a.tolist() for a, _ in want]
    assert got_labels.to_pylist() == [b.tolist() for _, b in want]
    assert lengths.tolist() == [len(r) for r in rows]


def test_a_tokenizer_path_without_its_library_names_the_extra_that_installs_it(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh venv with youmu and torch only (the pretraining guide followed as written)
    has neither ``tokenizers`` nor ``transformers``: loading a tokenizer path says which
    extra to install instead of a bare ``ModuleNotFoundError`` from a worker."""
    bpe_tokenizer().save(str(tmp_path / "tokenizer.json"))
    chat_tokenizer().save_pretrained(tmp_path / "hf")
    monkeypatch.setitem(sys.modules, "tokenizers", None)      # None in sys.modules: the import fails
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"needs tokenizers .*pip install 'youmu\[text\]'"):
        Tokenize(tmp_path / "tokenizer.json")(pa.table({"text": ["one"]}))
    with pytest.raises(ImportError, match=r"needs transformers .*pip install 'youmu\[hf\]'"):
        Tokenize(str(tmp_path / "hf"))(pa.table({"text": ["one"]}))


@given(st.lists(st.lists(st.integers(0, 2**31), max_size=40), max_size=30))
@settings(max_examples=60, deadline=None)
def test_ids_known_to_be_ints_make_the_same_column_as_checked_ids(rows: list[list[int]]) -> None:
    """``tokenizers``' ids skip the per-id type check: the column is the checked one's."""
    from youmu.text.tokenizer import token_column

    assert token_column(rows, ints=True).equals(token_column(rows))


def test_tokenize_with_a_tokenizers_tokenizer_gives_its_ids(tmp_path: Path) -> None:
    tok = bpe_tokenizer()
    texts = ["hello world", "", "a b c d e f", "héllo"]
    path = write_texts(tmp_path / "t.parquet", texts)
    ds = YoumuDataset(path, columns=["text"], shuffle="none", output="numpy", transform=Tokenize(tok))
    got = [r["input_ids"].tolist() for r in ds]
    assert got == [e.ids for e in tok.encode_batch(texts)]
