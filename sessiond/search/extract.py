"""What of a transcript entry is searchable.

One entry gives zero or more ``Doc``s, one per role: a user prompt, assistant
text, the tool side (tool names and their inputs: commands, paths, patterns;
tool results, cut at ``TOOL_TEXT_MAX`` characters because a 2 MB file dump
would otherwise outweigh every prompt in the index), and the metadata that
names a session (custom and AI titles, tags, the summary). Thinking blocks,
images, attachments, hook output and bookkeeping entries are not indexed: they
are machinery, not conversation, and would drown real hits.

Entries are decoded with a msgspec Struct naming only the fields used here; a
line with an unexpected shape (a number where a string was expected, deep
nesting) falls back to a generic decode read with ``isinstance`` checks, and a
line that is not JSON at all gives nothing, never an error.

No secret's text is ever indexed: every text an entry gives is redacted
(``clean``: ``secrets.redact_text``, and ``redact_value`` for a tool input
naming its secret in a key) before it is cut, reading only what is kept, so a search for a key finds nothing, the
rest of the line is still found, and the marker's fingerprint finds every
mention of one secret.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sessiond.secrets import redact_text, redact_value
from sessiond.secrets.rules import maybe_secret, secret_name
from sessiond.store.entries import readable_copy
from sessiond.store.prompts import classify_text
from sessiond.wire.hit import (  # noqa: F401  (the roles are named there)
    ASSISTANT,
    ROLES,
    SUMMARY,
    TAG,
    TITLE,
    TOOL,
    USER,
)

TOOL_TEXT_MAX: Final = 2000
"""Characters kept of one tool result or one tool input."""
TEXT_MAX: Final = 100_000
"""Characters kept of one prompt or one assistant text (a pasted log)."""

class Doc(msgspec.Struct, frozen=True):
    """One searchable part of a transcript entry: its text and the role it is
    indexed under (user, assistant, tool, title, tag, summary)."""

    role: str
    text: str


class Extracted(msgspec.Struct):
    """What one line says: its docs, and the envelope fields a hit shows."""

    docs: list[Doc]
    uuid: str | None = None
    timestamp: str | None = None
    sidechain: bool = False
    session: str | None = None
    cwd: str | None = None
    prompt: str | None = None
    """A first-prompt candidate (a real user prompt, as the listing shows it)."""
    titles: dict[str, str] = {}
    """``custom-title``/``ai-title``/``tag``/``summary`` values this entry sets."""


class _Block(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.Raw()  # Raw cannot be in a union: empty means absent
    content: msgspec.Raw = msgspec.Raw()


class _Message(msgspec.Struct):
    role: str | None = None
    content: str | list[_Block] | None = None


class _Entry(msgspec.Struct):
    type: str | None = None
    uuid: str | None = None
    timestamp: str | None = None
    isSidechain: bool | None = None
    isMeta: bool | None = None
    isCompactSummary: bool | None = None
    sessionId: str | None = None
    cwd: str | None = None
    message: _Message | None = None
    customTitle: str | None = None
    aiTitle: str | None = None
    summary: str | None = None
    tag: str | None = None
    lastPrompt: str | None = None


_decoder = msgspec.json.Decoder(_Entry)
_TITLE_FIELDS: Final = {"custom-title": ("customTitle", TITLE), "ai-title": ("aiTitle", TITLE),
                        "tag": ("tag", TAG), "summary": ("summary", SUMMARY)}


def strings_of(value: Any, out: list[str], budget: int) -> int:
    """Every string inside a decoded JSON value, depth first, until ``budget``
    characters are collected; returns what is left of the budget."""
    stack = [value]
    while stack and budget > 0:
        v = stack.pop()
        if isinstance(v, str):
            if v:
                out.append(v[:budget])
                budget -= len(v)
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return budget


MARGIN: Final = 512
"""Characters past a cut that are read for secrets too: a key across the cut is
recognized whole, so not even its first half is indexed."""


def clean(text: str, keep: int) -> str:
    """The first ``keep`` characters of ``text`` with no secret in them: only
    what is kept (and ``MARGIN``) is read, so a 2 MB tool result costs the
    detector no more than the 2,000 characters the index takes of it."""
    head = text[:keep + MARGIN]
    if maybe_secret(head.encode("utf-8", "surrogatepass")):
        head = redact_text(head)
    return head[:keep]


def _raw_text(raw: msgspec.Raw | None, budget: int) -> str:
    if raw is None or not len(raw):
        return ""
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return ""
    if isinstance(value, list):  # tool_result content: text blocks; images skipped
        value = [b.get("text") for b in value if isinstance(b, dict) and b.get("type") == "text"]
    if isinstance(value, dict) and any(map(secret_name, value)):
        value = redact_value(value)[0]  # a tool input's ``"api_key": "..."``: the name and the value apart
    parts: list[str] = []
    strings_of(value, parts, budget + MARGIN)
    return clean(" ".join(parts), budget)


def _message_docs(kind: str, msg: _Message, meta: bool, out: Extracted, summary: bool = False) -> None:
    content = msg.content
    if content is None:
        return
    role = ASSISTANT if kind == "assistant" else USER
    if isinstance(content, str):
        content = clean(content, TEXT_MAX)
        if content.strip() and not meta:
            out.docs.append(Doc(role, content[:TEXT_MAX]))
            if role == USER and not summary:
                _prompt(content, out)
        return
    texts: list[str] = []
    tools: list[str] = []
    for block in content:
        t = block.type
        if t == "text" and block.text:
            texts.append(clean(block.text, TEXT_MAX))
        elif t == "tool_use":
            tools.append(" ".join(filter(None, (block.name, _raw_text(block.input, TOOL_TEXT_MAX)))))
        elif t == "tool_result":
            text = _raw_text(block.content, TOOL_TEXT_MAX)
            if text:
                tools.append(text)
    if texts and not meta:
        joined = "\n".join(texts)[:TEXT_MAX]
        if joined.strip():
            out.docs.append(Doc(role, joined))
            if role == USER and not tools and not summary:
                _prompt(joined, out)
    if tools:
        out.docs.append(Doc(TOOL, "\n".join(tools)))


def _prompt(text: str, out: Extracted) -> None:
    got = classify_text(text[:2000])
    if got is not None and got[0] == "prompt":
        out.prompt = got[1][:200]


def extract(line: bytes | memoryview) -> Extracted | None:
    """The searchable parts of one JSONL line; None when it is not an entry."""
    try:
        e = _decoder.decode(line)
    except msgspec.ValidationError:
        loose = _loose(line)
        if loose is None:
            return None
        e = loose
    except msgspec.DecodeError:
        copy = readable_copy(line)  # a BOM (a file saved on Windows), a half emoji
        return None if copy is None else extract(copy)
    except RecursionError:
        return None
    out = Extracted(docs=[], uuid=e.uuid, timestamp=e.timestamp, sidechain=bool(e.isSidechain),
                    session=e.sessionId, cwd=e.cwd)
    kind = e.type
    if kind in ("user", "assistant") and e.message is not None:
        _message_docs(kind, e.message, bool(e.isMeta), out, bool(e.isCompactSummary))
    elif kind in _TITLE_FIELDS:
        field, role = _TITLE_FIELDS[kind]
        value = getattr(e, field)
        if isinstance(value, str):
            value = clean(value, 1000)
        if isinstance(value, str) and value.strip():
            out.titles = {kind: value[:1000]}
            out.docs.append(Doc(role, value[:1000]))
    elif kind == "last-prompt" and isinstance(e.lastPrompt, str):
        value = clean(e.lastPrompt, 1000)
        if isinstance(value, str) and value.strip():
            out.titles = {kind: value[:1000]}  # a title only: its text is a prompt already indexed
    return out


def _loose(line: bytes | memoryview) -> _Entry | None:
    """An entry of an unexpected shape, read field by field."""
    try:
        obj = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None

    def s(key: str, src: dict = obj) -> str | None:
        v = src.get(key)
        return v if isinstance(v, str) else None

    msg = obj.get("message")
    message = None
    if isinstance(msg, dict):
        content = msg.get("content")
        if isinstance(content, list):
            blocks = []
            for b in content:
                if not isinstance(b, dict):
                    continue
                raw = {k: msgspec.Raw(msgspec.json.encode(b[k])) for k in ("input", "content") if k in b}
                blocks.append(_Block(type=s("type", b), text=s("text", b), name=s("name", b), **raw))
            content = blocks
        elif not isinstance(content, str):
            content = None
        message = _Message(role=s("role", msg), content=content)
    return _Entry(type=s("type"), uuid=s("uuid"), timestamp=s("timestamp"), isSidechain=obj.get("isSidechain") is True,
                  isMeta=obj.get("isMeta") is True, isCompactSummary=obj.get("isCompactSummary") is True,
                  sessionId=s("sessionId"), cwd=s("cwd"), message=message,
                  customTitle=s("customTitle"), aiTitle=s("aiTitle"), summary=s("summary"), tag=s("tag"),
                  lastPrompt=s("lastPrompt"))
