"""What the web view shows, read through the CLI's own readers: a running
daemon of the root first (List, Search, Spend), the files when none runs.

Why no reader of its own: ``list``, ``search``, ``usage`` and ``show`` already
know how to ask the daemon, how to fall back to the files and how to bound
what a fallback reads; the view shows what they would print. Every function
here blocks (sockets, files): the application calls them in a worker thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from sessiond.client.cli import Context
from sessiond.wire.session_info import SessionInfo

PAGE_SIZE = 50
"""Sessions a page of the listing shows."""

SEARCH_LIMIT = 20
"""Sessions a search shows (the best first)."""


class Project(msgspec.Struct):
    """One project dir of the store: its name (the link), the cwd its newest
    session recorded, how many sessions it holds and when one was last active."""

    name: str
    cwd: str | None
    sessions: int
    last: str


class Row(msgspec.Struct):
    """One listed session with what the listing adds to it: its tokens and cost
    (None: not computed), whether it is shown as a fork under its origin."""

    info: SessionInfo
    tokens: int | None
    cost: float | None
    unpriced: bool
    fork_depth: int = 0


class Page(msgspec.Struct):
    """One page of a listing: its rows, which page, how many sessions in all."""

    rows: list[Row]
    page: int
    total: int
    pages: int


def all_sessions(obj: Context) -> list[SessionInfo]:
    """Every session of the store, most recently active first (``list --all``)."""
    from sessiond.client.cli.session_list import find_sessions

    return find_sessions(obj, None, True)


def project_sessions(obj: Context, name: str) -> list[SessionInfo]:
    """The sessions of the project dir ``name`` (a directory right under the
    store's ``projects/``), most recently active first; ``not_found`` for a
    name that is not one."""
    from sessiond.client.cli.session_list import find_sessions
    from sessiond.store.paths import projects_dir
    from sessiond.wire.errors import not_found

    base = projects_dir(obj.store_root())
    # os.path.isdir: False for any OSError (a name too long for the file system) or a
    # str no file name can be (``Path.is_dir`` raises ENAMETOOLONG)
    if not name or name in (".", "..") or "/" in name or "\0" in name or not os.path.isdir(base / name):
        raise not_found(f"no project dir {name!r} under {base}")
    return find_sessions(obj, None, False, only=[base / name])


def projects(sessions: list[SessionInfo]) -> list[Project]:
    """The project dirs the sessions are in, most recently active first."""
    from sessiond.store.listing import last_activity

    found: dict[str, Project] = {}
    for s in sessions:  # newest first: the first of a dir sets its cwd and time
        name = Path(s.path).parent.name
        got = found.get(name)
        if got is None:
            found[name] = Project(name=name, cwd=s.cwd, sessions=1, last=last_activity(s))
        else:
            got.sessions += 1
    return list(found.values())


def forks_under_origins(sessions: list[SessionInfo]) -> list[tuple[SessionInfo, int]]:
    """The sessions in their order, each fork moved right after its origin
    when the origin is among them, with its depth (0: not under another)."""
    ids = {s.sessionId for s in sessions}
    children: dict[str, list[SessionInfo]] = {}
    tops: list[SessionInfo] = []
    for s in sessions:
        origin = s.forkedFrom
        if origin and origin in ids and origin != s.sessionId:
            children.setdefault(origin, []).append(s)
        else:
            tops.append(s)
    out: list[tuple[SessionInfo, int]] = []
    seen: set[str] = set()

    def put(s: SessionInfo, depth: int) -> None:
        if s.sessionId in seen:
            return
        seen.add(s.sessionId)
        out.append((s, depth))
        for child in children.get(s.sessionId, ()):
            put(child, depth + 1)

    for s in tops:
        put(s, 0)
    for s in sessions:  # a cycle of forks (a hand-edited file): shown all the same
        put(s, 0)
    return out


def session_page(obj: Context, sessions: list[SessionInfo], page: int) -> Page:
    """Page ``page`` (from 1) of ``sessions``, forks under their origins, with
    message counts, tokens and cost as ``list`` fills them."""
    from sessiond.client.cli.session_list import fill_counts
    from sessiond.client.cli.session_spend import page_spend

    ordered = forks_under_origins(sessions)
    pages = max(1, -(-len(ordered) // PAGE_SIZE))
    page = min(max(1, page), pages)
    cut = ordered[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    infos = [s for s, _ in cut]
    fill_counts(infos)
    spend = page_spend(obj, infos)
    rows = []
    for s, depth in cut:
        got = spend.get(s.sessionId) if spend is not None else None
        rows.append(Row(info=s, tokens=None if spend is None else (got.tokens if got else 0),
                        cost=None if spend is None else (got.costUSD if got else 0.0),
                        unpriced=bool(got and got.unpriced), fork_depth=depth))
    return Page(rows=rows, page=page, total=len(ordered), pages=pages)


class Hit(msgspec.Struct):
    """One search hit as the page's script shows it (text only: it builds the
    DOM with ``textContent``)."""

    sessionId: str
    title: str
    project: str
    role: str
    timestamp: str | None
    snippet: str
    uuid: str | None
    resume: str
    highlights: list[tuple[int, int]] = []
    """``[start, end)`` of ``snippet`` that matched (of the snippet as given)."""


def as_you_type(text: str) -> str:
    """The query a search box means while its last word is still being typed:
    that word as a prefix (``word*``) when it is a plain word of two
    characters or more; else the text as it is."""
    words = text.split()
    if not words or text[-1:].isspace():
        return text
    last = words[-1]
    if len(last) < 2 or not all(c.isalnum() or c in "_-" for c in last) or last.upper() in ("AND", "OR", "NOT"):
        return text
    return text + "*"


def search(obj: Context, text: str) -> tuple[list[Hit], str | None]:
    """The ranked hits of ``text`` in every project (``search --all``), its
    last word taken as a prefix (``as_you_type``): the daemon's index when one
    runs, else the index read-only, else a scan."""
    from sessiond.client.cli.search_cmds import find_hits
    from sessiond.wire.errors import SessiondError

    hits = note = None
    if (typing := as_you_type(text)) != text:
        try:
            hits, note = find_hits(obj, obj.store_root(), typing, None, SEARCH_LIMIT)
        except (SessiondError, ValueError):
            hits = None  # a prefix too common to rank (or refused): the words as typed
    if hits is None:
        hits, note = find_hits(obj, obj.store_root(), text, None, SEARCH_LIMIT)
    return [Hit(sessionId=h.sessionId, title=h.title or "(untitled)", project=h.project, role=h.role,
                timestamp=h.timestamp, snippet=h.snippet, uuid=h.uuid, resume=f"sessiond resume {h.sessionId}",
                highlights=list(h.highlights)) for h in hits], note


def daily_usage(obj: Context) -> list[tuple[str, int, float]]:
    """(day, tokens, USD) of every day with usage, oldest first (``usage daily --all``)."""
    from sessiond.client.cli.usage_cmds import spend_report

    spent = spend_report(obj, "daily", None, True)
    return sorted((r.key, r.total_tokens, r.cost) for r in spent.rows)


def locate(obj: Context, session_id: str) -> tuple[str, Path, str | None]:
    """The session's canonical id (``check_session_id``: lower-case, no
    braces, what a command given to a person names), its main transcript and
    its recorded cwd, looked up in every
    project of the store (``lookup.find_session`` with no cwd: the server's
    own directory means nothing to a page, and no ``git`` runs per request);
    ``bad_request`` for what is not a session id, ``not_found``."""
    from sessiond.client import lookup
    from sessiond.store.locations import default_root
    from sessiond.wire.errors import not_found

    root = obj.root or default_root()
    loc = lookup.find_session(root, session_id, None)
    if loc is None:
        raise not_found(f"no session {session_id} under {root}")
    return loc.session_id, Path(loc.path), loc.cwd


def spend_of(path: Path) -> Any:
    """The session's tokens and cost (``show``'s figures)."""
    from sessiond.client.cli.spend_view import spend_of as of

    return of(path)


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
