"""Held entries on disk: the daemon side of ``sessiond/store/spoolfile.py``.

Entries a session receives before its first message are held in memory (the
pending buffer of ``sessions.py``) AND appended to the session's spool file
through the writer, like any transcript line: the acknowledgement of a held
entry waits on the spool file's queue, so ``written`` and ``durable`` mean what
they mean everywhere (in a file; synced). When the session materializes, its
transcript gets the held entries first; the spool file is deleted once the
transcript holds them durably (one fdatasync of the new file). A session that
ends without a message leaves no transcript, and its spool file is deleted.

At start, before the first connection is served, ``replay`` holds again what
a crashed daemon spooled: a session still without a transcript gets its pending
buffer back (so a client's resend is deduplicated against it and its first
message writes them first); a session whose transcript exists (the crash came
between materializing and deleting the spool) gets the entries its file lacks
appended, and nothing twice.

Bounded: a session's held bytes are capped by ``max_pending_bytes`` (the
pending buffer's cap, checked before anything is held); ``held_bytes`` is the
total, for status and for a global budget.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.store.appendfile import ensure_dir
from sessiond.store.paths import check_inside, is_session_id
from sessiond.store.safeopen import OversizedFile, StoreRoot, UnsafePath
from sessiond.store.spoolfile import HEADER_SLACK, header_line, read_spool, spool_dir, spool_path
from sessiond.store.statefile import not_used, set_aside
from sessiond.wire.core import StateFileProblem
from sessiond.wire.errors import SessiondError, io_error

from .filequeue import FileQueue
from .handlers.completion import after_all
from .writer import Writer

if TYPE_CHECKING:
    from .session_state import SessionState
    from .sessions import Registry

log = logging.getLogger("sessiond")


class Spool:
    """The spool files of sessions holding entries before their first message:
    each held entry is written there (so its ack means what it means
    everywhere), the file is deleted once the transcript holds them, and what a
    previous daemon left is held again at start (``replay``)."""

    def __init__(self, root: Path, writer: Writer) -> None:
        self.root = root
        self.writer = writer
        self.problems: list[StateFileProblem] = []
        """Spool files ``replay`` did not use: left in place (not a regular
        file, not a spool), or set aside (bigger than any session may hold)."""
        self.queues: dict[str, FileQueue] = {}
        """Session id -> the queue of its spool file, while the session holds entries."""
        self.sizes: dict[str, int] = {}
        self.held_bytes = 0
        """Bytes spooled for sessions that have not materialized (the budget hook)."""
        self._lingering: list[FileQueue] = []
        """Queues of deleted spool files still busy (a sync in flight): dropped by ``sweep``."""

    def queue_of(self, session_id: str) -> FileQueue | None:
        return self.queues.get(session_id)

    def prepare(self, state: SessionState) -> FileQueue:
        """The session's spool queue, made (and its directory) before a batch is
        accepted, so a refusal (a planted symlink, a directory that cannot be
        made) changes nothing."""
        q = self.queues.get(state.id)
        if q is not None:
            return q
        path = spool_path(self.root, state.id)
        try:
            ensure_dir(path.parent)
        except OSError as exc:
            raise io_error(f"cannot make the spool directory: {exc.strerror or exc}") from None
        check_inside(self.root, path)  # a planted symlink never sends held entries outside the root
        q = self.queues[state.id] = self.writer.queue(path)
        if q in self._lingering:  # the session's previous spool file, still busy: in use again
            self._lingering.remove(q)
        q.observed = False  # not a transcript: no catalog, mirror or index sees it
        self.writer.enqueue(q, [header_line(self.root, state.project, state.cwd or "/")])
        return q

    def hold(self, state: SessionState, lines: list[bytes]) -> FileQueue:
        """Append held ``lines`` of ``state`` to its spool file; the queue an
        acknowledgement of them waits on."""
        q = self.prepare(state)
        size = sum(map(len, lines))
        self.sizes[state.id] = self.sizes.get(state.id, 0) + size
        self.held_bytes += size
        self.writer.enqueue(q, lines)
        return q

    def release(self, state: SessionState, transcript: FileQueue | None) -> None:
        """The session no longer holds entries: it materialized (``transcript``:
        the queue its held entries went to) or ended without a message. Delete
        the spool file once its own writes are done (a later drain would
        recreate it) and, after a materialization, once the transcript holding
        those entries is synced."""
        q = self.queues.pop(state.id, None)
        if q is None:
            return
        self.held_bytes -= self.sizes.pop(state.id, 0)

        def delete(err: SessiondError | None) -> None:
            if err is not None:  # kept: the next start reconciles it with the transcript
                log.warning("spool of session %s kept: %s", state.id, err.message)
                return
            if state.id in self.queues:  # held again meanwhile: the file is in use
                return
            try:
                os.unlink(q.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot delete the spool of session %s: %s", state.id, exc.strerror or exc)
            self.writer.forget(q)
            if self.writer.queues.get(q.path) is q:
                self._lingering.append(q)

        if transcript is None:
            self.writer.when_written(q, delete)
            return
        both = after_all(2, delete)
        self.writer.when_written(q, both)
        self.writer.when_durable(transcript, both)

    def sweep(self) -> None:
        """Close the queues of deleted spool files that were still busy."""
        for q in self._lingering:
            self.writer.forget(q)
        self._lingering = [q for q in self._lingering if self.writer.queues.get(q.path) is q]

    def replay(self, registry: Registry) -> int:
        """Hold again what a previous daemon spooled (called before serving);
        the number of sessions found."""
        try:
            check_inside(self.root, spool_dir(self.root))  # a planted symlink: nothing read or deleted out there
            names = sorted(os.listdir(spool_dir(self.root)))
        except (FileNotFoundError, NotADirectoryError):
            return 0
        except SessiondError as exc:
            log.error("not replaying held entries: %s", exc.message)
            return 0
        found = 0
        for name in names:
            if not name.endswith(".jsonl") or not is_session_id(name[:-6]):
                continue
            path = spool_dir(self.root) / name
            try:
                read = read_spool(self.writer.root, path, self.writer.settings.max_pending_bytes + HEADER_SLACK)
            except OversizedFile as exc:  # more than any session may hold: kept aside, never read
                self.problems.append(set_aside(path, exc.strerror or str(exc)))
                continue
            if read is None:
                why = _not_a_spool(self.writer.root, path)
                if why is None:  # created, then killed before its first write: nothing was acknowledged
                    os.unlink(path)
                else:
                    self.problems.append(not_used(path, why))  # left where it is, named in status
                continue
            header, lines = read
            sid = name[:-6]
            try:
                registry.restore_held(sid, self.root / header.project, header.cwd, lines)
            except (SessiondError, OSError) as exc:
                log.error("cannot replay the spool of session %s: %s", sid, exc)
                continue
            found += 1
        if found:
            log.info("replayed the held entries of %d session%s from %s", found, "s" * (found != 1), spool_dir(self.root))
        return found

    def adopt(self, state: SessionState, size: int) -> FileQueue:
        """A replayed session keeps appending to its existing spool file."""
        q = self.queues[state.id] = self.writer.queue(spool_path(self.root, state.id))
        q.observed = False
        self.sizes[state.id] = size
        self.held_bytes += size
        return q


def _not_a_spool(store: StoreRoot, path: Path) -> str | None:
    """Why a file ``read_spool`` refused is kept; None when it holds no whole
    line (the header and the first entries go in one write, so nothing of it
    was ever acknowledged as written) and may go. Opened like every reader
    (``StoreRoot.open``): a FIFO there must not block the start."""
    try:
        fd = store.open(path, os.O_RDONLY)
    except UnsafePath as exc:
        return exc.strerror
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as f:
        return None if b"\n" not in f.read(1 << 20) else "not a spool file"
