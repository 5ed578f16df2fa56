"""The one place a conversation becomes HTML for the web view.

Why an adapter: the view renders a conversation with the renderer the HTML
export uses (``sessiond.client.render``: one view model, Markdown with raw HTML
off, tool calls paired with their results, subagents after the main
conversation, the turns before the last compaction collapsed, an anchor
``id="m-<uuid>"`` per message), and every other module of the view goes
through ``load`` and ``STYLESHEET``, so how a conversation is drawn is decided
here alone. The files are read as ``show`` and ``export`` read them
(``export.load_export``: the conversation a resume restores), and redacted as
``export`` redacts them (``export.redacted``, the title too): a page is as
easily shared (a screenshot, a screen) as an export.

What one page renders is bounded (``MAX_RENDER_BYTES`` of files): rendering
takes memory and time in proportion to the transcript (a 97 MB one took
minutes and gigabytes), for a page nobody reads whole; past the bound the
page says so and names the export that writes it whole.

Everything a transcript holds is escaped or rendered as inert Markdown by the
renderer: a ``<script>`` or ``onerror=`` in a prompt, a title, a tool result
or a file name is shown as its characters.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import msgspec

from sessiond.client import export
from sessiond.client.cli.output import printable
from sessiond.client.render.html import STYLESHEET, conversation_html

MAX_RENDER_BYTES = 16 * 1024 * 1024
"""The most a page renders: the session's files (its transcript and its
subagents'), in bytes. Larger, the page shows a note instead."""


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
    """Read the session's files (as ``show`` and ``export`` read them), redact
    its secrets (as ``export`` does) and render it; a note in its place when
    the files are larger than ``MAX_RENDER_BYTES``."""
    total = files_size(path)
    if total > MAX_RENDER_BYTES:
        return too_large(path, total)
    view = export.view_of(export.redacted(export.load_export(path))[0])
    return Rendered(title=view.title, session_id=view.session_id, first=view.first, last=view.last,
                    messages=view.messages, body=printable(conversation_html(view)))  # controls shown, as export shows them


def files_size(path: Path) -> int:
    """The bytes of the session's files: its transcript and its subagents' (as ``export`` reads them)."""
    total = 0
    for f in [path, *(p for _, p in export.agent_files(path, path.stem))]:
        try:
            total += os.stat(f).st_size
        except OSError:
            pass
    return total


def too_large(path: Path, total: int) -> Rendered:
    """What the page shows of a session too large to render: its title
    (redacted, as ``export`` shows it), how large it is, and the command
    that exports it whole."""
    from sessiond.client.cli.output import printable, size
    from sessiond.store.lite import session_title

    title = export.redacted_title(session_title(path))
    command = f"sessiond export {path.stem} --format html > {path.stem}.html"
    body = (f'<h1>{html.escape(printable(title))}</h1><p class="note">This conversation is {size(total)}, more than the web '
            f"view renders on one page ({size(MAX_RENDER_BYTES)}): none of its messages is shown here. "
            f"<code>{html.escape(command)}</code> writes it whole (its secrets redacted) to a file a browser "
            "opens.</p>")
    return Rendered(title=title, session_id=path.stem, first=None, last=None, messages=0, body=body)


__all__ = ["MAX_RENDER_BYTES", "STYLESHEET", "Rendered", "files_size", "load", "too_large"]
