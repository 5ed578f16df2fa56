"""The picker's rows in the order a person reads them: newest activity first,
each fork under the session it came from.

Why apart from the app: the order is plain Python (no Textual), computed once
per listing and again when a fork is made, and the bench and tests check it
without a screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    """One session's cells, as the list shows them (made printable by the caller)."""

    session: Any
    """The listed session (``SessionInfo``)."""
    title: str
    short_id: str
    project: str
    """Where the session works (home-relative); filtered by ``@part``."""
    last: str
    messages: str
    live: str = ""
    """Who writes the session right now (a client holding its lease, or another
    process holding the file open for writing: ``pid N``), empty when nobody does."""
    tag: str = ""
    forked_from: str = ""
    """The id of the session this one was forked from (``sessiond fork``), or empty."""
    depth: int = 0
    """How many forks deep under a listed origin (0: at the top level)."""


def grouped(rows: Sequence[Row]) -> list[Row]:
    """``rows`` (in listing order) with each fork moved right under the session
    it came from (forks of one origin in listing order, forks of forks deeper),
    ``depth`` set; a fork whose origin is not listed stays where it was."""
    from dataclasses import replace

    ids = {r.session.sessionId for r in rows}
    children: dict[str, list[Row]] = {}
    top: list[Row] = []
    for r in rows:
        if r.forked_from and r.forked_from in ids and r.forked_from != r.session.sessionId:
            children.setdefault(r.forked_from, []).append(r)
        else:
            top.append(r)
    if not children:
        return [replace(r, depth=0) if r.depth else r for r in rows]
    out: list[Row] = []
    seen: set[str] = set()

    def place(r: Row, depth: int) -> None:
        sid = r.session.sessionId
        if sid in seen:  # a cycle of forkedFrom (a hand-edited file): each row once
            return
        seen.add(sid)
        out.append(r if r.depth == depth else replace(r, depth=depth))
        for child in children.get(sid, ()):
            place(child, depth + 1)

    for r in top:
        place(r, 0)
    for r in rows:  # forks in a cycle with no top-level origin: kept, at the top level
        if r.session.sessionId not in seen:
            place(r, 0)
    return out
