"""Getting a session ready without stalling the loop: the registry's part
that resolves a new session's cwd, scans existing files for their uuids, and
parks the session's requests meanwhile.

What is cheap runs inline: a cwd of up to ``INLINE_CWD_LEVELS`` levels, a file
of up to ``INLINE_SCAN_BYTES``. Anything more runs in a worker thread while every
request of that session waits in arrival order (``park_for_cwd``, ``when_loaded``), and
a Flush waits for all of it (``after_loads``); everyone else is served. Every
file is opened through the writer's ``StoreRoot``: a FIFO at a transcript path
is refused, not waited on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.store import paths
from sessiond.store.safeopen import error_for
from sessiond.wire.errors import SessiondError, io_error

if TYPE_CHECKING:
    from sessiond.config import Settings

    from .bounds import Bounds
    from .session_state import SessionState
    from .workers import FairShare
    from .writer import Writer

log = logging.getLogger("sessiond")

INLINE_SCAN_BYTES = 4 * 1024 * 1024
"""Existing files (main transcripts and agent files alike) up to this size are
scanned on the loop (a few ms); larger ones in a worker thread."""

INLINE_CWD_LEVELS = 32
"""A new session's cwd of up to this many levels is resolved (realpath, NFC,
sanitizing) on the loop, in well under a millisecond; a deeper one in a worker
thread: realpath's cost grows with the square of the depth, and a cwd of
thousands of levels would hold the loop."""


class Readiness:
    """Gets sessions ready to write without stalling the loop: resolves a deep
    cwd and scans a big existing file in worker threads, and parks the requests
    that wait for either (per session, in arrival order; a Flush behind all of
    them). Each parked request counts against ``max_parked_requests``."""

    def __init__(self, settings: Settings, writer: Writer, bounds: Bounds, fair: FairShare | None) -> None:
        self.settings = settings
        self.writer = writer
        self.bounds = bounds
        self.fair = fair
        """Where big scans run, charged to the asking client (None: the loop's
        default executor)."""
        self.loads_in_flight = 0
        self._after_loads: list[Callable[[], None]] = []
        self._resolving: dict[str, list[Callable[[], None]]] = {}
        """New sessions whose cwd is resolved in a worker: the requests waiting."""
        self._unresolved: dict[str, SessiondError] = {}
        """Sessions whose cwd could not be used: the error, while the requests
        that waited for it are run again (and get it)."""

    def park_for_cwd(self, session_id: str, cwd: str, create: Callable[[str, Path], object],
                     resume: Callable[..., None], *args: object) -> bool:
        """For a session not in memory: True when ``resume(*args)`` is parked
        until its cwd is resolved in a worker (a deep one, or one being resolved
        already); ``create(session_id, project)`` then makes the session unless
        it exists by then. False: the cwd is resolved inline, by the caller."""
        failed = self._unresolved.get(session_id)
        if failed is not None:
            raise failed
        waiting = self._resolving.get(session_id)
        if waiting is None and cwd.count("/") > INLINE_CWD_LEVELS:
            paths.check_session_id(session_id)
            paths.check_cwd(cwd)
            waiting = self._resolving[session_id] = []
            self.loads_in_flight += 1
            fut = self.writer.loop.run_in_executor(None, self._resolve_cwd, session_id, cwd)
            fut.add_done_callback(lambda f: self._cwd_resolved(session_id, create, f))
        if waiting is None:
            return False
        self.bounds.park()
        waiting.append(partial(resume, *args))
        return True

    def _resolve_cwd(self, session_id: str, cwd: str) -> Path:
        """Worker thread: the project directory of a deep cwd, checked."""
        project = paths.project_dir(self.settings.root, cwd)
        self.check(paths.session_file(project, session_id))
        return project

    def _cwd_resolved(self, session_id: str, create: Callable[[str, Path], object], fut) -> None:
        waiting = self._resolving.pop(session_id)
        self.bounds.unpark(len(waiting))
        exc = fut.exception()
        if exc is None:
            try:
                create(session_id, fut.result())
            except SessiondError as err:
                exc = err
        if exc is not None:
            if not isinstance(exc, SessiondError):
                log.error("resolving the cwd of session %s failed: %r", session_id, exc)
                exc = io_error(f"cannot resolve the cwd of session {session_id}: {exc}")
            self._unresolved[session_id] = exc
        try:
            for resume in waiting:
                resume()
        finally:
            self._unresolved.pop(session_id, None)
            self._load_done()

    def check(self, path: Path) -> None:
        """Refuse a target the writer would refuse (a symlink on the way, not a
        regular file) at the request that names it, not at its first write."""
        try:
            self.writer.root.check(path)
        except OSError as exc:
            raise error_for(exc, f"checking {path.name}") from None

    def scan(self, state: SessionState, path: Path, scan: Callable[[int], object], apply: Callable[..., None],
             failed: Callable[[SessiondError], None]) -> bool:
        """Scan the existing file at ``path`` and ``apply`` the result: on the
        loop when small, else in a worker thread while every request of the
        session waits in order (``state.loading``); ``failed`` gets the error of
        a scan in a worker. False when there is no file. The file is opened
        through the root (a FIFO there must not block the loop)."""
        try:
            fd = self.writer.root.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise error_for(exc, f"reading {path.name}") from None
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise error_for(exc, f"reading {path.name}") from None
        if size <= INLINE_SCAN_BYTES:
            try:
                apply(scan(fd))
            except OSError as exc:
                raise error_for(exc, f"reading {path.name}") from None
            finally:
                os.close(fd)
            return True
        try:
            if self.fair is not None:
                fut = self.fair.submit(_scan_and_close, scan, fd)
            else:
                fut = self.writer.loop.run_in_executor(None, _scan_and_close, scan, fd)
        except BaseException:  # busy: that client has too many jobs waiting
            os.close(fd)
            raise
        if state.loading is None:
            state.loading = []
        state.scans += 1
        self.loads_in_flight += 1
        fut.add_done_callback(lambda f: self._scanned(state, path, apply, failed, f))
        return True

    def _scanned(self, state: SessionState, path: Path, apply: Callable[..., None],
                 failed: Callable[[SessiondError], None], fut) -> None:
        if fut.cancelled():  # the read pool shut down: the daemon is exiting
            return
        exc = fut.exception()
        if exc is None:
            apply(fut.result())
        else:
            log.error("scanning %s failed: %s", path, exc)
            failed(error_for(exc, f"reading {path.name}") if isinstance(exc, OSError) else io_error(f"cannot read {path.name}: {exc}"))
        state.scans -= 1
        if not state.scans:
            waiting, state.loading = state.loading or [], None
            self.bounds.unpark(len(waiting))
            for resume in waiting:
                resume()
        self._load_done()

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
            state.loading.insert(0, first)  # type: ignore[union-attr]  # a list while a scan runs
        else:
            waiting, state.loading = state.loading or [], None
            first()
            for resume in waiting:
                resume()
        self._load_done()

    def _load_done(self) -> None:
        self.loads_in_flight -= 1
        if not self.loads_in_flight:
            after, self._after_loads = self._after_loads, []
            self.bounds.unpark(len(after))
            for resume in after:
                resume()

    def when_loaded(self, state: SessionState, resume: Callable[..., None], *args: object) -> bool:
        """Park ``resume(*args)`` until the session's file is scanned; False when
        it is. Arguments rather than a closure: every append asks, nearly none waits."""
        if state.loading is None:
            return False
        self.bounds.park()
        state.loading.append(partial(resume, *args))
        return True

    def after_loads(self, resume: Callable[..., None], *args: object) -> bool:
        """Park ``resume(*args)`` until no scan is in flight (a Flush must see
        every append that arrived before it); False when none is."""
        if not self.loads_in_flight:
            return False
        self.bounds.park()
        self._after_loads.append(partial(resume, *args))
        return True


def _scan_and_close(scan: Callable[[int], object], fd: int) -> object:
    """A worker thread's scan of a descriptor it then closes."""
    try:
        return scan(fd)
    finally:
        os.close(fd)
