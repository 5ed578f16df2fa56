"""Which transcript a command means: an id, a unique id prefix or a path (an
id is looked up from the project dir, pulled from the mirror when it is not
local), and the project dir a ``--cwd`` names.

Why its own module: every command that takes a session (show, resume, fork,
tail, watch, export, check, repair, rm, rename, tag, restore, push ...)
resolves it the same way, with the same checks and the same one-line errors
(``resolve`` below is the one resolver); a command module imports this one,
not another command's module.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sessiond.store.locations import default_root
from sessiond.wire.errors import SessiondError, bad_request, not_found

from . import Context, UsageError
from .output import printable_name

PREFIX_MIN = 4
"""The shortest id prefix a command takes: ``git``'s abbreviations are at least
4 too, and 3 hex digits already name one of 4096."""

_PREFIX = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{0,35}")


def check_scope(cwd: str | None, all_projects: bool) -> None:
    """``--cwd`` and ``--all`` name two scopes: both given is refused (every
    command that takes the pair: list, search, reindex, du, prune), never one
    of them silently ignored."""
    if all_projects and cwd is not None:
        raise UsageError("--cwd and --all exclude each other: --all means every project, --cwd one")


def project_scope(root: Path, cwd: str | None, all_projects: bool) -> list[Path] | None:
    """The project dirs a command's ``--cwd``/``--all`` name: None for every
    project, else the cwd's dirs (``lookup.listing_dirs``)."""
    check_scope(cwd, all_projects)
    if all_projects:
        return None
    from sessiond.client import lookup

    return lookup.listing_dirs(root, where(cwd))


def where(cwd: str | None) -> str:
    """The project dir ``--cwd`` names (default: the current directory), checked
    as the daemon checks a cwd (absolute, no NUL, at most PATH_MAX). A relative
    ``--cwd`` is taken from the current directory, by every command alike."""
    from sessiond.store.paths import check_cwd

    path = os.path.abspath(cwd) if cwd else os.getcwd()
    check_cwd(path)
    return path


def find(root: Path, session: str, cwd: str | None):
    """The location of a local session (``lookup.find_session``), or not_found."""
    from sessiond.client import lookup

    loc = lookup.find_session(root, session, where(cwd))
    if loc is None:
        raise not_found(f"no session {session} under {root}")
    return loc


def _is_path(target: str) -> bool:
    """What is read as a file name rather than an id: it has a slash, ends in
    .jsonl, or names something that exists (``./abcd`` beats the prefix abcd)."""
    return os.sep in target or target.endswith(".jsonl") or os.path.lexists(target)


def resolve(obj: Context, target: str) -> str | Path:
    """What a session argument names: a canonical session id (a whole id in any
    case or braces, or the one session whose id starts with ``target``) or the
    path of a file. An ambiguous prefix is an error listing the candidates."""
    from sessiond.store.paths import check_session_id, is_session_id

    if is_session_id(target):
        return check_session_id(target)  # one canonical form: upper case or braces find the same file
    if _is_path(target):
        return Path(target)
    return by_prefix(obj.root or default_root(), id_prefix(target))


def id_prefix(target: str) -> str:
    """``target`` as an id prefix (lower case), or the error saying why it is none."""
    if not _PREFIX.fullmatch(target):
        raise not_found(f"no session or transcript file {target!r} (a session id, an id prefix or a .jsonl path)")
    if len(target) < PREFIX_MIN:
        raise UsageError(f"session id prefix {target!r} is too short: give at least {PREFIX_MIN} characters")
    return target.lower()


def by_prefix(root: Path, prefix: str) -> str:
    """The one session of the store whose id starts with ``prefix``; not_found
    for none, bad_request naming every candidate (title, project) for several."""
    from sessiond.store import listing

    found: dict[str, str] = {}
    for _, path, _ in listing.session_candidates(listing.project_dirs(root), stat=False):
        sid = os.path.basename(path)[:-6].lower()
        if sid.startswith(prefix):
            found.setdefault(sid, path)
    return one_of(prefix, found, f"under {root}")


def one_of(prefix: str, found: dict[str, str], where_said: str) -> str:
    """The single id of ``found`` (id -> its transcript path, or "" when there is
    no file to describe it by), or the error for none or several."""
    if len(found) == 1:
        return next(iter(found))
    if not found:
        raise not_found(f"no session id starts with {prefix} {where_said}")
    lines = [f"{len(found)} sessions start with {prefix}; give more of the id:"]
    for sid in sorted(found):
        lines.append(f"  {sid}  {_describe(found[sid])}".rstrip())
    raise SessiondError("\n".join(lines), code="bad_request")


def _describe(path: str) -> str:
    """``title  (project)`` of a candidate, from the file's head and tail
    windows, as every listing names a session (``naming.named``)."""
    if not path:
        return ""
    from .naming import named
    from .output import clip

    name = named(path, os.path.basename(os.path.dirname(path)))
    return f"{clip(name.title, 50)}  ({name.project})"


def session_id(obj: Context, target: str) -> str:
    """The canonical id ``target`` names, for the commands that act on a session
    (resume, watch, rm, rename, tag, push): a path names the session it records."""
    got = resolve(obj, target)
    return got if isinstance(got, str) else id_of_file(got)


def id_of_file(path: Path) -> str:
    """The session a transcript file is: its ``<uuid>.jsonl`` name, else the
    ``sessionId`` its entries record."""
    from sessiond.store.paths import check_session_id, is_session_id

    _regular(path, str(path))
    if path.name.endswith(".jsonl") and is_session_id(path.name[:-6]):
        return check_session_id(path.name[:-6])
    from sessiond.store.lite import read_lite

    sid = read_lite(path).session_id
    if sid is None or not is_session_id(sid):
        raise bad_request(f"{printable_name(str(path))} is not a transcript: it records no session id")
    return check_session_id(sid)


def _regular(path: Path, said: str) -> None:
    if not path.is_file():
        if path.exists():
            from sessiond.store.regular import describe

            raise bad_request(f"{printable_name(said)} is not a regular file ({describe(path.stat().st_mode)})")
        raise not_found(f"no transcript file {printable_name(said)}")


def locate(obj: Context, target: str, cwd: str | None):
    """(path, location or None) for an id, an id prefix or a path."""
    from sessiond.client import lookup

    got = resolve(obj, target)
    if isinstance(got, Path):
        _regular(got, target)
        return got.absolute(), None
    root = obj.root or default_root()
    loc = lookup.find_session(root, got, where(cwd))
    if loc is None:
        from .mirror_cmds import hydrate_missing

        if hydrate_missing(obj, got) is not None:  # not local: pulled from the mirror
            loc = lookup.find_session(root, got, where(cwd))
    if loc is None:
        raise not_found(f"no session {got} under {root}")
    return Path(loc.path), loc
