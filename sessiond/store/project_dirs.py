"""Which project dirs hold a cwd's sessions: its own (or a hash variant of a
long name), and with ``worktrees`` those of the repository's other git
worktrees, as Claude Code's picker lists them.

Apart from ``lookup.py`` (finding one session by id, whose answer is a
msgspec Struct) because ``sessiond list`` needs only this; ``lookup``
re-exports these names.
"""

from __future__ import annotations

import os
from pathlib import Path

from sessiond.wire.errors import SessiondError

from .paths import MAX_SANITIZED, canonical_cwd, projects_dir, sanitize

GIT_TIMEOUT = 5.0


def hash_variant_dirs(root: Path | str, name: str) -> list[Path]:
    """Project dirs named like the sanitized ``name`` but with another hash suffix.

    Only names over 200 chars carry a hash; every dir starting with the same 200
    chars + ``-`` is a candidate (the session file decides which is right).
    """
    if len(name) <= MAX_SANITIZED:
        return []
    prefix = name[:MAX_SANITIZED] + "-"
    try:
        with os.scandir(projects_dir(Path(root))) as it:
            return sorted(Path(e.path) for e in it
                          if e.name != name and e.name.startswith(prefix) and e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def find_project_dir(root: Path | str, cwd: str) -> Path | None:
    """The project dir holding the sessions of ``cwd`` (for ``list --cwd``): the
    exact sanitized name if it exists, else the first hash variant, else None."""
    name = sanitize(canonical_cwd(cwd))
    exact = projects_dir(Path(root)) / name
    if exact.is_dir():
        return exact
    variants = hash_variant_dirs(root, name)
    return variants[0] if variants else None


def listing_dirs(root: Path | str, cwd: str, *, worktrees: bool = False,
                 git_timeout: float = GIT_TIMEOUT) -> list[Path]:
    """Project dirs to list for ``cwd``: its own, plus (``worktrees=True``) those
    of the repository's other worktrees, as Claude Code's picker shows them."""
    here = canonical_cwd(cwd)
    dirs = [d for d in [find_project_dir(root, here)] if d is not None]
    if worktrees:
        for wt in git_worktrees(here, timeout=git_timeout):
            d = find_project_dir(root, wt) if wt != here else None
            if d is not None and d not in dirs:
                dirs.append(d)
    return dirs


def git_worktrees(cwd: str, *, timeout: float = GIT_TIMEOUT) -> list[str]:
    """Canonical paths of all worktrees of the repository containing ``cwd``
    (the main one included); [] when it is no repository, git is missing,
    fails or takes longer than ``timeout`` seconds."""
    import subprocess  # a process only for --worktrees (start-up of every other listing)

    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        out = subprocess.run(
            ["git", "-C", cwd, "worktree", "list", "--porcelain"],
            capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    paths = []
    for line in out.stdout.decode("utf-8", "surrogateescape").splitlines():
        if line.startswith("worktree "):
            paths.append(_canon(line[len("worktree "):]))
    return paths


def _canon(path: str) -> str:
    """Canonical form for comparing paths; a path that cannot be a cwd stays as is."""
    try:
        return canonical_cwd(path)
    except SessiondError:
        return path
