"""The ranking's fast path against the one it replaced, on a real index.

``rank.best_sessions`` scores a window before it looks its entries up (and
with no filter walks the doclists alone); ``query._shown`` cuts every hit's
snippet in one statement. Each must give what the straightforward path gives:
the whole window joined to its files and grouped per session, and one snippet
statement per hit. The reference copies below are that path, verbatim in what
they compute; the table runs words, prefixes, phrases and very common words,
with and without filters, exact, windowed and length-ranked (small windows and
count limits stand in for a big store), over a store built so that scores tie
(identical entries in many sessions)."""

from __future__ import annotations

import itertools
import random
import uuid
from pathlib import Path

import pytest

from sessiond.daemon.index.store import Store
from sessiond.search import query, rank
from sessiond.search.schema import index_path
from tests.helpers import assistant, line, user

WORDS = ("alpha", "alpine", "alps", "beta", "bet", "gamma", "delta", "deltoid", "echo", "foxtrot", "golf", "hotel")
SHARED = ("alpha beta", "alpha alpha gamma", "beta delta echo foxtrot golf hotel", "alps")
"""Texts written into many sessions, so that their scores and lengths tie."""


def reference_best_sessions(conn, expr, *, projects, role, since, limit, window, count_limit) -> rank.Ranked:
    """The ranking before the fast path: the whole window joined, then grouped."""
    where = ["docs MATCH ?"]
    args: list = [expr]
    if projects is not None:
        span = rank._span(conn, projects) if projects else None
        if span is None:
            return rank.Ranked([], None)
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
    rows = conn.execute(
        f"""SELECT docs.rowid, f.project, f.session, f.path, i.pos, i.role
            FROM docs CROSS JOIN doc_info i ON i.id = docs.rowid CROSS JOIN files f ON f.id = i.file
            WHERE {' AND '.join(where)} ORDER BY docs.rowid DESC LIMIT ?""", [*args, window + 1]).fetchall()
    windowed = len(rows) > window
    rows = rows[:window]
    if not rows:
        return rank.Ranked([], None)
    if windowed and rank._common(conn, expr, count_limit):
        sizes = dict(conn.execute(f"SELECT id, sz FROM docs_docsize WHERE id IN ({','.join('?' * len(rows))})",
                                  [r[0] for r in rows]))
        lengths = {rowid: rank.tokens(sz) for rowid, sz in sizes.items()}
        mean = max(1.0, sum(lengths.values()) / max(1, len(lengths)))
        scores = {rowid: -rank.length_score(n, mean) for rowid, n in lengths.items()}
    else:
        scores = dict(conn.execute("SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? AND rowid BETWEEN ? AND ?",
                                   [expr, rows[-1][0], rows[0][0]]))
    best: dict[tuple[str, str], tuple] = {}
    for r in rows:
        key = (scores[r[0]], r[3], r[4], r[5])
        cur = best.get((r[1], r[2]))
        if cur is None or key < cur[0]:
            best[(r[1], r[2])] = (key, r)
    ordered = [r for _, r in sorted(best.values(), key=lambda kr: (kr[0][0], kr[1][2], kr[1][1]))]
    return rank.Ranked([rank.Entry(r[0], scores[r[0]], *r[1:]) for r in ordered[:limit]], window if windowed else None)


def reference_shown(conn, expr, rowid) -> tuple | None:
    """One hit's snippet and entry, one statement per hit (the path before ``_shown``)."""
    return conn.execute(
        """SELECT snippet(docs, 0, ?, ?, '…', 24), i.uuid, i.ts, i.role, i.sidechain, f.path, f.agent, f.cwd
           FROM docs JOIN doc_info i ON i.id = docs.rowid JOIN files f ON f.id = i.file
           WHERE docs MATCH ? AND docs.rowid = ?""", (query.MARK_START, query.MARK_END, expr, rowid)).fetchone()


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("rank-root")
    rng = random.Random(34)
    files = []
    for p in range(3):
        project = root / "projects" / f"-work-rank{p}"
        project.mkdir(parents=True)
        for _ in range(7):
            path = project / f"{uuid.UUID(int=rng.getrandbits(128))}.jsonl"
            lines = []
            for n in range(rng.randint(20, 60)):
                if rng.random() < 0.3:
                    text = rng.choice(SHARED)
                else:
                    text = " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))
                make = user if rng.random() < 0.5 else assistant
                ts = f"2026-0{1 + rng.randint(0, 8)}-{10 + n % 18:02d}T10:00:00.000Z"
                lines.append(line(make(text, cwd=f"/work/rank{p}", timestamp=ts)) + b"\n")
            path.write_bytes(b"".join(lines))
            files.append(path)
    store = Store(root, index_path(root))
    for f in sorted(files, key=lambda f: rng.random()):
        store.catch_up(str(f))
    store.commit()
    store.close()
    conn = query.open_read_only(index_path(root))
    yield root, conn
    conn.close()


QUERIES = ("alpha", "beta", "alp*", "al*", "delt*", '"alpha beta"', '"alpha alpha"', "alpha gamma", "alps",
           "hotel", "echo foxtrot", "b*", '"beta delta"*', "nosuchword")
FILTERS = ({}, {"projects": ["-work-rank1"]}, {"projects": ["-work-rank0", "-work-rank2"]}, {"role": "user"},
           {"role": "assistant", "since": "2026-05-01T00:00:00.000Z"}, {"since": "2026-08-01T00:00:00.000Z"},
           {"projects": []})
WINDOWS = (3, 40, 250, rank.WINDOW)
COUNT_LIMITS = (10, rank.COUNT_LIMIT)
LIMITS = (1, 5, 20)
COMMON = ("alpha", "beta", "al*", "b*")


@pytest.mark.parametrize("text", QUERIES)
def test_the_fast_ranking_finds_what_the_whole_window_finds(index, text):
    _, conn = index
    expr = query.fts_expression(query.parse(text))
    paths = {"exact": 0, "windowed": 0, "by length": 0}
    for filters, window, count_limit, limit in itertools.product(FILTERS, WINDOWS, COUNT_LIMITS, LIMITS):
        args = {"projects": None, "role": None, "since": None, **filters}
        want = reference_best_sessions(conn, expr, **args, limit=limit, window=window, count_limit=count_limit)
        got = rank.best_sessions(conn, expr, **args, limit=limit, window=window, count_limit=count_limit)
        assert got == want, (text, filters, window, count_limit, limit)
        if want.window is None:
            paths["exact"] += 1
        elif rank._common(conn, expr, count_limit):
            paths["by length"] += 1
        else:
            paths["windowed"] += 1
    if text != "nosuchword":  # each query was ranked exactly and windowed somewhere in the table
        assert paths["exact"] and paths["windowed"], paths
    if text in COMMON:  # and these, in more entries than rank.PROBE, by length too
        assert paths["by length"], paths


def test_the_table_has_ties_to_break(index):
    """What makes the table worth running: many sessions whose best entries score alike."""
    _, conn = index
    expr = query.fts_expression(query.parse('"alpha beta"'))
    ranked = rank.best_sessions(conn, expr, projects=None, role=None, since=None, limit=20)
    scores = [e.score for e in ranked.entries]
    assert len(scores) == 20 and len(set(scores)) < len(scores) / 2


@pytest.mark.parametrize("text", QUERIES)
def test_one_snippet_statement_shows_what_one_per_hit_shows(index, text):
    _, conn = index
    expr = query.fts_expression(query.parse(text))
    for filters in FILTERS:
        args = {"projects": None, "role": None, "since": None, **filters}
        ranked = rank.best_sessions(conn, expr, **args, limit=20, window=40)
        rowids = [e.rowid for e in ranked.entries]
        assert query._shown(conn, expr, rowids) == {r: reference_shown(conn, expr, r) for r in rowids}


def test_a_hit_shows_the_title_its_file_has_now(index):
    """The title cache: a session renamed since the last query shows its new name."""
    root, conn = index
    hit = query.run(conn, root, "hotel").hits[0]
    path = Path(hit.path)
    before = hit.title
    with path.open("ab") as f:
        f.write(line({"type": "custom-title", "customTitle": "Renamed since", "sessionId": hit.sessionId}) + b"\n")
    after = [h.title for h in query.run(conn, root, "hotel").hits if h.sessionId == hit.sessionId]
    assert before != "Renamed since" and after == ["Renamed since"]


def test_the_title_cache_is_bounded(tmp_path):
    cache = query.TitleCache(size=3)
    for i in range(5):
        f = tmp_path / f"{i}.jsonl"
        f.write_bytes(line(user(f"prompt {i}")) + b"\n")
        assert cache.title(f) == f"prompt {i}"
    assert len(cache._titles) == 3
    assert cache.title(tmp_path / "gone.jsonl") is None
    by_chars = query.TitleCache(chars=3000)  # a custom title can be as long as a window
    for i in range(5):
        f = tmp_path / f"long{i}.jsonl"
        f.write_bytes(line(user("a prompt")) + b"\n"
                      + line({"type": "custom-title", "customTitle": f"{i} " + "x" * 1000, "sessionId": "s"}) + b"\n")
        assert by_chars.title(f) == f"{i} " + "x" * 1000
    assert len(by_chars._titles) == 2
