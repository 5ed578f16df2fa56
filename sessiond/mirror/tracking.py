"""What the mirror keeps track of: each file's watermarks, the set of files it
follows with the work each has, and what went wrong.

Why it exists: every other part of the mirror (the backlog, the waiters, the
pump, the state file) reads or advances these; one plain record per file
(``TrackedFile``), one owner of the set of them and of their work queue
(``TrackedFiles``), and one count of errors (``Errors``) are what they share."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.config import MirrorSettings
from sessiond.mirror.stream_format import HDR_FILE, HDR_PROJECT, FileRef, file_ref

from . import waiters
from .jetstream import mirror_error

if TYPE_CHECKING:
    from .backlog import Backlog

log = logging.getLogger("sessiond")

IDLE_EVICT = 30.0
"""Seconds a fully mirrored file stays tracked after its last write."""
CLEAN_REMEMBERED = 10_000
"""Evicted files whose mirrored size is remembered (their next write then
needs no question to the stream)."""

# --------------------------------------------------------------- per-file state


class TrackedFile:
    """One transcript as the mirror sees it: what is written, what is acked."""

    __slots__ = (
        "path", "ref", "subject", "headers", "acked", "sent", "size", "resolved", "last_seq",
        "mem", "mem_start", "mem_end", "inflight", "broken", "waiters", "touched",
    )

    def __init__(self, path: Path, ref: FileRef, prefix: str) -> None:
        self.path = path
        self.ref = ref
        self.subject = ref.subject(prefix)
        self.headers = {HDR_PROJECT: ref.project, HDR_FILE: ref.rel}
        self.acked = 0
        """Bytes [0, acked) are in the stream: only contiguous acks advance it."""
        self.sent = 0
        """Bytes [0, sent) were handed to the connection."""
        self.size = -1
        """The file's known end (-1: never seen)."""
        self.resolved = False
        """``acked`` is known: a new file, or the stream was asked."""
        self.last_seq = 0
        """Stream sequence of the file's last range: each publish expects it
        (``Nats-Expected-Last-Subject-Sequence``), so a second writer of the same
        file, or a resend of a range that did arrive, is refused by the server
        instead of making a fork or a duplicate."""
        self.mem: deque[list] = deque()  # [bytes, pos] of observed writes, not yet sent
        self.mem_start = 0
        self.mem_end = 0
        self.inflight: deque[tuple[int, asyncio.Future, float, int]] = deque()  # (end, future, sent at, size)
        self.broken: str | None = None
        self.waiters: list[tuple[int, waiters.Countdown]] = []  # see waiters.py
        self.touched = time.monotonic()

    @property
    def lag(self) -> int:
        if self.size < 0 or self.broken:
            return 0
        return max(0, self.size - self.acked)


# ------------------------------------------------------------------ what went wrong


class Errors:
    """What went wrong, for ``status`` and ``push``: how many times, and the
    last reason (cleared once the mirror is connected again)."""

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last: str | None = None

    def note(self, why: str) -> None:
        """One more error: counted, and shown as the last one."""
        self.count += 1
        self.last = why


# ------------------------------------------------------------- the tracked files


class TrackedFiles:
    """The files the mirror follows and which of them have work to do.

    Owns the set (found by path, forgotten when idle and fully mirrored, the
    mirrored size of forgotten ones remembered), the work queue the pump takes
    files from (``work``, an ordered set, and ``wake``, set when something is
    queued), the files with acknowledgements or durable acks outstanding
    (``busy``), and marking a file diverged (``mark_broken``)."""

    def __init__(self, cfg: MirrorSettings, projects: Path, backlog: Backlog, errors: Errors) -> None:
        self.cfg = cfg
        self.projects = projects
        self.backlog = backlog
        self.errors = errors
        self.files: dict[Path, TrackedFile] = {}
        self.work: dict[TrackedFile, None] = {}
        """Files with something to publish or to resolve, oldest first."""
        self.wake = asyncio.Event()
        """Set when a file is queued (or the pump has another reason to look again)."""
        self.busy: set[TrackedFile] = set()
        """Files with acknowledgements outstanding or durable acks waiting."""
        self.broken_sessions: dict[str, str] = {}
        """Sessions with a diverged file, and why: required mode refuses their appends."""
        self._ignored: set[Path] = set()
        self._clean: OrderedDict[Path, tuple[int, int]] = OrderedDict()  # evicted, mirrored: path -> (size, last_seq)

    def track(self, path: Path) -> TrackedFile | None:
        """The tracked file at ``path``, tracked from now on if it was not;
        None for a path that is no transcript of the root (warned once)."""
        f = self.files.get(path)
        if f is not None or path in self._ignored:
            return f
        ref = file_ref(self.projects, path)
        if ref is None:
            self._ignored.add(path)
            log.warning("mirror: %s is not a transcript path the mirror knows; not mirrored", path)
            return None
        f = self.files[path] = TrackedFile(path, ref, self.cfg.subject_prefix)
        return f

    def recall(self, path: Path) -> tuple[int, int] | None:
        """The (mirrored size, last sequence) of ``path`` when it was evicted
        fully mirrored; forgotten once asked."""
        return self._clean.pop(path, None)

    def schedule(self, f: TrackedFile) -> None:
        """``f`` has something to publish (or to resolve)."""
        self.work[f] = None
        self.wake.set()

    def forget(self, path: Path) -> None:
        """Stop tracking ``path``: its held bytes and its place in the queue go."""
        f = self.files.pop(path, None)
        if f is not None:
            self.backlog.drop(f)
            self.work.pop(f, None)

    def mark_broken(self, f: TrackedFile, why: str) -> None:
        """``f`` can no longer be mirrored (its remote copy diverged, it is gone):
        its session is flagged, its held bytes dropped, its durable acks failed."""
        if f.broken:
            return
        f.broken = why
        self.errors.note(why)
        self.broken_sessions[f.ref.session] = why
        log.error("mirror: %s: %s; this file is no longer mirrored", f.path, why)
        self.backlog.drop(f)
        waiters.fail(f, mirror_error(f"the mirror cannot take {f.path.name}: {why}"))

    def fail_waiters(self, why: str) -> None:
        """Required mode: every durable ack waiting for the mirror fails."""
        err = mirror_error(f"written locally, but not confirmed by the mirror: {why}")
        for f in list(self.busy):
            waiters.fail(f, err)

    def evict(self) -> None:
        """Forget files that are fully mirrored and idle (remember their size, so
        their next write needs no question to the stream)."""
        cutoff = time.monotonic() - IDLE_EVICT
        for path, f in list(self.files.items()):
            if (f.resolved and not f.broken and f.acked == f.size and not f.inflight and not f.waiters
                    and not f.mem and f.touched < cutoff and f not in self.work):
                del self.files[path]
                self.busy.discard(f)
                self._clean[path] = (f.size, f.last_seq)
                if len(self._clean) > CLEAN_REMEMBERED:
                    self._clean.popitem(last=False)

    def lag(self) -> tuple[int, int]:
        """(lagging bytes, lagging files)."""
        total = files = 0
        for f in self.files.values():
            lag = f.lag
            if lag:
                total += lag
                files += 1
        return total, files

    def pending(self) -> bool:
        """Whether anything written is not acknowledged yet (or not known to be)."""
        return any(f.lag or not f.resolved for f in self.files.values() if not f.broken and f.size >= 0)

    def lagging(self) -> dict[str, int | None]:
        """The files the next run must catch up, and their watermarks (the state file's content)."""
        return {str(f.path): f.acked for f in self.files.values()
                if not f.broken and f.size >= 0 and (f.lag or not f.resolved)}
