"""Who is writing a transcript right now, when it is not a sessiond client.

Why: sessiond knows the sessions its own clients hold (leases, SPEC 7), but a
Claude Code running in a terminal writes its session's file directly. Such a
session is live all the same: ``list``, ``status`` and the picker mark it, ``rm``
refuses it without ``--force``. A file is taken as being written when a
process of the same user that is not sessiond's own (its daemon keeps the
files it writes open) holds it open for writing (``/proc/<pid>/fd`` and the
``flags`` of its ``fdinfo``), or when it was written outside sessiond in the
last ``RECENT_WRITE_S`` seconds: Claude Code opens, appends and closes per
write, so between its writes only their recency tells. With a daemon running,
its follower knows which writes were not its own (``daemon/follow/tree.py``);
without one, every write is another program's, and the newest entry's
``timestamp`` tells (``written_recently``). The look at ``/proc`` is bounded
(processes and file descriptors per process) and follows nothing but
``/proc``'s links; where there is no ``/proc``, nothing is found.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

MAX_PROCESSES: Final = 4096
MAX_FDS: Final = 4096
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR
RECENT_WRITE_S: Final = 10.0
"""A session written outside sessiond at most this many seconds ago is live:
long enough to span the pauses between a streaming agent's writes, short
enough that a session left a moment ago is not."""


def recent_writer(seconds_ago: float) -> dict[str, str | int]:
    """The ``live`` value of a session written outside sessiond ``seconds_ago``."""
    return {"writer": "written outside sessiond", "secondsAgo": max(0, int(seconds_ago))}


def written_recently(last_entry_at: str | None, now: float | None = None) -> float | None:
    """Seconds since ``last_entry_at`` (an entry's ISO ``timestamp``) when that
    is at most ``RECENT_WRITE_S`` (a clock a little ahead counts as now), else None."""
    if not last_entry_at:
        return None
    try:
        at = datetime.fromisoformat(last_entry_at).timestamp()
    except ValueError:
        return None
    ago = (time.time() if now is None else now) - at
    return max(0.0, ago) if -RECENT_WRITE_S <= ago <= RECENT_WRITE_S else None


def open_for_writing(paths: Iterable[str]) -> dict[str, int]:
    """``path -> pid`` of a process of this user (not this one) holding the file
    open for writing, for each of ``paths`` (absolute, as given) that is."""
    wanted = {os.path.realpath(p): p for p in paths}
    if not wanted:
        return {}
    return _scan(wanted.get, len(wanted))


def sessions_written_under(projects: str) -> dict[str, int]:
    """``path -> pid`` for every session file directly in a project dir of
    ``projects`` (``<projects>/<project>/<id>.jsonl``, not a subagent's) that a
    process of this user outside sessiond holds open for writing: what
    ``status`` counts as live besides the sessions sessiond's clients hold."""
    base = os.path.realpath(projects) + os.sep

    def session_file(target: str) -> str | None:
        if not target.startswith(base) or not target.endswith(".jsonl"):
            return None
        parts = target[len(base):].split(os.sep)
        return target if len(parts) == 2 and not parts[1].startswith("agent-") else None

    return _scan(session_file, None)


def _scan(match: Callable[[str], str | None], enough: int | None) -> dict[str, int]:
    """One bounded look at ``/proc``: ``match(link target)`` names the files
    wanted (None: not wanted); stops once ``enough`` are found."""
    found: dict[str, int] = {}
    me, uid = os.getpid(), os.getuid()
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()][:MAX_PROCESSES]
    except OSError:
        return found
    for pid in pids:
        if pid == me:
            continue
        base = f"/proc/{pid}"
        try:
            if os.stat(base).st_uid != uid:
                continue
            fds = os.listdir(f"{base}/fd")[:MAX_FDS]
            if fds and _is_sessiond(base):
                continue
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{base}/fd/{fd}")
            except OSError:
                continue
            given = match(target)
            if given is None or given in found:
                continue
            if _writable(f"{base}/fdinfo/{fd}"):
                found[given] = pid
        if enough is not None and len(found) >= enough:
            break
    return found


def _writable(fdinfo: str) -> bool:
    try:
        with open(fdinfo) as f:
            for line in f:
                if line.startswith("flags:"):
                    return bool(int(line.split()[1], 8) & _WRITE_FLAGS)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _is_sessiond(base: str) -> bool:
    """sessiond's own processes (its daemon holds what it writes open)."""
    try:
        with open(f"{base}/cmdline", "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return False
    return any(a == b"sessiond" or a.endswith(b"/sessiond") or a.startswith(b"sessiond.") for a in argv[:4])


def live_writer(path: str) -> dict[str, str | int] | None:
    """``{pid, writer}`` when a process outside sessiond holds ``path`` open for writing, else None."""
    pid = open_for_writing([path]).get(path)
    return None if pid is None else {"pid": pid, "writer": "open for writing"}
