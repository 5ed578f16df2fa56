"""Which project dirs a request names (List, Search, Reindex, Usage), checked
to be project dirs of this daemon's root, at a cost bounded per dir.

Why not ``realpath`` of every dir: it makes one ``lstat`` per component, and
each costs the kernel a walk of the path so far, so a dir spelled
``<root>/projects/-x/../-x/../-x...`` costs the square of its length and still
resolves to a project dir; thousands of them in one request would hold the
event loop for a long time. Here a dir is normalized as text
(``..`` taken lexically, as a shell's ``cd`` does), its parent compared with
the projects dir as configured and as resolved (computed once per request),
and only a parent spelled some other way (a link to the root the daemon does
not know by name) is resolved, once per distinct spelling and for at most
``MAX_PARENTS`` of them. A project dir that is itself a link is followed
(one resolve of a path one level below the root) and must stay in the root.
"""

from __future__ import annotations

import os
from pathlib import Path

from sessiond.store.listing import project_dirs
from sessiond.store.paths import projects_dir
from sessiond.wire.errors import bad_request, permission_denied

MAX_PARENTS = 8
"""Distinct spellings of the projects dir one request may use (a client names
its project dirs below one root: one spelling, two across a link)."""


def requested_dirs(root: Path, dirs: list[str], all_projects: bool) -> list[str]:
    """The real paths of the project dirs a request names (every one with
    ``all``), in order, without repeats; ``permission_denied`` for a dir that
    is not a project dir of ``root``. At most one ``lstat`` per dir, besides
    one resolve per unknown spelling of the projects dir: Search runs it on
    the loop, as it decodes the request; List and Usage in their worker job."""
    if all_projects:
        return [str(d) for d in project_dirs(root)]
    base = projects_dir(root)
    real_base = os.path.realpath(base)
    known = {os.path.normpath(str(base)), real_base}
    resolved: dict[str, str] = {}
    out: dict[str, None] = {}
    for d in dirs:
        if "\x00" in d or not os.path.isabs(d):
            raise permission_denied(f"{d[:200]!r} is not a project directory of this daemon's root")
        parent, name = os.path.split(os.path.normpath(d))
        if parent not in known:
            if parent not in resolved:
                if len(resolved) >= MAX_PARENTS:
                    raise bad_request(f"the dirs name the projects dir in more than {MAX_PARENTS} ways")
                resolved[parent] = os.path.realpath(parent)
            if resolved[parent] != real_base:
                raise permission_denied(f"{d[:200]!r} is not a project directory of this daemon's root")
        path = os.path.join(real_base, name)
        if os.path.islink(path):
            path = os.path.realpath(path)
            if os.path.dirname(path) != real_base:
                raise permission_denied(f"{d[:200]!r} is not a project directory of this daemon's root: it links out of it")
        out[path] = None
    return list(out)


def requested_projects(root: Path, dirs: list[str], all_projects: bool) -> list[str] | None:
    """The project dir names a request names (None: every project), as the
    index knows them."""
    if all_projects:
        return None
    return [os.path.basename(p) for p in requested_dirs(root, dirs, False)]
