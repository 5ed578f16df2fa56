"""Trash, Restore, EmptyTrash, Import and Usage: the lifecycle requests (SPEC 9).

Each answers once its file work, done in a worker by ``sessiond/daemon/trash.py``'s
``Lifecycle`` with the functions the CLI also uses offline, is over.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sessiond.store import importer, trash
from sessiond.store.paths import check_id, check_session_id, projects_dir
from sessiond.store.usage import usage
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError, bad_request, conflict
from sessiond.wire.records import FileResult, Status, TrashEntry, path_from

from ..trash import busy, in_trash
from .scope import requested_dirs

if TYPE_CHECKING:
    from ..connection import Connection


def _error(rid: int, exc: BaseException) -> m.Error:
    """The answer for a failed operation; a file name in it that is not UTF-8
    shown escaped (the wire carries UTF-8 text only)."""
    if isinstance(exc, SessiondError):
        return m.Error(id=rid, code=exc.code, message=trash.shown(exc.message))
    if isinstance(exc, OSError):
        return m.Error(id=rid, code="io_error",
                       message=trash.shown(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")))
    return m.Error(id=rid, code="internal", message=trash.shown(f"{type(exc).__name__}: {exc}"))


def _answer(conn: Connection, rid: int, success: Callable[[Any], m.Response]) -> Callable[[Any, BaseException | None], None]:
    def done(result: Any, exc: BaseException | None) -> None:
        conn.reply(_error(rid, exc) if exc is not None else success(result))

    return done


def handle_trash(conn: Connection, req: m.Trash) -> None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    sid = check_session_id(req.session)
    path = trash.check_transcript_path(daemon.settings.root, Path(path_from(req.path, req.raw_path)), sid)
    if req.reason not in ("rm", "prune"):
        raise bad_request(f"unknown trash reason {req.reason!r}")
    lifecycle = daemon.lifecycle
    if req.agent is not None:  # one agent file: the session stays (out of memory for the move, back on its next use)
        agent, run = check_id("agent", req.agent), None if req.run is None else check_id("run", req.run)
        lifecycle.operate(sid, lambda: trash.trash_agent(daemon.settings.root, path, agent, run, reason=req.reason),
                          _answer(conn, req.id, lambda entry: m.TrashChanged(id=req.id, entries=[entry])),
                          after=None, force=req.force)
        return

    outside = None if req.force else daemon.follower.written_recently().get(sid)
    if outside is not None:  # Claude Code writing it outside sessiond's clients
        raise conflict(f"session {sid} is live (written outside sessiond {int(outside[0])} s ago: Claude Code?); "
                       f"--force moves it anyway")

    def trashed(entry: TrashEntry) -> m.Response:
        lifecycle.trashed(entry)
        return m.TrashChanged(id=req.id, entries=[entry])

    lifecycle.operate(sid, lambda: trash.trash_session(daemon.settings.root, path, reason=req.reason),
                      _answer(conn, req.id, trashed), after=in_trash(sid), force=req.force)


def handle_restore(conn: Connection, req: m.Restore) -> None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    sid = check_session_id(req.session)
    lifecycle = daemon.lifecycle
    refused = daemon.registry.unavailable.get(sid)
    if refused is not None and refused.code == "conflict":
        raise refused
    if sid in daemon.registry.sessions:  # written again since (a new file): restore refuses to overwrite it
        raise conflict(f"session {sid} is open in the daemon; close it before restoring")
    daemon.registry.unavailable[sid] = busy(sid)

    follower = daemon.follower
    follower.mine(sid)  # the files put back are the daemon's own doing, not another program's writes

    def restored(entry: TrashEntry) -> m.Response:
        follower.mine(sid)  # and so are the lines its next pass reads of them
        return m.TrashChanged(id=req.id, entries=[entry])

    lifecycle.operate(sid, lambda: lifecycle.restore(sid), _answer(conn, req.id, restored), after=None, hold=False)


def handle_empty_trash(conn: Connection, req: m.EmptyTrash) -> None:
    daemon = conn.daemon
    root = daemon.settings.root
    fut = daemon.loop.run_in_executor(None, lambda: (trash.empty_trash(root, older_than=req.older_than, dry_run=req.dry_run),
                                                     trash.trashed_ids(root)))

    def emptied(result: tuple[list[TrashEntry], set[str]]) -> m.Response:
        entries, still = result
        daemon.lifecycle.refresh_trashed(still)  # emptied ids take writes again
        return m.TrashChanged(id=req.id, entries=entries)

    done = _answer(conn, req.id, emptied)

    fut.add_done_callback(lambda f: done(f.result() if f.exception() is None else None, f.exception()))


def handle_import(conn: Connection, req: m.Import) -> m.Response | None:
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

    def every_file(status: Status, error: str | None = None) -> m.Imported:
        return m.Imported(id=req.id, session=sid, files=[
            FileResult(rel=f.rel, status=status, error=error) for f in source.files])

    refused = daemon.registry.unavailable.get(sid)
    if refused is not None:
        return every_file("busy", refused.message)
    if req.catalog_only:  # the catalog re-stats it in a worker, then the answer goes
        fut = daemon.loop.run_in_executor(None, daemon.catalog.learn, main)
        fut.add_done_callback(lambda f: conn.reply(every_file("unchanged")))
        return None
    state = daemon.registry.sessions.get(sid)
    if state is not None and (state.clients or state.pending):
        return every_file("busy", "a client is writing this session")
    lifecycle = daemon.lifecycle

    # The session leaves memory (its dedup sets and chain end would be stale
    # after new lines): its next request rescans the file.
    follower = daemon.follower
    follower.mine(sid)  # the copies are the daemon's own writes, not another program's

    def imported(results: list[FileResult]) -> m.Response:
        follower.mine(sid)  # and so are the lines its next pass reads of them
        return m.Imported(id=req.id, session=sid, files=results)

    lifecycle.operate(sid, lambda: lifecycle.import_session(source, main), _answer(conn, req.id, imported), after=None)
    return None


def handle_usage(conn: Connection, req: m.Usage) -> None:
    daemon = conn.daemon
    # A stat of every session file: this connection's fair share of the read
    # pool, dropped unstarted if it goes (``workers.py``).
    fut = daemon.fair.submit(
        lambda: usage(daemon.catalog.main_stats(requested_dirs(daemon.settings.root, req.dirs, req.all))),
        owner=conn.id, answer=True)

    done = _answer(conn, req.id, lambda report: m.UsageResult(id=req.id, usage=report))

    def answer(f) -> None:
        if not f.cancelled():  # cancelled: its client went, or the daemon is exiting
            done(f.result() if f.exception() is None else None, f.exception())

    fut.add_done_callback(answer)
