"""The one place a conversation becomes HTML for the web view.

Why an adapter: the view renders a conversation as the HTML export does
(``sessiond.client.export``: the conversation a resume restores, tool calls and
results collapsed, subagents after the main one, the turns before the last
compaction collapsed), plus what a page served live needs that a saved file
does not: an anchor per message (``id="m-<uuid>"``, the deep link) and no
``<html>`` of its own (the page wraps it). Every other module of the view goes
through ``render``, so a change of renderer is a change of this file alone.

All transcript text goes through the export's escaping (``html.escape``): a
``<script>`` or ``onerror=`` in a prompt, a title, a tool result or a file name
is shown as its characters.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import msgspec

from sessiond.client import export


class Rendered(msgspec.Struct):
    """One conversation as the page shows it: its title, session id, first and
    last message times, message count and the body's HTML (already escaped)."""

    title: str
    session_id: str | None
    first: str | None
    last: str | None
    messages: int
    body: str


STYLESHEET = export.CSS
"""The renderer's own rules, served with the view's stylesheet."""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _anchor(uuid: Any) -> str:
    """``m-<uuid>``, only of characters an id and a URL fragment hold as they
    are (a uuid is a transcript's, so anything else is dropped, never quoted)."""
    return "m-" + "".join(c for c in str(uuid) if c.isascii() and (c.isalnum() or c in "-_"))[:64]


def _messages(messages: list[dict[str, Any]], out: list[str], agents: set[str]) -> None:
    """Each entry in an ``<article>`` with its anchor and a link to itself; its
    turn rendered by the export (``_html_conversation``)."""
    for msg in messages:
        one: list[str] = []
        export._html_conversation([msg], one, agents)
        if not one:
            continue
        uuid = msg.get("uuid")
        if uuid:
            anchor = _anchor(uuid)
            out.append(f'<article class="msg" id="{anchor}"><a class="permalink" href="#{anchor}" '
                       f'title="link to this message">#</a>')
        else:
            out.append('<article class="msg">')
        out.extend(one)
        out.append("</article>")


def load(path: Path) -> Rendered:
    """Read the session's files (as ``show`` and ``export`` read them) and render it."""
    exported = export.load_export(path)
    main = exported.main
    first, last = export.dates(main)
    agents = {a for a, _ in exported.subagents}
    out: list[str] = []
    if exported.subagents:
        out.append('<nav class="agents">Subagents: ' + "".join(
            f'<a href="#subagent-{_e(a)}">{_e(a)}</a> ' for a, _ in exported.subagents) + "</nav>")
    if exported.history:
        out.append(f'<details class="history"><summary>Before compaction: {len(exported.history)} entries '
                   "(not what a resume restores)</summary>")
        _messages(exported.history, out, agents)
        out.append('</details><h2 class="after">After compaction</h2>')
    _messages(main.messages, out, agents)
    for agent, resumed in exported.subagents:
        out.append(f'<section class="subagent" id="subagent-{_e(agent)}"><h2>Subagent {_e(agent)}</h2>')
        _messages(resumed.messages, out, set())
        out.append("</section>")
    return Rendered(title=export.title_of(main), session_id=main.sessionId, first=first, last=last,
                    messages=len(main.chain), body="\n".join(out))
