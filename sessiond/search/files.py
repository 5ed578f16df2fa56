"""Which files are transcripts, for the indexer's re-stat and the offline scan.

A project dir holds ``<session>.jsonl`` main transcripts and, under
``<session>/subagents/`` (and ``…/workflows/<run>/``), ``agent-<id>.jsonl``
files; the session of an agent file is its parent's, so a hit there points
at the conversation it belongs to. Claude Code 2.0.x kept agent files flat,
``agent-<id>.jsonl`` beside the sessions: their session is the one their first
entry names (``sessionId``), read once when the file is met. Only regular files count; symlinks are
never followed (a planted link cannot make us read outside the root).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from sessiond.store.importer import FLAT_AGENT, flat_agent_session
from sessiond.store.paths import is_session_id, projects_dir


class Transcript:
    """One transcript file of the store (a main transcript or an agent file): its
    path, project dir, session, agent id and stat, what the indexer and the offline
    scan need to index or re-stat it."""

    __slots__ = ("path", "project", "session", "agent", "st")

    def __init__(self, path: str, project: str, session: str, agent: str | None, st: os.stat_result) -> None:
        self.path = path
        self.project = project
        self.session = session
        self.agent = agent
        self.st = st


def describe(root: Path, path: str | Path) -> tuple[str, str, str | None] | None:
    """``(project dir name, session id, agent id or None)`` of a transcript path
    under ``root``, or None when it is not one: the files ``transcripts`` walks,
    whatever bytes their names hold beyond the session id (an agent file named
    by another tool may be ``agent-<anything>.jsonl``, and not be UTF-8)."""
    try:
        parts = Path(path).relative_to(projects_dir(root)).parts
    except ValueError:
        return None
    if len(parts) == 2 and parts[1].endswith(".jsonl") and is_session_id(parts[1][:-6]):
        return parts[0], parts[1][:-6].lower(), None
    if len(parts) == 2 and FLAT_AGENT.fullmatch(parts[1]):
        owner = flat_agent_session(path)
        return None if owner is None else (parts[0], owner.lower(), parts[1][6:-6])
    if not (4 <= len(parts) <= 6 and is_session_id(parts[1]) and parts[2] == "subagents"):
        return None
    name = parts[-1]
    if not (name.startswith("agent-") and name.endswith(".jsonl")) or len(parts) == 5 or (len(parts) == 6 and parts[3] != "workflows"):
        return None
    return parts[0], parts[1].lower(), name[6:-6]


def _regular(entry: os.DirEntry) -> os.stat_result | None:
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _agents(d: str, project: str, session: str, depth: int = 0) -> Iterator[Transcript]:
    try:
        it = os.scandir(d)
    except OSError:
        return
    with it:
        for e in it:
            if e.name.startswith("agent-") and e.name.endswith(".jsonl"):
                st = _regular(e)
                if st is not None:
                    yield Transcript(e.path, project, session, e.name[6:-6], st)
            elif depth < 2 and e.is_dir(follow_symlinks=False) and (depth == 1 or e.name == "workflows"):
                yield from _agents(e.path, project, session, depth + 1)


def transcripts(root: Path, projects: list[str] | None = None) -> Iterator[Transcript]:
    """Every transcript of ``projects`` (dir names; None: every project)."""
    base = projects_dir(root)
    if projects is None:
        try:
            with os.scandir(base) as it:
                projects = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            return
    for project in projects:
        d = base / project
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            entries = list(it)
        for e in entries:
            name = e.name
            if name.endswith(".jsonl") and is_session_id(name[:-6]):
                st = _regular(e)
                if st is not None:
                    yield Transcript(e.path, project, name[:-6].lower(), None, st)
            elif FLAT_AGENT.fullmatch(name):  # Claude Code 2.0.x: beside the sessions
                st = _regular(e)
                owner = flat_agent_session(e.path) if st is not None else None
                if st is not None and owner is not None:
                    yield Transcript(e.path, project, owner.lower(), name[6:-6], st)
            elif is_session_id(name) and e.is_dir(follow_symlinks=False):
                yield from _agents(os.path.join(e.path, "subagents"), project, name.lower())


def oldest_first(found: Iterable[Transcript]) -> list[Transcript]:
    """Least recently modified first: the order the indexer takes files in, so
    doc ids grow with time across files too (a reindex gives the newest entries
    the highest ids, as the daemon's own writes do), which the ranking of very
    common queries relies on (``rank``: the newest matches first)."""
    return sorted(found, key=lambda t: (t.st.st_mtime_ns, t.path))
