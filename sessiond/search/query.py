"""Queries: what a user types, how it becomes an FTS5 query, and the hits.

A query is words and "quoted phrases"; every one must match (AND); a word
ending in ``*`` matches as a prefix. Everything else is taken literally: each
word is quoted before it reaches FTS5, so ``AND``, ``NEAR(``, ``-`` or a colon
in a path are plain text, never syntax (a query can never be an FTS5 error).

A hit is a session, not a line: the best-ranked entry of each session (BM25;
among the newest matches only, for a very common query: ``rank``) stands for
it, so twenty hits are twenty conversations. A hit in a subagent
file points at its parent session (``sessionId``, ``path``) and says which
agent file matched (``agentId``, ``file``, ``sidechain``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from sessiond.store.paths import projects_dir
from sessiond.wire.durations import FORMS, is_duration, parse_duration
from sessiond.wire.hit import FILTER_ROLES, MAX_LIMIT, Hit

from .budget import DEFAULT_CPU_SECONDS, Budget
from .rank import best_sessions
from .schema import from_db, to_db

if TYPE_CHECKING:
    import sqlite3  # the CLI's daemon path never loads the library
    import threading

MAX_QUERY: Final = 1000
"""Characters of a query; terms beyond are ignored (a query is typed, not a file)."""
MARK_START: Final = "\x02"
MARK_END: Final = "\x03"


class QueryError(ValueError):
    """A query that cannot be run (empty, a bad date, a bad role)."""


class QueryTooCostly(QueryError):
    """A query stopped when it had used its CPU budget (``budget.py``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the query was stopped after {seconds:g} s of CPU: it matches too much to rank "
                         "(a prefix of one or two letters, or only very common words); "
                         "give a longer prefix or another word")


class QueryStopped(Exception):
    """A query stopped because whoever asked for it is gone (``budget.py``):
    no answer to make, so no error for anyone either."""


class Term(msgspec.Struct, frozen=True):
    """One term of a parsed query: a word or a phrase's words, and whether the last
    word is a prefix (``word*``)."""

    words: tuple[str, ...]
    """One word, or the words of a phrase."""
    prefix: bool = False


class SearchResult(msgspec.Struct, kw_only=True):
    """A query's hits, and how they were found: ranked in a window of the newest
    matches, or from a scan of the files; the daemon sends them on as ``Searched``."""

    hits: list[Hit]
    window: int | None = None
    """Set when the query matched more entries than the ranking window: the
    hits are the best among the newest ``window`` matches (``rank``)."""
    scanned: str | None = None
    """Set when the hits come from a scan of the files: why the index was not read."""


_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')
_WORD = re.compile(r"[^\W_]+")


def words_of(text: str) -> list[str]:
    """Words as the tokenizer sees them (unicode61: letters and digits)."""
    return _WORD.findall(text)


def parse(text: str) -> list[Term]:
    """Terms of a query; ``QueryError`` when nothing searchable is left."""
    terms: list[Term] = []
    for m in _TOKEN.finditer(text[:MAX_QUERY]):
        if m.group(1) is not None:
            words = tuple(w for w in words_of(m.group(1)))
            if words:
                terms.append(Term(words))
            continue
        raw = m.group(2)
        prefix = raw.endswith("*")
        words = tuple(words_of(raw))
        if words:
            terms.append(Term(words, prefix=prefix and raw.rstrip("*")[-1:].isalnum()))
    if not terms:
        raise QueryError(f"nothing to search for in {text!r}: give words or \"a phrase\"")
    return terms


def fts_expression(terms: list[Term]) -> str:
    """The FTS5 MATCH string: each term a quoted phrase, ANDed."""
    parts = []
    for t in terms:
        phrase = '"' + " ".join(t.words) + '"'
        parts.append(phrase + ("*" if t.prefix else ""))
    return " AND ".join(parts)


def parse_since(value: str | None, now: datetime | None = None) -> str | None:
    """``YYYY-MM-DD``, an ISO date-time, or a duration ago (``30m``, ``7d``,
    ``3mo``: ``sessiond.wire.durations``, the forms every option takes), as
    the ISO UTC string entries carry (``2026-01-02T03:04:05.000Z``), which
    compares as text."""
    if value is None:
        return None
    v = value.strip()
    try:
        if is_duration(v):
            try:
                ago = parse_duration(v)
            except ValueError as exc:
                raise QueryError(f"--since {value!r}: {exc}") from None
            when = (now or datetime.now(UTC)) - timedelta(seconds=ago)
        else:
            try:
                when = datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                unit = " (a number needs a unit)" if v.isdigit() else ""
                raise QueryError(f"--since {value!r}{unit}: give an age ({FORMS}), a date (2026-01-31) "
                                 "or an ISO date-time") from None
            if when.tzinfo is None:
                when = when.astimezone()  # a date the user typed is in their time zone
        when = when.astimezone(UTC)
    except (OverflowError, ValueError) as exc:  # before year 1 or after 9999, here or in UTC (999y ago, 0001-01-01)
        if isinstance(exc, QueryError):
            raise
        raise QueryError(f"--since {value!r}: out of the range of dates (years 1 to 9999)") from None
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def check_role(role: str | None) -> None:
    if role is not None and role not in FILTER_ROLES:
        raise QueryError(f"--role {role!r}: one of {', '.join(FILTER_ROLES)}")


def split_marks(snippet: str) -> tuple[str, list[tuple[int, int]]]:
    """A snippet with FTS5's marks → the plain text and the marked ranges."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    start = None
    for part in re.split(f"([{MARK_START}{MARK_END}])", snippet):
        if part == MARK_START:
            start = pos
        elif part == MARK_END:
            if start is not None:
                spans.append((start, pos))
            start = None
        else:
            out.append(part)
            pos += len(part)
    return "".join(out), spans


def open_read_only(path: Path) -> sqlite3.Connection:
    """A connection that can only read (``mode=ro``): never writes, never creates."""
    import sqlite3

    from .schema import connect_functions, read_only_uri

    conn = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = 1")
    connect_functions(conn)
    return conn


def files_behind(conn: sqlite3.Connection, root: Path, projects: list[str] | None) -> int:
    """How many transcripts of ``projects`` the index does not hold as they are
    now (new, grown, rewritten, replaced: the indexer's own test of a file,
    ``index/store.py``). An index read without the daemon may be behind the
    files (the daemon stopped before its indexer caught up); a search there
    that trusted it would answer "no matches" for what was just written."""
    from .files import transcripts
    from .schema import indexed_files

    held = indexed_files(conn, projects)
    behind = 0
    for t in transcripts(root, projects):
        row = held.get(t.path)
        if row is None or row[:4] != (t.st.st_dev, t.st.st_ino, t.st.st_size, t.st.st_mtime_ns):
            behind += 1
    return behind


def run(conn: sqlite3.Connection, root: Path, text: str, *, projects: list[str] | None = None, limit: int = 20,
        since: str | None = None, role: str | None = None, cpu_seconds: float = DEFAULT_CPU_SECONDS,
        stop: threading.Event | None = None) -> SearchResult:
    """The best ``limit`` sessions for ``text`` in ``projects`` (dir names; None:
    every project), best first; ``QueryTooCostly`` past ``cpu_seconds``,
    ``QueryStopped`` once ``stop`` is set (its asker went away)."""
    check_role(role)
    expr = fts_expression(parse(text))
    limit = max(1, min(limit, MAX_LIMIT))
    import sqlite3

    if stop is not None and stop.is_set():
        raise QueryStopped("the query was not started: its asker went away")
    budget = Budget(conn, cpu_seconds, stop)
    try:
        with budget:
            return _hits(conn, root, expr, projects=None if projects is None else [to_db(p) for p in projects],
                         limit=limit, since=since, role=role)
    except sqlite3.OperationalError:
        if budget.stopped:
            raise QueryStopped("the query was stopped: its asker went away") from None
        if budget.expired:
            raise QueryTooCostly(cpu_seconds) from None
        raise


def _hits(conn: sqlite3.Connection, root: Path, expr: str, *, projects: list[str] | None, limit: int,
          since: str | None, role: str | None) -> SearchResult:
    ranked = best_sessions(conn, expr, projects=projects, role=role, since=since, limit=limit)
    shown = _shown(conn, expr, [e.rowid for e in ranked.entries])
    hits = []
    base = projects_dir(root)
    for e in ranked.entries:
        project, session = from_db(e.project), from_db(e.session)
        row = shown.get(e.rowid)
        if row is None:  # the indexer replaced it between two statements
            continue
        snip, uuid, ts, doc_role, sidechain, file, agent, cwd = row
        plain, spans = split_marks(snip)
        indexed, main_cwd = session_title(conn, e.project, e.session)
        main = base / project / f"{session}.jsonl"
        hits.append(Hit(sessionId=session, project=project, path=str(main),
                        title=hit_title(main, indexed), uuid=uuid, timestamp=ts, role=doc_role, snippet=plain, highlights=spans,
                        score=round(-e.score, 6), sidechain=bool(sidechain), agentId=agent and from_db(agent), file=from_db(file),
                        cwd=main_cwd or cwd))
    return SearchResult(hits=hits, window=ranked.window)


def _shown(conn: sqlite3.Connection, expr: str, rowids: list[int]) -> dict[int, tuple]:
    """What each hit shows of its entry (snippet, uuid, time, role, sidechain, file,
    agent, cwd), by rowid: one walk of the matches between the lowest and the
    highest of ``rowids`` (the span the ranking walked), a snippet cut only
    for theirs. One statement, not one per hit: each statement evaluates the
    whole expression again, and a prefix merges every doclist it covers."""
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    # ``+docs.rowid``: a filter on the walk, never FTS5's lookup of each id (the expression again per id)
    return {r[0]: r[1:] for r in conn.execute(
        f"""SELECT docs.rowid, snippet(docs, 0, ?, ?, '…', 24), i.uuid, i.ts, i.role, i.sidechain, f.path, f.agent, f.cwd
            FROM docs CROSS JOIN doc_info i ON i.id = docs.rowid CROSS JOIN files f ON f.id = i.file
            WHERE docs MATCH ? AND docs.rowid BETWEEN ? AND ? AND +docs.rowid IN ({marks})""",
        (MARK_START, MARK_END, expr, min(rowids), max(rowids), *rowids))}


class TitleCache:
    """The title of a session file (``lite.session_title``: its head and tail
    read and parsed), kept per file identity and size (device, inode, size,
    mtime): a hit names its session by the title the listing shows, and the
    same few sessions come back query after query, each a stat instead of two
    reads and a parse. Bounded in files (``size``) and in characters of titles
    and paths (``chars``: a custom title can be as long as a 64 KB window), the oldest forgotten
    first; shared by the threads that run queries."""

    def __init__(self, size: int = 4096, chars: int = 4_000_000) -> None:
        import threading

        self.size = size
        self.chars = chars
        self._titles: dict[tuple, str | None] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def title(self, path: Path) -> str | None:
        import os

        from sessiond.store.lite import session_title as file_title

        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._titles:
                return self._titles[key]
        title = file_title(path)
        with self._lock:
            if key not in self._titles:
                self._titles[key] = title
                self._chars += _chars(key, title)
            while self._titles and (len(self._titles) > self.size or self._chars > self.chars):
                old = next(iter(self._titles))
                self._chars -= _chars(old, self._titles.pop(old))
        return title

    def clear(self) -> None:
        """Forget every title (what a query costs the first time it shows its sessions)."""
        with self._lock:
            self._titles.clear()
            self._chars = 0


def _chars(key: tuple, title: str | None) -> int:
    return len(key[0]) + len(title or "")


TITLES: Final = TitleCache()


def hit_title(main: Path, fallback: str | None) -> str | None:
    """The title a search hit shows, from the index or from a scan alike: the
    one ``list`` and ``show`` give the session's file (``TITLES``), else
    ``fallback`` (what the index or the scan found, for a file gone or
    unreadable); redacted, since a hit shows no secret, not even in the prompt
    that names its session."""
    from sessiond.secrets import redact_text

    title = TITLES.title(main) or fallback
    return redact_text(title) if title else title


def session_title(conn: sqlite3.Connection, project: str, session: str) -> tuple[str | None, str | None]:
    """The title the listing shows, in its one order (``lite.title_of``: custom
    title, AI title, ``last-prompt``, summary, first prompt), as the index
    recorded it, and the cwd, from the session's files: the main file's, else
    a subagent file's."""
    from sessiond.store.lite import title_of

    rows = conn.execute(
        "SELECT custom_title, ai_title, last_prompt, summary, first_prompt, cwd, agent IS NULL FROM files "
        "WHERE project = ? AND session = ? ORDER BY agent IS NOT NULL, id", (project, session)).fetchall()
    for r in rows:
        title = title_of(*r[:5]) if r[6] else None
        if title:
            return title, r[5]
    cwd = next((r[5] for r in rows if r[5]), None)
    for r in rows:
        title = title_of(*r[:5])
        if title:
            return title, cwd
    return None, cwd
