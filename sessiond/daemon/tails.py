"""Resends' tail reads, off the loop.

An entry without a uuid sent with ``resend=True`` is dropped when a
byte-identical line is already in the last ``RESEND_WINDOW`` (1 MiB) of its
file or still queued: the lost daemon may have written it (unless a line
before it in the batch, for that file, was new: ``Routing``). Reading and
splitting that megabyte took a few ms on the loop per request, so a client
resending in a loop stalled every other client; here it is a fair-share job in
the read pool (``workers``), charged to the client that asked.

While the job runs, the session is held (``Readiness.hold``): its later requests
and every Flush wait, in order, as behind a scan. The file's size is taken when
the hold starts and the job reads the window ending there, so what it reads,
plus the lines queued then (which may be written meanwhile), is exactly what a
read on the loop would have seen. The request then runs again, first in line,
and finds its tails ready.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.store.appendfile import RESEND_WINDOW, tail_lines
from sessiond.store.safeopen import StoreRoot, error_for
from sessiond.wire.errors import SessiondError, io_error

if TYPE_CHECKING:
    from sessiond.wire import messages as m

    from .connection import Connection
    from .filequeue import FileQueue
    from .readiness import Readiness
    from .routing import Batch, Routing
    from .session_state import SessionState, Target
    from .workers import FairShare

Recent = dict[int, set[bytes]]
"""Recent lines per target, keyed by ``id(target)`` (what ``Routing.accept`` takes)."""


def read_tail(root: StoreRoot, path: Path, end: int, window: int = RESEND_WINDOW) -> set[bytes]:
    """The lines of ``path`` in the ``window`` bytes before offset ``end``,
    opened through the store's root (a regular file inside it, never blocking)."""
    if not end:
        return set()
    try:
        fd = root.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return set()
    try:
        return tail_lines(fd, size=end, window=window)
    finally:
        os.close(fd)


def queued_lines(queue: FileQueue, pending: Iterable[bytes] = ()) -> set[bytes]:
    """The lines still queued for a file (and a session's pending ones)."""
    out = set(queue.lines)
    out.update(pending)
    return out


def recent_lines(root: StoreRoot, queue: FileQueue, pending: Iterable[bytes] = (),
                 window: int = RESEND_WINDOW) -> set[bytes]:
    """Lines in the last ``window`` bytes of a queue's file, still queued, or
    pending, read on the loop: a resend whose tails were not read ahead, and
    the check before a resume re-appends metadata (``LITE_WINDOW``)."""
    out = queued_lines(queue, pending)
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


def file_size(path: os.PathLike) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class Tails:
    """Reads, off the loop, the recent lines a resend is deduplicated against,
    holding the session meanwhile, and hands them to the request when it runs again."""

    def __init__(self, root: StoreRoot, readiness: Readiness, routing: Routing, fair: FairShare) -> None:
        self.root = root
        self.readiness = readiness
        self.routing = routing
        self.fair = fair
        self._ready: dict[int, Recent | SessiondError] = {}
        """Per parked request (by ``id`` of the request object, alive while
        parked): the tails read for it, or the error reading them."""

    def recent_for(self, conn: Connection, req: m.Request, batch: Batch) -> Recent | None:
        """The recent lines of every target that an entry without a uuid of
        this resend goes to; None when the request is parked until they are read."""
        ready = self._ready.pop(id(req), None)
        if isinstance(ready, SessiondError):
            raise ready
        state = batch.state
        targets = self._targets(batch)
        if ready is not None:
            for target in targets:  # what was queued while the job ran
                ready[id(target)] |= self._queued(state, target)
            return ready
        if not targets:
            return {}
        jobs = [(t, self._queued(state, t), file_size(t.queue.path)) for t in targets]
        fut = self.fair.submit(_read_all, self.root, [(t.queue.path, end) for t, _, end in jobs],
                               owner=conn.id)
        self.readiness.hold(state)

        def done(f) -> None:
            if f.cancelled():  # the read pool shut down: the daemon is exiting
                return
            exc = f.exception()
            if exc is None:
                self._ready[id(req)] = {id(t): queued | lines for (t, queued, _), lines in zip(jobs, f.result())}
            else:
                self._ready[id(req)] = io_error(f"cannot read the tail of {state.path.name}: {exc}")
            self.readiness.release(state, first=lambda: conn.redispatch(req))

        fut.add_done_callback(done)
        return None

    def _targets(self, batch: Batch) -> list[Target]:
        if all(h.uuid is not None for h in batch.headers):
            return []
        out: dict[int, Target] = {}
        for header, target in zip(batch.headers, self.routing.resolve(batch)):
            if header.uuid is None:
                out.setdefault(id(target), target)
        return list(out.values())

    @staticmethod
    def _queued(state: SessionState, target: Target) -> set[bytes]:
        return queued_lines(target.queue, state.pending if target is state.main else ())


def _read_all(root: StoreRoot, jobs: Iterable[tuple[Path, int]]) -> list[set[bytes]]:
    return [read_tail(root, path, end) for path, end in jobs]
