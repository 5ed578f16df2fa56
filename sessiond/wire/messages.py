"""Every message on the socket: one msgspec Struct per request and per result.

Requests and responses are two tagged unions (the tag is the class name, in the
``op`` field), decoded by one typed decoder each, so an unknown or malformed message
is a typed error and never a crash. Every request carries an ``id`` that its
response echoes, so a client may pipeline. Transcript entries travel as the client's
JSON bytes, one object each; the daemon writes them unchanged.
"""


from typing import Annotated

import msgspec

from .core import (  # sessiond-hook's messages: defined there, every message is reached here
    DURABILITIES,
    MAX_BATCH_ENTRIES,
    MAX_CLIENT_NAME,
    MAX_ERROR_MESSAGE,
    MAX_PID,
    MAX_UUID,
    Append,
    Appended,
    Close,
    Count,
    Done,
    Durability,
    Error,
    Flush,
    Flushed,
    Hello,
    Record,
    Shutdown,
    StateFileProblem,
    Status,
    StatusResult,
    Welcome,
    WrittenOutside,
    _Message,
)
from .frames import (  # re-exported: m.PROTOCOL_VERSION is what the handshake sends
    PROTOCOL_VERSION as PROTOCOL_VERSION,
)
from .hit import MAX_LIMIT, Hit
from .lease import LeaseHolder
from .records import FileResult, PathBytes, PathText, SessionSource, TrashEntry
from .records import Usage as UsageReport
from .session_info import SessionInfo
from .spend import Day, Report, SpendReport, TimeZoneName

__all__ = [
    "Adopt",
    "Adopted",
    "Append",
    "Appended",
    "Close",
    "Count",
    "DURABILITIES",
    "Done",
    "Durability",
    "EmptyTrash",
    "Entries",
    "Error",
    "Flush",
    "Flushed",
    "Hello",
    "Import",
    "Imported",
    "LeaseHolder",
    "List",
    "Listed",
    "MAX_AGE_SECONDS",
    "MAX_AGENT_META",
    "MAX_BATCH_ENTRIES",
    "MAX_CLIENT_NAME",
    "MAX_ERROR_MESSAGE",
    "MAX_LIST_DIRS",
    "MAX_PID",
    "MAX_SINCE_CHARS",
    "MAX_UUID",
    "Open",
    "Opened",
    "PROTOCOL_VERSION",
    "ProjectDirs",
    "Record",
    "Reindex",
    "Reindexed",
    "Request",
    "Response",
    "Restore",
    "Search",
    "Searched",
    "Seconds",
    "SetAgentMeta",
    "Shutdown",
    "Spend",
    "Spent",
    "StateFileProblem",
    "Status",
    "StatusResult",
    "Subscribe",
    "Subscribed",
    "Trash",
    "TrashChanged",
    "Unsubscribe",
    "Unsubscribed",
    "Usage",
    "WrittenOutside",
    "UsageResult",
    "Welcome",
]

MAX_LIST_DIRS = 4096
"""Project dirs one List, Search, Reindex or Usage may name (a repository's
worktrees are a handful)."""

ProjectDirs = Annotated[list[PathText], msgspec.Meta(max_length=MAX_LIST_DIRS)]

MAX_AGE_SECONDS = 1000 * 366 * 86400.0
"""The longest age a request may name (a thousand years): past it a date is
out of ``datetime``'s range."""

Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_AGE_SECONDS)]
"""An age in seconds: finite, not negative."""

MAX_SINCE_CHARS = 64
"""An ISO-8601 date-time is some 30 characters."""


# ----------------------------------------------------------------------- requests


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


MAX_AGENT_META = 1024 * 1024
"""The longest agent meta file a ``SetAgentMeta`` may write: Claude Code's hold
a few fields (``agentType``, ``worktreePath``)."""


class SetAgentMeta(_Message):
    """Write ``agent-<agent>.meta.json`` (replaced atomically)."""

    id: Count
    session: str
    cwd: str
    agent: str
    meta: Annotated[bytes, msgspec.Meta(max_length=MAX_AGENT_META)]
    """A JSON object, at most ``MAX_AGENT_META`` bytes."""
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
    """Cancels a subscription of this connection: answered ``Done``, and the stream
    ends with ``Unsubscribed``."""

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
    """Puts the newest trashed copy of a session back where it was, byte for byte
    (``sessiond restore``); ``conflict`` when any of its paths exists again. Answered
    ``TrashChanged``."""

    id: Count
    session: str


class EmptyTrash(_Message):
    """Deletes trash entries for good: all, or those trashed longer ago than
    ``older_than`` (``sessiond trash empty``); ``dry_run`` only names them. Answered
    ``TrashChanged``."""

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


class Spend(_Message):
    """Tokens and cost (``sessiond usage``): a daily, monthly, session or
    blocks report of some project dirs (or all), from the sums the daemon keeps."""

    id: Count
    report: Report = "daily"
    dirs: ProjectDirs = []
    all: bool = False
    since: Day | None = None
    until: Day | None = None
    timezone: TimeZoneName | None = None
    """IANA name of the days' zone; None: the daemon's local one."""
    byModel: bool = False


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
           | Trash | Restore | EmptyTrash | Import | Usage | Spend | Search | Reindex | Subscribe | Unsubscribe)


# ---------------------------------------------------------------------- responses


class Opened(_Message):
    """The answer to ``Open``: the session's transcript path, whether the file
    exists yet (``materialized``), and the lease when this connection claimed it."""

    id: int
    session: str
    path: str
    materialized: bool
    holder: LeaseHolder | None = None
    """The lease, when this connection claimed it."""


class Adopted(_Message):
    """The answer to ``Adopt``: the file the session's appends go to from now on,
    and how many metadata entries were re-appended at its end."""

    id: int
    session: str
    path: str
    reappended: int = 0
    """Metadata entries re-appended at EOF."""


class Listed(_Message):
    """The answer to ``List``: one page of sessions, newest first."""

    id: int
    sessions: list[SessionInfo]


class Subscribed(_Message):
    """The first answer to ``Subscribe``: the main transcript streamed and the byte
    offset its first ``Entries`` frame starts at."""

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
    longer than the line cap (``sessiond/store/linecap.py``) or than a
    frame of this daemon carries. A frame without the field decodes as 0."""


class Unsubscribed(_Message):
    """The stream ended: cancelled (``Unsubscribe``), or the file went away."""

    id: int
    reason: str


class TrashChanged(_Message):
    """The trash entries a Trash, Restore or EmptyTrash moved or deleted."""

    id: int
    entries: list[TrashEntry]


class Imported(_Message):
    """The answer to ``Import``: what became of each file of the session (imported,
    grown, unchanged, diverged, unreadable, busy)."""

    id: int
    session: str
    files: list[FileResult]


class UsageResult(_Message):
    """The answer to ``Usage``: bytes and files per project and per session
    (``sessiond du``)."""

    id: int
    usage: UsageReport


class Spent(_Message):
    """The answer to ``Spend``: the tokens and cost of the report asked for (its
    rows, or its 5-hour blocks), from the responses the daemon keeps counted."""

    id: int
    spend: SpendReport


class Searched(_Message):
    """The answer to ``Search``: the hits, best session first, and what to know of
    them (the indexer behind, a windowed ranking, a scan of the files instead of the
    index)."""

    id: int
    hits: list[Hit]
    caughtUp: bool = True
    """False when the indexer had not caught up with every write in time: the
    hits may miss the newest lines."""
    window: int | None = None
    """Set when the query matched more entries than this: the hits are ranked
    among the newest ``window`` matching entries (``sessiond/search/rank.py``)."""
    scanned: str | None = None
    """Set when the index could not be used (being rebuilt, damaged, missing,
    unwritable): why; the hits come from reading the files instead."""
    rebuilt: str | None = None
    """Set when the index was found unusable and rebuilt before this answer: why."""


class Reindexed(_Message):
    """The answer to ``Reindex``, once the index of those dirs is rebuilt: files and
    bytes indexed, and the seconds it took."""

    id: int
    files: int
    bytes: int
    seconds: float


Response = (Welcome | Opened | Adopted | Listed | Appended | Flushed | Done | StatusResult | Error
            | TrashChanged | Imported | UsageResult | Spent | Searched | Reindexed | Subscribed | Entries | Unsubscribed)
