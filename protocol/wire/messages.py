"""Every message on the socket: one msgspec Struct per request and per result.

Requests and responses are two tagged unions (the tag is the class name, in the
``op`` field), decoded by one typed decoder each, so an unknown or malformed message
is a typed error and never a crash. Every request carries an ``id`` that its
response echoes, so a client may pipeline. Transcript entries travel as the client's
JSON bytes, one object each; the daemon writes them unchanged.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ..lease import LeaseHolder
from ..search.hit import MAX_LIMIT, Hit
from ..statefile import StateFileProblem
from ..transcript.session_info import SessionInfo
from .frames import (
    MAX_COUNT,
)
from .frames import (
    PROTOCOL_VERSION as PROTOCOL_VERSION,  # re-exported: m.PROTOCOL_VERSION is what the handshake sends
)
from .records import FileResult, PathBytes, PathText, SessionSource, TrashEntry
from .records import Usage as UsageReport

Durability = Literal["queued", "written", "durable"]
"""When an append is acknowledged: accepted into the queue, written with write(2),
or written and fdatasync'ed."""

DURABILITIES: tuple[str, ...] = ("queued", "written", "durable")

MAX_BATCH_ENTRIES = 100_000
"""Entries one Append or Record may carry. msgspec checks an array's announced
length before it builds a single element, so a frame of millions of tiny
entries (each a Python object some 20x its wire size) is refused for what it
weighs on the wire, not decoded into gigabytes."""

MAX_LIST_DIRS = 4096
"""Project dirs one List, Search, Reindex or Usage may name (a repository's
worktrees are a handful)."""

ProjectDirs = Annotated[list[PathText], msgspec.Meta(max_length=MAX_LIST_DIRS)]

# Every number a client sends is range-checked as it is decoded, so a value no
# handler can use (a negative offset, a count past what a file offset or SQLite
# integer holds, a NaN or infinite age) is ``bad_request`` naming the field
# (msgspec's "Expected `int` >= 0 - at `$.offset`"), never an OverflowError
# deep inside the daemon.

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
"""A count, a byte offset or an id: 0 to ``MAX_COUNT``."""

MAX_PID = 1 << 22
"""Linux's PID_MAX_LIMIT."""

MAX_AGE_SECONDS = 1000 * 366 * 86400.0
"""The longest age a request may name (a thousand years): past it a date is
out of ``datetime``'s range."""

Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_AGE_SECONDS)]
"""An age in seconds: finite, not negative."""

MAX_SINCE_CHARS = 64
"""An ISO-8601 date-time is some 30 characters."""

ProjectName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,255}$")]
"""A project dir's name: what Claude Code's sanitizing of a cwd leaves (no
``/``, no ``.``, so never a path out of ``projects/``)."""

EntryBatch = Annotated[list[bytes], msgspec.Meta(max_length=MAX_BATCH_ENTRIES)]


class _Message(msgspec.Struct, tag_field="op", tag=True, omit_defaults=True, forbid_unknown_fields=False):
    pass


# ----------------------------------------------------------------------- requests


class Hello(_Message):
    id: Count
    protocol_version: Count
    client: str = ""
    pid: Annotated[int, msgspec.Meta(ge=0, le=MAX_PID)] = 0


class Open(_Message):
    """Attach this connection to a session; the file is still created lazily."""

    id: Count
    session: str
    cwd: str
    lease: bool = False
    """Claim the session's lease (SPEC 7): refused with ``session_busy`` while
    another client holds it."""
    take_over: bool = False
    """Take the lease from its holder on purpose (see ``Adopt.take_over``)."""


class Append(_Message):
    """Raw entries, stored as they are (deduplicated and routed)."""

    id: Count
    session: str
    cwd: str
    entries: EntryBatch
    durability: Durability = "queued"
    agent: str | None = None
    """Route every entry of the batch to this agent's transcript."""
    run: str | None = None
    """Workflow run id: agent files go under ``subagents/workflows/<run>/``."""
    resend: bool = False
    """A client resending after losing its daemon: an entry WITHOUT a uuid is
    dropped if a byte-identical line is already near the end of its file (the
    lost daemon may have written it). Entries with a uuid are always deduped."""
    lease: bool = False
    """Claim (or keep) the session's lease with this batch; see ``Open.lease``."""
    exact: bool = False
    """The batch is a copy of a file its writer keeps elsewhere (the Agent SDK's
    SessionStore mirror): written at once, never held for the session's first
    user/assistant message (lazy materialization), and the daemon adds no line
    of its own to the session from then on (no metadata re-appended at exit, on
    adopt or before a compaction boundary), so the file is the copy, line for line."""
    project: ProjectName | None = None
    """The project dir (a name under ``projects/``, as Claude Code sanitizes a
    cwd) to place a new session in, instead of ``cwd``'s: the Agent SDK names a
    session by its project key, which is that name and not a path. A session
    already open in another project dir is ``bad_request``."""


class Record(_Message):
    """Messages to chain (SPEC 3.1): the daemon stamps ``parentUuid`` on each.

    ``parent`` is the hint returned by the previous Record of this process; when
    absent the chain continues after the session's last recorded participant.
    """

    id: Count
    session: str
    cwd: str
    messages: EntryBatch
    parent: str | None = None
    durability: Durability = "queued"
    agent: str | None = None
    run: str | None = None
    resend: bool = False
    lease: bool = False


class SetAgentMeta(_Message):
    """Write ``agent-<agent>.meta.json`` (replaced atomically)."""

    id: Count
    session: str
    cwd: str
    agent: str
    meta: bytes
    run: str | None = None


class Adopt(_Message):
    """Resume adopts a file (SPEC 4): later appends of the session go to it, and
    its metadata is re-appended at EOF unless already in the tail window."""

    id: Count
    session: str
    path: PathText
    lease: bool = False
    """Claim the lease as well (``session_busy`` while another client holds it)."""
    take_over: bool = False
    """Take the lease from its holder on purpose: the old holder's acknowledged
    entries are written before the answer (so a load after it sees them), and
    its later chain entries get ``lease_lost``. With ``lease`` the lease moves to
    this connection; without, it is left free for the next claimant (the CLI's
    ``resume --take-over``, which only loads)."""
    refuse_live: bool = False
    """``session_busy`` if another client holds the session, without claiming
    it (the CLI's ``resume``: it checks, the agent after it claims)."""


class Subscribe(_Message):
    """Stream a session's entries as they are written (answers: ``Subscribed``,
    then ``Entries`` frames with this request's id until ``Unsubscribed``).

    Where to start: ``offset`` (a byte offset of the main transcript), else the
    ``last`` N entries, else the current end. ``path`` names the main transcript
    when the client found it (another project dir); else ``cwd`` does."""

    id: Count
    session: str
    cwd: str | None = None
    path: PathText | None = None
    offset: Count | None = None
    last: Count | None = None
    agents: bool = False
    """Also every agent (subagent) file of the session, from its current end
    (new ones from their start)."""


class Unsubscribe(_Message):
    id: Count
    subscription: Count
    """The ``id`` of the Subscribe to cancel."""


class List(_Message):
    """Sessions of some project dirs (or every project), newest first."""

    id: Count
    dirs: ProjectDirs = []
    all: bool = False
    limit: Count | None = None
    offset: Count = 0
    every: bool = False
    """Also the sessions a listing hides because they have no user/assistant
    message yet (metadata only: what an Agent SDK store holds of a session
    that has only titles or entries of its own types)."""


class Flush(_Message):
    """Resolves once everything accepted before it is written (and synced if asked)."""

    id: Count
    session: str | None = None
    durable: bool = False


class Close(_Message):
    """Detach from a session; the last client's Close runs exit cleanup."""

    id: Count
    session: str


class Status(_Message):
    id: Count


class Shutdown(_Message):
    id: Count


# Lifecycle (SPEC 9): file operations the daemon performs itself, so its
# sessions, catalog and open files learn of them at once.


class Trash(_Message):
    """Move a session (its transcript at ``path``, its ``<id>/`` dir) into the
    trash. Refused (``conflict``) while clients are attached, unless ``force``."""

    id: Count
    session: str
    path: PathText
    force: bool = False
    reason: str = "rm"
    raw_path: PathBytes | None = None
    """``path``'s bytes when they are not UTF-8 (``records.path_text``)."""
    agent: str | None = None
    """Only this agent's transcript of the session
    (``<id>/subagents/[workflows/<run>/]agent-<agent>.jsonl``) goes into the
    trash, in an entry of its own; the session and its other files stay, and
    ``path`` (the main transcript) need not exist."""
    run: str | None = None


class Restore(_Message):
    id: Count
    session: str


class EmptyTrash(_Message):
    id: Count
    older_than: Seconds | None = None
    """Seconds: only entries trashed longer ago than this."""
    dry_run: bool = False


class Import(_Message):
    """Copy one session's files into the store, each byte for byte."""

    id: Count
    source: SessionSource
    catalog_only: bool = False
    """The source is the store itself: nothing to copy, the catalog learns of it."""


class Usage(_Message):
    """Bytes per project and per session (subagent files included)."""

    id: Count
    dirs: ProjectDirs = []
    all: bool = False


class Search(_Message):
    """Full-text search of the index (SPEC 8): words and "phrases", best sessions first."""

    id: Count
    query: str
    dirs: ProjectDirs = []
    all: bool = False
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT)] = 20
    since: Annotated[str, msgspec.Meta(max_length=MAX_SINCE_CHARS)] | None = None
    """ISO-8601 UTC; only entries at or after it."""
    role: str | None = None
    """``user``, ``assistant`` or ``tool``."""


class Reindex(_Message):
    """Rebuild the search index of some project dirs (or all) from the files."""

    id: Count
    dirs: ProjectDirs = []
    all: bool = False


Request = (Hello | Open | Append | Record | SetAgentMeta | Adopt | List | Flush | Close | Status | Shutdown
           | Trash | Restore | EmptyTrash | Import | Usage | Search | Reindex | Subscribe | Unsubscribe)


# ---------------------------------------------------------------------- responses


class Welcome(_Message):
    id: int
    protocol_version: int
    daemon_version: str
    pid: int
    max_frame_bytes: int = 0
    """The daemon's frame cap, so a client splits batches and refuses an entry
    that cannot fit; 0 (an older daemon): the default cap."""
    root: str = ""
    """The store root the daemon serves, so a client that names another root
    (``--root``, ``SESSIOND_ROOT``) learns at once that this daemon's files are
    not its own and sends it nothing; "" (an older daemon): unknown."""


class Opened(_Message):
    id: int
    session: str
    path: str
    materialized: bool
    holder: LeaseHolder | None = None
    """The lease, when this connection claimed it."""


class Adopted(_Message):
    id: int
    session: str
    path: str
    reappended: int = 0
    """Metadata entries re-appended at EOF."""


class Listed(_Message):
    id: int
    sessions: list[SessionInfo]


class Appended(_Message):
    id: int
    accepted: int
    duplicates: int = 0
    last: str | None = None
    """Record only: uuid of the last chain participant, the next call's hint."""
    pending: int = 0
    """Entries of this session held before its first user/assistant message, in
    no file yet (lazy materialization): written with that message, dropped if
    the session closes without one. 0 once the session has its file."""


class Flushed(_Message):
    id: int
    files: int = 0


class Done(_Message):
    """Plain success for requests that have nothing else to say."""

    id: int


class StatusResult(_Message):
    id: int
    pid: int
    version: str
    root: str
    socket: str
    uptime: float
    sessions: int
    materialized: int
    clients: int
    queuedEntries: int
    queuedBytes: int
    pendingEntries: int
    writes: int
    bytesWritten: int
    fsyncs: int
    errors: int
    config: dict[str, str | int | float | bool]
    mirror: dict[str, str | int | float | bool | None] | None = None
    """The remote mirror's state (servers, connected, lag), when one is configured."""
    spooledBytes: int = 0
    """Bytes of entries held before their session's first message, on disk in the spool."""
    pendingBytes: int = 0
    """Bytes of pre-message entries held across all sessions (in memory, beside the spool)."""
    budgets: dict[str, dict[str, int]] | None = None
    """Every memory budget: ``{name: {"used": n, "limit": n}}`` (daemon/bounds.py)."""
    workers: dict[str, int] | None = None
    """The read pool's fair share: threads, jobs running and waiting, requests refused ``busy``."""
    memory: dict[str, int] | None = None
    """RSS, and the uuids held for dedup (how many, how many not packed yet, bytes of the packed ones)."""
    index: dict[str, str | int | float | bool | None] | None = None
    """The search indexer's state, when the index is on."""
    live: list[LeaseHolder] = []
    """Sessions held by a writing client (SPEC 7)."""
    watchers: int = 0
    """Subscriptions streaming entries to clients."""
    follow: dict[str, int] | None = None
    """The follower of foreign writers: files followed, inotify watches held,
    dirs re-stat'ed instead, lines and bytes passed on, bytes known at start,
    bytes re-hashed to look for rewrites, files read again from 0 (resets)."""
    stateFiles: list[StateFileProblem] = []
    """The daemon's own state files it found unusable at its start (not a
    regular file, too big, not valid) and set aside instead of reading."""


class Subscribed(_Message):
    id: int
    session: str
    path: str
    offset: int
    """Where the stream of the main transcript starts."""


class Entries(_Message):
    """Lines of one file of a subscribed session, pushed as they are written
    (``id``: the Subscribe's). ``file`` is the path relative to the session's
    project dir (``<id>.jsonl`` or ``<id>/subagents/agent-<a>.jsonl``); the
    lines occupy the bytes from ``offset`` on, one newline after each. Each
    frame of a file starts where the last one ended plus ``skipped`` (or at 0
    after a ``reset``): a slow watcher is fed from the file at its own pace,
    never skipped ahead; only a line no frame may carry is passed over."""

    id: int
    file: str
    offset: int
    lines: list[bytes]
    reset: bool = False
    """The file was replaced or truncated: ``offset`` counts from its new start."""
    skipped: int = 0
    """Bytes just before ``offset`` (lines with their newlines) not sent: lines
    longer than the line cap (``protocol/transcript/linecap.py``) or than a
    frame of this daemon carries. (0 from a daemon that never skips: the field
    once counted what a watcher buffer dropped, and was gone for a while.)"""


class Unsubscribed(_Message):
    """The stream ended: cancelled (``Unsubscribe``), or the file went away."""

    id: int
    reason: str


class Error(_Message):
    id: int
    code: str
    message: str
    holder: LeaseHolder | None = None
    """Who holds the session, for ``session_busy`` and ``lease_lost``."""


class TrashChanged(_Message):
    """The trash entries a Trash, Restore or EmptyTrash moved or deleted."""

    id: int
    entries: list[TrashEntry]


class Imported(_Message):
    id: int
    session: str
    files: list[FileResult]


class UsageResult(_Message):
    id: int
    usage: UsageReport


class Searched(_Message):
    id: int
    hits: list[Hit]
    caughtUp: bool = True
    """False when the indexer had not caught up with every write in time: the
    hits may miss the newest lines."""
    window: int | None = None
    """Set when the query matched more entries than this: the hits are ranked
    among the newest ``window`` matching entries (``protocol.search.rank``)."""
    scanned: str | None = None
    """Set when the index could not be used (being rebuilt, damaged, missing,
    unwritable): why; the hits come from reading the files instead."""
    rebuilt: str | None = None
    """Set when the index was found unusable and rebuilt before this answer: why."""


class Reindexed(_Message):
    id: int
    files: int
    bytes: int
    seconds: float


Response = (Welcome | Opened | Adopted | Listed | Appended | Flushed | Done | StatusResult | Error
            | TrashChanged | Imported | UsageResult | Searched | Reindexed | Subscribed | Entries | Unsubscribed)
