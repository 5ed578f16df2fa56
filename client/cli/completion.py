"""Shell completion of session arguments (click's ``shell_complete``).

Why its own module: every command that takes a session completes it the same
way, from the files alone (completion runs on every Tab: it never talks to or
starts a daemon). What is typed matches an id by its start or a title anywhere
in it (case-insensitive); each candidate is the id, with the title as its help
(zsh and fish show it beside the id). The project of ``--cwd`` (or the current
directory) comes first, then every other project.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
from click.shell_completion import CompletionItem

MAX_ITEMS = 200
"""A shell lists at most a screenful anyway; past this, type more of the id."""


def _root(ctx: click.Context) -> Path:
    from sessiond.protocol.locations import default_root

    root = ctx.find_root().params.get("root")  # --root or SESSIOND_ROOT (click read the env)
    return Path(root) if root else default_root()


def complete_session(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Session ids of the store matching ``incomplete`` (id prefix or title words)."""
    from sessiond.protocol.transcript import listing, project_dirs

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
    items: list[CompletionItem] = []
    seen: set[str] = set()
    for dirs in (mine, rest):
        for s in listing.list_sessions(dirs) if dirs else []:
            title = " ".join((s.title or "").split())
            if s.sessionId in seen or not (s.sessionId.startswith(want) or (want and want in title.lower())):
                continue
            seen.add(s.sessionId)
            items.append(CompletionItem(s.sessionId, help=title[:60] or None))
            if len(items) >= MAX_ITEMS:
                return items
    return items


def complete_trashed(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Ids of the sessions in the trash (what ``restore`` takes)."""
    from sessiond.protocol import trash

    want = incomplete.lower()
    return [CompletionItem(e.session, help=e.project or None) for e in trash.entries(_root(ctx))
            if e.session.startswith(want)][:MAX_ITEMS]
