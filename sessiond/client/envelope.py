"""Stamping the envelope of SPEC 2 on messages a client records.

The recording side fills what a message lacks: ``isSidechain``, ``agentId``,
``userType``, ``cwd``, ``sessionId``, ``version``, ``gitBranch`` (when the cwd is a
git checkout), ``uuid`` and ``timestamp``. Fields the message already has win.
``parentUuid`` is left to the daemon, which alone knows the chain; it puts it first.
Stamped timestamps of one session strictly increase (:class:`Clock`).
"""

from __future__ import annotations

import functools
import os
import time
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sessiond import __version__
from sessiond.store.entries import TRANSCRIPT_TYPES
from sessiond.store.regular import open_regular

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ENVELOPE_ORDER = ("isSidechain", "agentId", "userType", "cwd", "sessionId", "version", "gitBranch")


def now_iso() -> str:
    """ISO-8601 UTC with milliseconds and ``Z``, as Claude Code writes timestamps."""
    return iso_ms(time.time_ns() // 1_000_000)


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as Claude Code writes a timestamp."""
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _ms(stamp: Any) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return (when - _EPOCH) // timedelta(milliseconds=1)


class Clock:
    """Timestamps for one session's entries that lack one: strictly increasing (1 ms
    apart on a tie), as Claude Code's own are, and never before a timestamp the
    session already sent. A viewer that orders by time otherwise shows two entries
    of one batch (two parallel tool_use blocks) as one."""

    def __init__(self) -> None:
        self.last = 0

    def saw(self, stamp: Any) -> None:
        """An entry came with its own timestamp: later stamps follow it."""
        ms = _ms(stamp)
        if ms is not None and ms > self.last:
            self.last = ms

    def next(self) -> str:
        self.last = max(time.time_ns() // 1_000_000, self.last + 1)
        return iso_ms(self.last)


@functools.lru_cache(maxsize=256)
def git_branch(cwd: str) -> str | None:
    """The checked-out branch of the repository containing ``cwd`` ("HEAD" when
    detached), read from ``.git/HEAD`` without running git; None outside a repo."""
    d = Path(cwd)
    for directory in (d, *d.parents):
        dotgit = directory / ".git"
        try:
            if dotgit.is_dir():
                head = _read_small(dotgit / "HEAD")
            elif dotgit.is_file():
                text = _read_small(dotgit).strip()
                if not text.startswith("gitdir:"):
                    return None
                gitdir = Path(text[len("gitdir:") :].strip())
                if not gitdir.is_absolute():
                    gitdir = directory / gitdir
                head = _read_small(gitdir / "HEAD")
            else:
                continue
        except OSError:
            return None
        head = head.strip()
        prefix = "ref: refs/heads/"
        return head[len(prefix) :] if head.startswith(prefix) else "HEAD"
    return None


def _read_small(path: Path) -> str:
    """The start of a git pointer file, opened like every reader
    (``open_regular``): a FIFO or a device there must not hang a ``record``."""
    fd = open_regular(path)
    try:
        return os.read(fd, 4096).decode(errors="replace")
    finally:
        os.close(fd)


def stamp(
    message: dict[str, Any],
    *,
    session_id: str,
    cwd: str,
    agent: str | None = None,
    version: str = __version__,
    user_type: str = "external",
    clock: Clock | None = None,
) -> dict[str, Any]:
    """The message with its envelope; ``parentUuid`` removed (the daemon sets it).

    ``version`` is the agent's (sessiond's own only by default); ``clock`` makes the
    timestamps stamped for one session strictly increasing."""
    fill: dict[str, Any] = {
        "isSidechain": agent is not None,
        "agentId": agent,
        "userType": user_type,
        "cwd": cwd,
        "sessionId": session_id,
        "version": version,
        "gitBranch": git_branch(cwd) if os.path.isabs(cwd) else None,
    }
    out: dict[str, Any] = {}
    for key in _ENVELOPE_ORDER:
        if key in message:
            out[key] = message[key]
        elif fill[key] is not None:
            out[key] = fill[key]
    for key, value in message.items():
        if key not in out and key not in ("parentUuid", "logicalParentUuid"):
            out[key] = value
    if message.get("type") in TRANSCRIPT_TYPES and "uuid" not in out:
        out["uuid"] = str(uuidlib.uuid4())
    if "timestamp" not in out:
        out["timestamp"] = clock.next() if clock is not None else now_iso()
    elif clock is not None:
        clock.saw(out["timestamp"])
    return out
