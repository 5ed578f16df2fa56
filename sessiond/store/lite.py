"""Lite read (SPEC 5): what the first and last 64 KB of a transcript say about it.

Why a lite read: a session list must stay instant with thousands of multi-MB
transcripts, so it never parses a whole file. Claude Code reads the first and the
last 64 KB of each file and so do we, with the same windows and the same rules, so
a root pointed at ``~/.claude`` shows the titles Claude Code's picker shows:

* head → first meaningful prompt, createdAt, cwd, gitBranch (when the tail has none), sessionId, sidechain
  flag, teamName;
* tail → customTitle, aiTitle, lastPrompt, tag, summary, gitBranch, the LAST occurrence of
  each winning (metadata is re-appended at EOF, SPEC 3.5, to stay in this window);
  a custom or AI title found only in the head (a big file whose title was set
  early and never re-appended) is taken from there, as the picker does;
* title = the one Claude Code's ``--resume`` picker shows (``title_of``).

Where each part lives: ``lite_head`` reads the head window (envelope, first
prompt, a prompt cut by the window), ``lite_tail`` the tail window (the
re-appended metadata, last write, message count), both through
``lite_decode``'s typed partial decodes (only the few fields needed are
materialized, most lines are not decoded at all); ``prompts`` says what counts
as a prompt. This module holds the record they fill and the two reads.

Window edges: the tail window starts mid-line unless the byte before it is a
newline (we read one extra byte to know), so its first partial line is dropped;
the head window usually ends mid-line, and when that cut line is the first
prompt (a prompt bigger than 64 KB) the prompt is salvaged from the cut JSON
string, so such a session keeps a (truncated) prompt instead of vanishing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final

import msgspec

from sessiond.wire.session_info import (  # noqa: F401  (what the lite read fills; listing and the catalog import it from here)
    SessionInfo,
)

from .lite_head import HeadState, probe_tail, salvage, scan_head
from .lite_tail import head_titles, last_branch, last_entry_at, message_count, scan_tail
from .regular import open_regular

LITE_WINDOW: Final = 65536
"""Bytes read at each end of a file (Claude Code's LITE_READ_BUF_SIZE)."""
METADATA_MAX: Final = LITE_WINDOW // 8
"""The longest metadata entry (custom title, tag, ...) our writers append, in
bytes of its JSON line. A listing (ours, Claude Code's picker) finds a
session's title and tag only in its last ``LITE_WINDOW`` bytes, which must
hold them and the last prompt together: a longer one would be written, said
done, and never shown."""


def check_metadata(kind: str, line: bytes) -> None:
    """Refuse (``too_large``) a ``kind`` entry whose JSON ``line`` is longer
    than ``METADATA_MAX``: ``rename`` and ``tag``, the picker's keys and a
    ``Session``'s setters all append through it."""
    if len(line) > METADATA_MAX:
        from sessiond.wire.errors import too_large

        noun = {"custom-title": "title"}.get(kind, kind)
        raise too_large(f"the {noun} is too long: its entry would be {len(line):,} bytes of JSON, and a listing reads "
                        f"a session's title and tag from its last {LITE_WINDOW // 1024} KB (at most "
                        f"{METADATA_MAX:,} bytes each)")

# Lite states. Only SESSION is listed; the others say why a file is not a session.
SESSION: Final = "session"
EMPTY: Final = "empty"  # no parseable entry at all (0 bytes, blank or torn lines)
METADATA_ONLY: Final = "metadata-only"  # entries, but no user/assistant message
SIDECHAIN: Final = "sidechain"  # first entry, or every message, a sidechain: a subagent transcript
TEAM: Final = "team"  # carries a teamName: a swarm teammate's transcript

Opener = Callable[[str], int]
"""``path -> fd`` (like ``os.open``); tests and benchmarks pass one to count opens."""


def default_opener(path: str) -> int:
    return open_regular(path)


class LiteInfo(msgspec.Struct, kw_only=True):
    """Everything the two windows say about one file, listable or not."""

    path: str
    size: int
    mtime_ns: int
    state: str = EMPTY
    session_id: str | None = None
    first_prompt: str | None = None
    first_media: str | None = None
    """"Image" or "Document" when the first prompt was an attachment."""
    created_at: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    is_sidechain: bool = False
    team_name: str | None = None
    custom_title: str | None = None
    ai_title: str | None = None
    last_prompt: str | None = None
    tag: str | None = None
    summary: str | None = None
    last_entry_at: str | None = None
    message_count: int | None = None
    forked_from: str | None = None

    @property
    def listable(self) -> bool:
        return self.state == SESSION

    @property
    def title(self) -> str | None:
        """The title Claude Code's picker shows for this file (``title_of``)."""
        return title_of(self.custom_title, self.ai_title, self.last_prompt, self.summary, self.first_prompt,
                        self.first_media)

    def session_info(self, session_id: str | None = None) -> SessionInfo:
        """The listing record; the id defaults to the file name (what resume takes)."""
        sid = session_id or os.path.basename(self.path).removesuffix(".jsonl")
        return SessionInfo(
            sessionId=sid,
            path=self.path,
            title=self.title,
            firstPrompt=self.first_prompt,
            lastPrompt=self.last_prompt,
            customTitle=self.custom_title,
            aiTitle=self.ai_title,
            summary=self.summary,
            tag=self.tag,
            createdAt=self.created_at,
            modifiedAt=iso_utc(self.mtime_ns),
            size=self.size,
            cwd=self.cwd,
            gitBranch=self.git_branch,
            lastEntryAt=self.last_entry_at,
            messageCount=self.message_count,
            forkedFrom=self.forked_from,
        )


def title_of(custom_title: str | None, ai_title: str | None, last_prompt: str | None, summary: str | None,
             first_prompt: str | None, first_media: str | None = None) -> str | None:
    """The one order every place that names a session uses: the title Claude
    Code's ``--resume`` picker shows (2.1.197 and 2.1.337 read off a terminal,
    ``tests/e2e/test_claude_picker.py``): the custom title, else the AI title,
    else the tail's ``summary``, else the tail's ``last-prompt`` entry (what
    the user was most recently doing), else the first prompt (a slash command
    as typed when nothing else was typed), else "Image"/"Document" for a
    session that began with an attachment. The summary comes before
    ``lastPrompt`` as both pickers show them, though the Agent SDK's
    ``list_sessions`` reads ``lastPrompt`` first; the two meet only in a
    session resumed across versions (summaries are 1.x/2.0's, ``last-prompt``
    2.1's)."""
    return custom_title or ai_title or summary or last_prompt or first_prompt or first_media or None


UNTITLED: Final = "(untitled)"
"""What is shown for a session with no title and no prompt."""


def session_title(path: str | os.PathLike[str]) -> str | None:
    """The one title of the session file at ``path``, as ``list``, ``show``,
    ``export`` and ``search`` show it: ``LiteInfo.title`` (``title_of``: the
    title Claude Code's picker shows). Why one function: each command had its own idea (the
    loaded chain's first user text, tags and all), and a session was called
    four different things. None when there is none or the file is unreadable."""
    try:
        return read_lite(path).title
    except OSError:
        return None


def iso_utc(ns: int) -> str:
    """``2026-01-31T07:15:51.765Z``: the timestamp format transcripts use."""
    sec, rem = divmod(ns, 1_000_000_000)
    t = time.gmtime(sec)
    return (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{rem // 1_000_000:03d}Z")


def parse_lite(head: bytes, tail: bytes | None, *, path: str = "", size: int | None = None,
               mtime_ns: int = 0) -> LiteInfo:
    """Lite info from the two windows.

    ``head`` is the first window (the whole file when it is that small). ``tail``
    is None when the head holds the whole file, else the last window plus ONE
    byte before it, so we can tell whether its first line is whole.
    """
    size = len(head) if size is None else size
    info = LiteInfo(path=path, size=size, mtime_ns=mtime_ns)
    whole = tail is None
    # Complete lines of the head; a whole file's last line may lack its newline.
    head_end = len(head) if whole else head.rfind(b"\n") + 1
    st = HeadState()
    scan_head(head, head_end, st)
    if st.prompt is None and head_end < len(head):
        salvage(head[head_end:], st)

    if tail is None:
        buf, start, end = head, 0, len(head)
    else:
        buf, end = tail, len(tail)
        # Byte 0 precedes the window: a newline there means line 1 is whole.
        first_nl = tail.find(b"\n")
        start = end if first_nl < 0 else first_nl + 1
    if not (whole or st.side or st.team) and not (st.message and st.cwd):
        probe_tail(buf, start, end, st)

    parsed = 0
    if not (st.side or st.team):  # never listed: spare the tail scan
        tail_fields, parsed = scan_tail(buf, start, end)
        for field, value in tail_fields.items():
            setattr(info, field, value)
        if not whole and not (info.custom_title and info.ai_title):
            for field, value in head_titles(head, head_end).items():
                if not getattr(info, field):
                    setattr(info, field, value)

    if st.message and not (st.side or st.team):  # listed: when last written, how many messages
        info.last_entry_at = last_entry_at(buf, start, end)
        info.message_count = message_count(buf, start, end, whole)
    info.first_prompt = st.prompt or st.command
    info.first_media = st.media
    info.created_at = st.created_at
    info.cwd = st.cwd
    # the branch it ended on (the tail's last), as Claude Code's picker and the Agent SDK show it
    info.git_branch = (last_branch(buf, start, end) if not (st.side or st.team) else None) or st.branch
    info.session_id = st.sid
    info.is_sidechain = bool(st.side) or (st.side_message and not st.message)
    info.team_name = st.team
    info.forked_from = st.forked_from
    if info.is_sidechain:
        info.state = SIDECHAIN
    elif st.team:
        info.state = TEAM
    elif st.message:
        info.state = SESSION
    elif st.entries or parsed:
        info.state = METADATA_ONLY
    else:
        info.state = EMPTY
    return info


def read_lite(path: str | os.PathLike[str], *, opener: Opener | None = None,
              window: int = LITE_WINDOW) -> LiteInfo:
    """Open, fstat, read both windows, close: at most two ``pread`` calls.

    Raises OSError (FileNotFoundError when the file vanished since it was listed).
    """
    p = os.fspath(path)
    fd = (opener or default_opener)(p)
    try:
        st = os.fstat(fd)
        size = st.st_size
        head = os.pread(fd, window, 0) if size else b""
        tail = os.pread(fd, window + 1, size - window - 1) if size > window else None
    finally:
        os.close(fd)
    if tail is not None and len(head) < window:  # shrank under us: what we have is all
        tail = None
    return parse_lite(head, tail, path=p, size=size, mtime_ns=st.st_mtime_ns)
