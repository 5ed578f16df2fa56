"""Session state: the pending buffer, lazy materialization, dedup, routing and the
metadata cache (SPEC 3.2, 3.4, 3.5).

A session is created in memory by its first request; its main transcript file is
created only by its first ``user``/``assistant`` message. Every entry is routed to
a ``Target`` (the main transcript or one agent file), each with its own queue and
uuid set: a uuid already in the target is dropped silently (idempotent retries).
Inline sidechain entries of 1.0.x files (``isSidechain`` without ``agentId``) stay
in the main file but are deduplicated apart from the main chain, so a forked
sidechain may share uuids with the main transcript as SPEC 3.4 allows.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from functools import partial
from operator import attrgetter
from pathlib import Path

from sessiond.protocol.transcript import paths
from sessiond.protocol.transcript.entries import (
    COMPACT_BOUNDARY,
    MATERIALIZING_TYPES,
    REAPPENDED_METADATA,
    REAPPENDED_SET,
    TRANSCRIPT_TYPES,
    EntryHeader,
    is_compact_boundary,
    try_header,
)
from sessiond.protocol.transcript.appendfile import RESEND_WINDOW, tail_lines
from sessiond.protocol.transcript.lite import LITE_WINDOW
from sessiond.protocol.transcript.jsonl import SessionScan, head_lines, scan_session, scan_uuids
from sessiond.protocol.transcript.recording import Cursor
from sessiond.protocol.transcript.safeopen import StoreRoot, error_for
from sessiond.protocol.wire.errors import SessiondError, bad_request, too_large

from sessiond.common.config import Settings

from .bounds import Bounds
from .compaction import Compactor
from .readiness import Readiness
from .spool import Spool
from .uuidset import UuidSet
from .workers import FairShare
from .writer import FileQueue, Writer

log = logging.getLogger("sessiond")

_TYPE = attrgetter("type")
_UUID = attrgetter("uuid")
_SUBTYPE = attrgetter("subtype")
_SIDECHAIN = attrgetter("isSidechain")



class Target:
    """One transcript file: its write queue, its dedup set, where its chain ends
    (``last``; ``cursor``: the recording state behind it, recording.Cursor)."""

    __slots__ = ("queue", "uuids", "last", "cursor")

    def __init__(self, queue: FileQueue, uuids: UuidSet, last: str | None) -> None:
        self.queue = queue
        self.uuids = uuids
        self.last = last
        self.cursor: Cursor | None = None


class SessionState:
    __slots__ = (
        "id", "project", "path", "materialized", "pending", "pending_bytes",
        "metadata", "dirty_since_meta", "side_uuids", "main", "agents", "clients",
        "last_active", "loading", "load_error", "cwd", "scans", "agent_errors", "gone",
    )

    def __init__(self, session_id: str, project: Path, writer: Writer) -> None:
        self.id = session_id
        self.project = project
        self.path = paths.session_file(project, session_id)
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.metadata: dict[str, bytes] = {}
        self.dirty_since_meta = False
        self.agents: dict[Path, Target] = {}
        self.clients: set[int] = set()
        self.last_active = time.monotonic()
        self.loading: list[Callable[[], None]] | None = None
        """While an existing file is scanned in a worker thread: the requests
        waiting for it, in arrival order."""
        self.load_error: SessiondError | None = None
        self.scans = 0  # scans of its files running in worker threads
        self.agent_errors: dict[Path, SessiondError] = {}
        """Agent files whose scan in a worker failed: the next request routed
        there gets the error (once; the one after scans again)."""
        self.materialized = False
        self.cwd: str | None = None  # the last cwd a request named, already checked
        self.side_uuids = UuidSet()
        self.main = Target(writer.queue(self.path), UuidSet(), None)
        self.gone = False
        """Its files were moved away (trash): nothing may be written for it any more,
        not even the exit cleanup of a client still attached."""

    def apply_scan(self, scan: SessionScan) -> None:
        """What an existing transcript tells: dedup sets, chain end, metadata."""
        self.materialized = True
        self.side_uuids = UuidSet.unpacked(scan.sidechain_uuids)  # packed in the background once quiet
        self.metadata = {**scan.metadata, **self.metadata}
        self.main.uuids = UuidSet.unpacked(scan.uuids)
        self.main.last = scan.cursor.tip
        self.main.cursor = scan.cursor

    def targets(self) -> list[Target]:
        return [self.main, *self.agents.values()]

    @property
    def idle(self) -> bool:
        return (not self.clients and self.loading is None and not self.pending
                and all(t.queue.idle for t in self.targets()))


def recent_lines(root: StoreRoot, queue: FileQueue, pending: list[bytes] | tuple = (),
                 window: int = RESEND_WINDOW) -> set[bytes]:
    """Lines in the last ``window`` bytes of a queue's file, still queued, or pending."""
    out: set[bytes] = set(queue.lines)
    out.update(pending)
    try:
        fd = root.open(queue.path, os.O_RDONLY)
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise error_for(exc, f"reading {queue.path.name}") from None
    try:
        out.update(tail_lines(fd, window=window))
    finally:
        os.close(fd)
    return out


class Routed:
    """Result of accepting one batch: counts and the queues it touched."""

    __slots__ = ("accepted", "duplicates", "queues", "last")

    def __init__(self) -> None:
        self.accepted = 0
        self.duplicates = 0
        self.queues: list[FileQueue] = []
        self.last: str | None = None


class Registry(Readiness):
    def __init__(self, settings: Settings, writer: Writer, fair: FairShare | None = None,
                 bounds: Bounds | None = None) -> None:
        self.settings = settings
        self.writer = writer
        self.fair = fair
        """Where scans of existing files run, charged to the requesting client
        (None: the loop's default executor)."""
        self.compactor = Compactor(fair) if fair is not None else None
        """Packs dedup sets in the background (None: they stay unpacked)."""
        self.bounds = bounds or Bounds(settings)
        self._full_sweep_at = 0.0
        self.sessions: dict[str, SessionState] = {}
        self.spool = Spool(settings.root, writer)
        Readiness.__init__(self)
        self.unavailable: dict[str, SessiondError] = {}
        """Sessions no request may touch, and why: in the trash, or being moved or
        imported right now (see ``daemon/trash.py``)."""

    def get(self, session_id: str, cwd: str) -> SessionState:
        """The session's state, created on first use. A session keeps the project
        of its first request: a subagent running in another worktree still writes
        under its parent session.

        An existing file is scanned for its uuids first: inline when small, in a
        worker thread when large (``state.loading`` is then set and requests wait
        for it with ``when_loaded``), so a big transcript never stalls the loop.
        """
        state = self.sessions.get(session_id)  # the canonical id, nearly always: one dict probe
        if state is None:
            session_id = paths.check_session_id(session_id)
            state = self.sessions.get(session_id)
            if state is None:
                state = self._create(session_id, paths.project_dir(self.settings.root, cwd))
        if cwd != state.cwd:
            paths.check_cwd(cwd)
        state.cwd = cwd
        return self._ready(state)

    def adopt(self, session_id: str, project: Path) -> SessionState:
        """The session, bound to an existing file in ``project`` (resume): a
        session whose file lives in a hash-variant dir keeps writing there."""
        session_id = paths.check_session_id(session_id)
        state = self.sessions.get(session_id)
        if state is None:
            state = self._create(session_id, project)
        elif state.project != project:
            raise bad_request(f"session {session_id} is already open in {state.project}")
        return self._ready(state)

    def _create(self, session_id: str, project: Path) -> SessionState:
        refused = self.unavailable.get(session_id)
        if refused is not None:
            raise refused
        self._check(paths.session_file(project, session_id))
        if len(self.sessions) >= self.settings.max_sessions:
            now = time.monotonic()
            if now - self._full_sweep_at >= 1.0:  # a scan of every session: at most once a second
                self._full_sweep_at = now
                self.sweep(now, idle_for=0.0)  # idle ones first: their files are the truth
            self.bounds.check_sessions(len(self.sessions))
        state = self.sessions[session_id] = SessionState(session_id, project, self.writer)
        self._load(state)
        return state

    def _ready(self, state: SessionState) -> SessionState:
        if state.load_error is not None:
            del self.sessions[state.id]
            raise state.load_error
        state.last_active = time.monotonic()
        return state

    def restore_held(self, session_id: str, project: Path, cwd: str, lines: list[bytes]) -> None:
        """Hold again the entries a previous daemon spooled for a session (see
        spool.py): pending again when the session still has no transcript;
        otherwise the lines its transcript lacks are appended (a crash between
        materializing and deleting the spool), nothing twice."""
        paths.check_inside(self.settings.root, paths.session_file(project, session_id))
        state = self.sessions.get(session_id) or self._create(session_id, project)
        state.cwd = cwd
        if state.loading is not None:  # a big transcript: reconcile once it is scanned
            self.bounds.parked += 1  # acknowledged before the restart: counted like any parked request, never refused
            state.loading.append(partial(self._restore_into, state, lines))
            return
        if state.load_error is not None:
            del self.sessions[state.id]
            raise state.load_error
        self._restore_into(state, lines)

    def _restore_into(self, state: SessionState, lines: list[bytes]) -> None:
        batch = [(h, line) for line in lines if (h := try_header(line)) is not None]
        if not state.materialized:
            for header, line in batch:
                if header.uuid is not None:
                    (state.side_uuids if header.isSidechain else state.main.uuids).add(header.uuid)
                if header.type in REAPPENDED_SET:
                    state.metadata[header.type] = line
                state.pending.append(line)
                state.pending_bytes += len(line)
                self.bounds.pending_changed(len(line))  # acknowledged before the restart: counted, never refused
            self.spool.adopt(state, state.pending_bytes)
            return
        present = head_lines(state.path, sum(map(len, lines)) + RESEND_WINDOW)
        missing = [line for header, line in batch
                   if (header.uuid not in state.main.uuids if header.uuid is not None else line not in present)]
        for header, line in batch:
            if header.uuid is not None:
                state.main.uuids.add(header.uuid)
        self.spool.adopt(state, 0)
        if missing:
            log.warning("session %s: %d held entries missing from its transcript appended", state.id, len(missing))
            self.writer.enqueue(state.main.queue, missing)
        self.spool.release(state, state.main.queue)

    def reappend_metadata(self, state: SessionState) -> int:
        """After a resume adopts a file: re-append the current metadata at EOF
        unless every line of it is already within the tail window listing reads."""
        lines = self.metadata_lines(state)
        if not lines:
            return 0
        tail = recent_lines(self.writer.root, state.main.queue, window=LITE_WINDOW)
        if all(line in tail for line in lines):
            return 0
        self.writer.enqueue(state.main.queue, lines)
        state.dirty_since_meta = False
        return len(lines)

    def _load(self, state: SessionState) -> None:
        def failed(err: SessiondError) -> None:
            state.load_error = err

        try:
            self._scan(state, state.path, scan_session, state.apply_scan, failed)
        except SessiondError as err:
            state.load_error = err

    def hold(self, state: SessionState) -> None:
        """Make the session's requests (and every Flush) wait, in arrival
        order, until ``release``: while its file is read in a worker (a
        resend's tail, see ``tails``), as behind a scan."""
        if state.loading is None:
            state.loading = []
        state.scans += 1
        self.loads_in_flight += 1

    def release(self, state: SessionState, first: Callable[[], None]) -> None:
        """Run ``first`` (the request the hold was for), then the requests
        that waited, unless a scan still holds the session: then ``first``
        waits at the head of the line."""
        state.scans -= 1
        if state.scans:
            state.loading.insert(0, first)  # type: ignore[union-attr]
        else:
            waiting, state.loading = state.loading or [], None
            first()
            for resume in waiting:
                resume()
        self._load_done()

    def when_agents_ready(self, state: SessionState, headers: list[EntryHeader], agent: str | None, run: str | None,
                          resume: Callable[..., None], *args: object) -> bool:
        """Give every agent file a batch routes to its ``Target``, its existing
        file scanned for uuids first (in a worker thread when large, as for main
        transcripts); True when ``resume(*args)`` is parked behind such a scan.
        Call it after ``when_loaded``, before ``resolve``."""
        if agent is None and run is None and not any(map(_SIDECHAIN, headers)):
            return False
        self.check_targets(headers, agent, run)
        wanted = {paths.agent_file(state.project, state.id, a, run) for a in self._agents_of(headers, agent)}
        for path in wanted:
            if path not in state.agents:
                err = state.agent_errors.pop(path, None)
                if err is not None:
                    raise err
                self._add_agent(state, path)
        return self.when_loaded(state, resume, *args)

    @staticmethod
    def _agents_of(headers: list[EntryHeader], agent: str | None) -> set[str]:
        if agent is not None:
            return {agent}
        return {h.agentId for h in headers if h.isSidechain and h.agentId is not None}

    def _add_agent(self, state: SessionState, path: Path) -> None:
        self._check(path)
        target = Target(self.writer.queue(path), UuidSet(), None)

        def apply(uuids: set[str]) -> None:
            target.uuids = UuidSet.unpacked(uuids)
            state.agents[path] = target

        def failed(err: SessiondError) -> None:
            state.agent_errors[path] = err

        if not self._scan(state, path, scan_uuids, apply, failed):
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

    def resolve(self, state: SessionState, batch: list[tuple[EntryHeader, bytes]], agent: str | None, run: str | None) -> list[Target]:
        """The target of every entry, resolved before anything is mutated, so a
        batch that cannot be routed (bad id, unreadable agent file) changes nothing."""
        if agent is None and run is None and not any(h.isSidechain for h, _ in batch):
            return [state.main] * len(batch)  # the common case: all of it is the main transcript
        self.check_targets([h for h, _ in batch], agent, run)
        return [self.target_for(state, h, agent, run) for h, _ in batch]

    fast_path = True
    """Off only in the test that checks the fast path against the general one."""

    def accept(self, state: SessionState, headers: list[EntryHeader], lines: list[bytes], agent: str | None,
               run: str | None, *, resend: bool = False, recent: dict[int, set[bytes]] | None = None) -> Routed:
        """Dedup, route and queue a validated batch (``headers[i]`` is the header
        of ``lines[i]``): all or nothing. ``recent``: for a resend, the recent
        lines of its targets (by ``id(target)``) already read off the loop
        (``tails``); a target missing there is read here."""
        if self.fast_path and agent is None and run is None and not resend and state.materialized:
            out = self._accept_plain(state, headers, lines)
            if out is not None:
                return out
        return self._accept(state, list(zip(headers, lines)), agent, run, resend, recent)

    def _accept_plain(self, state: SessionState, headers: list[EntryHeader], lines: list[bytes]) -> Routed | None:
        """The batch an agent sends nearly always: transcript entries of a
        started session, each with a new uuid, none a sidechain, metadata or
        compaction boundary. Checked and applied with C-level passes over the
        batch (``map``, set operations) instead of the per-entry loop, which was
        the largest Python cost of an append. None when the batch is anything
        else: ``_accept`` then handles it, with the same outcome this would have."""
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

    def _accept(self, state: SessionState, batch: list[tuple[EntryHeader, bytes]], agent: str | None, run: str | None,
                resend: bool, known: dict[int, set[bytes]] | None = None) -> Routed:
        targets = self.resolve(state, batch, agent, run)
        recent: dict[int, set[bytes]] = dict(known) if known else {}
        if not state.materialized:
            extra = sum(len(line) for h, line in batch if h.type not in MATERIALIZING_TYPES)
            if state.pending_bytes + extra > self.settings.max_pending_bytes:
                raise too_large(
                    f"session {state.id} has no message yet and its pending buffer would exceed "
                    f"{self.settings.max_pending_bytes} bytes"
                )
            if extra and not any(h.type in MATERIALIZING_TYPES for h, _ in batch) and state.main in targets:
                self.spool.prepare(state)  # entries will be held: their spool file first, or refuse it all
            self.bounds.check_pending(extra)
        out = Routed()
        main = state.main
        per_target: dict[int, tuple[Target, list[bytes]]] = {}
        main_lines: list[bytes] = []
        held: list[bytes] = []  # entries held for a session with no file yet: spooled (spool.py)
        materialized = False
        accepted = duplicates = 0
        # The loop runs once per entry of every append: locals, no helper calls
        # on the common path (a main-transcript entry with a uuid).
        for (header, line), target in zip(batch, targets):
            uuid = header.uuid
            inline_side = target is main and bool(header.isSidechain)
            if uuid is None:
                if resend:
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
            if target is not main:
                per_target.setdefault(id(target), (target, []))[1].append(line)
                continue
            kind = header.type
            if kind in REAPPENDED_SET:
                state.metadata[kind] = line
            else:
                state.dirty_since_meta = True
            if state.materialized:
                if kind == "system" and is_compact_boundary(header) and not inline_side:
                    # SPEC 3.5: the current metadata goes just before the boundary,
                    # so it stays in the tail window of the compacted session.
                    main_lines.extend(self.metadata_lines(state))
                main_lines.append(line)
            elif kind in MATERIALIZING_TYPES:
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

    @staticmethod
    def metadata_lines(state: SessionState) -> list[bytes]:
        return [state.metadata[k] for k in REAPPENDED_METADATA if k in state.metadata]

    # ------------------------------------------------------------ clients, cleanup

    def attach(self, state: SessionState, client: int) -> None:
        state.clients.add(client)

    def detach(self, state: SessionState, client: int, dropped: bool = False) -> FileQueue | None:
        """Returns the queue holding the exit cleanup's re-append, if it made one.

        A connection that DROPPED (no Close) from a session still holding
        entries before its first message does not discard them at once: a
        client that timed out on a stalled daemon reconnects and carries on, and
        it was told those entries were written. ``sweep`` discards them when no
        client came back within ``idle_evict``."""
        state.clients.discard(client)
        if not state.clients:
            if dropped and not state.materialized and state.pending:
                state.last_active = time.monotonic()
                return None
            return self.exit_cleanup(state)
        return None

    def exit_cleanup(self, state: SessionState) -> FileQueue | None:
        """The last client went away (Close, a dropped connection, or shutdown):
        re-append the current metadata at EOF so listing finds it in the tail
        window, and let go of a pending buffer that never became a file.

        Returns the main queue when something was re-appended, so a Close can
        answer only once that is written (SPEC 3.3: the re-append is a sync path).
        """
        if state.gone:
            return None
        if state.materialized:
            if state.dirty_since_meta and state.metadata:
                self.writer.enqueue(state.main.queue, self.metadata_lines(state))
                state.dirty_since_meta = False
                return state.main.queue
        elif state.pending or state.metadata or state.main.uuids:
            # Nothing of the main transcript reached the disk: forget every trace
            # of the discarded entries, so a later resend of them is not taken
            # for a duplicate and a discarded title is never re-appended.
            log.info("session %s closed without a message: %d pending entries, no file", state.id, len(state.pending))
            self.spool.release(state, None)
            self.bounds.pending_changed(-state.pending_bytes)
            state.pending = []
            state.pending_bytes = 0
            state.metadata.clear()
            state.main.uuids.clear()
            state.side_uuids.clear()
            state.main.last = None
            state.main.cursor = None
            state.dirty_since_meta = False
        return None

    def evict_for_move(self, state: SessionState) -> list[FileQueue]:
        """Take a session out of memory for good (its files are about to move):
        later requests for it start afresh (or are refused, see ``unavailable``).
        Returns its queues, to be closed once written. Never called for a
        session holding entries before its first message (``daemon/trash.py``)."""
        state.gone = True
        if self.sessions.get(state.id) is state:
            del self.sessions[state.id]
        return [t.queue for t in state.targets()]

    def sweep(self, now: float, idle_for: float | None = None) -> int:
        """Forget sessions nobody used for ``idle_for`` (``idle_evict``): their
        files are the truth and are rescanned on next use. Held entries are
        kept for their client for ``idle_evict`` whatever ``idle_for`` says. How many were forgotten."""
        idle_for = self.settings.idle_evict if idle_for is None else idle_for
        self.spool.sweep()
        gone = 0
        for sid, state in list(self.sessions.items()):
            if (state.pending and not state.clients and not state.materialized and state.loading is None
                    and now - state.last_active > self.settings.idle_evict):
                self.exit_cleanup(state)  # held for a client that never came back: no message, no file
            if state.idle and not state.pending and now - state.last_active >= idle_for:
                for target in state.targets():
                    self.writer.forget(target.queue)
                del self.sessions[sid]
                gone += 1
            elif self.compactor is not None:
                self.compactor.quiet(state, now)
        return gone

    @property
    def pending_entries(self) -> int:
        return sum(len(s.pending) for s in self.sessions.values())

