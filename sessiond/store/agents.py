"""Finding a session's agent (subagent) files: a bounded look, never through a symlink.

Why one function: the daemon's watchers (a subscription with agents), resume's
``subagents`` and export all need the agent files of ``<project>/<session>/``,
and a glob of ``subagents/`` follows whatever stands there: a
``<session>/subagents`` planted as a symlink to ``/``, ``/proc`` or a huge tree
outside the root would be walked (by the daemon, on its event loop). Here only
the layout Claude Code writes is looked at, each level opened relative to
the one above with ``O_NOFOLLOW`` (a symlink at any level, the session dir
included, is not followed: the session's agents are taken as having none
there), and at most ``MAX_ENTRIES`` directory entries are looked at in all, so
a directory of 200,000 entries costs a bounded listing:

    <session>/subagents/agent-<id>.jsonl
    <session>/subagents/workflows/<run>/agent-<id>.jsonl

Claude Code 2.0.x kept them flat, as ``agent-<id>.jsonl`` beside the sessions
in the project dir, where only the entries say whose they are (their
``sessionId`` is the parent session's): ``session_agent_files`` gives a
session's agents in both layouts, so show, export and search link a 2.0.x
tree as they link a 2.1 one (du, rm and import already did, through
``importer.flat_agents``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

MAX_ENTRIES = 20_000
"""Directory entries looked at per look, in all levels together."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class AgentFile(NamedTuple):
    """One agent (subagent) transcript of a session: its id, path and size."""

    agent: str
    """The id in ``agent-<id>.jsonl`` (not checked: callers that need a legal id check it)."""
    path: Path
    size: int


class AgentFiles(NamedTuple):
    """What ``agent_files`` found: the agent files in layout order, and whether the
    look was complete or stopped at ``MAX_ENTRIES``."""

    files: list[AgentFile]
    """Sorted: ``subagents/`` first, then each workflow run's."""
    complete: bool
    """False when ``MAX_ENTRIES`` stopped the look (the files found so far are given)."""


def agent_files(session_dir: Path, max_entries: int = MAX_ENTRIES) -> AgentFiles:
    """The agent files below ``session_dir`` (``<project>/<session id>``); none
    when it or its ``subagents`` is missing, not a directory, or a symlink."""
    left = [max_entries]
    found: list[AgentFile] = []
    runs: list[tuple[str, Path]] = []
    base = session_dir / "subagents"
    with _Dir.open(session_dir) as sd, _Dir.at(sd, "subagents") as sub:
        for name, is_dir, size in _entries(sub, left):
            if is_dir and name == "workflows":
                with _Dir.at(sub, name) as wf:
                    runs = [(run, base / name / run) for run, run_is_dir, _ in _entries(wf, left) if run_is_dir]
                    for run, run_path in sorted(runs):
                        with _Dir.at(wf, run) as rd:
                            found += _agents(rd, run_path, left)
            elif size is not None and _is_agent(name):
                found.append(AgentFile(name[len("agent-"):-len(".jsonl")], base / name, size))
    top = sorted(f for f in found if f.path.parent == base)
    return AgentFiles(top + [f for f in found if f.path.parent != base], left[0] > 0)


def flat_agent_files(project: Path, session_id: str, max_entries: int = MAX_ENTRIES) -> list[AgentFile]:
    """The flat ``agent-<id>.jsonl`` files of ``project`` whose first entry
    carries ``session_id`` (Claude Code 2.0.x's layout), sorted; at most
    ``max_entries`` directory entries are looked at, no symlink is followed."""
    from .importer import FLAT_AGENT, flat_agent_session

    found = []
    sid = session_id.lower()
    with _Dir.open(project) as d:
        for name, _, size in _entries(d, [max_entries]):
            if size is not None and FLAT_AGENT.fullmatch(name):
                path = project / name
                owner = flat_agent_session(path)
                if owner is not None and owner.lower() == sid:
                    found.append(AgentFile(name[len("agent-"):-len(".jsonl")], path, size))
    return sorted(found)


def session_agent_files(main: Path, session_id: str | None) -> list[AgentFile]:
    """The agent files of the session whose main transcript is ``main``, in both
    layouts: ``<session>/subagents/`` (2.1) first, then the flat 2.0.x ones
    beside ``main`` that the 2.1 layout does not already hold (only when
    ``main`` is ``<session id>.jsonl``: an agent file's siblings are not its
    subagents)."""
    if not session_id:
        return []
    nested = agent_files(main.parent / session_id).files
    if main.name.lower() != f"{session_id.lower()}.jsonl":
        return nested
    held = {f.agent for f in nested}
    return nested + [f for f in flat_agent_files(main.parent, session_id) if f.agent not in held]


def _is_agent(name: str) -> bool:
    return name.startswith("agent-") and name.endswith(".jsonl") and len(name) > len("agent-.jsonl")


def _agents(d: int | None, path: Path, left: list[int]) -> list[AgentFile]:
    return sorted(AgentFile(name[len("agent-"):-len(".jsonl")], path / name, size)
                  for name, _, size in _entries(d, left) if size is not None and _is_agent(name))


def _entries(d: int | None, left: list[int]) -> list[tuple[str, bool, int | None]]:
    """(name, is a directory, size when a regular file) of the entries of the
    directory ``d``, none of them followed, counting each against ``left``."""
    out: list[tuple[str, bool, int | None]] = []
    if d is None or left[0] <= 0:
        return out
    try:
        with os.scandir(d) as it:
            for e in it:
                left[0] -= 1
                if left[0] < 0:
                    break
                try:
                    if e.is_dir(follow_symlinks=False):
                        out.append((e.name, True, None))
                    elif e.is_file(follow_symlinks=False):
                        out.append((e.name, False, e.stat(follow_symlinks=False).st_size if _is_agent(e.name) else 0))
                except OSError:
                    continue
    except OSError:
        pass
    return out


class _Dir:
    """A directory fd opened without following a symlink (None when it cannot be), closed on exit."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    def open(cls, path: Path) -> _Dir:
        try:
            return cls(os.open(path, _DIR_FLAGS))
        except OSError:
            return cls(None)

    @classmethod
    def at(cls, parent: int | None, name: str) -> _Dir:
        if parent is None:
            return cls(None)
        try:
            return cls(os.open(name, _DIR_FLAGS, dir_fd=parent))
        except OSError:
            return cls(None)

    def __enter__(self) -> int | None:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
