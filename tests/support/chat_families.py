"""Published chat templates against their training versions: TRL ships, for each model
family, the template as the model publishes it (``qwen2_5.jinja``) and a training
version whose answers are ``{% generation %}`` blocks (``qwen2_5_training.jinja``);
the second is what TRL's SFT trains on with ``assistant_only_loss=True``. Read from
the installed ``trl`` package's files (``trl==1.16.0``, installed ``--no-deps`` by
``make setup``; never imported). A family's tokenizer is the text tests' BPE with the
family's turn markers added as special tokens (never downloaded).

``compare(family, chats)``: each chat rendered by both templates; where both render
it to the same text, the published template through :class:`youmu.text.ChatTemplate`
(located turn by turn) against the training one through ``transformers``' assistant
mask — ids and labels. Run as a script for the counts over many chats:

    python tests/support/chat_families.py --chats 2000 [--families qwen2_5,llama3]
"""

from __future__ import annotations

import functools
import importlib.util
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from textutil import CORPUS, bpe_tokenizer

__all__ = ["trl_templates", "family_tokenizer", "chats", "compare", "Comparison", "HEADER_MARKED"]

#: Families whose training template also marks (part of) the assistant header, the
#: generation prompt the model is given, which youmu never labels: Qwen2.5 the "\n"
#: after "<|im_start|>assistant", DeepSeek-V3 "<｜Assistant｜>", gpt-oss
#: "<|start|>assistant". Their labels differ from TRL's exactly there.
HEADER_MARKED = ("qwen2_5", "deepseekv3", "gptoss")

_TOKEN = re.compile(r"<[^<>\s]{1,40}>|\[/?INST\]")


@functools.cache
def trl_templates() -> dict[str, tuple[str, str]]:
    """``{family: (published, training)}`` from the installed ``trl``'s template files."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates"
    out = {}
    for training in sorted(folder.glob("*_training.jinja")):
        name = training.name[: -len("_training.jinja")]
        published = folder / f"{name}.jinja"
        if published.exists():
            out[name] = (published.read_text(encoding="utf-8"), training.read_text(encoding="utf-8"))
    return out


@functools.cache
def _specials(family: str) -> tuple[str, ...]:
    published, training = trl_templates()[family]
    return tuple(sorted(set(_TOKEN.findall(published)) | set(_TOKEN.findall(training))))


def family_tokenizer(family: str, which: int) -> Any:
    """The text tests' BPE as a fast tokenizer with the family's template (0: published,
    1: training) and its turn markers as special tokens."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=bpe_tokenizer(), bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>", chat_template=trl_templates()[family][which])
    tok.add_tokens(list(_specials(family)), special_tokens=True)
    return tok


_PIECES = ["", " ", "  padded both sides  ", "line one\nline two", "\nleading newline", "trailing newline\n",
           "Ünïcödé, 中文文本, emoji 🙂", "tabs\tand\ttabs", "<think>\nsome reasoning\n</think>\n\nthe answer",
           "a </think> lone close", "x"]


def chats(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` varied chats: a system turn or not, 1–4 exchanges, some ending on a user
    turn, contents empty, blank, multi-line, non-ASCII or with reasoning blocks."""
    rnd = random.Random(seed)

    def content() -> str:
        if rnd.random() < 0.4:
            return rnd.choice(_PIECES)
        return " ".join(rnd.choices(CORPUS[:5], k=rnd.randint(1, 3)))

    out = []
    for _ in range(n):
        conv = [{"role": "system", "content": content()}] if rnd.random() < 0.3 else []
        for _ in range(rnd.randint(1, 4)):
            conv.append({"role": "user", "content": content()})
            conv.append({"role": "assistant", "content": content()})
        if rnd.random() < 0.2:
            conv.append({"role": "user", "content": content()})
        out.append(conv)
    return out


@dataclass
class Comparison:
    """What :func:`compare` found for one family."""

    family: str
    compared: int = 0  #: chats both templates render to the same text
    same: int = 0  #: of those, equal ids and labels
    refused: int = 0  #: chats a template raises on (Gemma: no system turn; roles must alternate)
    rendered_otherwise: int = 0  #: chats the two templates render differently (not comparable)
    header_only: int = 0  #: differing only where the training template marks the generation prompt
    youmu_refused: list[tuple[list[dict[str, str]], str]] = field(default_factory=list)  #: TextError rows
    mismatches: list[tuple[list[dict[str, str]], list[int], list[int], list[int]]] = field(default_factory=list)


def compare(family: str, conversations: list[list[dict[str, str]]], batch_rows: int = 64) -> Comparison:
    """Published template through ``ChatTemplate`` against the training template
    through ``transformers``' assistant mask, on every chat both render alike."""
    from youmu.errors import TextError
    from youmu.text import ChatTemplate

    published, training = family_tokenizer(family, 0), family_tokenizer(family, 1)
    result = Comparison(family)
    both = []
    for conv in conversations:
        try:
            text = training.apply_chat_template(conv, tokenize=False)
            same = published.apply_chat_template(conv, tokenize=False) == text
        except Exception:
            result.refused += 1
            continue
        if not same:
            result.rendered_otherwise += 1
            continue
        both.append(conv)
    transform = ChatTemplate(published, batch_rows=batch_rows)
    assert not transform.tagged
    for lo in range(0, len(both), batch_rows):
        batch = both[lo:lo + batch_rows]
        try:
            out, _ = transform(pa.table({"messages": batch}))
            rows = list(zip(batch, out.column("input_ids").to_pylist(), out.column("labels").to_pylist()))
        except TextError:  # which: one by one
            rows = []
            for conv in batch:
                try:
                    one, _ = transform(pa.table({"messages": [conv]}))
                except TextError as e:
                    result.youmu_refused.append((conv, str(e)))
                    continue
                rows.append((conv, one.column("input_ids")[0].as_py(), one.column("labels")[0].as_py()))
        for conv, ids, labels in rows:
            ref = training.apply_chat_template(conv, tokenize=True, return_dict=True,
                                               return_assistant_tokens_mask=True)
            want = [i if m else -100 for i, m in zip(ref["input_ids"], ref["assistant_masks"])]
            result.compared += 1
            if ids == ref["input_ids"] and labels == want:
                result.same += 1
            elif ids == ref["input_ids"] and _header_only(published, conv, ids, labels, want):
                result.header_only += 1
            else:
                result.mismatches.append((conv, ids, labels, want))
    return result


def _header_only(tok: Any, conv: list[dict[str, str]], ids: list[int], labels: list[int], want: list[int]) -> bool:
    """Whether ``labels`` and ``want`` differ only on tokens ``want`` marks inside a
    generation prompt (the text the template adds for ``add_generation_prompt``)."""
    headers = set()
    for i, m in enumerate(conv):
        if m["role"] == "assistant":
            before = tok.apply_chat_template(conv[:i], tokenize=False)
            prompt = tok.apply_chat_template(conv[:i], tokenize=False, add_generation_prompt=True)
            headers.update(tok(prompt[len(before):], add_special_tokens=False)["input_ids"])
    return all(a == -100 and b in headers for a, b in zip(labels, want) if a != b)


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chats", type=int, default=1000)
    p.add_argument("--families", default="")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    families = args.families.split(",") if args.families else list(trl_templates())
    convs = chats(args.chats, args.seed)
    print(f"{'family':24} {'compared':>8} {'same':>6} {'header':>6} {'mismatch':>8} {'refused':>7} {'other':>6} {'youmu-refused':>13}")
    for fam in families:
        try:
            r = compare(fam, convs)
        except Exception as e:  # a family youmu cannot take at all
            print(f"{fam:24} failed: {type(e).__name__}: {str(e)[:150]}")
            continue
        print(f"{fam:24} {r.compared:8} {r.same:6} {r.header_only:6} {len(r.mismatches):8} {r.refused:7} "
              f"{r.rendered_otherwise:6} {len(r.youmu_refused):13}")
        for conv, ids, labels, want in r.mismatches[:1]:
            print("   mismatch e.g.", conv, "\n   youmu:", labels, "\n   trl:  ", want)
        for conv, why in r.youmu_refused[:1]:
            print("   refused e.g.", conv, why)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
