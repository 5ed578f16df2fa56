"""Finding a session file by id, from wherever the user stands (SPEC 5).

Why a search order: sessions live under the sanitized cwd they were started in,
but a user resumes from wherever they are. ``find_session`` looks, in order:

1. the project dir of the cwd itself;
2. project dirs whose name differs only in the hash suffix, for cwds whose
   sanitized name is over 200 chars (another runtime hashed the long name with
   another function: Claude Code under Bun vs Node);
3. the project dirs of the repository's other git worktrees
   (``git worktree list --porcelain``, run with a timeout so a hung git or a
   slow network file system cannot hang ``resume``);
4. every project dir of the store.

The result says whether the session belongs to the same repository as the cwd.
A session of another repository must not be resumed in place — its relative
paths, git state and project memory are elsewhere — so the CLI prints
``cd <its cwd> && sessiond resume <id>`` instead (``SessionLocation.resume_hint``).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from sessiond.store.paths import canonical_cwd, check_session_id, projects_dir, sanitize
from sessiond.store.project_dirs import (
    GIT_TIMEOUT,
    _canon,
    find_project_dir,
    git_worktrees,
    hash_variant_dirs,
    listing_dirs,
)

__all__ = ["GIT_TIMEOUT", "SessionLocation", "find_project_dir", "find_session", "git_worktrees", "hash_variant_dirs",
           "listing_dirs"]

# How a session was found.
PROJECT = "project"
HASH_PREFIX = "hash-prefix"
WORKTREE = "worktree"
ALL_PROJECTS = "all-projects"


class SessionLocation(msgspec.Struct, frozen=True):
    """Where ``find_session`` found a session: its file and project dir, how it was
    found, and whether resuming it from the caller's cwd is right (if not,
    ``resume_hint`` says where)."""

    session_id: str
    path: str
    project_dir: str
    found_via: str
    """``project`` | ``hash-prefix`` | ``worktree`` | ``all-projects``."""
    same_repo: bool
    """True when resuming in place is right: same cwd, same repository or one of
    its worktrees. False for another repository, or when no cwd was given."""
    cwd: str | None
    """Where the session ran (its first recorded ``cwd``), where resume belongs."""

    def resume_hint(self, program: str = "sessiond") -> str | None:
        """``cd <cwd> && sessiond resume <id>`` for a session of another repository
        (the cwd as one shell word that shows as one line: ``shell_word``)."""
        if self.same_repo or not self.cwd:
            return None
        from sessiond.client.cli.output import shell_word

        return f"cd {shell_word(self.cwd)} && {program} resume {self.session_id}"


def _within(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _session_cwd(path: Path) -> str | None:
    """The cwd recorded at the head of a session file, canonicalised."""
    try:
        from sessiond.store.lite import read_lite  # a window read, for the sessions whose cwd is asked

        cwd = read_lite(path).cwd
    except OSError:
        return None
    return _canon(cwd) if cwd else None


def find_session(root: Path | str, session_id: str, cwd: str | None = None, *,
                 search_all: bool = True, git_timeout: float = GIT_TIMEOUT) -> SessionLocation | None:
    """Where session ``session_id`` is, searched from ``cwd`` (see module doc).

    Refuses a session id that is not a UUID (``bad_request``) before touching
    the file system, so an id can never become a path. None when not found.
    """
    session_id = check_session_id(session_id)
    root = Path(root)
    file_name = f"{session_id}.jsonl"
    seen: set[Path] = set()

    def probe(d: Path) -> Path | None:
        if d in seen:
            return None
        seen.add(d)
        f = d / file_name
        return f if f.is_file() else None

    def located(f: Path, via: str, same: bool, fallback_cwd: str | None) -> SessionLocation:
        return SessionLocation(session_id=session_id, path=str(f), project_dir=str(f.parent),
                               found_via=via, same_repo=same,
                               cwd=_session_cwd(f) or fallback_cwd)

    here: str | None = None
    worktrees: list[str] = []
    if cwd is not None:
        here = canonical_cwd(cwd)
        name = sanitize(here)
        if f := probe(projects_dir(root) / name):
            return located(f, PROJECT, True, here)
        for d in hash_variant_dirs(root, name):
            if f := probe(d):
                return located(f, HASH_PREFIX, True, here)
        worktrees = git_worktrees(here, timeout=git_timeout)
        for wt in worktrees:
            if wt == here:
                continue
            wt_name = sanitize(wt)
            for d in [projects_dir(root) / wt_name, *hash_variant_dirs(root, wt_name)]:
                if f := probe(d):
                    return located(f, WORKTREE, True, wt)

    if not search_all:
        return None
    try:
        with os.scandir(projects_dir(root)) as it:
            dirs = sorted(Path(e.path) for e in it if e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return None
    for d in dirs:
        if f := probe(d):
            session_cwd = _session_cwd(f)
            same = False
            if here is not None and session_cwd:
                # No repository: only the very same directory counts.
                same = _within(session_cwd, worktrees) if worktrees else session_cwd == here
            return SessionLocation(session_id=session_id, path=str(f), project_dir=str(d),
                                   found_via=ALL_PROJECTS, same_repo=same, cwd=session_cwd)
    return None
