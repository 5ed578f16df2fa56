"""Routing and accepting a batch: which file each entry goes to, and what is
queued for it (SPEC 3.4, 3.5).

An entry goes to the main transcript unless the request names an agent (or a
run), or it is a sidechain entry carrying its ``agentId``: then to that agent's
file, whose ``Target`` is made (its existing file scanned for uuids, in a worker
when large) before anything is accepted, so a batch is routed all or nothing.
Inline sidechain entries of 1.0.x files (``isSidechain`` without ``agentId``)
stay in the main file but are deduplicated apart from the main chain. Before a
session's first message its entries are held in the pending buffer (spooled).
A part of ``Registry``: the registry owns the sessions' lifecycle, this the
path of a batch through them.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sessiond.store import paths
from sessiond.store.entries import (
    COMPACT_BOUNDARY,
    MATERIALIZING_TYPES,
    REAPPENDED_SET,
    TRANSCRIPT_TYPES,
    EntryHeader,
    is_compact_boundary,
)
from sessiond.store.jsonl import scan_uuids
from sessiond.wire.errors import SessiondError, too_large

from .filequeue import FileQueue
from .session_state import SessionState, Target
from .tails import recent_lines
from .uuidset import DedupSet, dedup_set

if TYPE_CHECKING:
    from sessiond.config import Settings

    from .bounds import Bounds
    from .compaction import Compactor
    from .readiness import Readiness
    from .spool import Spool
    from .uuidset import AnyUuidSet
    from .writer import Writer

MAX_BATCH_AGENTS = 1024
"""Agent files one batch may route to (``too_large`` past it). A turn of an
agent writes to one or a few; each agent file new to the daemon is prepared on
the loop (its target made, its file looked at) and created on the writer's one
file thread, so one batch naming thousands would keep every other client
waiting meanwhile."""

_TYPE = attrgetter("type")
_UUID = attrgetter("uuid")
_SUBTYPE = attrgetter("subtype")
_SIDECHAIN = attrgetter("isSidechain")


class Batch(msgspec.Struct, frozen=True):
    """One request's entries on their way into a session, as admitted: the
    session, each entry's routing header and line (``headers[i]`` is the header
    of ``lines[i]``), the agent or workflow run the request routes them to, and
    whether the client is resending after losing its daemon."""

    state: SessionState
    headers: list[EntryHeader]
    lines: list[bytes]
    agent: str | None = None
    run: str | None = None
    resend: bool = False


class Routed:
    """Result of accepting one batch: counts and the queues it touched."""

    __slots__ = ("accepted", "duplicates", "queues", "last")

    def __init__(self) -> None:
        self.accepted = 0
        self.duplicates = 0
        self.queues: list[FileQueue] = []
        self.last: str | None = None


class Routing:
    """Takes a validated batch into a session: resolves each entry's target
    file (preparing agent files first), drops duplicates, holds what comes
    before the session's first message, and queues the rest on the writer,
    all or nothing."""

    def __init__(self, settings: Settings, writer: Writer, bounds: Bounds, spool: Spool,
                 compactor: Compactor | None, readiness: Readiness) -> None:
        self.settings = settings
        self.writer = writer
        self.bounds = bounds
        self.spool = spool
        self.compactor = compactor
        self.readiness = readiness
        """Where an agent file's existing content is scanned, and requests parked meanwhile."""

    def when_agents_ready(self, batch: Batch, resume: Callable[..., None], *args: object) -> bool:
        """Give every agent file a batch routes to its ``Target``, its existing
        file scanned for uuids first (in a worker thread when large, as for main
        transcripts); True when ``resume(*args)`` is parked behind such a scan.
        Call it after ``when_loaded``, before ``resolve``."""
        state, headers, agent, run = batch.state, batch.headers, batch.agent, batch.run
        if agent is None and run is None and not any(map(_SIDECHAIN, headers)):
            return False
        self.check_targets(headers, agent, run)
        agents = self._agents_of(headers, agent)
        if len(agents) > MAX_BATCH_AGENTS:
            raise too_large(f"a batch may route to {MAX_BATCH_AGENTS} agent files at most, this one names "
                            f"{len(agents)}; send it in batches of fewer agents")
        wanted = {paths.agent_file(state.project, state.id, a, run) for a in agents}
        for path in wanted:
            if path not in state.agents:
                err = state.agent_errors.pop(path, None)
                if err is not None:
                    raise err
                self._add_agent(state, path)
        return self.readiness.when_loaded(state, resume, *args)

    @staticmethod
    def _agents_of(headers: list[EntryHeader], agent: str | None) -> set[str]:
        if agent is not None:
            return {agent}
        return {h.agentId for h in headers if h.isSidechain and h.agentId is not None}

    def _add_agent(self, state: SessionState, path: Path) -> None:
        self.readiness.check(path)
        target = Target(self.writer.queue(path), DedupSet(), None)

        def apply(uuids: AnyUuidSet) -> None:
            target.uuids = uuids
            state.agents[path] = target

        def failed(err: SessiondError) -> None:
            state.agent_errors[path] = err

        if not self.readiness.scan(state, path, _scan_dedup, apply, failed):
            state.agents[path] = target

    def target_for(self, state: SessionState, header: EntryHeader, agent: str | None, run: str | None) -> Target:
        if agent is None and header.isSidechain and header.agentId is not None:
            agent = header.agentId
        if agent is None:
            return state.main
        target = state.agents.get(paths.agent_file(state.project, state.id, agent, run))
        if target is None:
            raise SessiondError("internal: an agent target was not prepared (when_agents_ready)")
        return target

    def check_targets(self, headers: list[EntryHeader], agent: str | None, run: str | None) -> None:
        """Validate every routing id of a batch before any of it is accepted."""
        if agent is not None:
            paths.check_id("agent", agent)
        if run is not None:
            paths.check_id("run", run)
        if agent is None:
            for h in headers:
                if h.isSidechain and h.agentId is not None:
                    paths.check_id("agent", h.agentId)

    def resolve(self, batch: Batch) -> list[Target]:
        """The target of every entry, resolved before anything is mutated, so a
        batch that cannot be routed (bad id, unreadable agent file) changes nothing."""
        state, headers, agent, run = batch.state, batch.headers, batch.agent, batch.run
        if agent is None and run is None and not any(map(_SIDECHAIN, headers)):
            return [state.main] * len(headers)  # the common case: all of it is the main transcript
        self.check_targets(headers, agent, run)
        return [self.target_for(state, h, agent, run) for h in headers]

    fast_path = True
    """Off only in the test that checks the fast path against the general one."""

    def accept(self, batch: Batch, recent: dict[int, set[bytes]] | None = None) -> Routed:
        """Dedup, route and queue an admitted batch: all or nothing. ``recent``:
        for a resend, the recent lines of its targets (by ``id(target)``)
        already read off the loop (``tails``); a target missing there is read here."""
        if (self.fast_path and batch.agent is None and batch.run is None and not batch.resend
                and batch.state.materialized):
            out = self._accept_plain(batch)
            if out is not None:
                return out
        return self._accept(batch, recent)

    def _accept_plain(self, batch: Batch) -> Routed | None:
        """The batch an agent sends nearly always: transcript entries of a
        started session, each with a new uuid, none a sidechain, metadata or
        compaction boundary. Checked and applied with C-level passes over the
        batch (``map``, set operations) instead of the per-entry loop, which was
        the largest Python cost of an append. None when the batch is anything
        else: ``_accept`` then handles it, with the same outcome this would have."""
        state, headers, lines = batch.state, batch.headers, batch.lines
        if not TRANSCRIPT_TYPES.issuperset(map(_TYPE, headers)) or any(map(_SIDECHAIN, headers)):
            return None
        if COMPACT_BOUNDARY in set(map(_SUBTYPE, headers)):
            return None
        uuids = list(map(_UUID, headers))
        fresh = set(uuids)
        main = state.main
        if len(fresh) != len(uuids) or None in fresh or not main.uuids.isdisjoint(fresh):
            return None  # duplicates, or entries without a uuid
        main.uuids.add_new(fresh)  # just found disjoint: no second look
        if self.compactor is not None:
            self.compactor.hot(main.uuids)
        if uuids:
            main.last = uuids[-1]
            state.dirty_since_meta = True
        out = Routed()
        out.accepted = len(lines)
        if lines:
            self.writer.enqueue(main.queue, lines)
            out.queues.append(main.queue)
        return out

    def _accept(self, batch: Batch, known: dict[int, set[bytes]] | None) -> Routed:
        state, resend = batch.state, batch.resend
        targets = self.resolve(batch)
        entries = list(zip(batch.headers, batch.lines))
        recent: dict[int, set[bytes]] = dict(known) if known else {}
        if not state.materialized and not state.exact:  # an exact copy is never held back: its first entry makes the file
            extra = sum(len(line) for h, line in entries if h.type not in MATERIALIZING_TYPES)
            if state.pending_bytes + extra > self.settings.max_pending_bytes:
                raise too_large(
                    f"session {state.id} has no message yet and its pending buffer would exceed "
                    f"{self.settings.max_pending_bytes} bytes"
                )
            if extra and not any(h.type in MATERIALIZING_TYPES for h in batch.headers) and state.main in targets:
                self.spool.prepare(state)  # entries will be held: their spool file first, or refuse it all
            self.bounds.check_pending(extra)
        out = Routed()
        main = state.main
        per_target: dict[int, tuple[Target, list[bytes]]] = {}
        main_lines: list[bytes] = []
        held: list[bytes] = []  # entries held for a session with no file yet: spooled (spool.py)
        materialized = False
        accepted = duplicates = 0
        # For a resend, the targets (by id) that a line of this batch was found new for. A daemon
        # writes each file's lines of a batch in order, so what the lost daemon wrote of it is a
        # prefix: after a new line none was written, and a line without a uuid is kept even where
        # the same bytes are in the tail (Claude Code writes some such lines at every API request).
        fresh: set[int] = set()
        # The loop runs once per entry of every append: locals, no helper calls
        # on the common path (a main-transcript entry with a uuid).
        for (header, line), target in zip(entries, targets):
            uuid = header.uuid
            inline_side = target is main and bool(header.isSidechain)
            if uuid is None:
                if resend and id(target) not in fresh:
                    if id(target) not in recent:
                        recent[id(target)] = recent_lines(self.writer.root, target.queue,
                                                          state.pending if target is main else ())
                    if line in recent[id(target)]:
                        duplicates += 1
                        continue
            else:
                seen = state.side_uuids if inline_side else target.uuids
                if uuid in seen:
                    duplicates += 1
                    continue
                seen.add(uuid)
                if not inline_side and header.type in TRANSCRIPT_TYPES:
                    target.last = uuid
            accepted += 1
            if resend:
                fresh.add(id(target))
            if target is not main:
                per_target.setdefault(id(target), (target, []))[1].append(line)
                continue
            kind = header.type
            if kind in REAPPENDED_SET:
                state.remember_metadata(kind, line)
            else:
                state.dirty_since_meta = True
            if state.materialized:
                if kind == "system" and is_compact_boundary(header) and not inline_side and not state.exact:
                    # SPEC 3.5: the current metadata goes just before the boundary,
                    # so it stays in the tail window of the compacted session.
                    main_lines.extend(state.metadata_lines())
                main_lines.append(line)
            elif kind in MATERIALIZING_TYPES or state.exact:
                state.materialized = True
                materialized = True
                held = []  # this batch's held entries go straight into the new file with it
                main_lines.extend(state.pending)
                main_lines.append(line)
                self.bounds.pending_changed(-state.pending_bytes)
                state.pending = []
                state.pending_bytes = 0
            else:
                state.pending.append(line)
                state.pending_bytes += len(line)
                held.append(line)
                self.bounds.pending_changed(len(line))
        out.accepted = accepted
        out.duplicates = duplicates
        if held:
            out.queues.append(self.spool.hold(state, held))
        if self.compactor is not None:
            for target in {id(t): t for t in targets}.values():
                self.compactor.hot(target.uuids)
            self.compactor.hot(state.side_uuids)
        if main_lines:
            self.writer.enqueue(state.main.queue, main_lines)
            out.queues.append(state.main.queue)
            if materialized:
                self.spool.release(state, state.main.queue)
        for target, lines in per_target.values():
            self.writer.enqueue(target.queue, lines)
            out.queues.append(target.queue)
        return out


def _scan_dedup(fd: int) -> AnyUuidSet:
    """An agent file's dedup set, made where its scan ran (``uuidset.dedup_set``)."""
    return dedup_set(scan_uuids(fd))
