"""The session registry: sessions made, found, loaded, attached and let go
(SPEC 3.2, 3.3).

A session is created in memory by its first request; its main transcript file is
created only by its first ``user``/``assistant`` message. An existing file is
scanned for its uuids first (``readiness``), entries a previous daemon held for
it are taken back (``restore_held``), and when its last client leaves its
metadata is re-appended at EOF (``exit_cleanup``); idle sessions are forgotten
(``sweep``), their files being the truth. The registry is composed of parts
that each own one thing: ``readiness`` (work off the loop and the requests
parked behind it), ``routing`` (a batch's way into a session's files) and
``spool`` (held entries on disk); the state itself is ``session_state``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from sessiond.config import Settings
from sessiond.store import paths
from sessiond.store.appendfile import RESEND_WINDOW
from sessiond.store.entries import REAPPENDED_SET, try_header
from sessiond.store.jsonl import head_lines
from sessiond.store.lite import LITE_WINDOW
from sessiond.wire.errors import SessiondError, bad_request

from .bounds import Bounds
from .compaction import Compactor
from .filequeue import FileQueue
from .readiness import Readiness
from .routing import Routing
from .session_state import SessionState, scan_for_state
from .spool import Spool
from .tails import recent_lines
from .uuidset import DedupSet, UuidSet
from .workers import FairShare
from .writer import Writer

log = logging.getLogger("sessiond")


class Registry:
    """The sessions the daemon holds in memory, by id: made on first use (ready
    to write, off the loop when that is costly), attached to clients, cleaned
    up when the last one leaves, and forgotten when idle."""

    def __init__(self, settings: Settings, writer: Writer, fair: FairShare | None = None,
                 bounds: Bounds | None = None) -> None:
        self.settings = settings
        self.writer = writer
        self.compactor = Compactor(fair) if fair is not None and DedupSet is UuidSet else None
        """Packs the pure-Python dedup sets in the background (None: the compiled
        sets have nothing to pack; without a read pool they stay unpacked)."""
        self.bounds = bounds or Bounds(settings)
        self._full_sweep_at = 0.0
        self.sessions: dict[str, SessionState] = {}
        self.spool = Spool(settings.root, writer)
        self.readiness = Readiness(settings, writer, self.bounds, fair)
        """Scans and cwd resolution off the loop, and the requests parked behind them."""
        self.routing = Routing(settings, writer, self.bounds, self.spool, self.compactor, self.readiness)
        """A batch's way into a session's files."""
        self.unavailable: dict[str, SessiondError] = {}
        """Sessions no request may touch, and why: in the trash, or being moved or
        imported right now (see ``sessiond/daemon/trash.py``)."""

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

    def ready(self, session_id: str, cwd: str, resume: Callable[..., None], *args: object) -> SessionState | None:
        """``get`` once the session is ready to write: None when ``resume(*args)``
        is parked until its cwd is resolved or its file scanned (both in worker
        threads when slow), in arrival order."""
        if session_id not in self.sessions and self.readiness.park_for_cwd(
                session_id, cwd, self._create_missing, resume, *args):
            return None
        state = self.get(session_id, cwd)
        if self.readiness.when_loaded(state, resume, *args):
            return None
        return state

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

    def _create_missing(self, session_id: str, project: Path) -> None:
        """A session whose cwd was resolved in a worker, unless a request made it meanwhile."""
        if session_id not in self.sessions:
            self._create(session_id, project)

    def _create(self, session_id: str, project: Path) -> SessionState:
        refused = self.unavailable.get(session_id)
        if refused is not None:
            raise refused
        self.readiness.check(paths.session_file(project, session_id))
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
                    state.remember_metadata(header.type, line)
                state.pending.append(line)
                state.pending_bytes += len(line)
                self.bounds.pending_changed(len(line))  # acknowledged before the restart: counted, never refused
            self.spool.adopt(state, state.pending_bytes)
            return
        present = head_lines(state.path, sum(map(len, lines)) + RESEND_WINDOW)
        missing = [line for header, line in batch
                   if (header.uuid not in state.main.uuids if header.uuid is not None else line not in present)]
        for header, _line in batch:
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
        lines = state.metadata_lines()
        if not lines or state.exact:
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
            self.readiness.scan(state, state.path, scan_for_state, state.apply_scan, failed)
        except SessiondError as err:
            state.load_error = err

    # ------------------------------------------------------------ clients, cleanup

    def attach(self, state: SessionState, client: int) -> None:
        state.clients.add(client)

    def detach(self, state: SessionState, client: int, dropped: bool = False) -> None:
        """The client left the session; the last one runs the exit cleanup.

        A connection that DROPPED (no Close) from a session still holding
        entries before its first message does not discard them at once: a
        client that timed out on a stalled daemon reconnects and carries on, and
        it was told those entries were written. ``sweep`` discards them when no
        client came back within ``idle_evict``."""
        state.clients.discard(client)
        if not state.clients:
            if dropped and not state.materialized and state.pending:
                state.last_active = time.monotonic()
                return
            self.exit_cleanup(state)

    def exit_cleanup(self, state: SessionState) -> None:
        """The last client went away (Close, a dropped connection, or shutdown):
        re-append the current metadata at EOF so listing finds it in the tail
        window, and let go of a pending buffer that never became a file. (A
        Close answers once the session's queues, the re-append included, are
        written: SPEC 3.3, the re-append is a sync path.)
        """
        if state.gone:
            return
        if state.materialized:
            lines = state.metadata_lines() if state.dirty_since_meta and not state.exact else []
            if lines:
                self.writer.enqueue(state.main.queue, lines)
                state.dirty_since_meta = False
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

    def evict_for_move(self, state: SessionState) -> list[FileQueue]:
        """Take a session out of memory for good (its files are about to move):
        later requests for it start afresh (or are refused, see ``unavailable``).
        Returns its queues, to be closed once written. Never called for a
        session holding entries before its first message (``sessiond/daemon/trash.py``)."""
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

