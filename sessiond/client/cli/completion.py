"""Shell completion of session arguments (click's ``shell_complete``).

Why its own module: every command that takes a session completes it the same
way, from the files alone (completion runs on every Tab: it never talks to or
starts a daemon). What is typed matches an id by its start, else a title
anywhere in it (case-insensitive); each candidate is the id, with the title as its help
(zsh and fish show it beside the id; bash too, ``group.BashTitles``). The project of ``--cwd`` (or the current
directory) comes first, then every other project.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
from click.shell_completion import CompletionItem

from .output import clip, printable

MAX_ITEMS = 200
"""A shell lists at most a screenful anyway; past this, type more of the id."""


def _root(ctx: click.Context) -> Path:
    from sessiond.store.locations import default_root

    root = ctx.find_root().params.get("root")  # --root or SESSIOND_ROOT (click read the env)
    return Path(root) if root else default_root()


def complete_session(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Session ids of the store matching ``incomplete``: by the id's start (only
    the files so named are read), else by words of the title (every file's
    windows are read: the slow way, taken only when no id matches)."""
    from sessiond.store import listing, project_dirs

    if os.sep in incomplete or incomplete.startswith("."):  # a path is being typed: the shell's own files
        return [CompletionItem(incomplete, type="file")]
    root = _root(ctx)
    try:
        here = os.path.abspath(ctx.params.get("cwd") or os.getcwd())
        mine = project_dirs.listing_dirs(root, here)
    except (OSError, ValueError):
        mine = []
    rest = [d for d in listing.project_dirs(root) if d not in set(mine)]
    want = incomplete.lower()
    files = [sorted(listing.session_candidates(dirs), key=lambda c: -c[0]) for dirs in (mine, rest)]
    by_id = [[c[1] for c in group if os.path.basename(c[1]).lower().startswith(want)] for group in files]
    if any(by_id) or not want:
        return _items(by_id, lambda title: True)
    return _items([[c[1] for c in group] for group in files], lambda title: want in title.lower())


def _items(groups: list[list[str]], keep) -> list[CompletionItem]:
    """One item per listable session of ``groups`` (in order) whose title ``keep``s."""
    from sessiond.store.lite import read_lite

    items: list[CompletionItem] = []
    seen: set[str] = set()
    for group in groups:
        for path in group:
            sid = os.path.basename(path)[:-6].lower()
            try:
                info = read_lite(path)
            except OSError:
                continue
            title = " ".join((info.title or "").split())
            if sid in seen or not info.listable or not keep(title):
                continue
            seen.add(sid)
            shown = printable(title[:60]) or None
            items.append(CompletionItem(sid, help=shown, title=shown))  # zsh and fish print help; bash the title
            if len(items) >= MAX_ITEMS:
                return items
    return items


def complete_trashed(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Ids of the sessions in the trash (what ``restore`` takes), each with
    its title as the trash holds it."""
    from sessiond.store import trash

    from .naming import trashed_named

    want = incomplete.lower()
    root = _root(ctx)
    items: list[CompletionItem] = []
    for e in trash.entries(root):
        if e.session.startswith(want) and len(items) < MAX_ITEMS:
            shown = printable(clip(trashed_named(root, e).title, 60))
            items.append(CompletionItem(e.session, help=shown, title=shown))
    return items
