"""A conversation view (``render.conversation``) as one Markdown document.

The messages' own Markdown goes in as it is, so a viewer renders it (headings,
lists, code, tables), unless rendering it could do more than show text: a
message holding raw HTML, an image (a viewer would fetch it), a link that is
not http(s), mailto or an in-page anchor, a link reference definition
(``[x]: url``: a viewer resolves it in every message, so another one's
``![a][x]`` would load an image), a character reference a viewer would
decode into a control (``&#x202e;``, a bidi override), or a construct
left open that would swallow what follows (an unclosed fence) goes in
fenced, shown as its characters. Everything the export itself writes around
them (title, names, gists, times, notices) is escaped inline text, or
HTML-escaped inside the export's own ``<details>``. Tool calls fold with their input and result, the
turns before the last compaction fold under one ``<details>``.

Public API: :func:`conversation_markdown`, :func:`fence`, :func:`inline`.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from typing import Any

from .conversation import (
    ConversationView,
    Image,
    Notice,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Turn,
    When,
    agent_anchor,
    hidden_summary,
    input_fields,
    safe_link,
    time_text,
)

_SENTINEL = "sessiond-render-end-of-text"


def fence(text: str, lang: str = "text") -> str:
    """``text`` as a fenced code block no line of it can end: the fence is one
    backtick longer than the longest run of backticks in ``text`` (at least
    three; a closing fence must be at least as long as the opening one).
    Inside, a CommonMark renderer interprets nothing."""
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


_SPECIAL = re.compile(r"([\\`*_\[\]()<>&!#|~$])")
"""What starts or ends an inline construct (code, emphasis, a link, an image,
raw HTML, an autolink, an entity, a heading's closing ``#``s, a table cell,
strikethrough, math in some renderers)."""


def inline(text: Any) -> str:
    """``text`` as literal inline Markdown: one line, every character that
    could start a construct backslash-escaped (CommonMark shows an escaped
    one as itself), so nothing in it renders as anything but its characters."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _e(text: Any) -> str:
    return html.escape(" ".join(str(text).split()), quote=True)


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True})
    md.enable(["table", "strikethrough"])
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # every link tokenised, so every one is checked
    return md


def _renders_safely(text: str) -> bool:
    """Whether ``text`` as Markdown shows only text, formatting and safe
    links, defines no link reference (a viewer resolves one anywhere in the
    document) and closes before what follows it (see the module). Parsed as the
    export writes it (``printable``: its raw controls shown), so a control
    still in what is shown came from a character reference (``&#x202e;``, a
    bidi override once a viewer decodes it)."""
    from sessiond.client.cli.output import printable

    env: dict[str, Any] = {}
    tokens = _parser().parse(printable(text) + "\n\n" + _SENTINEL, env)
    tail = tokens[-3:]
    if [t.type for t in tail] != ["paragraph_open", "inline", "paragraph_close"]:
        return False  # the text left something open (a fence, an HTML block) that took the paragraph after it
    if env.get("references"):
        return False  # a definition ([x]: url) is the whole document's: another message's ![a][x] would load it
    stack = list(tokens)
    while stack:
        token = stack.pop()
        if token.type in ("html_block", "html_inline", "image"):
            return False
        if token.type == "link_open" and not safe_link(str(token.attrGet("href") or "")):
            return False
        if token.type == "text" and printable(token.content) != token.content:
            return False
        stack.extend(token.children or [])
    return True


def _text(text: str) -> str:
    return text if _renders_safely(text) else fence(text)


def _slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", value)


def _folded(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def _notice(n: Notice) -> str:
    if n.text and " ".join(n.text.split()) != n.gist:
        body = _text(n.text) if n.kind in ("meta", "compact-summary") else fence(n.text)
        return _folded(f"{_e(n.label)}: {_e(n.gist)}", body)
    return f"*{inline(n.label)}: {inline(n.gist)}*"


def _result(r: ToolResult, when: When) -> str:
    head = "Error" if r.is_error else "Result"
    parts = [f"**{head}** {inline(when(r.time)) if r.time else ''}".rstrip(), fence(r.text) if r.text else "*(empty)*"]
    if r.images:
        parts.append(f"*\\[{r.images} image{'s' if r.images != 1 else ''}\\]*")
    parts.extend(_notice(n) for n in r.notices)
    return "\n\n".join(parts)


def _tool(call: ToolCall, when: When, agents: set[str]) -> str:
    error = call.result is not None and call.result.is_error
    parts = []
    for key, value in input_fields(call.input):
        raw = call.input.get(key) if isinstance(call.input, dict) else call.input
        lang = "bash" if call.name.lower() == "bash" and key == "command" else "text" if isinstance(raw, str) else "json"
        parts.append(f"**{inline(key)}**\n\n{fence(value, lang)}")
    if call.result is not None:
        parts.append(_result(call.result, when))
    summary = f"{_e(call.name)}: {_e(call.gist)}" + (" (error)" if error else "")
    out = _folded(summary, "\n\n".join(parts) or "*(no input)*")
    if call.agent in agents:
        out += f"\n\n→ [subagent {inline(call.agent)}](#{agent_anchor(call.agent)})"
    elif call.agent:
        out += f"\n\n*subagent {inline(call.agent)} (no transcript of it here)*"
    return out


def _block(block: Any, when: When, agents: set[str]) -> str:
    if isinstance(block, Text):
        return _text(block.text)
    if isinstance(block, Thinking):
        return _folded("Thinking", _text(block.text))
    if isinstance(block, ToolCall):
        return _tool(block, when, agents)
    if isinstance(block, ToolResult):
        return _folded(f"Result: {_e(block.tool_use_id)}", _result(block, when))
    if isinstance(block, Image):
        return f"*\\[image: {inline(block.media_type)}\\]*"
    if isinstance(block, Notice):
        return _notice(block)
    return ""


_ROLE = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool result"}


def _turns(turns: list[Turn], out: list[str], level: int, when: When, agents: set[str]) -> None:
    for turn in turns:
        anchor = f' <a id="m-{_slug(turn.uuid)}"></a>' if turn.uuid else ""
        role = _ROLE.get(turn.role, turn.role) + (" (meta)" if turn.meta else "")
        stamp = f" · {inline(when(turn.time))}" if turn.time else ""
        model = f" · {inline(turn.model)}" if turn.model else ""
        out.append(f"{'#' * level} {inline(role)}{stamp}{model}{anchor}\n")
        out.extend(_block(b, when, agents) + "\n" for b in turn.blocks)


def conversation_markdown(view: ConversationView, *, when: When | None = None) -> str:
    """The view as CommonMark (GFM tables): a header list, the turns under
    role headings (``## User · time``, an ``m-<uuid>`` anchor each), the
    pre-compaction turns folded first, what was hidden, each subagent's
    conversation under its own heading, linked from the call that started it."""
    shown = when or time_text
    agents = {s.agent for s in view.subagents}  # a link lands on a section of this document
    out = [f"# {inline(view.title)}\n",
           f"- Session: {inline(view.session_id or '?')}",
           f"- Started: {inline(shown(view.first)) if view.first else '?'} · Last message: "
           f"{inline(shown(view.last)) if view.last else '?'}",
           f"- Messages: {view.messages}"]
    if view.subagents:
        out.append("- Subagents: " + ", ".join(f"[{inline(s.agent)}](#{agent_anchor(s.agent)})" for s in view.subagents))
    if view.redacted:
        out.append("- Secrets redacted")
    out.append("")
    if view.history:
        out.append(f"<details><summary>Before compaction: {len(view.history)} turn{'s' if len(view.history) != 1 else ''} "
                   "(not what a resume restores)</summary>\n")
        _turns(view.history, out, 3, shown, agents)
        out.append("</details>\n\n## After compaction\n")
    _turns(view.turns, out, 2, shown, agents)
    if hidden_summary(view.hidden):
        out.append(f"*{inline(hidden_summary(view.hidden))}*\n")
    for sub in view.subagents:
        out.append(f'<a id="{agent_anchor(sub.agent)}"></a>\n\n## Subagent {inline(sub.agent)}\n')
        _turns(sub.turns, out, 3, shown, agents)
        if hidden_summary(sub.hidden):
            out.append(f"*{inline(hidden_summary(sub.hidden))}*\n")
    return "\n".join(out).rstrip() + "\n"
