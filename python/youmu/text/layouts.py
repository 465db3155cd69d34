"""Chat layouts: how a row stores its conversation, one small object per layout in one
registry (as LLaMA-Factory's dataset converters are), each giving the same normalized
conversation — ``[{"role", "content"}, ...]`` with the template's roles — to
:class:`~youmu.text.ChatTemplate` and :class:`~youmu.vision.VisionTransform` alike.

* ``"openai"``: OpenAI / Hugging Face ``messages``, a list of ``{"role", "content"}``
  (UltraChat);
* ``"sharegpt"``: ShareGPT / OpenHermes / LLaVA ``conversations``, a list of
  ``{"from", "value"}`` with ``human`` / ``gpt`` / ``system``;
* ``"alpaca"``: Alpaca's columns, ``instruction`` (+ ``input``) as the user's turn and
  ``output`` as the answer (+ ``system`` where the rows have it).

A transform given no layout reads each message through every message layout whose
keys it carries (a null value is no key: Arrow gives every field of a struct to every
message, so a file mixing the two layouts has both keys on each message, one null).
There is no precedence between layouts: where two read the same message they must
agree (speakers after mapping to roles, content exactly); where they disagree the
message means two things — a silent pick would train on a prompt as the answer, or
the reverse, and the two transforms once picked opposite ways — so it is a
:class:`~youmu.errors.TextError` naming both keys, skipped with the row under
``on_error="skip"``.

A new layout is one entry here: ``register(MessageLayout("speaker", "speaker",
"text", {"user": "user", "bot": "assistant"}))``, or a :class:`Layout` subclass for
rows that spread a conversation over columns.

Example:
    >>> read_conversation(any_messages(), {"messages": [{"from": "human", "value": "Hi"},
    ...                                                 {"role": "assistant", "content": "Hello"}]}, "messages")
    [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello'}]
    >>> read_conversation(LAYOUTS["alpaca"], {"instruction": "Add", "input": "1 2", "output": "3"}, "")
    [{'role': 'user', 'content': 'Add\\n1 2'}, {'role': 'assistant', 'content': '3'}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from youmu.errors import ArgumentTypeError, InvalidArgumentError, TextError

__all__ = ["Layout", "MessageLayout", "AnyMessages", "Alpaca", "LAYOUTS", "IMAGE_PLACEHOLDER", "register",
           "any_messages", "layout_arg", "read_conversation"]

#: What LLaVA-style text marks an image's place with (typed image parts become it).
IMAGE_PLACEHOLDER = "<image>"
#: A message as a layout reads it: (stored speaker, content), ``None`` where absent.
_Turn = tuple[Any, Any]


class Layout:
    """How a row stores its conversation. ``columns(column)`` are the columns a row
    must have (``column``: the conversation column the transform was given),
    ``optional()`` those read where the rows have them, ``speakers()`` the stored
    speaker names it knows (→ template roles), and ``turns`` the row's ``(speaker,
    content)`` pairs as stored (``roles``: the names in use, for layouts that compare
    speakers)."""

    name: str

    def columns(self, column: str) -> tuple[str, ...]:
        return (column,)

    def optional(self) -> tuple[str, ...]:
        return ()

    def speakers(self) -> Mapping[str, str]:
        return {"system": "system", "user": "user", "assistant": "assistant"}

    def turns(self, row: Mapping[str, Any], column: str, roles: Mapping[str, str]) -> list[_Turn]:
        raise NotImplementedError


def _messages(value: Any) -> Sequence[Any]:
    """A conversation cell's messages: a non-empty list of mappings."""
    if value is None:
        raise TextError("conversation is null")
    # (list, ...) first: a list (what Arrow gives) passes without the slower ABC check
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, Sequence)):
        raise TextError(f"conversation must be a list of messages, got {type(value).__name__}")
    if not value:
        raise TextError("conversation has no messages")
    for i, m in enumerate(value):
        if not isinstance(m, (dict, Mapping)):
            raise TextError(f"message must be a mapping, got {type(m).__name__}", message=i)
    return value


@dataclass(frozen=True)
class MessageLayout(Layout):
    """A column holding a list of messages, each a mapping with the speaker under
    ``role`` and the text under ``content``; ``roles`` maps its speaker names."""

    name: str
    role: str
    content: str
    roles: Mapping[str, str] = field(default_factory=dict)

    def speakers(self) -> Mapping[str, str]:
        return self.roles

    def turn(self, m: Mapping[str, Any]) -> _Turn:
        return m.get(self.role), m.get(self.content)

    def turns(self, row: Mapping[str, Any], column: str, roles: Mapping[str, str]) -> list[_Turn]:
        return [self.turn(m) for m in _messages(row.get(column))]


def _agreed(reads: list[tuple[str, Any]], what: str, same: Any, i: int) -> Any:
    """The one value the layouts' keys give (``None``: no key has one); keys that give
    values meaning different things are a :class:`TextError`."""
    given = [(k, v) for k, v in reads if v is not None]
    for k, v in given[1:]:
        if same(v) != same(given[0][1]):
            raise TextError(f"message carries {what} {given[0][0]!r}={given[0][1]!r} and {k!r}={v!r}, which "
                            "disagree: the row means two conversations (read it with one layout=)", message=i)
    return given[0][1] if given else None


@dataclass(frozen=True)
class AnyMessages(Layout):
    """Each message read through every one of ``kinds`` whose keys it carries; where
    two read it, they must agree (see the module's notes). The kinds are taken when
    the transform is made, so its worker processes read what it was made with."""

    kinds: tuple[MessageLayout, ...]
    name: str = "any"

    def speakers(self) -> Mapping[str, str]:
        out: dict[str, str] = {}
        for x in self.kinds:
            out.update(x.speakers())
        return out

    def turns(self, row: Mapping[str, Any], column: str, roles: Mapping[str, str]) -> list[_Turn]:
        out = []
        for i, m in enumerate(_messages(row.get(column))):
            reads = [x.turn(m) for x in self.kinds]
            role = _agreed([(x.role, r) for x, (r, _) in zip(self.kinds, reads)], "speakers",
                           lambda r: roles.get(r, r) if isinstance(r, str) else r, i)
            content = _agreed([(x.content, c) for x, (_, c) in zip(self.kinds, reads)], "contents", _text_of, i)
            out.append((role, content))
        return out


@dataclass(frozen=True)
class Alpaca(Layout):
    """Alpaca's columns: ``instruction`` and ``input`` (joined by a newline, as
    LLaMA-Factory joins them) are the user's turn, ``output`` the assistant's, and
    ``system`` a system turn where the rows have that column and it is not null."""

    name: str = "alpaca"
    instruction: str = "instruction"
    input: str = "input"
    output: str = "output"
    system: str = "system"

    def columns(self, column: str) -> tuple[str, ...]:
        return (self.instruction, self.output)

    def optional(self) -> tuple[str, ...]:
        return (self.input, self.system)

    def turns(self, row: Mapping[str, Any], column: str, roles: Mapping[str, str]) -> list[_Turn]:
        prompt = [row.get(self.instruction), row.get(self.input)]
        if prompt[0] is None:
            raise TextError(f"the instruction ({self.instruction!r}) is null")
        for name, p in zip((self.instruction, self.input), prompt):
            if p is not None and not isinstance(p, str):
                raise TextError(f"the {name!r} column must hold strings, got {type(p).__name__}")
        system = row.get(self.system)
        head = [] if system is None else [("system", system)]
        return head + [("user", "\n".join(p for p in prompt if p)), ("assistant", row.get(self.output))]


#: The layouts by name, the built-in ones first.
LAYOUTS: dict[str, Layout] = {}


def register(layout: Layout) -> Layout:
    """Add ``layout`` to :data:`LAYOUTS` under its name (a message layout is then also
    read by transforms given no layout); a name taken is an
    :class:`~youmu.errors.InvalidArgumentError`."""
    if not isinstance(layout, Layout) or not isinstance(getattr(layout, "name", None), str) or not layout.name:
        raise ArgumentTypeError(f"layout must be a named youmu.text.layouts.Layout, got {layout!r}")
    if layout.name in LAYOUTS:
        raise InvalidArgumentError(f"a chat layout named {layout.name!r} is already registered")
    LAYOUTS[layout.name] = layout
    return layout


register(MessageLayout("openai", "role", "content", {"system": "system", "user": "user", "assistant": "assistant"}))
register(MessageLayout("sharegpt", "from", "value", {"system": "system", "human": "user", "gpt": "assistant"}))
register(Alpaca())


def any_messages() -> AnyMessages:
    """What transforms given no layout read: messages in any registered message layout."""
    return AnyMessages(tuple(x for x in LAYOUTS.values() if isinstance(x, MessageLayout)))


def layout_arg(layout: str | Layout | None) -> Layout:
    """The layout a transform's ``layout=`` names: ``None`` (:func:`any_messages`), a
    registered name, or a :class:`Layout`."""
    if layout is None:
        return any_messages()
    if isinstance(layout, Layout):
        return layout
    if isinstance(layout, str) and layout in LAYOUTS:
        return LAYOUTS[layout]
    if isinstance(layout, str):
        raise InvalidArgumentError(f"layout must be one of {sorted(LAYOUTS)} (or a Layout), got {layout!r}")
    raise ArgumentTypeError(f"layout must be a layout name or a youmu.text.layouts.Layout, got {type(layout).__name__}")


def _text_of(content: Any, images: bool = True) -> Any:
    """A message's content as text: typed parts (``[{"type": "image"} | {"type":
    "text", "text": ...}]``) joined, each image as :data:`IMAGE_PLACEHOLDER`
    (``images=False``: parts are left as they are, for the caller to refuse)."""
    if not images or not isinstance(content, list):
        return content
    if not all(isinstance(c, Mapping) for c in content):
        return content
    return "".join(IMAGE_PLACEHOLDER if c.get("type") == "image" else (c.get("text") or "") for c in content)


def read_conversation(layout: Layout, row: Mapping[str, Any], column: str, roles: Mapping[str, str] | None = None,
                      images: bool = False) -> list[dict[str, str]]:
    """The row's conversation through ``layout`` as ``[{"role", "content"}, ...]``,
    ``roles`` (default: the layout's) mapping its speakers to template roles;
    ``images``: typed content parts are read, images as :data:`IMAGE_PLACEHOLDER`.
    Anything else is a :class:`~youmu.errors.TextError` (with the message's index
    where one is at fault)."""
    roles = layout.speakers() if roles is None else roles
    out = []
    for i, (role, content) in enumerate(layout.turns(row, column, roles)):
        if role is None:
            raise TextError(f"message has no role (none of {_role_keys(layout)}; it has {_keys(row, column, i)})",
                            message=i)
        if not isinstance(role, str) or role not in roles:
            raise TextError(f"message has role {role!r}, which is not one of {sorted(roles)} (pass roles= to map it)",
                            message=i)
        content = _text_of(content, images)
        if not isinstance(content, str):
            raise TextError(f"message content must be a string, got {type(content).__name__}", message=i)
        out.append({"role": roles[role], "content": content})
    return out


def _role_keys(layout: Layout) -> list[str]:
    kinds = layout.kinds if isinstance(layout, AnyMessages) else (layout,)
    return [repr(x.role) for x in kinds if isinstance(x, MessageLayout)]


def _keys(row: Mapping[str, Any], column: str, i: int) -> list[str]:
    try:
        return sorted(row[column][i])
    except (KeyError, IndexError, TypeError):
        return sorted(row)
