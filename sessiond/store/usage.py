"""Storage per session and per project (``du``), and what ``prune`` selects.

A session's bytes are its transcript plus everything under its ``<id>/`` dir
(subagent and workflow transcripts, meta files) and a ``.torn`` side file; its
last write is the newest mtime among them (an agent still writing keeps its
session young). The main transcripts' stats come from the caller (the daemon's
catalog, or a scan of the project dirs): only the side dirs are walked here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from sessiond.wire.records import ProjectUsage, SessionUsage, Usage

from .importer import flat_agents


def tree_stats(path: Path) -> tuple[int, int, int]:
    """(bytes, files, newest mtime_ns) under a directory, symlinks not followed."""
    total = count = newest = 0
    stack = [str(path)]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        total += st.st_size
                        count += 1
                        newest = max(newest, st.st_mtime_ns)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    return total, count, newest


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def session_usage(path: str, size: int, mtime_ns: int) -> SessionUsage:
    p = Path(path)
    sid = p.name[: -len(".jsonl")]
    side_bytes, side_files, side_newest = tree_stats(p.parent / sid)
    try:
        torn = os.lstat(p.with_name(p.name + ".torn"))
        side_bytes, side_files = side_bytes + torn.st_size, side_files + 1
    except FileNotFoundError:
        pass
    newest = max(mtime_ns, side_newest) / 1e9
    return SessionUsage(
        sessionId=sid, project=p.parent.name, path=path, bytes=size + side_bytes, files=1 + side_files,
        lastWrite=_iso(newest),
        mtime=newest,
    )


def usage(mains: Iterable[tuple[str, int, int]]) -> Usage:
    """``mains``: (path, size, mtime_ns) of each main transcript."""
    sessions = sorted((session_usage(*m) for m in mains), key=lambda s: (-s.bytes, s.path))
    by_id = {(s.project, s.sessionId): s for s in sessions}
    for project in {Path(s.path).parent for s in sessions}:  # Claude Code 2.0.x's flat agent files
        for sid, files in flat_agents(project).items():
            s = by_id.get((project.name, sid))
            if s is None:
                continue
            for f in files:
                st = os.lstat(f.src)
                s.bytes += st.st_size
                s.files += 1
                if st.st_mtime > s.mtime:
                    s.mtime = st.st_mtime
                    s.lastWrite = _iso(st.st_mtime)
    sessions.sort(key=lambda s: (-s.bytes, s.path))
    projects: dict[str, ProjectUsage] = {}
    for s in sessions:
        pu = projects.setdefault(s.project, ProjectUsage(project=s.project, bytes=0, sessions=0, files=0))
        pu.bytes += s.bytes
        pu.sessions += 1
        pu.files += s.files
    return Usage(bytes=sum(s.bytes for s in sessions), files=sum(s.files for s in sessions),
                 projects=sorted(projects.values(), key=lambda p: (-p.bytes, p.project)), sessions=sessions)


def select_prune(sessions: Iterable[SessionUsage], *, now: float, older_than: float | None,
                 larger_than: int | None) -> list[SessionUsage]:
    """Sessions last written more than ``older_than`` seconds ago AND (when
    given) larger than ``larger_than`` bytes, oldest first."""
    out = [s for s in sessions
           if (older_than is None or now - s.mtime >= older_than) and (larger_than is None or s.bytes > larger_than)]
    return sorted(out, key=lambda s: (s.mtime, s.path))
