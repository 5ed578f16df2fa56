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
The rendering is ``render/``'s (one view model for show, export and the web
view); here the export is loaded (``load_export``) and redacted (``redacted``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from sessiond.store.agents import session_agent_files

from .render.conversation import ConversationView, When, conversation_view
from .resume.pipeline import Resumed, load_transcript


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
    from .sidechains import inline_sidechains

    main = load_transcript(path)
    subs = [(agent, load_transcript(p)) for agent, p in agent_files(Path(main.path), main.sessionId)]
    subs += inline_sidechains(main, {agent for agent, _ in subs})  # Claude Code 1.0.x's: in the main file
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
    its secrets redacted when ``redact`` (``redacted_title``)."""
    from sessiond.store.lite import UNTITLED, session_title

    title = session_title(resumed.path)
    return redacted_title(title) if redact else title or UNTITLED


def redacted_title(title: str | None) -> str:
    """A title as a document others may see shows it (an export, the web
    view's pages and listings): its secrets redacted, ``(untitled)`` for none."""
    from sessiond.secrets import redact_text
    from sessiond.store.lite import UNTITLED

    return redact_text(title) if title else UNTITLED


def dates(resumed: Resumed) -> tuple[str | None, str | None]:
    stamps = [m["timestamp"] for m in resumed.messages if isinstance(m.get("timestamp"), str)]
    return (min(stamps), max(stamps)) if stamps else (None, None)



def view_of(export: Exported, *, all_entries: bool = False) -> ConversationView:
    """The export as the view model every rendering draws (``render.conversation``):
    the main conversation, its pre-compaction history, its subagents, the title
    redacted when the export is."""
    return conversation_view(export.main, title=title_of(export.main, export.redact), history=export.history,
                             subagents=export.subagents, all_entries=all_entries, redacted=export.redact)


def to_markdown(export: Exported, when: When | None = None) -> str:
    """The conversation as one Markdown document (``render.markdown``)."""
    from .render.markdown import conversation_markdown

    return conversation_markdown(view_of(export), when=when)


def to_html(export: Exported, when: When | None = None) -> str:
    """The conversation as one self-contained HTML page (``render.html``): no
    script, nothing fetched (its CSP allows inline style only)."""
    from .render.html import conversation_html, page

    view = view_of(export)
    return page(view.title, conversation_html(view, when=when))
