"""List: a page of sessions, made in the read pool as this connection's fair
share of it (``workers``) from the answer kept for its scope (``pages``); the
loop only sends the encoded frame."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sessiond.protocol.transcript.listing import project_dirs
from sessiond.protocol.transcript.paths import projects_dir
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import SessiondError, bad_request, permission_denied

if TYPE_CHECKING:
    from ..connection import Connection


def requested_dirs(daemon, dirs: list[str], all_projects: bool) -> list[str]:
    """The project dirs a request names (every one with ``all``), each checked
    to be a project dir of this daemon's root (worker thread: it stats them)."""
    base = os.path.realpath(projects_dir(daemon.settings.root))
    if all_projects:
        return [str(d) for d in project_dirs(daemon.settings.root)]
    out = []
    for d in dirs:
        if "\x00" in d or os.path.dirname(os.path.realpath(d)) != base:
            raise permission_denied(f"{d!r} is not a project directory of this daemon's root")
        out.append(os.path.realpath(d))
    return out


def handle_list(conn: Connection, req: m.List) -> None:
    daemon = conn.daemon
    if req.limit is not None and req.limit < 0 or req.offset < 0:
        raise bad_request("limit and offset must not be negative")
    leases = daemon.leases
    live = {sid: leases.holder(sid).live() for sid in leases.held}  # as of now, on the loop
    fut = daemon.fair.submit(_answer, daemon, req, live, owner=conn.id)

    def done(f) -> None:
        if f.cancelled():  # the daemon is exiting
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
    dirs = requested_dirs(daemon, req.dirs, req.all)
    return daemon.pages.frame(req.id, dirs, req.limit, req.offset, live)
