"""``ChatTemplate`` on published chat templates, which have no ``{% generation %}``
block: it labels what the families' own training templates label (TRL's
``*_training.jinja``, through ``transformers``' assistant mask), on every chat both
templates render to the same text, with the text tests' tokenizer and each family's
turn markers (tests/support/chat_families.py; nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from chat_families import HEADER_MARKED, chats, compare, family_tokenizer, trl_templates
from hypothesis import given, settings
from hypothesis import strategies as st
from textutil import CHATML_PUBLISHED, CHATML_TRAINING, chat_tokenizer, ultrachat, write_chats

from youmu.text import ChatTemplate
from youmu.torch import YoumuDataset

pytestmark = pytest.mark.skipif(not trl_templates(), reason="trl's template files are not installed (make setup)")

#: families whose training template marks exactly the answer and its end of turn
EXACT = ["cohere", "cohere2", "gemma", "gemma3", "llama3", "lfm2", "lfm2_v2", "phi3", "phi3_5", "qwen3",
         "qwen3_instruct_2507", "qwen3_vl", "qwen2_5_vl", "smolvlm", "idefics3", "diffusion_gemma"]
CHATS = chats(150, seed=3)


@pytest.mark.parametrize("family", EXACT)
def test_a_published_template_labels_what_its_training_version_marks(family: str) -> None:
    r = compare(family, CHATS)
    assert r.compared >= 20  # enough chats render alike to compare (Qwen3's training one always shows <think>)
    assert (r.same, r.header_only, r.mismatches, r.youmu_refused) == (r.compared, 0, [], [])


@pytest.mark.parametrize("family", [*HEADER_MARKED, "muse_glimmer", "deepseek_r1_distill", "qwen3_8", "qwen3_6",
                                    "nemotron_3_nano"])
def test_where_the_training_version_also_marks_the_assistant_header_only_the_header_differs(family: str) -> None:
    # TRL marks part of the generation prompt there (Qwen2.5's "\n" after "assistant", DeepSeek's
    # <｜Assistant｜>, gpt-oss' <|start|>assistant): a prompt the model is given, never labelled here
    r = compare(family, CHATS)
    assert r.compared >= 20 and r.header_only > 0
    assert (r.mismatches, r.youmu_refused) == ([], [])


def _labelled_text(tok, conv, **kw) -> list[str]:
    out, _ = ChatTemplate(tok, **kw)(pa.table({"messages": [conv]}))
    ids, labels = out.column("input_ids")[0].as_py(), out.column("labels")[0].as_py()
    runs, run = [], []
    for i, lab in zip(ids, labels):
        if lab != -100:
            run.append(i)
        elif run:
            runs.append(tok.decode(run))
            run = []
    return runs + ([tok.decode(run)] if run else [])


def test_qwen3_answers_are_labelled_on_the_text_it_renders_for_the_whole_chat() -> None:
    # Qwen3 drops the reasoning of earlier answers once another question follows: each
    # answer is labelled as the whole chat renders it, the last with its empty <think> block
    tok = family_tokenizer("qwen3", 0)
    conv = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>\nR\n</think>\n\nA1"},
            {"role": "user", "content": "q2"}, {"role": "assistant", "content": "A2"}]
    assert _labelled_text(tok, conv) == ["A1<|im_end|>\n", "<think>\n\n</think>\n\nA2<|im_end|>\n"]


def test_the_end_of_turn_is_the_one_a_followed_answer_renders() -> None:
    # gpt-oss ends the last answer <|return|> and others <|end|>; Phi-3 adds its EOS after the last only
    gptoss = family_tokenizer("gptoss", 0)
    conv = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "q2"}, {"role": "assistant", "content": "A2"}]
    assert _labelled_text(gptoss, conv) == ["<|channel|>final<|message|>A1<|end|>",
                                            "<|channel|>final<|message|>A2<|return|>"]
    assert _labelled_text(family_tokenizer("phi3", 0), conv) == ["A1<|end|>\n", "A2<|end|>\n</s>"]


def test_a_template_without_generation_blocks_labels_as_its_tagged_version(tmp_path: Path) -> None:
    convs = ultrachat(30)
    path = write_chats(tmp_path / "c.parquet", convs)
    transforms = [ChatTemplate(chat_tokenizer(t), batch_rows=8) for t in (CHATML_PUBLISHED, CHATML_TRAINING)]
    assert not transforms[0].tagged and transforms[1].tagged
    got, want = ([(x["input_ids"].tolist(), x["labels"].tolist())
                  for x in YoumuDataset(path, shuffle="none", output="numpy", transform=t)] for t in transforms)
    assert got == want and len(got) == 30


MESSAGES = st.lists(
    st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=80)), min_size=1, max_size=8
).map(lambda turns: [{"role": r, "content": c} for r, c in turns] + [{"role": "assistant", "content": "."}])


@settings(max_examples=40, deadline=None)
@given(convs=st.lists(MESSAGES, min_size=1, max_size=6))
def test_published_chatml_labels_as_its_training_version_on_any_conversation(convs) -> None:
    t = pa.table({"messages": convs})
    got, want = (ChatTemplate(chat_tokenizer(template), batch_rows=4)(t)[0]
                 for template in (CHATML_PUBLISHED, CHATML_TRAINING))
    assert got.equals(want)


def test_glm_labels_differ_from_trl_only_on_the_next_turns_role_token() -> None:
    # GLM stops on <|user|>; TRL's training version labels it after each answer, while the
    # published template writes it as the next message's, so it is not an answer token here.
    # The answers themselves match, the last one's reasoning block included
    tok = family_tokenizer("glm4moe", 0)
    r = compare("glm4moe", CHATS)
    assert r.compared >= 20 and r.youmu_refused == []
    for _, _, labels, want in r.mismatches:
        assert {tok.convert_ids_to_tokens(b) for a, b in zip(labels, want) if a != b} <= {"<|user|>", "<|system|>"}
        assert all(a == -100 for a, b in zip(labels, want) if a != b)
