"""List: a page of sessions from the catalog, computed in the read pool as
this connection's fair share of it (``workers``)."""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import replace

from sessiond.protocol.transcript.listing import project_dirs
from sessiond.protocol.transcript.paths import projects_dir
from sessiond.protocol.transcript.session_info import SessionInfo
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import bad_request, permission_denied

if TYPE_CHECKING:
    from ..connection import Connection


def requested_dirs(daemon, dirs: list[str], all_projects: bool) -> list[str]:
    """The project dirs a request names (every one with ``all``), each checked
    to be a project dir of this daemon's root."""
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
    dirs = requested_dirs(daemon, req.dirs, req.all)
    fut = daemon.fair.submit(partial(daemon.catalog.page, encoded=True), dirs, req.limit, req.offset, owner=conn.id)

    def done(f) -> None:
        exc = f.exception()
        if exc is None:
            conn.reply(m.Listed(id=req.id, sessions=with_live(daemon.leases, f.result())))
        else:
            conn.reply(m.Error(id=req.id, code="io_error", message=f"listing failed: {exc}"))

    fut.add_done_callback(done)
    return None


def with_live(leases, sessions: list) -> list:
    """Mark the sessions a client is writing now (``live``). The page's records
    come encoded from the catalog; only one naming a held session's id is
    decoded, marked and encoded again."""
    if not leases.held:
        return sessions
    held = [(sid.encode(), sid) for sid in leases.held]
    out = []
    for s in sessions:
        if isinstance(s, msgspec.Raw):
            raw = bytes(s)
            sid = next((sid for key, sid in held if key in raw), None)
            if sid is not None:
                info = _decode_info(raw)
                if info.sessionId == sid:
                    s = msgspec.Raw(msgspec.msgpack.encode(replace(info, live=leases.holder(sid).live())))
            out.append(s)
            continue
        holder = leases.holder(s.sessionId)
        out.append(s if holder is None else replace(s, live=holder.live()))
    return out


_decode_info = msgspec.msgpack.Decoder(SessionInfo).decode
