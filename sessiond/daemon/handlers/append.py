"""Append and Record: validate, dedup, route, queue, and ack at the asked durability."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from sessiond.store.entries import EntryHeader, decode_headers
from sessiond.store.linecap import MAX_LINE
from sessiond.store.paths import projects_dir
from sessiond.store.recording import Cursor, chain_messages
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError, too_large

from ..leases import is_chain
from ..routing import Batch
from .completion import after_all

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..connection import Connection
    from ..routing import Routed
    from ..session_state import SessionState, Target


def admit(conn: Connection, req: m.Append | m.Record, entries: list[bytes]) -> Batch | None:
    """The one admission step of Append and Record: the daemon is not stopping,
    the session is ready (parked otherwise), every entry's routing header
    decodes (one bad entry refuses all), its agent files are ready (parked
    otherwise), a required mirror is up, the session's lease allows it, and
    the session is attached to the connection. The admitted ``Batch``; None
    when the request is parked (it runs again from the start)."""
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    if daemon.settings.max_frame > MAX_LINE:
        _check_line_cap(entries)
    registry = daemon.registry
    state = _session_of(conn, req)
    if state is None:
        return None
    headers = decode_headers(entries)
    exact = isinstance(req, m.Append) and req.exact
    if exact and req.agent is None and any(h.isSidechain and h.agentId for h in headers):
        # a copy goes to the file its request names, not to the agent file an entry's agentId would pick
        headers = [msgspec.structs.replace(h, agentId=None) if h.agentId else h for h in headers]
    batch = Batch(state, headers, entries, req.agent, req.run, req.resend)
    if registry.routing.when_agents_ready(batch, conn.redispatch, req):
        return None
    if daemon.mirror is not None:
        daemon.mirror.check_session(state.id)  # required mirror down: refuse, never diverge
    daemon.leases.guard(state.id, conn, req.lease, lambda: is_chain(batch.headers, batch.agent))
    conn.attach(state)
    return batch


def _check_line_cap(entries: list[bytes]) -> None:
    """Refuse (``too_large``, nothing accepted) a batch holding an entry longer
    than the line cap every reader shares (``linecap.MAX_LINE``): written, it
    would be acknowledged and then skipped by every reader (resume, listing,
    search, watchers) as no entry. Only a frame cap raised past the line cap
    lets one through, so only such a daemon looks (once per batch)."""
    longest = max(map(len, entries), default=0)
    if longest > MAX_LINE:
        raise too_large(f"an entry of {longest} bytes is longer than any reader of a transcript takes "
                        f"({MAX_LINE} bytes)")


def route(conn: Connection, req: m.Append | m.Record, batch: Batch) -> Routed | None:
    """Accept an admitted batch; None when a resend is parked until the recent
    tails of its files are read (``tails``)."""
    recent = None
    if batch.resend:
        recent = conn.daemon.tails.recent_for(conn, req, batch)
        if recent is None:
            return None
    if isinstance(req, m.Append) and req.exact:
        batch.state.exact = True  # from now on the daemon adds no line of its own to this session
    return conn.daemon.registry.routing.accept(batch, recent)


def _session_of(conn: Connection, req: m.Append | m.Record) -> SessionState | None:
    """The session a request names: placed by its cwd, or in the project dir
    an Append names (``Append.project``); None when the request is parked."""
    registry = conn.daemon.registry
    project = req.project if isinstance(req, m.Append) else None
    if project is None:
        return registry.ready(req.session, req.cwd, conn.redispatch, req)
    state = registry.adopt(req.session, projects_dir(conn.daemon.settings.root) / project)
    return None if registry.readiness.when_loaded(state, conn.redispatch, req) else state


def handle_append(conn: Connection, req: m.Append) -> m.Response | None:
    batch = admit(conn, req, req.entries)
    if batch is None:
        return None
    routed = route(conn, req, batch)
    if routed is None:
        return None
    return _ack(conn, req.id, req.durability, routed, batch.state)


def handle_record(conn: Connection, req: m.Record) -> m.Response | None:
    batch = admit(conn, req, req.messages)
    if batch is None:
        return None
    state = batch.state
    targets = conn.daemon.registry.routing.resolve(batch)
    # Each target file is its own chain (a sidechain message never chains onto,
    # nor dedups against, the main transcript): chain each group separately.
    groups: dict[int, tuple[Target, list[tuple[EntryHeader, bytes]]]] = {}
    for item, target in zip(zip(batch.headers, batch.lines), targets):
        groups.setdefault(id(target), (target, []))[1].append(item)
    lines: list[tuple[EntryHeader, bytes]] = []
    duplicates = 0
    last = None
    cursors: list[tuple[Target, Cursor]] = []
    for target, items in groups.values():
        parent = req.parent if req.parent is not None else target.last
        chained = chain_messages(items, target.uuids.__contains__, parent, target.cursor)
        lines += chained.lines
        duplicates += chained.duplicates
        cursors.append((target, chained.cursor))
        if target is state.main or last is None:
            last = chained.last
    chained_batch = msgspec.structs.replace(batch, headers=[h for h, _ in lines], lines=[line for _, line in lines])
    routed = route(conn, req, chained_batch)
    if routed is None:
        return None  # parked until its tails are read (chained again then)
    for target, cursor in cursors:
        target.last, target.cursor = cursor.tip, cursor  # the tip, not the last entry written
    routed.duplicates += duplicates
    routed.last = last
    return _ack(conn, req.id, req.durability, routed, state)


def _ack(conn: Connection, rid: int, durability: str, routed: Routed, state: SessionState) -> m.Response | None:
    result = m.Appended(id=rid, accepted=routed.accepted, duplicates=routed.duplicates, last=routed.last,
                        pending=0 if state.materialized else len(state.pending))
    if durability == "queued" or not routed.queues:
        return result
    writer = conn.daemon.writer

    def done(err: SessiondError | None) -> None:
        conn.reply(result if err is None else m.Error(id=rid, code=err.code, message=err.message))

    answer: Callable[[SessiondError | None], None] = done
    mirror = conn.daemon.mirror
    if durability == "durable" and mirror is not None and mirror.required:
        answer = mirror.confirming([q.path for q in routed.queues], done)  # ack once JetStream has it too
    waiter = answer if len(routed.queues) == 1 else after_all(len(routed.queues), answer)
    for q in routed.queues:
        if durability == "durable":
            writer.when_durable(q, waiter)
        else:
            writer.when_written(q, waiter)
    return None
