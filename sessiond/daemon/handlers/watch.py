"""Subscribe and Unsubscribe: watching a session live (sessiond/daemon/watchers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sessiond.store import paths
from sessiond.wire import messages as m
from sessiond.wire.errors import bad_request, not_found

if TYPE_CHECKING:
    from ..connection import Connection


def handle_subscribe(conn: Connection, req: m.Subscribe) -> m.Response:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    sid = paths.check_session_id(req.session)
    state = daemon.registry.sessions.get(sid)
    if state is not None:
        main = state.path
    elif req.path is not None:
        main = Path(req.path)
        if not main.is_absolute() or main.name != f"{sid}.jsonl":
            raise bad_request(f"{req.path!r} is not the transcript of session {sid}")
    elif req.cwd is not None:
        paths.check_cwd(req.cwd)
        main = paths.session_file(paths.project_dir(daemon.settings.root, req.cwd), sid)
    else:
        raise bad_request("Subscribe needs the session's path or cwd")
    paths.check_inside(daemon.settings.root, main)
    if state is None and not main.is_file():
        raise not_found(f"no session {sid} at {main}")
    return daemon.watchers.subscribe(conn, msgspec.structs.replace(req, session=sid), main)


def handle_unsubscribe(conn: Connection, req: m.Unsubscribe) -> m.Response:
    if not conn.daemon.watchers.unsubscribe(conn, req.subscription, "cancelled"):
        raise not_found(f"no subscription {req.subscription} on this connection")
    return m.Done(id=req.id)
