"""Which entries a query's hits come from: exact BM25, or a bounded window.

FTS5 ranks by BM25 only by scoring every match, and a term in most entries
matches hundreds of thousands of them, which takes seconds to score. So a
query is answered from at most ``WINDOW`` matching entries, walked newest
first (``ORDER BY rowid DESC``, which FTS5 does from its doclists without
scoring the rest; rowids follow the order the indexer met the lines, and it
meets files oldest first, so the highest rowids are the newest entries):

* a query with at most ``WINDOW`` matches in scope (every distinctive query)
  is ranked exactly as a full BM25 ranking would rank it: same scores, same
  ties;
* a query with more is *windowed*: its hits are the best among the
  ``WINDOW`` newest matching entries, so a very common word gives the recent
  conversations where it matters most, never an old one that only a full
  ranking would put first. They are scored by BM25, except when the query
  matches more than ``COUNT_LIMIT`` entries of the whole index (estimated,
  ``_common``): then by BM25 with every term counted once, so the shortest
  entries, where the match is most of what they say, rank first. The answer
  says it was windowed (``Ranked.window``), and a narrower query (one more
  word, a phrase) gets the exact ranking back.

Why not FTS5's ``bm25()`` for every windowed query: before it scores its first
row it counts every row of the whole index that matches each term (the IDF),
and for a word in most entries that count is nearly the query's whole cost,
many times the window's walk and its entries' lengths (docs/benchmarks.md,
"Search"). Within one query every entry shares the IDF;
what the count buys in a window is only the term frequency.

A scope (project dirs) bounds the walk to the rowid span of its files, so a
small project is not searched by walking every other project's matches.

What a query costs is lookups, so each is made once and only where needed:
with no filter, the ``PROBE`` newest matches are walked first (they decide
``_common``), then the window, scored by ``bm25()`` as the walk goes, from
FTS5's own doclists and sizes; an entry's file and session (a lookup in
``doc_info``, the table that holds the text, one B-tree descent each) are read
only for the best-scored entries, until ``limit`` sessions have their best
(``_pick``), not for all the window's. The hits are the same as grouping the
whole window (``tests/search/test_rank_paths.py`` holds the two side by side).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    import sqlite3  # the CLI's daemon path never loads the library

WINDOW: Final = 2000
"""Matching entries ranked at most: each is walked, scored and grouped, so this
bounds a query's work whatever it matches."""

COUNT_LIMIT: Final = 50_000
"""Matching entries past which a windowed query is not scored by ``bm25()``:
past it, counting the matches for the IDF costs more than the window (see
above)."""
PROBE: Final = 256
"""Newest matches whose spread estimates how many entries match in all."""

K1: Final = 1.2
B: Final = 0.75
"""FTS5's own BM25 parameters, for the windowed score (``length_score``)."""


class Entry(NamedTuple):
    """One matching index row as the ranking sees it: its score, where it is
    (project, session, file, position) and its role."""

    rowid: int
    score: float
    """FTS5's bm25(), or ``-length_score`` in a window: lower is better."""
    project: str
    session: str
    path: str
    pos: int
    role: str


class Ranked(NamedTuple):
    """The ranking's result: the best entry of each of the best sessions, and the
    window when the ranking was windowed."""

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
                  since: str | None, limit: int, window: int = WINDOW, count_limit: int = COUNT_LIMIT) -> Ranked:
    """The best entry of each of the ``limit`` best sessions matching the FTS5
    expression ``expr`` within the filters.

    The window's entries are scored first and only then told apart by where
    they are (file, session: ``_pick``), best first, until ``limit`` sessions
    are found: with no filter the walk reads FTS5's doclists alone, and only
    the few best entries are looked up in ``doc_info`` (a row there is a
    B-tree descent into the table that holds the text), not the whole window."""
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
    info: dict[int, tuple] = {}
    scores: dict[int, float] | None = None
    common: bool | None = None
    if len(where) == 1:  # no filter: the doclists alone, newest first
        probe = _newest(conn, expr, PROBE)
        common = _dense(conn, probe, count_limit)
        if not common:  # BM25 as the walk goes: one statement
            rows = conn.execute("SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY rowid DESC LIMIT ?",
                                [expr, window + 1]).fetchall()
            ids = [r[0] for r in rows]
            scores = dict(rows)
        else:
            ids = probe[:window + 1] if window < PROBE else _newest(conn, expr, window + 1)
    else:  # CROSS JOIN keeps docs the outer loop: the walk in rowid order, joined only when the filters pass
        rows = conn.execute(
            f"""SELECT docs.rowid, f.project, f.session, f.path, i.pos, i.role
                FROM docs CROSS JOIN doc_info i ON i.id = docs.rowid CROSS JOIN files f ON f.id = i.file
                WHERE {' AND '.join(where)} ORDER BY docs.rowid DESC LIMIT ?""", [*args, window + 1]).fetchall()
        ids = [r[0] for r in rows]
        info = {r[0]: r for r in rows}
    windowed = len(ids) > window
    ids = ids[:window]
    if not ids:
        return Ranked([], None)
    if scores is None:
        scores = _scores(conn, expr, ids, windowed and (common if common is not None else _common(conn, expr, count_limit)))
    ranked = [Entry(r[0], scores[r[0]], *r[1:]) for r in _pick(conn, ids, scores, info, limit)]
    return Ranked(ranked, window if windowed else None)


def _scores(conn: sqlite3.Connection, expr: str, ids: list[int], by_length: bool) -> dict[int, float]:
    """Each entry's score (lower is better): FTS5's BM25 (every match in scope
    is in ``ids``, unless windowed), or ``-length_score`` when ``by_length``."""
    if not by_length:
        return dict(conn.execute("SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? AND rowid BETWEEN ? AND ?",
                                 [expr, ids[-1], ids[0]]))
    # each entry's length (by id: the window can be spread over most of the table)
    sizes = dict(conn.execute(f"SELECT id, sz FROM docs_docsize WHERE id IN ({','.join('?' * len(ids))})", ids))
    lengths = {rowid: sz[0] if sz[0] < 0x80 else tokens(sz) for rowid, sz in sizes.items()}
    mean = max(1.0, sum(lengths.values()) / max(1, len(lengths)))
    # the score falls as the length grows: the shortest entry is the best
    return {rowid: -length_score(n, mean) for rowid, n in lengths.items()}


def _newest(conn: sqlite3.Connection, expr: str, n: int) -> list[int]:
    """The rowids of the ``n`` newest entries matching ``expr`` (the doclists' end, no join)."""
    return [r[0] for r in conn.execute("SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rowid DESC LIMIT ?", [expr, n])]


def _common(conn: sqlite3.Connection, expr: str, count_limit: int = COUNT_LIMIT) -> bool:
    """Whether ``expr`` matches more than ``count_limit`` entries of the whole
    index, estimated from how densely its ``PROBE`` newest matches lie among
    the newest rowids (``_dense``)."""
    return _dense(conn, _newest(conn, expr, PROBE), count_limit)


def _dense(conn: sqlite3.Connection, probe: list[int], count_limit: int) -> bool:
    """``_common`` of the ``PROBE`` newest matches ``probe`` (newest first)."""
    if len(probe) < PROBE:
        return False
    top = conn.execute("SELECT max(id) FROM doc_info").fetchone()[0] or 0
    return PROBE * top / (probe[0] - probe[-1] + 1) > count_limit


LOOKUP: Final = 64
"""Entries looked up in ``doc_info`` at a time, best first (``_pick``)."""


def _pick(conn: sqlite3.Connection, ids: list[int], score: dict[int, float], info: dict[int, tuple],
          limit: int) -> list[tuple]:
    """The best row (rowid, project, session, path, pos, role) of each of the
    ``limit`` best sessions among ``ids``: the row of lowest ``score``, then
    the first file and line (the same for any build); the sessions best first
    (ties: by session id, project). Entries are taken in the order of their
    score, a whole tie at a time, and looked up in ``doc_info`` as they are
    needed (``info``: rows already known): once ``limit`` sessions have their
    best row, every later entry scores worse than all of them."""
    order = sorted((rowid for rowid in ids if rowid in score), key=score.__getitem__)
    best: dict[tuple[str, str], tuple] = {}
    i = fetched = 0
    step = LOOKUP
    while i < len(order) and len(best) < limit:
        s = score[order[i]]
        j = i + 1
        while j < len(order) and score[order[j]] == s:
            j += 1
        if j > fetched:
            fetched = max(j, min(len(order), fetched + step))
            step *= 2
            need = [rowid for rowid in order[i:fetched] if rowid not in info]
            if need:
                info.update((r[0], r) for r in conn.execute(
                    f"""SELECT i.id, f.project, f.session, f.path, i.pos, i.role FROM doc_info i CROSS JOIN files f ON f.id = i.file
                        WHERE i.id IN ({','.join('?' * len(need))})""", need))
        tie: dict[tuple[str, str], tuple] = {}
        for rowid in order[i:j]:
            r = info.get(rowid)
            if r is None:  # the indexer removed it between two statements
                continue
            if (r[1], r[2]) in best:  # a better row of that session came before
                continue
            key = (r[3], r[4], r[5])
            cur = tie.get((r[1], r[2]))
            if cur is None or key < cur[0]:
                tie[(r[1], r[2])] = (key, r)
        best.update((k, (s, r)) for k, (_, r) in tie.items())
        i = j
    return [r for _, r in sorted(best.values(), key=lambda sr: (sr[0], sr[1][2], sr[1][1]))][:limit]


def length_score(length: int, mean: float) -> float:
    """BM25 of an entry of ``length`` tokens where each term occurs once and
    weighs 1 (``mean``: the window's mean length): higher is better, and only
    the length tells two entries apart."""
    return (K1 + 1) / (1 + K1 * (1 - B + B * length / mean))


def tokens(docsize: bytes) -> int:
    """An entry's token count: the first varint (SQLite's: big-endian groups
    of 7 bits, the high bit set on all but the last; a ninth byte gives 8) of
    its row in FTS5's ``docs_docsize`` table, which keeps one per column."""
    n = 0
    for i, byte in enumerate(docsize[:9]):
        if i == 8:
            return (n << 8) | byte
        n = (n << 7) | (byte & 0x7F)
        if byte < 0x80:
            break
    return n
