"""``ChatTemplate``: chat rows templated and tokenized the way trainers do it — the
tokenizer's own ``chat_template`` through ``transformers``' ``apply_chat_template``,
labels ``-100`` except on the assistant's tokens, cut
to ``cutoff_len`` as LLaMA-Factory cuts (:mod:`youmu.text.cutoff`) — a page's rows
at a time in the DataLoader workers (a batched transform, :mod:`youmu.streams.batched`).

The assistant's tokens: those ``transformers`` marks (``return_assistant_tokens_mask``)
where the template has ``{% generation %}`` blocks; in a published model's template,
which has none (Qwen, Llama 3, Mistral, Phi-3, Gemma, SmolLM2, DeepSeek-V3, gpt-oss),
each answer found by rendering the conversation turn by turn
(:mod:`youmu.text.turns`): the answer and its end-of-turn, as the families' training
templates mark them, never the assistant header.

Rows come in any layout of :mod:`youmu.text.layouts`: UltraChat's ``messages`` (a
list of ``{"role", "content"}``), ShareGPT / OpenHermes' ``conversations`` (a list of
``{"from", "value"}`` with ``human`` / ``gpt`` / ``system``) or Alpaca's
``instruction`` / ``input`` / ``output`` columns, with system turns and any number of
turns.

Example:
    >>> conversation_of([{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}], DEFAULT_ROLES)
    [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello'}]
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from youmu._internal.args import bool_arg, choice_arg, int_arg, opt_int_arg
from youmu.errors import ArgumentTypeError, ColumnNotFoundError, InvalidArgumentError, TextError
from youmu.streams.batched import BATCH_ROWS
from youmu.streams.skips import ON_ERROR
from youmu.text.cutoff import keep_lengths, turn_pairs
from youmu.text.layouts import Layout, any_messages, layout_arg, read_conversation
from youmu.text.tokenizer import TokenizerRef, fit_offsets, flat_ids, list_column, row_offsets, token_column
from youmu.text.turns import generation_reachable, label_turns

__all__ = ["ChatTemplate", "DEFAULT_ROLES", "OVERFLOW", "IGNORE_INDEX", "conversation_of", "assistant_labels",
           "assistant_label_columns", "generation_template", "template_one"]

#: The label of tokens the loss ignores (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX = -100
#: Stored speaker names → the template's roles: those of every built-in message layout
#: (the chat roles, and ShareGPT's names).
DEFAULT_ROLES: Mapping[str, str] = dict(any_messages().speakers())
#: What a row longer than ``cutoff_len`` gets: cut as LLaMA-Factory cuts, refused with
#: a :class:`~youmu.errors.TextError` naming it, or dropped (its position counted).
OVERFLOW = ("truncate", "raise", "drop")


def conversation_of(value: Any, roles: Mapping[str, str]) -> list[dict[str, str]]:
    """A conversation cell's messages as ``[{"role", "content"}, ...]`` with ``roles``
    mapping the stored speakers, read in any registered message layout
    (:mod:`youmu.text.layouts`: ``role``/``content``, ShareGPT's ``from``/``value``).
    Anything else is a :class:`~youmu.errors.TextError` (with the message's index
    where one is at fault)."""
    return read_conversation(any_messages(), {"messages": value}, "messages", roles)


def generation_template(tokenizer: Any, chat_template: str | None = None) -> bool:
    """Whether ``tokenizer`` is a fast ``transformers`` tokenizer whose chat template (or
    ``chat_template``) marks the assistant's answers with ``{% generation %}`` blocks
    (in the parsed template: a tag in a comment is none, :func:`~youmu.text.turns.generation_reachable`)."""
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if not (isinstance(template, str) and getattr(tokenizer, "is_fast", False) is True
            and callable(getattr(tokenizer, "apply_chat_template", None))):
        return False
    try:
        return generation_reachable(template)
    except InvalidArgumentError:  # does not parse: rendering it says why, where it is used
        return "generation" in template


def template_one(tokenizer: Any, messages: list[dict[str, str]], **kwargs: Any) -> tuple[list[int], list[int]]:
    """``(input_ids, assistant mask)`` of one conversation through the tokenizer's chat
    template; a template that raises is a :class:`~youmu.errors.TextError`."""
    try:
        out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True, **kwargs)
    except Exception as e:  # whatever the template raises (jinja's raise_exception, a bad key)
        raise TextError(f"the chat template raised {type(e).__name__}: {e}") from e
    ids = out["input_ids"]
    # integers only: an id 1.7 would become 1 in the int64 arrays made of them
    return flat_ids([ids], fit_offsets(row_offsets([ids]))[-1]).tolist(), list(out["assistant_masks"])


def assistant_labels(ids: Sequence[int] | np.ndarray, mask: Sequence[int] | np.ndarray,
                     cutoff_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, labels)`` of one templated conversation: labels are the ids where
    ``mask`` marks the assistant's tokens and ``-100`` elsewhere, both cut to
    ``cutoff_len`` turn by turn as LLaMA-Factory cuts (:mod:`youmu.text.cutoff`).

    >>> ids, labels = assistant_labels([1, 2, 3, 4, 5], [0, 0, 1, 1, 0], None)
    >>> labels.tolist()
    [-100, -100, 3, 4, -100]
    >>> [a.tolist() for a in assistant_labels(list(range(10)), [0] * 6 + [1] * 4, 6)]
    [[0, 1, 2, 3, 6, 7], [-100, -100, -100, -100, 6, 7]]
    """
    ids_a = np.asarray(ids, dtype=np.int64)
    marked = np.asarray(mask, dtype=bool)
    labels = np.where(marked, ids_a, IGNORE_INDEX)
    if cutoff_len is None or len(ids_a) <= cutoff_len:
        return ids_a, labels
    take, at = [], 0
    for (source, target), (s, t) in zip(turn_pairs(marked), keep_lengths(turn_pairs(marked), cutoff_len)):
        take.append(np.arange(at, at + s))
        take.append(np.arange(at + source, at + source + t))
        at += source + target
    keep = np.concatenate(take) if take else np.zeros(0, dtype=np.int64)
    return ids_a[keep], labels[keep]


def assistant_label_columns(ids: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], cutoff_len: int | None,
                            who: str = "the tokenizer") -> tuple[pa.Array, pa.Array, np.ndarray]:
    """:func:`assistant_labels` of a batch of templated conversations at once:
    ``(input_ids, labels, lengths before the cut)``, the first two as ``list<int64>``
    Arrow columns. The ids, masks and labels are built once for the whole batch, flat
    (no per-row arrays); only rows over ``cutoff_len`` are cut one by one.

    >>> ids, labels, n = assistant_label_columns([[1, 2, 3], [4, 5]], [[0, 1, 1], [0, 1]], None)
    >>> labels.to_pylist(), n.tolist()
    ([[-100, 2, 3], [-100, 5]], [3, 2])
    """
    offsets = fit_offsets(row_offsets(ids, who))  # a row claiming 2**31 ids is refused before any is copied
    total = int(offsets[-1])
    flat = flat_ids(ids, total, who)
    if len(masks) and isinstance(masks[0], np.ndarray):
        marked = np.concatenate(masks).astype(bool, copy=False)
    else:
        marked = np.fromiter(itertools.chain.from_iterable(masks), dtype=bool, count=total)
    labels = np.where(marked, flat, IGNORE_INDEX)
    lengths = np.diff(offsets)
    if cutoff_len is None or not (lengths > cutoff_len).any():
        return list_column(offsets, flat), list_column(offsets, labels), lengths
    ids_rows, label_rows = [], []
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        a, b = flat[lo:hi], labels[lo:hi]
        if hi - lo > cutoff_len:
            a, b = assistant_labels(a, marked[lo:hi], cutoff_len)
        ids_rows.append(a)
        label_rows.append(b)
    return token_column(ids_rows), token_column(label_rows), lengths


class ChatTemplate:
    """Template and tokenize a chat column into ``input_ids`` and ``labels`` (a batched
    transform: ``YoumuDataset(..., transform=ChatTemplate(tok))``).

    Args:
        tokenizer: a ``transformers`` fast tokenizer with a ``chat_template`` — a
            published model's as it is (``AutoTokenizer.from_pretrained(...)``) — or the
            path of a saved one (loaded once per worker process). Its assistant's tokens
            are what the template's ``{% generation %}`` blocks mark, where it has any
            (found in the parsed template: a tag in a comment is none); otherwise each
            answer is found by rendering the conversation up to it with the generation
            prompt and through it (:mod:`youmu.text.turns`): what the answer adds after
            the prompt, its end-of-turn token and what the template writes after it
            before the next message (``<|im_end|>\\n``, ``<|eot_id|>``,
            ``<end_of_turn>\\n``), as TRL's training templates of those families mark
            them; never the assistant header. An answer the template renders
            differently once others follow (Qwen3 drops earlier ``<think>`` blocks) is
            labelled on the text it renders for the whole conversation.
        column: the conversation column: UltraChat's ``messages`` or ShareGPT's
            ``conversations`` (either layout is read from any column).
        layout: how the rows store a conversation (:mod:`youmu.text.layouts`): ``None``
            (default) messages in any registered message layout, a message of two
            layouts that disagree being a :class:`~youmu.errors.TextError`;
            ``"openai"`` or ``"sharegpt"`` for one layout's keys only; ``"alpaca"``
            for Alpaca's columns (``column`` is then not read); or a
            :class:`~youmu.text.layouts.Layout`.
        roles: stored speaker names → template roles (default: the layout's, for no
            layout :data:`DEFAULT_ROLES`: ``system``/``user``/``assistant`` and
            ShareGPT's ``human``/``gpt``); a speaker not in it is a
            :class:`~youmu.errors.TextError`.
        chat_template: a template to use instead of the tokenizer's own.
        cutoff_len: the most tokens a sample keeps, cut turn by turn as LLaMA-Factory
            does (:mod:`youmu.text.cutoff`: prompt and answer of each turn share what
            the earlier turns left). ``None``: no limit.
        overflow: a row over ``cutoff_len``: ``"truncate"`` (default), ``"raise"`` (a
            :class:`~youmu.errors.TextError` naming the file and row) or ``"drop"``.
        template_kwargs: passed to the template (e.g. ``{"enable_thinking": False}``).
        keep_columns: keep the row's other columns (the conversation column is dropped).
        batch_rows: the most rows templated per call (a pass's first calls take
            fewer, :func:`youmu.streams.batched.chunk_sizes`).
        on_error: a bad row (a null or malformed conversation, a null ``content``, a
            speaker not in ``roles`` such as ShareGPT's ``observation``, a turn the
            template refuses such as a system turn under Gemma's, a row over
            ``cutoff_len`` with ``overflow="raise"``): ``"raise"`` (default) its
            :class:`~youmu.errors.TextError` naming the column, message, file and row;
            ``"skip"``: the row is dropped and the rest of its batch kept, counted and
            reported in the ``"skipped"`` list of a delivered sample, as
            :class:`~youmu.vision.VisionTransform` reports its rows (:mod:`youmu.streams.skips`:
            every row delivered or reported once, across workers and resumes; a pass in
            which no row was good is an error).

    A sample: ``input_ids`` and ``labels`` (``list<int64>``, as tensors with
    ``output="torch"``); ``len(input_ids)`` is its length for
    ``DynamicBatchLoader``'s ``length_fn``, and
    :func:`~youmu.batching.algo.loss.label_token_count` its loss tokens. A row with no
    token to learn — no assistant turn, or ``{% generation %}`` blocks that never run
    for it — or whose answers cannot be told from the template's rendering is a
    :class:`~youmu.errors.TextError` naming it (``on_error="skip"``: skipped and
    reported), never a sample whose labels are all ``-100``.

    Example:
        >>> from transformers import AutoTokenizer                  # doctest: +SKIP
        >>> tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
        >>> ds = YoumuDataset("ultrachat/*.parquet", transform=ChatTemplate(tok, cutoff_len=2048))  # doctest: +SKIP
    """

    #: called with a table of rows (youmu.streams.batched)
    batched = True

    def __init__(self, tokenizer: Any, column: str = "messages", *, layout: str | Layout | None = None,
                 roles: Mapping[str, str] | None = None,
                 chat_template: str | None = None, cutoff_len: int | None = None, overflow: str = "truncate",
                 template_kwargs: Mapping[str, Any] | None = None, keep_columns: bool = True,
                 batch_rows: int = BATCH_ROWS, on_error: str = "raise") -> None:
        if not isinstance(column, str) or not column:
            raise ArgumentTypeError(f"column must be a column name, got {column!r}")
        self.tokenizer = TokenizerRef(tokenizer)
        tok = self.tokenizer.get()
        if self.tokenizer.kind == "tokenizers" or not callable(getattr(tok, "apply_chat_template", None)):
            raise ArgumentTypeError(
                f"ChatTemplate needs a transformers tokenizer with a chat template, got {type(tok).__name__}; wrap a "
                "tokenizers.Tokenizer as transformers.PreTrainedTokenizerFast(tokenizer_object=..., chat_template=...)"
            )
        if not getattr(tok, "is_fast", False):
            raise ArgumentTypeError(f"ChatTemplate needs a fast tokenizer (token offsets mark the assistant's tokens), "
                                    f"got {type(tok).__name__}; load it with use_fast=True")
        if chat_template is not None and not isinstance(chat_template, str):
            raise ArgumentTypeError(f"chat_template must be a str, got {type(chat_template).__name__}")
        try:
            template = tok.get_chat_template(chat_template)
        except ValueError as e:
            raise InvalidArgumentError(f"the tokenizer has no chat template ({e}); pass chat_template=") from None
        # a template that marks the answers itself keeps its marks; any other is run turn by turn
        self.tagged = generation_reachable(template)
        self.layout = layout_arg(layout)
        roles = self.layout.speakers() if roles is None else roles
        if not isinstance(roles, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in roles.items()):
            raise ArgumentTypeError(f"roles must map stored speaker names to template roles (str -> str), "
                                    f"got {roles!r}")
        if template_kwargs is not None and not isinstance(template_kwargs, Mapping):
            raise ArgumentTypeError(f"template_kwargs must be a mapping, got {type(template_kwargs).__name__}")
        self.column = column
        #: the column a row's error names: the conversation column, or the layout's first
        self.where = self.layout.columns(column)[0]
        self.roles = dict(roles)
        self.chat_template = chat_template
        self.cutoff_len = opt_int_arg("cutoff_len", cutoff_len, minimum=1)
        self.overflow = choice_arg("overflow", overflow, OVERFLOW)
        self.template_kwargs = dict(template_kwargs or {})
        self.keep_columns = bool_arg("keep_columns", keep_columns)
        self.batch_rows = int_arg("batch_rows", batch_rows, minimum=1)
        self.on_error = choice_arg("on_error", on_error, ON_ERROR)

    def __repr__(self) -> str:
        return (f"ChatTemplate({type(self.tokenizer.get()).__name__}, column={self.column!r}, "
                f"cutoff_len={self.cutoff_len})")

    @property
    def reports_rows(self) -> bool:
        """Whether the stream reports the rows this transform skips (``on_error="skip"``)."""
        return self.on_error == "skip"

    def _conversations(self, table: pa.Table, errors: dict[int, TextError] | None) -> list[Any]:
        """Each row's conversation; a bad row's error is raised, or (``errors`` given)
        kept there and the row's conversation is ``None``."""
        for name in self.layout.columns(self.column):
            if name not in table.column_names:
                raise ColumnNotFoundError(f"chat column {name!r} is not in the rows (they have "
                                          f"{table.column_names}; read it with columns=[...] that include it)")
        read = self._read_columns(table)
        cells = {name: table.column(name).to_pylist() for name in read}
        out: list[Any] = []
        for i in range(table.num_rows):
            try:
                out.append(read_conversation(self.layout, {name: cells[name][i] for name in read}, self.column,
                                             self.roles))
            except TextError as e:
                e = e.located(column=self.where, batch_row=i)
                if errors is None:
                    raise e from None
                errors[i] = e
                out.append(None)
        return out

    def _read_columns(self, table: pa.Table) -> list[str]:
        """The columns of ``table`` the layout reads: those it needs, and those of its
        optional ones the rows have."""
        return list(self.layout.columns(self.column)) + [c for c in self.layout.optional()
                                                          if c in table.column_names]

    def _template(self, conversations: list[list[dict[str, str]]], all_rows: bool) -> Any:
        """The conversations templated and tokenized in one call. One that the template
        refuses is found by rendering them one by one: its :class:`TextError` is
        raised (``all_rows``: a :class:`_RowErrors` of every one refused)."""
        tok = self.tokenizer.get()
        kwargs = {"chat_template": self.chat_template, **self.template_kwargs}
        try:
            return tok.apply_chat_template(conversations, tokenize=True, return_dict=True,
                                           return_assistant_tokens_mask=True, **kwargs)
        except Exception as e:  # whatever the template raises (jinja's raise_exception, a bad key)
            refused = []
            for i, conv in enumerate(conversations):  # which row: render them one by one
                try:
                    tok.apply_chat_template(conv, tokenize=False, **kwargs)
                except Exception as row_error:
                    refused.append(TextError(f"the chat template raised {type(row_error).__name__}: {row_error}",
                                             column=self.where, batch_row=i))
                    if not all_rows:
                        raise refused[0] from row_error
            if refused:
                raise _RowErrors(refused) from None
            raise TextError(f"the chat template raised {type(e).__name__}: {e}", column=self.where) from e

    def _masks(self, conversations: list[list[dict[str, str]]], skip: bool) -> tuple[list[Any], list[Any]]:
        """``(ids, assistant masks)`` of each conversation: the template's own
        ``{% generation %}`` marks, or (none in it) its answers found turn by turn
        (:func:`~youmu.text.turns.label_turns`). A row with no token to learn (no
        assistant turn, or a template that marks none of its answers) or whose answers
        cannot be found raises its :class:`TextError` (``skip``: :class:`_RowErrors`)."""
        failures: dict[int, TextError] = {}
        if self.tagged:
            out = self._template(conversations, skip)
            ids, masks = out["input_ids"], out["assistant_masks"]
        else:
            tok = self.tokenizer.get()
            ids, masks, failures = label_turns(tok, conversations, {"chat_template": self.chat_template,
                                                                    **self.template_kwargs})
        for i, (conv, mask) in enumerate(zip(conversations, masks)):
            if i not in failures and not any(mask):
                if not any(m["role"] == "assistant" for m in conv):
                    failures[i] = TextError("the conversation has no assistant turn: no token to learn (0 labels)")
                else:
                    failures[i] = TextError("the chat template marks none of the assistant's tokens (0 labels): its "
                                            "{% generation %} blocks never run for this conversation")
        if failures:
            refused = [failures[i].located(column=self.where, batch_row=i) for i in sorted(failures)]
            raise _RowErrors(refused) if skip else refused[0]
        return ids, masks

    def _labelled(self, conversations: list[list[dict[str, str]]], skip: bool) -> tuple[pa.Array, pa.Array, np.ndarray]:
        """``(input_ids, labels, keep)`` of conversations that all template well; a row
        at fault raises its :class:`TextError` (``skip``: :class:`_RowErrors`)."""
        keep = np.ones(len(conversations), dtype=bool)
        if not conversations:
            return token_column([]), token_column([]), keep
        ids, masks = self._masks(conversations, skip)
        who = f"the tokenizer of ChatTemplate(column {self.where!r})"
        ids_col, labels_col, lengths = assistant_label_columns(ids, masks, self.cutoff_len, who)
        if self.cutoff_len is not None:
            over = lengths > self.cutoff_len
            if over.any() and self.overflow == "raise":
                refused = [TextError(f"conversation of {int(lengths[i])} tokens is over cutoff_len={self.cutoff_len}",
                                     column=self.where, batch_row=int(i)) for i in np.flatnonzero(over)]
                raise _RowErrors(refused) if skip else refused[0]
            if self.overflow == "drop":
                keep = ~over
        return ids_col, labels_col, keep

    def __call__(self, table: pa.Table) -> tuple[pa.Table, np.ndarray] | tuple[pa.Table, np.ndarray, list[TextError]]:
        skip = self.on_error == "skip"
        errors: dict[int, TextError] = {}
        conversations = self._conversations(table, errors if skip else None)
        good = [i for i, c in enumerate(conversations) if c is not None]
        while True:
            try:
                ids_col, labels_col, kept = self._labelled([conversations[i] for i in good], skip)
                break
            except _RowErrors as e:  # on_error="skip": those rows out, the rest of the batch again
                bad = {int(x.batch_row): x for x in e.errors}  # type: ignore[arg-type]
            except TextError as e:
                if not skip or e.batch_row is None:
                    if e.batch_row is not None:  # the row in the table, not in the rows templated
                        e = e.located(column=e.column or self.where, batch_row=good[e.batch_row])
                    raise e from None
                bad = {int(e.batch_row): e}
            for j, x in bad.items():
                errors[good[j]] = x.located(column=x.column or self.where, batch_row=good[j])
            good = [i for j, i in enumerate(good) if j not in bad]
        keep = np.zeros(table.num_rows, dtype=bool)
        keep[good] = kept
        if errors:  # the rows skipped hold no ids: one row out per row in
            at = np.full(table.num_rows, len(good), dtype=np.int64)  # an empty row past the templated ones
            at[good] = np.arange(len(good))
            empty = token_column([[]])
            ids_col = pa.concat_arrays([ids_col, empty]).take(pa.array(at))
            labels_col = pa.concat_arrays([labels_col, empty]).take(pa.array(at))
        rest = table.drop_columns(self._read_columns(table)) if self.keep_columns else pa.table({})
        rest = rest.drop_columns([c for c in ("input_ids", "labels") if c in rest.column_names])
        cols = {name: rest.column(name) for name in rest.column_names}
        cols.update(input_ids=ids_col, labels=labels_col)
        if not skip:
            return pa.table(cols), keep
        return pa.table(cols), keep, [errors[i].located(skip=True) for i in sorted(errors)]


class _RowErrors(Exception):
    """The :class:`TextError` of every row of a batch a step refused (``on_error="skip"``:
    all of them are skipped at once, not found one call at a time)."""

    def __init__(self, errors: list[TextError]) -> None:
        super().__init__(f"{len(errors)} rows refused")
        self.errors = errors
