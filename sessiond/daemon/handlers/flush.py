"""Flush: a barrier across every connection.

Resolves once every entry accepted before it (by any client) is written, and
fdatasync'ed when ``durable``. Entries held for a session with no message yet are
in its spool file (sessiond/daemon/spool.py): a flush of the session covers that file too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiond.store.paths import check_session_id
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError

from .completion import after_all

if TYPE_CHECKING:
    from ..connection import Connection


def handle_flush(conn: Connection, req: m.Flush) -> m.Response | None:
    daemon = conn.daemon
    if daemon.registry.readiness.after_loads(conn.redispatch, req):
        return None  # appends parked behind a file scan arrived before this flush
    if req.session is not None:
        state = daemon.registry.sessions.get(check_session_id(req.session))
        if state is None:  # not in memory: nothing of it is queued
            return m.Flushed(id=req.id, files=0)
        queues = [t.queue for t in state.targets()]
        spooled = daemon.registry.spool.queue_of(state.id)
        if spooled is not None:  # held entries (no message yet) are on disk in the spool: flush that too
            queues.append(spooled)
    else:
        queues = list(daemon.writer.queues.values())
    queues = [q for q in queues if q.accepted > (q.synced if req.durable else q.written)]
    if not queues:
        return m.Flushed(id=req.id, files=0)

    def done(err: SessiondError | None) -> None:
        if err is None:
            conn.reply(m.Flushed(id=req.id, files=len(queues)))
        else:
            conn.reply(m.Error(id=req.id, code=err.code, message=err.message))

    waiter = after_all(len(queues), done)
    for q in queues:
        if req.durable:
            daemon.writer.when_durable(q, waiter)
        else:
            daemon.writer.when_written(q, waiter)
    return None
