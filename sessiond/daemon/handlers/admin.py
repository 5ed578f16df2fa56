"""Status and Shutdown."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from sessiond import __version__
from sessiond.wire import messages as m

from .. import memory

if TYPE_CHECKING:
    from ..connection import Connection


def handle_status(conn: Connection, req: m.Status) -> m.Response:
    d = conn.daemon
    registry, writer, stats = d.registry, d.writer, d.stats
    return m.StatusResult(
        id=req.id,
        pid=os.getpid(),
        version=__version__,
        root=str(d.settings.root),
        socket=str(d.settings.socket),
        uptime=round(time.monotonic() - d.started, 3),
        sessions=len(registry.sessions),
        materialized=sum(1 for s in registry.sessions.values() if s.materialized),
        clients=len(d.connections),
        queuedEntries=writer.queued_entries,
        queuedBytes=writer.queued_bytes,
        pendingEntries=registry.pending_entries,
        spooledBytes=registry.spool.held_bytes,
        writes=stats.writes,
        bytesWritten=stats.bytes_written,
        fsyncs=stats.fsyncs,
        errors=stats.errors,
        config=d.settings.public(),
        mirror=d.mirror.status() if d.mirror is not None else None,
        pendingBytes=d.bounds.pending_bytes,
        budgets=d.bounds.report(len(d.connections), len(registry.sessions), writer.queued_bytes,
                                [c.budget_use() for c in d.connections], d.pages.status(), d.fair.jobs),
        workers={**d.fair.status(), "syncThreads": d.writer.sync.slots},
        memory=memory.status(registry),
        index=d.index.status() if d.index is not None else None,
        follow=d.follower.status(),
        live=d.leases.live(),
        writtenOutside=[m.WrittenOutside(sessionId=sid, project=project, secondsAgo=int(ago))
                        for sid, (ago, project) in sorted(d.follower.written_recently().items())],
        watchers=d.watchers.count,
        stateFiles=d.state_files,
    )


def handle_shutdown(conn: Connection, req: m.Shutdown) -> m.Response:
    conn.daemon.request_shutdown("Shutdown request")
    return m.Done(id=req.id)
