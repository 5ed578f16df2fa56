"""The messages a process that only writes and asks for status exchanges: the
handshake, ``Append``/``Record``, ``Close``, ``Flush``, ``Status``, ``Shutdown``,
their answers and ``Error``.

They are apart from ``messages.py`` (which imports and re-exports each of them,
so every message is defined once) for ``sessiond-hook``, the entry point hooks
and agents run at every turn: building these dozen Structs is what such a run
pays, not the sixty of every command. ``Responses`` is the union of the answers
here; ``framing.decode_response`` tries it first and decodes with the whole
union of ``messages.py`` (imported then) only for an answer not in it.
"""


from typing import Annotated, Literal

import msgspec

from .frames import MAX_COUNT
from .lease import LeaseHolder

Durability = Literal["queued", "written", "durable"]
"""When an append is acknowledged: accepted into the queue, written with write(2),
or written and fdatasync'ed."""

DURABILITIES: tuple[str, ...] = ("queued", "written", "durable")

MAX_BATCH_ENTRIES = 100_000
"""Entries one Append or Record may carry. msgspec checks an array's announced
length before it builds a single element, so a frame of millions of tiny
entries (each a Python object some 20x its wire size) is refused for what it
weighs on the wire, not decoded into gigabytes."""

# Every number a client sends is range-checked as it is decoded, so a value no
# handler can use (a negative offset, a count past what a file offset or SQLite
# integer holds, a NaN or infinite age) is ``bad_request`` naming the field
# (msgspec's "Expected `int` >= 0 - at `$.offset`"), never an OverflowError
# deep inside the daemon.

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
"""A count, a byte offset or an id: 0 to ``MAX_COUNT``."""

PROJECT_NAME = r"[A-Za-z0-9_-]{1,255}"
"""Project dir names as Claude Code sanitizes a cwd (alphanumerics, ``_`` and ``-``)."""
ProjectName = Annotated[str, msgspec.Meta(pattern=f"^{PROJECT_NAME}$")]
"""A project dir's name: no ``/``, no ``.``, so never a path out of ``projects/``."""

MAX_PID = 1 << 22
"""Linux's PID_MAX_LIMIT."""

MAX_CLIENT_NAME = 256
"""The longest client name a ``Hello`` may give. The name is kept with every
lease the connection takes and written in the lease table, which a restarted
daemon reads back only up to its cap (``sessiond/daemon/leases.py``, whose
check of a saved name is this bound): a longer name would cost its holder its
leases across a restart, and a name of megabytes would have the whole table set
aside, everyone's leases with it."""

MAX_UUID = 256
"""The longest ``uuid`` an appended entry may carry, and a ``Record``'s
``parent`` hint (characters). Claude Code's are 36; the daemon keeps every
uuid of a live session for its dedup, so a client's megabyte uuids would each
be held as long as the session is."""

EntryBatch = Annotated[list[bytes], msgspec.Meta(max_length=MAX_BATCH_ENTRIES)]


class _Message(msgspec.Struct, tag_field="op", tag=True, omit_defaults=True, forbid_unknown_fields=False):
    pass


class StateFileProblem(msgspec.Struct):
    """A state file the daemon could not use at its start (``status``'s ``stateFiles``)."""

    file: str
    problem: str
    setAside: str | None = None
    """Where the file was moved (same directory); None when it could not be."""


# ----------------------------------------------------------------------- requests


class Hello(_Message):
    """The first request of every connection: the client's protocol version, name
    and pid. The daemon answers ``Welcome`` (or ``version_mismatch``, then closes) and
    names the client by them in its log and in the leases it holds."""

    id: Count
    protocol_version: Count
    client: Annotated[str, msgspec.Meta(max_length=MAX_CLIENT_NAME)] = ""
    pid: Annotated[int, msgspec.Meta(ge=0, le=MAX_PID)] = 0



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
    lost daemon may have written it), unless a line before it in the batch, for
    the same file, was new (the lost daemon wrote a batch's lines in order, so
    none after that). Entries with a uuid are always deduped."""
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
    parent: Annotated[str, msgspec.Meta(max_length=MAX_UUID)] | None = None
    durability: Durability = "queued"
    agent: str | None = None
    run: str | None = None
    resend: bool = False
    lease: bool = False



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
    """Asks for the daemon's figures, answered ``StatusResult``: what ``sessiond status``
    prints."""

    id: Count



class Shutdown(_Message):
    """Asks the daemon to exit as on SIGTERM (``sessiond stop``): answered ``Done`` at
    once, then every session's exit cleanup runs, every queue is written and synced,
    and the process exits 0."""

    id: Count


# ---------------------------------------------------------------------- responses


class Welcome(_Message):
    """The daemon's answer to ``Hello``: its protocol and package versions, its pid,
    and what a client must know before it sends anything (the frame cap, the root
    served)."""

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



class Appended(_Message):
    """The answer to ``Append`` or ``Record``, sent once the batch reached the
    durability it asked for: how many entries were accepted, how many were dropped as
    duplicates, and (Record) the hint for the next call."""

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
    """The answer to ``Flush``: everything accepted before it is written (and synced,
    if asked); ``files`` counts the files that had something to write."""

    id: int
    files: int = 0



class Done(_Message):
    """Plain success for requests that have nothing else to say."""

    id: int



class WrittenOutside(msgspec.Struct, frozen=True, omit_defaults=True):
    """A session a program outside sessiond (Claude Code in a terminal) wrote in
    the last seconds, as the daemon's follower saw it: live, though no client
    of sessiond holds it."""

    sessionId: str
    project: str
    """The project dir's name under ``projects/``."""
    secondsAgo: int


class StatusResult(_Message):
    """The answer to ``Status``: the daemon's identity, load and counters, its
    settings, and the state of each of its parts (mirror, index, budgets, workers,
    leases, watchers, follower), as ``sessiond status`` prints them."""

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
    """Every memory budget: ``{name: {"used": n, "limit": n}}`` (sessiond/daemon/bounds.py)."""
    workers: dict[str, int] | None = None
    """The read pool's fair share: threads, jobs running and waiting, requests refused ``busy``."""
    memory: dict[str, int] | None = None
    """RSS, and the uuids held for dedup (how many, how many not packed yet, bytes of the packed ones)."""
    index: dict[str, str | int | float | bool | None] | None = None
    """The search indexer's state, when the index is on."""
    live: list[LeaseHolder] = []
    """Sessions held by a writing client (SPEC 7)."""
    writtenOutside: list[WrittenOutside] = []
    """Sessions written outside sessiond in the last seconds (Claude Code itself)."""
    watchers: int = 0
    """Subscriptions streaming entries to clients."""
    follow: dict[str, int] | None = None
    """The follower of foreign writers: files followed, inotify watches held,
    dirs re-stat'ed instead, lines and bytes passed on, bytes known at start,
    bytes re-hashed to look for rewrites, files read again from 0 (resets)."""
    stateFiles: list[StateFileProblem] = []
    """The daemon's own state files it found unusable at its start (not a
    regular file, too big, not valid) and set aside instead of reading."""



MAX_ERROR_MESSAGE = 8192
"""The longest message an ``Error`` carries (characters): a few paths of
``PATH_MAX`` and the words around them."""


class Error(_Message):
    """The answer to a request that failed: a stable ``code`` (``errors.py``) and a
    message for a person. The client raises it as ``RemoteError`` (``SessionBusy`` or
    ``LeaseLost``, with ``holder``, for a held session)."""

    id: int
    code: str
    message: str
    """At most ``MAX_ERROR_MESSAGE`` characters, then ``…``: a message quotes
    what was wrong (``repr`` of a session id, an agent id), and the quote of a
    value of most of a frame, four times its size for control characters, would
    make an answer past the frame cap that no client reads."""
    holder: LeaseHolder | None = None
    """Who holds the session, for ``session_busy`` and ``lease_lost``."""

    def __post_init__(self) -> None:
        if len(self.message) > MAX_ERROR_MESSAGE:
            self.message = self.message[:MAX_ERROR_MESSAGE] + "…"


Responses = Welcome | Appended | Flushed | Done | StatusResult | Error
"""The answers to the requests above (``messages.Response`` is every answer)."""
