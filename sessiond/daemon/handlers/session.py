"""Open, Close and agent metadata: a connection's relation to its sessions."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sessiond.store import paths
from sessiond.store.safeopen import StoreRoot, UnsafePath, error_for
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError, bad_request, io_error, not_found

from .completion import after_all

if TYPE_CHECKING:
    from ..connection import Connection
    from ..session_state import SessionState

log = logging.getLogger("sessiond")


def handle_open(conn: Connection, req: m.Open) -> m.Response | None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    state = daemon.registry.ready(req.session, req.cwd, conn.redispatch, req)
    if state is None:
        return None
    holder = daemon.leases.claim(state.id, conn, req.take_over) if req.lease or req.take_over else None
    conn.attach(state)
    result = m.Opened(id=req.id, session=state.id, path=str(state.path), materialized=state.materialized, holder=holder)
    if not req.take_over:
        return result
    _after_written(conn, state, result)  # answers once the session's accepted entries are written
    return None


def _after_written(conn: Connection, state: SessionState, result: m.Response) -> None:
    """Answer once everything accepted for the session so far (from any client)
    is in its files: a take-over reads the file right after this answer (the
    old holder's acknowledged entries above all), and a client drops what it
    was told ``queued`` once its Close is answered."""
    queues = [t.queue for t in state.targets()]
    spooled = conn.daemon.registry.spool.queue_of(state.id)
    if spooled is not None:
        queues.append(spooled)

    def done(err: SessiondError | None) -> None:
        conn.reply(result if err is None else m.Error(id=result.id, code=err.code, message=err.message))

    waiter = after_all(len(queues), done)
    for q in queues:
        conn.daemon.writer.when_written(q, waiter)
    return None


def handle_close(conn: Connection, req: m.Close) -> m.Response | None:
    """Detach, and answer once every entry accepted for the session so far is
    written: its main transcript, its agent files, its spool, and the metadata
    re-append of the exit cleanup when this was the last client (a sync path,
    SPEC 3.3). Only written, not synced: what was asked ``durable`` already is.
    A session whose files moved away (trash) has nothing left to wait for."""
    state = conn.detach(paths.check_session_id(req.session))
    if state is None or state.gone:
        return m.Done(id=req.id)
    _after_written(conn, state, m.Done(id=req.id))
    return None


def handle_agent_meta(conn: Connection, req: m.SetAgentMeta) -> m.Response | None:
    """Replace an agent's meta file; answered once it is written and synced on
    the writer's file thread (``filework``), never on the loop."""
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    state = daemon.registry.ready(req.session, req.cwd, conn.redispatch, req)
    if state is None:
        return None
    try:
        # Checked as a JSON object without building its values (kept as the
        # client's bytes): a value of a million empty arrays would weigh
        # fifty times its bytes as Python objects, built on the loop.
        meta = msgspec.json.decode(req.meta, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise bad_request("agent meta must be a JSON object") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"agent meta is not JSON: {exc}") from None
    path = paths.agent_meta_file(state.project, state.id, req.agent, req.run)
    try:
        daemon.writer.root.check(path)
    except OSError as exc:
        raise error_for(exc, f"checking {path.name}") from None

    def done(fut) -> None:
        exc = fut.exception()
        if exc is None:
            conn.reply(m.Done(id=req.id))
            return
        log.error("writing %s failed: %s", path, exc)
        err = error_for(exc, f"writing {path.name}") if isinstance(exc, OSError) else io_error(f"writing {path.name}: {exc}")
        conn.reply(m.Error(id=req.id, code=err.code, message=err.message))

    writer = daemon.writer
    writer.files.submit(writer.root.write_atomic, path, msgspec.json.encode(meta)).add_done_callback(done)
    return None


def handle_adopt(conn: Connection, req: m.Adopt) -> m.Response | None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    sid = paths.check_session_id(req.session)
    path = Path(req.path)
    if not path.is_absolute() or path.name != f"{sid}.jsonl":
        raise bad_request(f"{req.path!r} is not the transcript of session {sid}")
    try:
        daemon.writer.root.check(path)  # inside the root, no symlink on the way, a regular file if anything
    except OSError as exc:
        raise error_for(exc, f"checking {path.name}") from None
    _check_main_transcript(daemon.writer.root, path)
    if not path.is_file():
        raise not_found(f"no transcript at {req.path}")
    registry = daemon.registry
    state = registry.adopt(sid, path.parent)
    if registry.readiness.when_loaded(state, conn.redispatch, req):
        return None
    if req.lease:
        daemon.leases.claim(state.id, conn, req.take_over)
    elif req.take_over:
        daemon.leases.take_away(state.id, conn)
    elif req.refuse_live:
        daemon.leases.refuse_if_held(state.id, conn)
    conn.attach(state)
    count = registry.reappend_metadata(state)
    result = m.Adopted(id=req.id, session=sid, path=str(state.path), reappended=count)
    if req.take_over:
        _after_written(conn, state, result)
        return None
    if not count:
        return result

    def done(err: SessiondError | None) -> None:
        conn.reply(result if err is None else m.Error(id=req.id, code=err.code, message=err.message))

    daemon.writer.when_written(state.main.queue, done)
    return None


_PROJECTS = paths.projects_dir(Path()).name


def _check_main_transcript(root: StoreRoot, path: Path) -> None:
    """Adopt binds a session to the file its later appends go to, so only a
    session's main transcript qualifies: ``<root>/projects/<project>/<sid>.jsonl``,
    where listing and lookup find sessions. Anything else inside the root (a
    held-entries spool file, a trashed copy, a subagent dir, a file straight in
    ``projects/``) would have the daemon append to a file nobody resumes, or
    resurrect a trashed session behind the trash's back. Checked as named and
    as it resolves, so a symlinked project dir cannot point into the trash."""
    where = _below_root(root, path)
    real = _below_root(root, Path(os.path.realpath(path)))
    for parts in (where, real):
        if parts is None or len(parts) != 3 or parts[0] != _PROJECTS:
            raise bad_request(f"{path} is not a session transcript of the store: Adopt takes "
                              f"{paths.projects_dir(root.path)}/<project>/<session-id>.jsonl")


def _below_root(root: StoreRoot, path: Path) -> list[str] | None:
    try:
        return root.parts(path)
    except UnsafePath:
        return None
