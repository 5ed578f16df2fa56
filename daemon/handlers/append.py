"""Append and Record: validate, dedup, route, queue, and ack at the asked durability."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import replace

from sessiond.protocol.transcript.entries import EntryHeader, decode_headers
from sessiond.protocol.transcript.paths import projects_dir
from sessiond.protocol.transcript.recording import Cursor, chain_messages
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import SessiondError

from ..leases import is_chain
from .completion import after_all

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..connection import Connection
    from ..routing import Routed
    from ..session_state import SessionState, Target


def handle_append(conn: Connection, req: m.Append) -> m.Response | None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    state = _session_of(conn, req)
    if state is None:
        return None
    headers = decode_headers(req.entries)
    if req.exact and req.agent is None and any(h.isSidechain and h.agentId for h in headers):
        # a copy goes to the file its request names, not to the agent file an entry's agentId would pick
        headers = [replace(h, agentId=None) if h.agentId else h for h in headers]
    if daemon.registry.when_agents_ready(state, headers, req.agent, req.run, conn.redispatch, req):
        return None
    if daemon.mirror is not None:
        daemon.mirror.check_session(state.id)  # required mirror down: refuse, never diverge
    daemon.leases.guard(state.id, conn, req.lease, lambda: is_chain(headers, req.agent))
    conn.attach(state)
    recent = None
    if req.resend:
        recent = daemon.tails.recent_for(conn, req, state, headers, req.entries, req.agent, req.run)
        if recent is None:
            return None  # parked until its tails are read
    if req.exact:
        state.exact = True
    routed = daemon.registry.accept(state, headers, req.entries, req.agent, req.run, resend=req.resend, recent=recent)
    return _ack(conn, req.id, req.durability, routed, state)


def _session_of(conn: Connection, req: m.Append) -> SessionState | None:
    """The session an Append names: placed by its cwd, or in the project dir
    it names (``Append.project``); None when the request is parked."""
    registry = conn.daemon.registry
    if req.project is None:
        return registry.ready(req.session, req.cwd, conn.redispatch, req)
    state = registry.adopt(req.session, projects_dir(conn.daemon.settings.root) / req.project)
    return None if registry.when_loaded(state, conn.redispatch, req) else state


def handle_record(conn: Connection, req: m.Record) -> m.Response | None:
    daemon = conn.daemon
    daemon.refuse_if_stopping()
    registry = daemon.registry
    state = registry.ready(req.session, req.cwd, conn.redispatch, req)
    if state is None:
        return None
    headers = decode_headers(req.messages)  # all decoded first: one bad entry refuses all
    if registry.when_agents_ready(state, headers, req.agent, req.run, conn.redispatch, req):
        return None
    if daemon.mirror is not None:
        daemon.mirror.check_session(state.id)
    daemon.leases.guard(state.id, conn, req.lease, lambda: is_chain(headers, req.agent))
    conn.attach(state)
    batch = list(zip(headers, req.messages))
    targets = registry.resolve(state, batch, req.agent, req.run)
    # Each target file is its own chain (a sidechain message never chains onto,
    # nor dedups against, the main transcript): chain each group separately.
    groups: dict[int, tuple[Target, list[tuple[EntryHeader, bytes]]]] = {}
    for item, target in zip(batch, targets):
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
    headers, chained_lines = [h for h, _ in lines], [line for _, line in lines]
    recent = None
    if req.resend:
        recent = daemon.tails.recent_for(conn, req, state, headers, chained_lines, req.agent, req.run)
        if recent is None:
            return None  # parked until its tails are read (chained again then)
    routed = registry.accept(state, headers, chained_lines, req.agent, req.run, resend=req.resend, recent=recent)
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
