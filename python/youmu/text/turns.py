"""Which characters of a rendered chat are the assistant's, for a chat template with no
``{% generation %}`` block — every published one (Qwen2.5/3, Llama 3, Mistral, Phi-3,
Gemma, SmolLM2, DeepSeek-V3, gpt-oss): the tokenizer's own template, unchanged, run a
turn at a time, with no table of known models.

An assistant turn ``i`` is what the template adds after the generation prompt: the
conversation before it rendered with ``add_generation_prompt=True`` (the prompt the
model answers), and through it with ``add_generation_prompt=False`` (the answer
written in). The answer starts where the two part, and runs as far as the rendering
through the turn agrees with the whole conversation's — its end-of-turn token and
whatever the template writes after it up to the next message (``<|im_end|>\\n``,
``<|eot_id|>``, ``<end_of_turn>\\n``, Phi-3's EOS after the last answer): what the
families' own training templates mark with ``{% generation %}`` (TRL's
``*_training.jinja``), and never the assistant header. A template that renders a
turn differently once others follow (Qwen3 drops the ``<think>`` block of earlier
answers) is labelled on the text it renders for the whole conversation: the answer is
then the longest end of the turn's text found where the turn starts. A turn that
cannot be found in the whole rendering is a :class:`~youmu.errors.TextError` for its
row, never a guess.

Example:
    >>> turn_span("<u>hi</u><a>yo</a></s>", "<u>hi</u><a>", "<u>hi</u><a>yo</a></s>", 0)
    (12, 22)
    >>> full = "<u>hi</u><a>yo</a><u>ok</u>"
    >>> turn_span(full, "<u>hi</u><a>", "<u>hi</u><a>yo</a></s>", 0)   # the EOS only ends the last turn
    (12, 19)

(the span runs into ``<u>`` by its ``<``: a token that the span ends inside is not
the answer's, :func:`span_mask`)
    >>> generation_reachable("{# {% generation %} #}{{ messages }}")   # a comment is no block
    False
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from youmu.errors import InvalidArgumentError, TextError

__all__ = ["generation_reachable", "turn_span", "turn_spans", "span_mask", "assistant_turns"]


@functools.lru_cache(maxsize=64)
def generation_reachable(template: str) -> bool:
    """Whether the parsed ``template`` has a ``{% generation %}`` block outside a branch
    that can never run (``{% if false %}``). The text is parsed as ``transformers``
    parses it (the ``generation`` tag, loop controls), so a tag in a ``{# comment #}``
    or a string is no block; a template that does not parse is an
    :class:`~youmu.errors.InvalidArgumentError`."""
    import jinja2
    import jinja2.ext
    from jinja2 import nodes

    class _Generation(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_youmu_generation"), [], [], body).set_lineno(lineno)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[_Generation, jinja2.ext.loopcontrols])
    try:
        tree = env.parse(template)
    except jinja2.TemplateSyntaxError as e:
        raise InvalidArgumentError(f"the chat template does not parse: {e} (line {e.lineno})") from None
    return _reaches(tree, nodes)


def _reaches(node: Any, nodes: Any) -> bool:
    if isinstance(node, nodes.ExtensionAttribute) and node.name == "_youmu_generation":
        return True
    if isinstance(node, nodes.If):
        try:
            taken = bool(node.test.as_const())
        except Exception:  # not a constant: either branch may run
            taken = None
        branches: list[Any] = []
        if taken is not False:
            branches += node.body
        if taken is not True:
            branches += [*node.elif_, *node.else_]
        return any(_reaches(n, nodes) for n in branches)
    return any(_reaches(n, nodes) for n in node.iter_child_nodes())


def _common(a: str, b: str, at: int) -> int:
    """Length of the common prefix of ``a`` and ``b[at:]``."""
    n = min(len(a), len(b) - at)
    if b.startswith(a[:n], at):
        return n
    lo, hi = 0, n  # a[:lo] matches, a[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(a[:mid], at):
            lo = mid
        else:
            hi = mid
    return lo


def turn_span(full: str, prompt: str, through: str, floor: int, gen: str | None = None) -> tuple[int, int] | None:
    """``(start, end)`` of one assistant turn in ``full`` (the whole conversation
    rendered), from ``prompt`` (the conversation before the turn, with the generation
    prompt ``gen`` where known) and ``through`` (through the turn, as history);
    ``floor`` is where the turn before ended. ``None`` where ``full`` does not hold
    the turn there."""
    # the conversation before the turn must render as in the whole; within the generation
    # prompt, the answer starts where the prompt, the turn or the whole part (Nemotron's
    # prompt opens "<think>\n", its history shows "<think></think>")
    base = len(prompt) - len(gen) if gen is not None and prompt.endswith(gen) else len(prompt)
    start = min(_common(prompt, through, 0), _common(through, full, 0))
    if start < max(floor, base):
        return None
    answer = through[start:]
    common = _common(answer, full, start)
    if common == len(answer) or not answer:
        return start, start + common
    # the turn renders otherwise once others follow (an earlier answer's reasoning dropped,
    # Qwen3's whole <think> block, GLM's text inside it): where the two part, the whole
    # rendering goes on with the longest end of the answer found right there
    at = start + common
    head = full[at:at + 1]
    p = answer.find(head, common + 1) if head else -1
    while p != -1:
        if full.startswith(answer[p:], at):
            return start, at + len(answer) - p
        p = answer.find(head, p + 1)
    return (start, at) if common else None


def assistant_turns(conversation: Sequence[dict[str, str]]) -> list[int]:
    """Indices of the assistant's messages."""
    return [i for i, m in enumerate(conversation) if m["role"] == "assistant"]


def turn_spans(full: str, prompts: Sequence[str], throughs: Sequence[str], turns: Sequence[int],
               gen: str | None = None) -> list[tuple[int, int]]:
    """The spans of a conversation's assistant turns (message indices ``turns``) in
    ``full`` (:func:`turn_span`); a turn that cannot be found is a
    :class:`~youmu.errors.TextError` naming the message."""
    spans: list[tuple[int, int]] = []
    floor = 0
    for prompt, through, message in zip(prompts, throughs, turns):
        span = turn_span(full, prompt, through, floor, gen)
        if span is None:
            raise TextError("cannot tell which tokens are this assistant message's: the chat template renders the "
                            "conversation up to it differently from the whole conversation; give the template "
                            "{% generation %} blocks (chat_template=)", message=message)
        if spans and span[0] < spans[-1][1]:  # a prompt is never the answer before it
            spans[-1] = (spans[-1][0], span[0])
        spans.append(span)
        floor = span[1]
    return [s for s in spans if s[1] > s[0]]


def span_mask(starts: np.ndarray, ends: np.ndarray, span_starts: np.ndarray, span_ends: np.ndarray) -> np.ndarray:
    """Which tokens (character ``starts``/``ends``) are a span's (spans sorted and
    disjoint): those overlapping it, as ``transformers`` marks a ``{% generation %}``
    block, except one the span ends inside — an answer's span ends where its
    rendering stops agreeing with the whole conversation's, which can be within the
    next message's first token (``<|user|>`` against Phi-3's ``<|endoftext|>``).

    >>> span_mask(np.array([0, 2, 4, 6]), np.array([2, 4, 6, 8]), np.array([3]), np.array([7])).tolist()
    [False, True, True, False]
    """
    if not len(span_starts):
        return np.zeros(len(starts), dtype=bool)
    k = np.searchsorted(span_ends, starts, side="right")  # the first span ending after each token's start
    inside = k < len(span_ends)
    marked = np.zeros(len(starts), dtype=bool)
    kk = k[inside]
    marked[inside] = (ends[inside] > span_starts[kk]) & (ends[inside] <= span_ends[kk])
    return marked


def render(tok: Any, conversations: list[list[dict[str, str]]], generation_prompt: bool,
           kwargs: dict[str, Any]) -> list[str | TextError]:
    """Each conversation rendered by the chat template (all at once; one by one where
    that raises, each failure a :class:`~youmu.errors.TextError` in its place)."""
    if not conversations:
        return []
    try:
        return list(tok.apply_chat_template(conversations, tokenize=False, add_generation_prompt=generation_prompt,
                                            **kwargs))
    except Exception:  # whatever the template raises: find which conversation
        pass
    out: list[str | TextError] = []
    for conv in conversations:
        try:
            out.append(tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=generation_prompt,
                                               **kwargs))
        except Exception as e:
            out.append(TextError(f"the chat template raised {type(e).__name__}: {e}"))
    return out


def _text(x: str | TextError) -> str:
    if isinstance(x, TextError):
        raise x
    return x


def _row_spans(tok: Any, conv: list[dict[str, str]], turns: list[int], full: str | TextError,
               prompts: list[str | TextError], histories: list[str | TextError], before: str | TextError | None,
               kwargs: dict[str, Any]) -> tuple[str, list[tuple[int, int]]]:
    """One conversation's whole rendering and its answers' spans (:func:`turn_spans`)."""
    full_text, prompt_texts = _text(full), [_text(p) for p in prompts]
    gen = None  # what add_generation_prompt adds, from the conversation before the first answer
    if turns and isinstance(before, str) and prompt_texts[0].startswith(before):
        gen = prompt_texts[0][len(before):]
    throughs = []
    for i, history in zip(turns, histories):
        text = _text(history)
        if gen is not None and text.endswith(gen):
            throughs.append(text[:len(text) - len(gen)])
        else:  # no generation prompt to take off: the turn rendered as the last message
            throughs.append(_text(render(tok, [conv[:i + 1]], False, kwargs)[0]))
    if turns and turns[-1] + 1 == len(conv):
        throughs.append(full_text)
    return full_text, turn_spans(full_text, prompt_texts, throughs, turns, gen)


def label_turns(tok: Any, conversations: list[list[dict[str, str]]],
                kwargs: dict[str, Any]) -> tuple[list[list[int]], list[np.ndarray], dict[int, TextError]]:
    """``(ids, assistant masks, failures by row)`` of conversations templated by a chat
    template without ``{% generation %}`` blocks: each rendered whole, each assistant
    turn located (:func:`turn_spans`), the whole renderings tokenized at once and the
    tokens of a turn marked (:func:`span_mask`). A failed row has empty ids.

    An answer followed by more of the conversation is rendered as history, the way
    inference renders it: the conversation through it with the generation prompt, that
    prompt then taken off (gpt-oss ends an answer ``<|return|>`` only when it is the
    last message, ``<|end|>`` otherwise, and it is ``<|end|>`` it must learn there)."""
    turns = [assistant_turns(c) for c in conversations]
    prompted = [c[:i] for c, ts in zip(conversations, turns) for i in ts]
    followed = [c[:i + 1] for c, ts in zip(conversations, turns) for i in ts if i + 1 < len(c)]
    firsts = [c[:ts[0]] for c, ts in zip(conversations, turns) if ts]
    # two calls to the template for the whole batch: with the generation prompt, and without
    with_prompt = render(tok, prompted + followed, True, kwargs)
    without = render(tok, firsts + list(conversations), False, kwargs)
    prompts, histories = iter(with_prompt[:len(prompted)]), iter(with_prompt[len(prompted):])
    befores, fulls = iter(without[:len(firsts)]), without[len(firsts):]
    failures: dict[int, TextError] = {}
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    for row, (conv, ts, full) in enumerate(zip(conversations, turns, fulls)):
        p = [next(prompts) for _ in ts]
        h = [next(histories) for i in ts if i + 1 < len(conv)]
        before = next(befores) if ts else None
        try:
            text, found = _row_spans(tok, conv, ts, full, p, h, before, kwargs)
        except TextError as err:
            failures[row] = err
            text, found = "", []
        texts.append(text)
        spans.append(found)
    enc = tok(texts, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False,
              verbose=False)
    ids, masks = [], []
    for e, found in zip(enc.encodings, spans):
        offsets = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
        at = np.asarray(found, dtype=np.int64).reshape(-1, 2)
        ids.append(e.ids)
        masks.append(span_mask(offsets[:, 0], offsets[:, 1], at[:, 0], at[:, 1]))
    return ids, masks, failures
