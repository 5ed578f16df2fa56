"""Search and Reindex: asked of the indexer, answered from the index.

A search first waits (at most ``CATCH_UP_TIMEOUT``) for the indexer to have
looked at everything written before it and re-stated its scope, then runs the
query in a worker thread on a read-only connection; a slow indexer makes the
answer say ``caughtUp: false``, never makes it fail.

A query runs under a CPU budget (``search_cpu_s``, ``sessiond/search/budget.py``):
one that would rank too much (``a*`` over a big index) is stopped and answered
``bad_request``, so it never holds a thread for seconds.

The index is a cache that can be lost under the daemon (deleted, truncated,
overwritten, replaced: ``sessiond/search/indexfile.py``). A search never answers
from an index that is not the file the indexer writes, nor "no matches"
because it is gone: while the indexer rebuilds it, or when the file at its
path is not that file or SQLite finds it damaged (then the indexer is told,
and rebuilds it), the search scans the files instead (``sessiond/search/scan.py``)
and the answer says so (``scanned``); one that waited for a rebuild says that
(``rebuilt``).

A query ranking thousands of entries is as expensive as a List, so it runs as
the asking connection's fair share of the read pool (``workers.py``): a client
flooding searches holds one thread, waits behind everyone else's work, and past
its bound of waiting jobs is answered ``busy``.

A search ends with the connection that asked: waiting for the indexer or the
writes, it is cancelled (``Connection.spawn``); queued, it is dropped; running,
its query is interrupted (``conn.gone``, ``budget.py``).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from typing import TYPE_CHECKING

from sessiond.search import indexfile, query
from sessiond.search.scan import scan
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError, bad_request

from .completion import after_queued_writes
from .scope import requested_projects

if TYPE_CHECKING:
    from ..connection import Connection

CATCH_UP_TIMEOUT = 5.0


class Readers:
    """One read-only connection to the index per read-pool thread, each known
    here so that a stopping daemon closes them all before the indexer closes
    its writer: the last connection to close a WAL database checkpoints it and
    removes its ``-wal`` and ``-shm`` files, which a read-only connection
    cannot do, so a cleanly stopped daemon leaves only the index file."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.open: set[sqlite3.Connection] = set()
        self.generation = 0

    def get(self, index, ino: int) -> sqlite3.Connection:
        """This thread's connection to ``index``, opened again when the file is
        another one (``reindex --all`` starts a new file) or after ``close_all``."""
        key = (index, ino, self.generation)
        reader = getattr(self.local, "conn", None)
        if reader is None or self.local.key != key:
            if reader is not None:
                self.drop(reader)
            reader = query.open_read_only(index)
            with self.lock:
                self.open.add(reader)
            self.local.conn, self.local.key = reader, key
        return reader

    def drop(self, reader: sqlite3.Connection) -> None:
        with self.lock:
            self.open.discard(reader)
        self.local.conn = None
        reader.close()

    def close_all(self) -> None:
        with self.lock:
            readers, self.open = self.open, set()
            self.generation += 1
        for reader in readers:
            try:
                reader.close()
            except sqlite3.Error:
                pass


readers = Readers()


def _link(conn: Connection):
    link = conn.daemon.index
    if link is None:
        raise SessiondError("the search index is off in this daemon's configuration (search_index = false)", code="not_found")
    return link


def handle_search(conn: Connection, req: m.Search) -> None:
    link = _link(conn)
    try:
        query.parse(req.query)
        query.check_role(req.role)
        if req.since is not None:
            query.parse_since(req.since)
    except query.QueryError as exc:
        raise bad_request(str(exc)) from None
    if conn.daemon.registry.readiness.after_loads(conn.redispatch, req):
        return None  # appends parked behind a session's file scan arrived before this Search
    # on the loop: text work and at most one lstat per dir (``scope``), like decoding the request
    projects = requested_projects(conn.daemon.settings.root, req.dirs, req.all)
    conn.spawn(_search(conn, link, req, projects))
    return None


async def _search(conn: Connection, link, req: m.Search, projects: list[str] | None) -> None:
    daemon = conn.daemon
    written = daemon.loop.create_future()  # what was accepted before it: in the files, so noted for the indexer
    def wake() -> None:
        if not written.done():
            written.set_result(None)

    after_queued_writes(daemon, wake)
    try:
        await written
        rebuilds = link.rebuilds
        caught_up = await link.caught_up(projects, CATCH_UP_TIMEOUT)
    except asyncio.CancelledError:  # its client went before its job was queued
        daemon.fair.dropped += 1
        raise
    try:
        found, damage = await daemon.fair.submit(_run, daemon.settings.root, link.index, link.unusable(), link.identity,
                                                 req, projects, daemon.settings.search_cpu, conn.gone,
                                                 owner=conn.id, answer=True)
    except SessiondError as exc:  # its share is full: busy
        conn.reply(m.Error(id=req.id, code=exc.code, message=exc.message))
        return
    except (asyncio.CancelledError, query.QueryStopped):  # its client went, or the daemon is exiting
        return
    except query.QueryError as exc:  # it used its CPU budget
        conn.reply(m.Error(id=req.id, code="bad_request", message=str(exc)))
        return
    except Exception as exc:  # never a crashed connection
        conn.reply(m.Error(id=req.id, code="internal", message=f"search failed: {exc}"))
        return
    if damage is not None:
        link.damaged(*damage)
    rebuilt = link.rebuilt_because if link.rebuilds != rebuilds and found.scanned is None else None
    conn.reply(m.Searched(id=req.id, hits=found.hits, caughtUp=caught_up, window=found.window, scanned=found.scanned,
                          rebuilt=rebuilt and f"the search index was rebuilt ({rebuilt})"))


def _run(root, index, unusable: str | None, identity: indexfile.Identity | None, req: m.Search,
         projects: list[str] | None, cpu_seconds: float,
         stop: threading.Event) -> tuple[query.SearchResult, tuple[indexfile.Identity, str] | None]:
    """The query on this worker thread's read-only connection to ``index``
    (stopped when ``stop`` is set: the asking connection is gone),
    when the indexer says it may be read (``unusable`` is None) and the file
    at its path is the one it writes (``identity``; its header intact, no
    FIFO or symlink there for SQLite to open); else a scan of the files. Also
    returns the file and why, when SQLite found it damaged."""
    damage = None
    if unusable is None:
        why = indexfile.problem(index, identity)
        unusable = None if why is None else f"the search index is unusable ({why})"
    if unusable is None:
        reader = None
        try:
            st = os.lstat(index)
            reader = readers.get(index, st.st_ino)
            return query.run(reader, root, req.query, projects=projects, limit=req.limit,
                             since=query.parse_since(req.since), role=req.role, cpu_seconds=cpu_seconds, stop=stop), None
        except query.QueryTooCostly:
            raise
        except OSError as exc:  # gone since it was looked at
            unusable = f"the search index is unusable (cannot be opened: {exc.strerror or exc})"
        except sqlite3.Error as exc:
            if reader is not None:
                readers.drop(reader)  # damaged or being replaced: open it again next time
            unusable = f"the search index is unreadable ({exc})"
            if indexfile.is_damage(exc):
                damage = ((st.st_dev, st.st_ino), str(exc))
    hits = scan(root, req.query, projects=projects, limit=req.limit, since=query.parse_since(req.since), role=req.role)
    return query.SearchResult(hits=hits, scanned=unusable), damage


def handle_reindex(conn: Connection, req: m.Reindex) -> None:
    link = _link(conn)
    if not req.all and not req.dirs:
        raise bad_request("reindex: give project dirs or all")
    conn.daemon.spend.forget()  # the usage figures are rebuilt from the files too

    async def run() -> None:
        try:
            projects = await conn.daemon.loop.run_in_executor(None, requested_projects, conn.daemon.settings.root,
                                                              req.dirs, req.all)
        except SessiondError as exc:
            conn.reply(m.Error(id=req.id, code=exc.code, message=exc.message))
            return
        done = await link.reindex(projects)
        if done is None:
            conn.reply(m.Error(id=req.id, code="io_error", message="the search indexer stopped during the reindex"))
        else:
            conn.reply(m.Reindexed(id=req.id, files=done.files, bytes=done.bytes, seconds=done.seconds))

    conn.daemon.loop.create_task(run())
    return None
