"""What the daemon holds of one session: its targets (the main transcript and
each agent file, each with its queue, dedup set and chain end), the pending
buffer of a session with no message yet, the metadata cache and who is attached.

Plain state, no policy: the registry (``sessions``) creates, loads and evicts
it, routing (``routing``) fills it. Its own module so the modules that only
look at a session (tails, spool, compaction, connection) need neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.store import paths
from sessiond.store.entries import REAPPENDED_METADATA
from sessiond.store.jsonl import SessionScan, scan_session
from sessiond.store.lite import METADATA_MAX
from sessiond.store.recording import Cursor
from sessiond.wire.errors import SessiondError

from .filequeue import FileQueue
from .uuidset import DedupSet, dedup_set

if TYPE_CHECKING:
    from .uuidset import AnyUuidSet
    from .writer import Writer


class Target:
    """One transcript file: its write queue, its dedup set, where its chain ends
    (``last``; ``cursor``: the recording state behind it, recording.Cursor)."""

    __slots__ = ("queue", "uuids", "last", "cursor")

    def __init__(self, queue: FileQueue, uuids: AnyUuidSet, last: str | None) -> None:
        self.queue = queue
        self.uuids = uuids
        self.last = last
        self.cursor: Cursor | None = None


class SessionState:
    """One session as the daemon holds it between requests: where it writes,
    what it has already accepted (dedup sets, chain ends), what it holds
    before its first message, its metadata and its clients."""

    __slots__ = (
        "id", "project", "path", "materialized", "pending", "pending_bytes",
        "metadata", "dirty_since_meta", "side_uuids", "main", "agents", "clients",
        "last_active", "loading", "load_error", "cwd", "scans", "agent_errors", "gone", "exact",
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
        self.side_uuids: AnyUuidSet = DedupSet()
        self.main = Target(writer.queue(self.path), DedupSet(), None)
        self.gone = False
        self.exact = False
        """An ``Append.exact`` touched it: its files are copies of files kept
        elsewhere, so nothing is held for a first message and the daemon adds
        no line of its own (metadata re-appends)."""
        """Its files were moved away (trash): nothing may be written for it any more,
        not even the exit cleanup of a client still attached."""

    def apply_scan(self, scanned: tuple[SessionScan, AnyUuidSet, AnyUuidSet]) -> None:
        """What an existing transcript tells (``scan_for_state``): dedup sets,
        chain end, metadata."""
        scan, self.main.uuids, self.side_uuids = scanned
        self.materialized = True
        found = {k: line for k, line in scan.metadata.items() if len(line) <= METADATA_MAX}
        self.metadata = {**found, **self.metadata}
        self.main.last = scan.cursor.tip
        self.main.cursor = scan.cursor

    def remember_metadata(self, kind: str, line: bytes) -> None:
        """``line`` is now the current metadata of its ``kind``: kept for the
        re-append when a listing can find it in a file's tail
        (``lite.METADATA_MAX``). A longer one (any client may append one) stays
        where it was written and is never re-appended: no reader of the tail
        would see it again, and re-appending it at every client's exit would
        only grow the file by its size a close. So nothing of its kind is kept
        (an older value is no longer current), and the session does not hold
        megabytes of metadata it will never write."""
        if len(line) <= METADATA_MAX:
            self.metadata[kind] = line
        else:
            self.metadata.pop(kind, None)

    def metadata_lines(self) -> list[bytes]:
        """The metadata to re-append at EOF, in its fixed order (each line one
        a listing finds in a tail: ``remember_metadata``)."""
        return [line for k in REAPPENDED_METADATA if (line := self.metadata.get(k)) is not None]

    def targets(self) -> list[Target]:
        return [self.main, *self.agents.values()]

    @property
    def idle(self) -> bool:
        return (not self.clients and self.loading is None and not self.pending
                and all(t.queue.idle for t in self.targets()))


def scan_for_state(fd: int) -> tuple[SessionScan, AnyUuidSet, AnyUuidSet]:
    """Scan a transcript and make its dedup sets, in the same thread (a worker
    for a big file): what ``SessionState.apply_scan`` takes."""
    scan = scan_session(fd)
    return scan, dedup_set(scan.uuids), dedup_set(scan.sidechain_uuids)
