"""The one place a conversation becomes HTML for the web view.

Why an adapter: the view renders a conversation with the renderer the HTML
export uses (``sessiond.client.render``: one view model, Markdown with raw HTML
off, tool calls paired with their results, subagents after the main
conversation, the turns before the last compaction collapsed, an anchor
``id="m-<uuid>"`` per message), and every other module of the view goes
through ``load`` and ``STYLESHEET``, so how a conversation is drawn is decided
here alone. The files are read as ``show`` and ``export`` read them
(``export.load_export``: the conversation a resume restores).

Everything a transcript holds is escaped or rendered as inert Markdown by the
renderer: a ``<script>`` or ``onerror=`` in a prompt, a title, a tool result
or a file name is shown as its characters.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from sessiond.client import export
from sessiond.client.render.html import STYLESHEET, conversation_html


class Rendered(msgspec.Struct):
    """One conversation as the page shows it: its title, session id, first and
    last message times, message count and the body's HTML (made safe by the
    renderer)."""

    title: str
    session_id: str | None
    first: str | None
    last: str | None
    messages: int
    body: str


def load(path: Path) -> Rendered:
    """Read the session's files (as ``show`` and ``export`` read them) and render it."""
    view = export.view_of(export.load_export(path))
    return Rendered(title=view.title, session_id=view.session_id, first=view.first, last=view.last,
                    messages=view.messages, body=conversation_html(view))


__all__ = ["STYLESHEET", "Rendered", "load"]
