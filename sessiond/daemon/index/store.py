"""The index's write side: bring one file's rows up to date with the file.

``catch_up(path)`` is the only way rows change: it stats the file, and
* indexes the whole lines after the offset it reached last time (a line still
  being written waits for its newline),
* starts the file over when it is not the file indexed before (another inode),
  is shorter than what was indexed, or no longer has the bytes it had just
  before that offset (rewritten in place),
* drops it when it is gone or not a regular file.
So it does not matter who wrote a file, or whether we were told about each
write: the file is the queue, and any event only says "look at F again".
Every batch of lines commits together with the offset it reaches, so a crash
of the indexer loses work, never consistency.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path

from sessiond.search import indexfile
from sessiond.search.extract import SUMMARY, TAG, TITLE, extract
from sessiond.search.files import describe
from sessiond.search.schema import DDL, SCHEMA_VERSION, compress_text, connect_functions, from_db, indexed_files, to_db
from sessiond.store.appendfile import ensure_dir
from sessiond.store.crc import crc32
from sessiond.store.linecap import MAX_LINE, read_span
from sessiond.store.regular import open_regular
from sessiond.store.safeopen import UnsafePath
from sessiond.store.safeopen import open_regular as open_owned

log = logging.getLogger("sessiond.index")

READ_CHUNK = 8 * 1024 * 1024
TAIL_SUM = 256
"""Bytes before the indexed offset whose CRC tells a file rewritten in place."""
_TITLE_COLUMN = {"custom-title": "custom_title", "ai-title": "ai_title", "tag": "tag", "summary": "summary",
                 "last-prompt": "last_prompt"}


class FileRow:
    """One row of the ``files`` table (the schema's columns and types)."""

    __slots__ = ("id", "path", "project", "session", "agent", "dev", "ino", "indexed", "tailsum", "size", "mtime_ns",
                 "cwd", "first_prompt", "custom_title", "ai_title", "summary", "last_prompt", "tag", "last_ts")

    COLUMNS = __slots__

    id: int
    path: str
    project: str
    session: str
    agent: str | None
    dev: int
    ino: int
    indexed: int
    tailsum: int
    size: int
    mtime_ns: int
    cwd: str | None
    first_prompt: str | None
    custom_title: str | None
    ai_title: str | None
    summary: str | None
    last_prompt: str | None
    tag: str | None
    last_ts: str | None


_NAMES = frozenset(("path", "project", "session", "agent"))
"""The columns that hold names (``to_db``)."""


class IndexUnusable(Exception):
    """The index cannot be opened or written for a reason a rebuild does not
    cure (the disk is full, the directory read-only): searches scan the files
    meanwhile, and the indexer tries again later."""


def open_index(path: Path) -> tuple[sqlite3.Connection, int, str | None]:
    """The index for writing, and a descriptor on the very file SQLite opened
    (its identity is compared with the path's at each pass: ``Store.check``).
    Created when missing; whatever is unusable there (not a regular file, a
    symlink, damaged, another database) is set aside first and the index starts
    empty; of another schema version (an older sessiond's), removed: it is a
    cache of the files. ``IndexUnusable`` when even a new file cannot be made.
    The third value says why something was set aside (None: nothing was)."""
    replaced = None
    for _attempt in range(3):
        why = indexfile.problem(path)
        sides = any(os.path.lexists(f"{path}{s}") for s in indexfile.SIDE_FILES)
        # a WAL without its database (or with an emptied one) would be replayed into the new one
        if why not in (None, indexfile.MISSING, indexfile.EMPTY) or (why is not None and sides):
            set_aside(path, why)
            replaced = why
        try:
            fd = _open_file(path)
        except UnsafePath:  # swapped in after the check: look again
            continue
        except PermissionError as exc:
            if not os.path.lexists(path):  # the directory is read-only
                raise IndexUnusable(f"{path}: {exc.strerror or exc}") from None
            replaced = f"a read-only file: {exc.strerror or exc}"
            set_aside(path, replaced)
            continue
        except OSError as exc:
            raise IndexUnusable(f"{path}: {exc.strerror or exc}") from None
        conn, why = None, None
        try:
            conn = _connect(path, fd)
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if version is None:
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            elif version[0] != SCHEMA_VERSION:  # (before anything reads the tables)
                log.warning("search index %s is of schema %s, not %s: rebuilding it", path, version[0], SCHEMA_VERSION)
                conn.close()
                os.close(fd)
                remove_index(path)
                continue
            conn.execute("SELECT max(id) FROM doc_info").fetchone()  # its tables can be read (what Store reads first)
            conn.execute("SELECT 1 FROM files LIMIT 1").fetchone()
            return conn, fd, replaced
        except UnsafePath:  # swapped between our check and SQLite's open: look again
            pass
        except sqlite3.Error as exc:
            if not indexfile.is_damage(exc):
                raise IndexUnusable(f"{path}: {exc}") from None
            why = f"SQLite cannot use it: {exc}"
        if conn is not None:
            conn.close()
        os.close(fd)
        if why is not None:
            set_aside(path, why)
            replaced = why
    raise IndexUnusable(f"{path}: still unusable after setting it aside")


def set_aside(path: Path, why: str) -> None:
    """Set aside what is at the index's paths (``indexfile.set_aside``), saying why in the log."""
    try:
        moved = indexfile.set_aside(path)
    except OSError as exc:
        raise IndexUnusable(f"{path} is unusable ({why}) and cannot be set aside: {exc.strerror or exc}") from None
    if moved:
        log.warning("search index %s unusable (%s): set aside as %s", path, why, ", ".join(p.name for p in moved))


def remove_index(path: Path) -> None:
    """Delete the index and its side files (a reindex of everything, or an
    older schema: ours, regular files); anything else there is left for
    ``open_index`` to set aside."""
    for suffix in ("", *indexfile.SIDE_FILES):
        p = f"{path}{suffix}"
        try:
            if stat.S_ISREG(os.lstat(p).st_mode):
                os.unlink(p)
        except FileNotFoundError:
            pass


def _open_file(path: Path) -> int:
    """The index file, created 0600 whatever the umask; never through a
    symlink, never a FIFO or a device (``UnsafePath``)."""
    ensure_dir(path.parent)  # a fresh root: the daemon has not written anything yet
    fd = open_owned(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def _connect(path: Path, fd: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    st = os.fstat(fd)
    if indexfile.problem(path, (st.st_dev, st.st_ino)) not in (None, indexfile.EMPTY):
        conn.close()  # swapped between our check and SQLite's open (a new file is empty until WAL mode is set)
        raise UnsafePath(f"{path} was replaced while it was being opened")
    connect_functions(conn)
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect on a new file only: free pages can be given back
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")  # a lost tail after a power cut is re-indexed from the files
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
    for ddl in DDL:
        conn.execute(ddl)
    conn.execute("COMMIT")
    return conn


class Store:
    """The write connection and the catch-up of files; one thread uses it."""

    def __init__(self, root: Path, path: Path) -> None:
        self.root = root
        self.path = path
        self.conn, self.fd, self.replaced = open_index(path)
        st = os.fstat(self.fd)
        self.identity: indexfile.Identity = (st.st_dev, st.st_ino)
        self.next_id = (self.conn.execute("SELECT max(id) FROM doc_info").fetchone()[0] or 0) + 1
        self.empty = self.conn.execute("SELECT 1 FROM files LIMIT 1").fetchone() is None
        """Nothing indexed yet: a new file (or a new store) is being built from scratch."""
        self.in_tx = False
        self.bytes_read = 0
        self.docs_added = 0

    # ---------------------------------------------------------------- transactions

    def begin(self) -> None:
        if not self.in_tx:
            self.conn.execute("BEGIN")
            self.in_tx = True

    def commit(self) -> None:
        if self.in_tx:
            self.conn.execute("COMMIT")
            self.in_tx = False

    def close(self) -> None:
        """Leave a plain rollback-journal file behind: the WAL checkpointed into
        it and its ``-wal``/``-shm`` removed, so a CLI that reads the index
        while no daemon runs (``mode=ro``) creates no side files either (it
        would make both, and a read-only connection cannot remove them). Busy
        (a reader still has it open): it stays in WAL mode, which is as good;
        the next start sets WAL again either way."""
        try:
            self.commit()
            self.conn.execute("PRAGMA journal_mode = DELETE")
        except sqlite3.Error:
            pass
        self.abandon()

    def abandon(self) -> None:
        """Close without writing more (a damaged or replaced file): what is not
        committed is rolled back."""
        self.in_tx = False
        self.conn.close()
        os.close(self.fd)

    def problem(self) -> str | None:
        """Why the file at the index's path is no longer the index this writes
        (deleted, replaced, truncated, its header overwritten), or None."""
        return indexfile.problem(self.path, self.identity)

    def optimize(self) -> None:
        """Merge the FTS5 segments into one (smaller, faster to query) and give
        the pages that frees back to the file system (a quarter of the file)."""
        self.commit()
        self.conn.execute("INSERT INTO docs (docs) VALUES ('optimize')")
        self.conn.executescript("PRAGMA incremental_vacuum;")  # steps until done (execute() frees one page)

    # ------------------------------------------------------------------------ rows

    def row(self, path: str) -> FileRow | None:
        r = self.conn.execute(f"SELECT id, {', '.join(FileRow.COLUMNS[1:])} FROM files WHERE path = ?", (to_db(path),)).fetchone()
        if r is None:
            return None
        row = FileRow()
        for k, v in zip(FileRow.COLUMNS, r):
            setattr(row, k, from_db(v) if k in _NAMES and v is not None else v)
        return row

    def rows_of(self, projects: list[str] | None) -> dict[str, tuple[int, int, int, int, int]]:
        """``path -> (dev, ino, size, mtime_ns, indexed)`` of the files indexed in ``projects``."""
        return indexed_files(self.conn, projects)

    def drop(self, path: str) -> bool:
        r = self.conn.execute("SELECT id FROM files WHERE path = ?", (to_db(path),)).fetchone()
        if r is None:
            return False
        self.begin()
        self._delete_docs(r[0])
        self.conn.execute("DELETE FROM files WHERE id = ?", (r[0],))
        return True

    def drop_projects(self, projects: list[str]) -> None:
        self.begin()
        for (fid,) in self.conn.execute(
                f"SELECT id FROM files WHERE project IN ({','.join('?' * len(projects))})", [to_db(p) for p in projects]).fetchall():
            self._delete_docs(fid)
            self.conn.execute("DELETE FROM files WHERE id = ?", (fid,))

    def _delete_docs(self, fid: int) -> None:
        # external content: FTS5 reads the old text through the view to unindex it, so doc_info goes second
        self.conn.execute("DELETE FROM docs WHERE rowid IN (SELECT id FROM doc_info WHERE file = ?)", (fid,))
        self.conn.execute("DELETE FROM doc_info WHERE file = ?", (fid,))

    # -------------------------------------------------------------------- catch-up

    def catch_up(self, path: str) -> int:
        """Bring ``path`` up to date; returns the bytes read."""
        try:
            fd = open_regular(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # gone, or a FIFO, a symlink, a directory: not a transcript to index
            self.drop(path)
            return 0
        try:
            return self._catch_up(fd, path, os.fstat(fd))
        finally:
            os.close(fd)

    def _catch_up(self, fd: int, path: str, st: os.stat_result) -> int:
        row = self.row(path)
        if row is None:
            what = describe(self.root, path)
            if what is None:
                return 0
            row = self._new_row(path, *what)
        elif (row.dev, row.ino) != (st.st_dev, st.st_ino) or st.st_size < row.indexed or not self._tail_matches(fd, row):
            self._reset(row)
        elif st.st_size == row.size and st.st_mtime_ns == row.mtime_ns:
            return 0
        row.dev, row.ino = st.st_dev, st.st_ino
        start = row.indexed
        n = self._index_lines(fd, row, st.st_size)
        row.size, row.mtime_ns = st.st_size, st.st_mtime_ns
        self._save(row)
        return n - start if n > start else 0

    def _new_row(self, path: str, project: str, session: str, agent: str | None) -> FileRow:
        row = FileRow()
        for k in FileRow.COLUMNS:
            setattr(row, k, None)
        row.path, row.project, row.session, row.agent = path, project, session, agent
        row.dev = row.ino = row.indexed = row.tailsum = row.size = row.mtime_ns = 0
        self.begin()
        rowid = self.conn.execute("INSERT INTO files (path, project, session, agent) VALUES (?, ?, ?, ?)",
                                  (to_db(path), to_db(project), to_db(session), None if agent is None else to_db(agent))).lastrowid
        assert rowid is not None  # an INSERT always sets it
        row.id = rowid
        return row

    def _reset(self, row: FileRow) -> None:
        self.begin()
        self._delete_docs(row.id)
        for k in ("cwd", "first_prompt", "custom_title", "ai_title", "summary", "last_prompt", "tag", "last_ts"):
            setattr(row, k, None)
        row.indexed = row.tailsum = row.size = row.mtime_ns = 0

    def _tail_matches(self, fd: int, row: FileRow) -> bool:
        start = max(0, row.indexed - TAIL_SUM)
        return crc32(os.pread(fd, row.indexed - start, start)) == row.tailsum

    def _save(self, row: FileRow) -> None:
        self.begin()
        cols = FileRow.COLUMNS[5:]
        self.conn.execute(f"UPDATE files SET {', '.join(c + ' = ?' for c in cols)} WHERE id = ?",
                          [getattr(row, c) for c in cols] + [row.id])

    def _index_lines(self, fd: int, row: FileRow, size: int) -> int:
        """Index the whole lines from ``row.indexed`` on, ``READ_CHUNK`` of
        them at a time (up to ``size``, or the end of a line that crosses it);
        a line over the shared cap is passed over (``linecap.read_span``), never
        carried from one read to the next until its end comes.
        Returns the offset reached."""
        pos = row.indexed
        while pos < size:
            span = read_span(fd, pos, min(READ_CHUNK, size - pos))
            if span.end == pos:
                break  # a line without its newline yet
            self.bytes_read += span.end - pos
            if span.skipped:
                log.warning("indexing %s: passed over %d lines longer than %d bytes at %d",
                            row.path, span.skipped, MAX_LINE, pos)
            if span.data:
                self._index_block(row, span.data, len(span.data), span.start)
            pos = row.indexed = span.end
        if row.indexed:
            start = max(0, row.indexed - TAIL_SUM)
            row.tailsum = crc32(os.pread(fd, row.indexed - start, start))
        return row.indexed

    def _index_block(self, row: FileRow, buf: bytes, end: int, base: int) -> None:
        docs = []
        infos = []
        nid = self.next_id
        sidechain_file = row.agent is not None
        at = base
        for line in buf[:end].split(b"\n"):
            pos = at
            at += len(line) + 1
            if not line:
                continue
            got = extract(line)
            if got is None:
                continue
            if got.timestamp and (row.last_ts is None or got.timestamp > row.last_ts):
                row.last_ts = got.timestamp
            if row.cwd is None and got.cwd:
                row.cwd = got.cwd
            if row.first_prompt is None and got.prompt and not got.sidechain:
                row.first_prompt = got.prompt
            skip_title = False
            for kind, value in got.titles.items():
                col = _TITLE_COLUMN[kind]
                if getattr(row, col) == value:
                    skip_title = True  # a re-append of the current value: nothing new to find
                setattr(row, col, value)
            ts = got.timestamp or row.last_ts
            for doc in got.docs:
                if skip_title and doc.role in (TITLE, TAG, SUMMARY):
                    continue
                docs.append((nid, doc.text))
                infos.append((nid, row.id, got.uuid, ts, doc.role, int(got.sidechain or sidechain_file), pos,
                              compress_text(doc.text)))
                nid += 1
        if docs:
            self.begin()
            self.conn.executemany("INSERT INTO doc_info (id, file, uuid, ts, role, sidechain, pos, ztext) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", infos)
            self.conn.executemany("INSERT INTO docs (rowid, text) VALUES (?, ?)", docs)
            self.next_id = nid
            self.docs_added += len(docs)
