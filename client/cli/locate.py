"""Which transcript a command means: an id (looked up from the project dir,
pulled from the mirror when it is not local) or a path, and the project dir a
``--cwd`` names.

Why its own module: every command that takes ``ID|PATH`` or ``--cwd`` (show,
resume, fork, tail, watch, export, rm, push ...) resolves them the same way,
with the same checks and the same one-line errors; a command module imports
this one, not another command's module.
"""

from __future__ import annotations

import os
from pathlib import Path

from sessiond.protocol.locations import default_root
from sessiond.protocol.wire.errors import bad_request, not_found

from . import Context


def where(cwd: str | None) -> str:
    """The project dir ``--cwd`` names (default: the current directory), checked
    as the daemon checks a cwd (absolute, no NUL, at most PATH_MAX)."""
    from sessiond.protocol.transcript.paths import check_cwd

    path = os.path.abspath(cwd) if cwd else os.getcwd()
    check_cwd(path)
    return path


def find(root: Path, session: str, cwd: str | None):
    """The location of a local session (``lookup.find_session``), or not_found."""
    from sessiond.protocol.transcript import lookup

    loc = lookup.find_session(root, session, where(cwd))
    if loc is None:
        raise not_found(f"no session {session} under {root}")
    return loc


def locate(obj: Context, target: str, cwd: str | None):
    """(path, location or None) for an id or a path."""
    from sessiond.protocol.transcript import lookup
    from sessiond.protocol.transcript.paths import check_session_id, is_session_id

    if not is_session_id(target) or os.sep in target or target.endswith(".jsonl"):
        path = Path(target)
        if not path.is_file():
            if path.exists():
                from sessiond.protocol.transcript.regular import describe

                raise bad_request(f"{target} is not a regular file ({describe(path.stat().st_mode)})")
            raise not_found(f"no transcript file {target}")
        return path.absolute(), None
    target = check_session_id(target)  # one canonical form: upper case or braces find the same file
    root = obj.root or default_root()
    loc = lookup.find_session(root, target, where(cwd))
    if loc is None:
        from .mirror_cmds import hydrate_missing

        if hydrate_missing(obj, target) is not None:  # not local: pulled from the mirror
            loc = lookup.find_session(root, target, where(cwd))
    if loc is None:
        raise not_found(f"no session {target} under {root}")
    return Path(loc.path), loc
