"""The index's layout: one SQLite file with an FTS5 table, beside the files.

Why SQLite FTS5: it ships with Python's standard library, is embedded (no
server), keeps the index consistent across crashes (each batch of lines and the
file offset it reaches commit together), lets readers (the CLI, the daemon's
queries) read while the indexer writes (WAL), and ranks with BM25.

Tables:

* ``files``: one row per transcript file indexed, with how far it is indexed
  (``indexed``: bytes of whole lines), which file that was (``dev``/``ino``, and
  ``tailsum``: a CRC of the bytes just before ``indexed``, so a file rewritten in
  place is noticed), and what a hit shows (session id, agent id, cwd, titles,
  first prompt). A subagent file carries its parent session's id.
* ``docs``: the FTS5 table, one row per searchable piece of an entry, an
  external-content table over ``doc_text``, a view of ``doc_info.ztext`` (the
  text, zlib-compressed: FTS5's own copy of the text was 70 % of the index;
  compressed it is less than half of that, and still there to delete a doc
  exactly and to cut snippets from). ``doc_info`` says which file, entry, role
  and time a doc came from,
  and ``pos``, the byte offset of its line (the order of hits that tie, the
  same however the index was built).

The index is a cache: ``SCHEMA_VERSION`` changing, or a damaged file, means it
is rebuilt from the transcripts, never migrated.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import sqlite3

SCHEMA_VERSION: Final = 3
INDEX_NAME: Final = ".sessiond-search.sqlite3"

TOKENIZER: Final = "unicode61 remove_diacritics 2"
TEXT_FUNCTION: Final = "sessiond_text"
"""SQL function every connection registers (``connect_functions``): a doc's
text from its zlib-compressed copy."""

NAME_MARK: Final = "\0"
"""Starts a name column (``path``, ``project``, ``session``, ``agent``) holding a
name that is not UTF-8: the rest is the hex of its bytes. SQLite's text is
UTF-8 and Python's sqlite3 refuses to bind a str with lone surrogates (what
``os.fsdecode`` makes of such a name); no path or file name holds a NUL, so the
mark never starts a real one."""


def to_db(name: str) -> str:
    """``name`` as a name column holds it (see ``NAME_MARK``)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return NAME_MARK + name.encode("utf-8", "surrogatepass").hex()
    return name


def from_db(text: str) -> str:
    """The name a name column holds (``to_db`` reversed)."""
    if text.startswith(NAME_MARK):
        return bytes.fromhex(text[1:]).decode("utf-8", "surrogatepass")
    return text


DDL: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
    """CREATE TABLE IF NOT EXISTS files (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        session TEXT NOT NULL,
        agent TEXT,
        dev INTEGER NOT NULL DEFAULT 0,
        ino INTEGER NOT NULL DEFAULT 0,
        indexed INTEGER NOT NULL DEFAULT 0,
        tailsum INTEGER NOT NULL DEFAULT 0,
        cwd TEXT,
        first_prompt TEXT,
        custom_title TEXT,
        ai_title TEXT,
        summary TEXT,
        last_prompt TEXT,
        tag TEXT,
        last_ts TEXT,
        size INTEGER NOT NULL DEFAULT 0,
        mtime_ns INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS files_session ON files (project, session)",
    """CREATE TABLE IF NOT EXISTS doc_info (
        id INTEGER PRIMARY KEY,
        file INTEGER NOT NULL,
        uuid TEXT,
        ts TEXT,
        role TEXT NOT NULL,
        sidechain INTEGER NOT NULL DEFAULT 0,
        pos INTEGER NOT NULL DEFAULT 0,
        ztext BLOB NOT NULL
    )""",
    f"CREATE VIEW IF NOT EXISTS doc_text AS SELECT id, {TEXT_FUNCTION}(ztext) AS text FROM doc_info",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(text, content='doc_text', content_rowid='id', tokenize='{TOKENIZER}')",
    "CREATE INDEX IF NOT EXISTS doc_info_file ON doc_info (file)",
)


def _text(z: bytes | None) -> str | None:
    return None if z is None else zlib.decompress(z).decode("utf-8", "surrogatepass")


def compress_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 1)  # level 6 took 20 % of a build for ~8 % less


def connect_functions(conn) -> None:
    """What every connection to the index needs before it touches ``docs``."""
    conn.create_function(TEXT_FUNCTION, 1, _text, deterministic=True)


def index_path(root: Path, configured: Path | None = None) -> Path:
    """Where the index of ``root`` lives (the setting wins)."""
    return configured if configured is not None else root / INDEX_NAME


def read_only_uri(path: Path) -> str:
    """The URI a reader opens: it can never write, create or lock out the indexer."""
    from urllib.parse import quote

    return f"file:{quote(str(path))}?mode=ro"


def indexed_files(conn: sqlite3.Connection, projects: list[str] | None) -> dict[str, tuple[int, int, int, int, int]]:
    """``path -> (dev, ino, size, mtime_ns, indexed)`` of the files the index
    holds in ``projects`` (None: all): what the indexer's re-stat compares the
    files with, and what an offline search checks the index is not behind."""
    if projects is None:
        cur = conn.execute("SELECT path, dev, ino, size, mtime_ns, indexed FROM files")
    else:
        cur = conn.execute(
            f"SELECT path, dev, ino, size, mtime_ns, indexed FROM files WHERE project IN ({','.join('?' * len(projects))})",
            [to_db(p) for p in projects])
    return {from_db(r[0]): r[1:] for r in cur}

