"""A resumed conversation as a document a person reads: Markdown or one HTML file.

What goes in is what a resume restores (``load_transcript``), so an export shows
the conversation the agent would continue, not every line of the file (the
turns before the last compaction come first, marked, collapsed in HTML): turns
under role headers with their times, tool calls and their results collapsed,
thinking only on demand, each subagent's conversation after the main one and
linked from it, the title and the dates at the top.

The HTML is a single self-contained file: inline CSS, no script, no font, image
or stylesheet from anywhere (a saved export opens the same offline, years
later, and leaks nothing to a network when opened). Collapsing is ``<details>``.
Pure rendering: the caller reads the files (``load_export``) and writes the result.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from sessiond.store.agents import session_agent_files

from .resume.pipeline import Resumed, load_transcript

RESULT_PREVIEW = 120


class Exported(msgspec.Struct):
    """What an export renders: the session and its subagents' conversations."""

    main: Resumed
    subagents: list[tuple[str, Resumed]]
    history: list[dict[str, Any]] = []
    """The main conversation before its last compaction (``resume.history``):
    exported first, marked as what a resume no longer restores."""
    redact: bool = False
    """Whether its secrets were redacted (``redacted``): the title is then too."""


def agent_files(path: Path, session_id: str | None) -> list[tuple[str, Path]]:
    """(agent id, file) of the session's subagents, workflow runs and Claude Code
    2.0.x's flat agent files included, sorted (``agents.session_agent_files``)."""
    return [(f.agent, f.path) for f in session_agent_files(path, session_id)]


def load_export(path: Path | str) -> Exported:
    from .resume.history import pre_compaction

    main = load_transcript(path)
    subs = [(agent, load_transcript(p)) for agent, p in agent_files(Path(main.path), main.sessionId)]
    return Exported(main=main, subagents=subs, history=pre_compaction(path))


def redacted(export: Exported) -> tuple[Exported, int]:
    """The export with every secret its messages hold redacted (``sessiond.secrets``:
    ``[REDACTED:<kind>:<fingerprint>]``), and how many there were: what an
    export shows unless its reader asked for the secrets (``--no-redact``)."""
    from sessiond.secrets import redact_value

    count = 0

    def one(resumed: Resumed) -> Resumed:
        nonlocal count
        messages, found = redact_value(resumed.messages)
        count += len(found)
        return msgspec.structs.replace(resumed, messages=messages) if found else resumed

    history, found = redact_value(export.history)
    count += len(found)
    return Exported(main=one(export.main), subagents=[(a, one(r)) for a, r in export.subagents], history=history,
                    redact=True), count


def title_of(resumed: Resumed, redact: bool = False) -> str:
    """The session's title as every command shows it (``lite.session_title``),
    its secrets redacted when ``redact``."""
    from sessiond.store.lite import UNTITLED, session_title

    title = session_title(resumed.path) or UNTITLED
    if redact:
        from sessiond.secrets import redact_text

        title = redact_text(title)
    return title


def dates(resumed: Resumed) -> tuple[str | None, str | None]:
    stamps = [m["timestamp"] for m in resumed.messages if isinstance(m.get("timestamp"), str)]
    return (min(stamps), max(stamps)) if stamps else (None, None)


def _when(ts: Any) -> str:
    """The default rendering of a time: its ISO-8601 UTC text, readable."""
    return ts[:19].replace("T", " ") if isinstance(ts, str) else ""


When = Callable[[Any], str]
"""How a time is shown: the CLI passes its local-time helper (the zone of
the person exporting, with the date), this module has ``_when``."""


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") if isinstance(b, dict) and b.get("type") == "text"
                         else f"[{b.get('type', '?')}]" if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else str(content)


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def _turns(messages: list[dict[str, Any]]):
    """(role, time, blocks, meta) per turn a person reads: the blocks of one API
    response (separate entries sharing ``message.id``) form one turn, tool
    results one turn of their own; a string content is one text block."""
    last_id: Any = None
    turn: list[Any] | None = None
    for msg in messages:
        kind = msg.get("type")
        if kind in ("user", "assistant"):
            inner = msg.get("message") or {}
            content = inner.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [b for b in content or [] if isinstance(b, dict)]
            if not blocks:
                continue
            if kind == "assistant":
                role = "assistant"
            else:
                role = "tool" if all(b.get("type") == "tool_result" for b in blocks) else "user"
            mid = inner.get("id") if kind == "assistant" else None
            if turn is not None and mid is not None and mid == last_id:
                turn[2].extend(blocks)
                continue
            if turn is not None:
                yield tuple(turn)
            turn, last_id = [role, msg.get("timestamp"), blocks, bool(msg.get("isMeta") or msg.get("synthetic") or msg.get("isCompactSummary"))], mid
        elif kind == "system":
            if turn is not None:
                yield tuple(turn)
            turn, last_id = ["system", msg.get("timestamp"),
                             [{"type": "text", "text": str(msg.get("content") or msg.get("subtype") or "system")}], True], None
    if turn is not None:
        yield tuple(turn)


# ---------------------------------------------------------------------- markdown


def _md_fence(text: str, lang: str = "text") -> str:
    """``text`` as a fenced code block no line of it can end: the fence is one
    backtick longer than the longest run of backticks in ``text`` (at least
    three), and a closing fence must be at least as long as the opening one.
    Inside, a CommonMark renderer interprets nothing: no HTML, no link, no
    heading, no entity."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]()<>&!#|~$])")
"""What starts or ends an inline construct (code, emphasis, a link, an image,
raw HTML, an autolink, an entity, a heading's closing ``#``s, a GFM table cell
or strikethrough, math in some renderers). The text goes mid-line, after the
export's own prefix, so line-start markers (``-``, ``1.``, ``>``) cannot act."""


def _md_inline(text: Any) -> str:
    """``text`` as literal inline Markdown: one line (a newline would end a
    heading or a list item and start a block of its own), every ASCII
    punctuation character that could start a construct (``_MD_SPECIAL``)
    backslash-escaped (CommonMark shows an escaped one as itself), so no ``<tag>``, ``[link](javascript:...)``, emphasis or
    entity of the transcript's is rendered as anything but its characters."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _md_anchor(agent: str) -> str:
    """The anchor of an agent's section: ``subagent-`` and its id lowercased,
    anything but ``a-z0-9_-`` as ``-`` (an id comes from a file name, which may
    hold a quote or an angle bracket; it lands inside an attribute and a link)."""
    return "subagent-" + re.sub(r"[^a-z0-9_-]", "-", agent.lower())


def _md_conversation(messages: list[dict[str, Any]], out: list[str], level: int, when: When = _when) -> None:
    """Every piece of transcript text goes out fenced (``_md_fence``: a prompt,
    an assistant's message, a tool's input and result, thinking), escaped as
    inline text (``_md_inline``: times) or HTML-escaped inside the export's own
    ``<details>`` (previews, tool names): what a transcript holds is shown,
    never rendered as Markdown or HTML (a ``<script>``, an ``onerror=``, a
    ``javascript:`` link, a fake heading)."""
    h = "#" * level
    for role, ts, blocks, meta in _turns(messages):
        out.append(f"{h} {role}{' (meta)' if meta else ''} · {_md_inline(when(ts))}\n")
        if meta:
            text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            out.append(f"<details><summary>{html.escape(' '.join(text.split())[:RESULT_PREVIEW])}</summary>\n\n{_md_fence(text)}\n\n</details>\n")
            continue
        for b in blocks:
            kind = b.get("type")
            if kind == "text" and str(b.get("text", "")).strip():
                out.append(_md_fence(str(b["text"]).strip()) + "\n")
            elif kind == "thinking" and b.get("thinking"):
                out.append(f"<details><summary>Thinking</summary>\n\n{_md_fence(str(b['thinking']))}\n\n</details>\n")
            elif kind == "tool_use":
                out.append(f"<details><summary>Tool call: {html.escape(' '.join(str(b.get('name', 'tool')).split()))}</summary>\n\n"
                           f"{_md_fence(_json(b.get('input', {})), 'json')}\n\n</details>\n")
            elif kind == "tool_result":
                label = "Tool error" if b.get("is_error") else "Tool result"
                out.append(f"<details><summary>{label}</summary>\n\n{_md_fence(_result_text(b.get('content')))}\n\n</details>\n")
            elif kind == "image":
                out.append("*[image]*\n")


def to_markdown(export: Exported, when: When = _when) -> str:
    """The conversation as CommonMark: the title and names as escaped inline
    text, every message in a fenced block (see ``_md_conversation``)."""
    main = export.main
    first, last = dates(main)
    out = [f"# {_md_inline(title_of(main, export.redact))}\n",
           f"- Session: {_md_inline(main.sessionId or '?')}",
           f"- Started: {_md_inline(when(first) or '?')} · Last message: {_md_inline(when(last) or '?')}",
           f"- Messages: {len(main.chain)}"]
    if export.subagents:
        out.append("- Subagents: " + ", ".join(f"[{_md_inline(a)}](#{_md_anchor(a)})" for a, _ in export.subagents))
    out.append("")
    if export.history:
        out.append(f"## Before compaction ({len(export.history)} entries: not what a resume restores)\n")
        _md_conversation(export.history, out, 3, when)
        out.append("## After compaction (what a resume restores)\n")
    _md_conversation(main.messages, out, 2, when)
    for agent, resumed in export.subagents:
        out.append(f'<a id="{_md_anchor(agent)}"></a>\n\n## Subagent {_md_inline(agent)}\n')
        _md_conversation(resumed.messages, out, 3, when)
    return "\n".join(out).rstrip() + "\n"


# -------------------------------------------------------------------------- html

CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:58rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;background:#fbfbfd}
header{border-bottom:2px solid #d2d2d7;margin-bottom:1.5rem}h1{font-size:1.6rem;margin:.2rem 0}
.meta{color:#6e6e73;font-size:.9rem}.turn{border-radius:10px;padding:.6rem 1rem;margin:.8rem 0;border:1px solid #e5e5ea}
.user{background:#eef5ff;border-color:#bcd7ff}.assistant{background:#fff}.tool{background:#f6f6f6}.system{background:#fffbea;color:#6e6e73}
.role{font-weight:600;font-size:.8rem;text-transform:uppercase;letter-spacing:.05em;color:#3a3a3c}
.role time{font-weight:400;color:#8e8e93;margin-left:.5rem}
.text{white-space:pre-wrap;word-wrap:break-word}pre{white-space:pre-wrap;word-wrap:break-word;background:#f2f2f7;padding:.5rem;border-radius:6px;font-size:.85rem;max-height:40rem;overflow:auto}
details{margin:.4rem 0}summary{cursor:pointer;color:#0066cc}details.thinking summary{color:#8e44ad}details.error summary{color:#c0392b}
section.subagent{border-top:2px dashed #d2d2d7;margin-top:2rem}nav a{margin-right:.8rem}
details.history{border:1px dashed #d2d2d7;border-radius:10px;padding:.4rem 1rem;opacity:.85}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_conversation(messages: list[dict[str, Any]], out: list[str], agents: set[str], when: When = _when) -> None:
    for role, ts, blocks, meta in _turns(messages):
        out.append(f'<div class="turn {role}"><div class="role">{_e(role)}{" · meta" if meta else ""}'
                   f'<time>{_e(when(ts))}</time></div>')
        if meta:  # skill bodies, command output, synthetic prompts: there on demand
            text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            preview = " ".join(text.split())[:RESULT_PREVIEW] or "(meta)"
            out.append(f'<details class="meta"><summary>{_e(preview)}</summary><pre>{_e(text)}</pre></details></div>')
            continue
        for b in blocks:
            kind = b.get("type")
            if kind == "text" and str(b.get("text", "")).strip():
                out.append(f'<div class="text">{_e(str(b["text"]).strip())}</div>')
            elif kind == "thinking" and b.get("thinking"):
                out.append(f'<details class="thinking"><summary>Thinking</summary><pre>{_e(b["thinking"])}</pre></details>')
            elif kind == "tool_use":
                args = b.get("input", {})
                link = ""
                agent = _agent_of(args, agents)
                if agent:
                    link = f' <a href="#subagent-{_e(agent)}">→ subagent {_e(agent)}</a>'
                out.append(f'<details class="tool"><summary>{_e(b.get("name", "tool"))}</summary>'
                           f'<pre>{_e(_json(args))}</pre></details>{link}')
            elif kind == "tool_result":
                text = _result_text(b.get("content"))
                preview = " ".join(text.split())[:RESULT_PREVIEW] or "(empty)"
                cls = "error" if b.get("is_error") else "result"
                out.append(f'<details class="{cls}"><summary>{"Error" if b.get("is_error") else "Result"}: {_e(preview)}</summary>'
                           f'<pre>{_e(text)}</pre></details>')
            elif kind == "image":
                out.append('<div class="text"><em>[image]</em></div>')
        out.append("</div>")


def _agent_of(args: Any, agents: set[str]) -> str | None:
    """A Task/Agent tool call names its subagent only in later entries; link the
    call when its input mentions one of the session's agent ids."""
    if not agents or not isinstance(args, dict):
        return None
    text = _json(args)
    return next((a for a in sorted(agents) if a in text), None)


def to_html(export: Exported, when: When = _when) -> str:
    main = export.main
    first, last = dates(main)
    title = title_of(main, export.redact)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width,initial-scale=1">',
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
           f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
           f"<header><h1>{_e(title)}</h1><p class=\"meta\">Session <code>{_e(main.sessionId or '?')}</code> · "
           f"started <time>{_e(when(first) or '?')}</time> · last message <time>{_e(when(last) or '?')}</time> · "
           f"{len(main.chain)} messages</p>"]
    if export.subagents:
        out.append("<nav>Subagents: " + "".join(f'<a href="#subagent-{_e(a)}">{_e(a)}</a>' for a, _ in export.subagents) + "</nav>")
    out.append("</header><main>")
    agents = {a for a, _ in export.subagents}
    if export.history:  # collapsed: there to look back at, not the conversation a resume continues
        out.append(f'<details class="history"><summary>Before compaction: {len(export.history)} entries '
                   "(not what a resume restores)</summary>")
        _html_conversation(export.history, out, agents, when)
        out.append('</details><h2 class="after">After compaction</h2>')
    _html_conversation(main.messages, out, agents, when)
    for agent, resumed in export.subagents:
        out.append(f'<section class="subagent" id="subagent-{_e(agent)}"><h2>Subagent {_e(agent)}</h2>')
        _html_conversation(resumed.messages, out, set(), when)
        out.append("</section>")
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"
