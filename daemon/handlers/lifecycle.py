"""Trash, Restore, EmptyTrash, Import and Usage: the lifecycle requests (SPEC 9).

Each answers once its file work, done in a worker by ``daemon/trash.py``'s
``Lifecycle`` with the functions the CLI also uses offline, is over.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.protocol import trash
from sessiond.protocol.transcript import importer
from sessiond.protocol.transcript.paths import check_session_id, projects_dir
from sessiond.protocol.transcript.usage import usage
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import SessiondError, bad_request

from ..trash import busy, in_trash
from .listing import requested_dirs

if TYPE_CHECKING:
    from ..connection import Connection


def _error(rid: int, exc: BaseException) -> m.Error:
    if isinstance(exc, SessiondError):
        return m.Error(id=rid, code=exc.code, message=exc.message)
    if isinstance(exc, OSError):
        return m.Error(id=rid, code="io_error", message=f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    return m.Error(id=rid, code="internal", message=f"{type(exc).__name__}: {exc}")


def handle_trash(conn: Connection, req: m.Trash) -> None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    sid = check_session_id(req.session)
    path = trash.check_transcript_path(daemon.settings.root, Path(req.path), sid)
    if req.reason not in ("rm", "prune"):
        raise bad_request(f"unknown trash reason {req.reason!r}")
    lifecycle = daemon.lifecycle
    when_closed = lifecycle.hold(sid, force=req.force)

    def answer(entry, exc) -> None:
        if exc is not None:
            conn.reply(_error(req.id, exc))
            return
        lifecycle.trashed(entry)
        conn.reply(m.TrashChanged(id=req.id, entries=[entry]))

    def closed(err: SessiondError | None) -> None:
        if err is not None:
            daemon.registry.unavailable.pop(sid, None)
            conn.reply(_error(req.id, err))
            return
        lifecycle.run(sid, lambda: trash.trash_session(daemon.settings.root, path, reason=req.reason),
                      answer, after=in_trash(sid))

    when_closed(closed)


def handle_restore(conn: Connection, req: m.Restore) -> None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    sid = check_session_id(req.session)
    lifecycle = daemon.lifecycle
    refused = daemon.registry.unavailable.get(sid)
    if refused is not None and refused.code == "conflict":
        raise refused
    if sid in daemon.registry.sessions:  # written again since (a new file): restore refuses to overwrite it
        raise SessiondError(f"session {sid} is open in the daemon; close it before restoring", code="conflict")
    daemon.registry.unavailable[sid] = busy(sid)

    def answer(entry, exc) -> None:
        if exc is not None:
            conn.reply(_error(req.id, exc))
            return
        lifecycle.restored(entry)
        conn.reply(m.TrashChanged(id=req.id, entries=[entry]))

    lifecycle.run(sid, lambda: trash.restore_session(daemon.settings.root, sid),
                  answer, after=None)


def handle_empty_trash(conn: Connection, req: m.EmptyTrash) -> None:
    daemon = conn.daemon
    if req.older_than is not None and req.older_than < 0:
        raise bad_request("older_than must not be negative")
    fut = daemon.loop.run_in_executor(None, lambda: trash.empty_trash(daemon.settings.root, older_than=req.older_than,
                                                                       dry_run=req.dry_run))

    def done(f) -> None:
        exc = f.exception()
        daemon.lifecycle.emptied()
        conn.reply(_error(req.id, exc) if exc is not None else m.TrashChanged(id=req.id, entries=f.result()))

    fut.add_done_callback(done)


def handle_import(conn: Connection, req: m.Import) -> None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    root = daemon.settings.root
    source = req.source
    for f in source.files:  # every name checked before anything is touched
        importer.destination(root, source, f)
        if not os.path.isabs(f.src) or "\x00" in f.src:
            raise bad_request(f"import source must be an absolute path: {f.src!r}")
    sid = source.session
    main = projects_dir(root) / source.project / f"{sid}.jsonl"
    refused = daemon.registry.unavailable.get(sid)
    if refused is not None:
        conn.reply(m.Imported(id=req.id, session=sid, files=[
            importer.FileResult(rel=f.rel, status="busy", error=refused.message) for f in source.files]))
        return
    if req.catalog_only:
        daemon.lifecycle.imported(main)
        conn.reply(m.Imported(id=req.id, session=sid, files=[
            importer.FileResult(rel=f.rel, status="unchanged") for f in source.files]))
        return
    state = daemon.registry.sessions.get(sid)
    if state is not None and state.clients:
        conn.reply(m.Imported(id=req.id, session=sid, files=[
            importer.FileResult(rel=f.rel, status="busy", error="a client is writing this session") for f in source.files]))
        return
    lifecycle = daemon.lifecycle
    # The session leaves memory (its dedup sets and chain end would be stale
    # after new lines): its next request rescans the file.
    when_closed = lifecycle.hold(sid, force=False)

    def answer(results, exc) -> None:
        if exc is not None:
            conn.reply(_error(req.id, exc))
            return
        lifecycle.imported(main)
        conn.reply(m.Imported(id=req.id, session=sid, files=results))

    def closed(err: SessiondError | None) -> None:
        if err is not None:
            daemon.registry.unavailable.pop(sid, None)
            conn.reply(_error(req.id, err))
            return
        lifecycle.run(sid, lambda: importer.import_session(root, source), answer, after=None)

    when_closed(closed)


def handle_usage(conn: Connection, req: m.Usage) -> None:
    daemon = conn.daemon
    dirs = requested_dirs(daemon, req.dirs, req.all)
    fut = daemon.loop.run_in_executor(None, lambda: usage(daemon.catalog.main_stats(dirs)))

    def done(f) -> None:
        exc = f.exception()
        conn.reply(_error(req.id, exc) if exc is not None else m.UsageResult(id=req.id, usage=f.result()))

    fut.add_done_callback(done)
