"""What a command says when it has nothing to show: why, and what to do next.

Why its own module: "no sessions" alone leaves a person guessing whether the
store is empty, the project is another, or the sessions are still where
Claude Code wrote them. Every command that lists sessions of a project
(``list``, ``search``, ``du``, ``prune``) says the same here: how many
``--all`` would reach, else how many sessions ``~/.claude/projects`` holds
that were never imported (``sessiond import``). Click-free; run only when
the answer is empty, so a listing that has rows never pays for the count.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import Context
from .output import count, project_label


def store_sessions(root: Path) -> tuple[int, int, set[str]]:
    """The sessions of the store (transcript files by their id's name), the
    projects holding one, and their ids."""
    from sessiond.store import listing

    ids: set[str] = set()
    projects = 0
    for d in listing.project_dirs(root):
        found = {os.path.basename(p)[:-6].lower() for _, p, _ in listing.session_candidates([d], stat=False)}
        projects += bool(found)
        ids |= found
    return len(ids), projects, ids


def not_imported(root: Path, have: set[str]) -> tuple[int, Path]:
    """How many sessions Claude Code's projects dir (``$CLAUDE_CONFIG_DIR`` or
    ``~/.claude``, ``/projects``) holds whose id the store lacks, and that dir."""
    from sessiond.store import listing

    from ..claude_handoff import claude_root

    claude = claude_root()
    source = claude / "projects"
    try:
        if source.resolve() == (root / "projects").resolve():  # the store is Claude Code's own dir
            return 0, source
    except OSError:
        return 0, source
    files = listing.session_candidates(listing.project_dirs(claude), stat=False)
    return len({os.path.basename(p)[:-6].lower() for _, p, _ in files} - have), source


def nothing_found(obj: Context, what: str, cwd: str | None, all_projects: bool, verb: str = "--all shows",
                  detail: str = "") -> str:
    """The line a command prints instead of an empty listing: ``no sessions in
    ~/src/app; --all shows 36 sessions in 5 projects``, or, when the store has
    none, ``~/.claude/projects holds 12 sessions not imported yet: sessiond
    import``. ``what``: what was looked for ("sessions", "matches"); ``verb``:
    what --all would do ("--all searches", "sessiond list --all shows");
    ``detail``: the filter that left nothing (" tagged x")."""
    from .locate import where

    root = obj.store_root()
    total, projects, ids = store_sessions(root)
    here = "" if all_projects else f" in {project_label(where(cwd))}"
    said = f"no {what}{detail}{here}"
    if total and not all_projects:
        return f"{said}; {verb} {count(total, 'session')} in {count(projects, 'project')}"
    if total:
        return said
    waiting, source = not_imported(root, ids)
    if waiting:
        return f"{said}; {project_label(str(source))} holds {count(waiting, 'session')} not imported yet: sessiond import"
    return f"{said}; the store is empty: sessions appear as agents write them through sessiond (sessiond import copies Claude Code's)"
