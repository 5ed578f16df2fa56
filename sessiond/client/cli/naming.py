"""How a command names what it lists: a session by its title, a project by
its working directory, click-free.

Why its own module: ``du``, ``prune``, ``rm``, the trash and ``restore`` get
records that carry a session's id and its project dir's encoded name
(``-home-dev-app``), not what a person knows it by; ``list`` shows the title
and the cwd. Each of those commands names a session here, from its file's
two windows (``read_lite``: the title ``list`` shows, ``title_of``'s order,
and the cwd), so every command calls a session and a project the same.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from sessiond.store.lite import UNTITLED, read_lite

from .output import clip, project_label


class Named(NamedTuple):
    """What a session is called: its title (``(untitled)`` when it has none)
    and its project, the cwd (``~``-relative) or, when no entry records one,
    the project dir's name."""

    title: str
    project: str


def named(path: str | os.PathLike[str] | None, folder: str | None = None) -> Named:
    """The title and project of the transcript at ``path`` (``folder``: its
    project dir's name, said when the file records no cwd or cannot be read)."""
    title = cwd = None
    if path is not None:
        try:
            info = read_lite(path)
            title, cwd = info.title, info.cwd
        except (OSError, ValueError):
            pass
    return Named(" ".join((title or UNTITLED).split()), project_label(cwd, folder))


def trashed_transcript(root: Path, entry) -> Path | None:
    """Where the main transcript of a trash entry (``TrashEntry``) lies inside
    the trash (``.trash/<name>/files/<its path>``), or None for an entry
    holding no such file (an agent's entry, one being emptied)."""
    from sessiond.store.trash import trash_root

    for item in entry.items:
        if item.kind == "file" and os.path.basename(item.path) == f"{entry.session}.jsonl":
            return trash_root(root) / entry.name / "files" / item.path
    return None


def trashed_named(root: Path, entry) -> Named:
    """A trash entry's session, named from the transcript the trash holds (the
    store's own file once restored: ``named`` of its path)."""
    return named(trashed_transcript(root, entry), entry.project)


def line_title(title: str, width: int = 60) -> str:
    """A title on one line of a listing, quoted, cut to ``width`` cells."""
    return f"“{clip(title, width)}”" if title != UNTITLED else UNTITLED
