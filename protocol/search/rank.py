"""Which entries a query's hits come from: exact BM25, or a bounded window.

FTS5 ranks by BM25 only by scoring every match, and a term in most entries
matches hundreds of thousands of them (5 s for the best 20 of 600,000). So a
query is answered from at most ``WINDOW`` matching entries, walked newest
first (``ORDER BY rowid DESC``, which FTS5 does from its doclists without
scoring the rest; rowids follow the order the indexer met the lines, and it
meets files oldest first, so the highest rowids are the newest entries):

* a query with at most ``WINDOW`` matches in scope (every distinctive query)
  is ranked exactly as a full BM25 ranking would rank it: same scores, same
  ties;
* a query with more is *windowed*: its hits are the best by BM25 among the
  ``WINDOW`` newest matching entries, so a very common word gives the recent
  conversations where it is densest, never an old one that only a full
  ranking would put first. The answer says so (``Ranked.window``), and a
  narrower query (one more word, a phrase) gets the exact ranking back.

A scope (project dirs) bounds the walk to the rowid span of its files, so a
small project is not searched by walking every other project's matches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    import sqlite3  # the CLI's daemon path never loads the library

WINDOW: Final = 2000
"""Matching entries ranked at most (1-2 µs each to walk, score and group)."""


class Entry(NamedTuple):
    rowid: int
    score: float
    """FTS5's bm25(): lower is better."""
    project: str
    session: str
    path: str
    pos: int
    role: str


class Ranked(NamedTuple):
    entries: list[Entry]
    """The best entry of each of the best sessions, best first."""
    window: int | None
    """``WINDOW`` when the query matched more entries than that (ranked among
    the newest ``WINDOW``), else None (the exact ranking)."""


def _span(conn: sqlite3.Connection, projects: list[str]) -> tuple[int, int] | None:
    """The lowest and highest doc id of the files of ``projects`` (None: no docs)."""
    row = conn.execute(
        f"""SELECT min((SELECT min(id) FROM doc_info WHERE file = f.id)), max((SELECT max(id) FROM doc_info WHERE file = f.id))
            FROM files f WHERE f.project IN ({','.join('?' * len(projects))})""", projects).fetchone()
    return None if row is None or row[0] is None else (row[0], row[1])


def best_sessions(conn: sqlite3.Connection, expr: str, *, projects: list[str] | None, role: str | None,
                  since: str | None, limit: int, window: int = WINDOW) -> Ranked:
    """The best entry of each of the ``limit`` best sessions matching the FTS5
    expression ``expr`` within the filters."""
    where = ["docs MATCH ?"]
    args: list = [expr]
    if projects is not None:
        span = _span(conn, projects) if projects else None
        if span is None:
            return Ranked([], None)
        where.append("docs.rowid BETWEEN ? AND ?")
        args += span
        where.append(f"f.project IN ({','.join('?' * len(projects))})")
        args += projects
    if role is not None:
        where.append("i.role = ?")
        args.append(role)
    if since is not None:
        where.append("i.ts >= ?")
        args.append(since)
    # CROSS JOIN keeps docs the outer loop: the walk in rowid order, scored only when the filters pass
    rows = conn.execute(
        f"""SELECT docs.rowid, bm25(docs), f.project, f.session, f.path, i.pos, i.role
            FROM docs CROSS JOIN doc_info i ON i.id = docs.rowid CROSS JOIN files f ON f.id = i.file
            WHERE {' AND '.join(where)} ORDER BY docs.rowid DESC LIMIT ?""", [*args, window + 1]).fetchall()
    windowed = len(rows) > window
    best: dict[tuple[str, str], Entry] = {}
    for r in rows[:window]:
        e = Entry(*r)
        key = (e.project, e.session)
        cur = best.get(key)
        # a session's best entry: best score, then the first file and line (the same for any build)
        if cur is None or (e.score, e.path, e.pos, e.role) < (cur.score, cur.path, cur.pos, cur.role):
            best[key] = e
    ranked = sorted(best.values(), key=lambda e: (e.score, e.session, e.project))[:limit]
    return Ranked(ranked, window if windowed else None)
