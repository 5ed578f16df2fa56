"""List: a page of sessions, made in the read pool as this connection's fair
share of it (``workers``) from the answer kept for its scope (``pages``); the
loop only sends the encoded frame.

A List first waits for what was accepted before it to be written
(``completion.after_queued_writes``), so an agent's ``queued`` append is in
every List made after its answer, even within its coalescing window."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiond.store.writers import recent_writer
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError

from .completion import after_queued_writes
from .scope import requested_dirs

if TYPE_CHECKING:
    from ..connection import Connection


def handle_list(conn: Connection, req: m.List) -> None:
    daemon = conn.daemon
    if daemon.registry.readiness.after_loads(conn.redispatch, req):
        return None  # appends parked behind a session's file scan arrived before this List
    after_queued_writes(daemon, lambda: _submit(conn, req))
    return None


def _submit(conn: Connection, req: m.List) -> None:
    daemon = conn.daemon
    if conn.transport is None:  # it left while the writes were made: no answer to make
        return
    leases = daemon.leases
    live = {sid: leases.holder(sid).live() for sid in leases.held}  # type: ignore[union-attr]  # a held session has a holder  # as of now, on the loop
    for sid, (ago, _) in daemon.follower.written_recently().items():  # Claude Code writing it outside sessiond
        live.setdefault(sid, recent_writer(ago))
    fut = daemon.fair.submit(_answer, daemon, req, live, owner=conn.id, answer=True)

    def done(f) -> None:
        if f.cancelled():  # its client went, or the daemon is exiting
            return
        exc = f.exception()
        if exc is None:
            conn.reply_encoded(req.id, f.result())
        elif isinstance(exc, SessiondError):
            conn.reply(m.Error(id=req.id, code=exc.code, message=exc.message))
        else:
            conn.reply(m.Error(id=req.id, code="io_error", message=f"listing failed: {exc}"))

    fut.add_done_callback(done)
    return None


def _answer(daemon, req: m.List, live: dict) -> bytes:
    dirs = requested_dirs(daemon.settings.root, req.dirs, req.all)
    return daemon.pages.frame(req.id, dirs, req.limit, req.offset, live, req.every)
