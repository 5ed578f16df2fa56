"""``sessiond list``: the sessions of a project (or all), newest first, as a
table that fits the terminal or as JSON; from the daemon's catalog when one
runs, else read from the files (reading never starts a daemon).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from . import Context
from .output import (
    Progress,
    cells,
    clip,
    clip_left,
    echo,
    echo_json,
    pad,
    paged,
    printable,
    project_label,
    size,
    terminal_columns,
    when,
)


def _mark_outside_writers(sessions: list, *, by_time: bool) -> None:
    """Sessions a process outside sessiond (Claude Code in a terminal) holds open
    for writing are live too (``store.writers``): one look at ``/proc`` for the
    page; with ``by_time`` (read from the files: no daemon runs, so every write
    is another program's), also those whose newest entry is a few seconds old."""
    from sessiond.store.writers import open_for_writing, recent_writer, written_recently

    quiet = [s for s in sessions if not s.live]
    held = open_for_writing(s.path for s in quiet)
    for s in quiet:
        if s.path in held:
            s.live = {"pid": held[s.path], "writer": "open for writing"}
        elif by_time and (ago := written_recently(s.lastEntryAt)) is not None:
            s.live = recent_writer(ago)


def list_sessions(obj: Context, cwd: str | None, all_projects: bool, worktrees: bool, limit: int | None, offset: int,
                  as_json: bool, tag: str | None = None, pager: bool = True) -> None:
    """Print one page of sessions (``limit`` after the ``offset`` most recently
    active), as JSON or as a table (through the pager when longer than the screen)."""
    sessions = find_sessions(obj, cwd, all_projects, worktrees, limit, offset, tag)
    fill_counts(sessions)
    from .session_spend import page_spend

    spend = page_spend(obj, sessions)
    if as_json:
        echo_json([_with_spend(s, spend) for s in sessions])
        return
    if not sessions:
        from .hints import nothing_found

        echo(nothing_found(obj, "sessions", cwd, all_projects, detail="" if tag is None else f" tagged {tag}"), err=True)
        return
    # The terminal's width (or COLUMNS); piped into another program (no COLUMNS),
    # rows are whole: no title, branch or project is cut.
    rows = session_table(sessions, show_project=all_projects, width=terminal_columns(UNLIMITED), spend=spend)
    paged("\n".join(map(printable, rows)), pager=pager)


def find_sessions(obj: Context, cwd: str | None, all_projects: bool, worktrees: bool = False,
                  limit: int | None = None, offset: int = 0, tag: str | None = None,
                  only: list[Path] | None = None) -> list:
    """One page of sessions (``SessionInfo``, most recently active first:
    ``listing.last_activity``), live ones marked: the project's (``cwd``,
    default the current directory) or every project's, only those tagged
    ``tag`` if given; with ``only``, the sessions of those project dirs
    (``cwd`` unused). From a running daemon's catalog (whose pages are in mtime
    order: the whole scope is asked, then ordered and cut here), else read from
    the files (with progress on a terminal); what ``list`` prints and the
    picker shows."""
    from sessiond.store import project_dirs
    from sessiond.store.paths import check_cwd, project_dir

    root = obj.store_root()
    if all_projects and cwd is not None:  # refused as every command refuses it (imported only then: list is hot)
        from .locate import check_scope

        check_scope(cwd, all_projects)
    if all_projects:
        dirs: list[Path] = []
        asked = dirs
    elif only is not None:
        dirs = asked = only
    else:
        where = os.path.abspath(cwd) if cwd else os.getcwd()
        check_cwd(where)
        dirs = project_dirs.listing_dirs(root, where, worktrees=worktrees)
        # No project dir on disk yet: a daemon may have accepted the cwd's first
        # session and not written it yet; it is asked about the dir it would make.
        asked = dirs or [project_dir(root, where)]
    from sessiond.store.listing import by_activity

    sessions = _from_daemon(obj, asked, all_projects)
    from_files = sessions is None
    if sessions is not None:
        sessions = _page(by_activity(sessions), limit, offset, tag)
    else:  # no daemon: read the files (reading never starts one)
        from sessiond.store import listing  # the lite reader: only when no daemon answers

        progress = Progress.callback("reading sessions") if sys.stdout.isatty() else None
        # A tag is known only once a file is read: every file then, cut here.
        lim, off = (None, 0) if tag is not None else (limit, offset)
        if all_projects:
            sessions = listing.list_all_sessions(root, limit=lim, offset=off, progress=progress)
        else:
            sessions = listing.list_sessions(dirs, limit=lim, offset=off, progress=progress) if dirs else []
        if progress is not None:
            progress.finish()
        if tag is not None:
            sessions = _page(sessions, limit, offset, tag)
    _mark_outside_writers(sessions, by_time=from_files)
    return sessions


def _with_spend(s, spend: dict | None) -> dict:
    """``list --json``'s object: the session's fields, then ``tokens``,
    ``costUSD`` and ``unpricedModels`` (null when not computed)."""
    import msgspec

    obj = msgspec.to_builtins(s)
    if spend is None:
        obj.update(tokens=None, costUSD=None, unpricedModels=None)
    else:
        got = spend.get(s.sessionId)
        obj.update(tokens=got.tokens if got else 0, costUSD=got.costUSD if got else 0.0,
                   unpricedModels=got.unpriced if got else [])
    return obj


def _tokens(n: int) -> str:
    """A token count in 4 characters or so: 950, 12k, 3.4M."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k" if n < 10_000 else f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M" if n < 10_000_000 else f"{n // 1_000_000}M"


def _cost(got) -> str:
    """USD to the cent; ``?`` after it when a model had no price (its tokens
    counted, its cost not)."""
    return f"${got.costUSD:.2f}" + ("?" if got.unpriced else "")


def fill_counts(sessions: list) -> None:
    """The message count of every listed session whose lite read could not
    say (a big file with no ``turn_duration`` in its tail): the printed page's
    files only (the picker, which holds every session, does not pay for it),
    at most ``READ_MAX`` bytes of them."""
    from sessiond.store.message_count import count_messages

    from .session_spend import READ_MAX

    budget = READ_MAX  # a page of thousands of big files leaves the rest at "-" rather than read gigabytes
    for s in sessions:
        if s.messageCount is None and s.size <= budget:
            budget -= s.size
            s.messageCount = count_messages(s.path)


def _page(sessions: list, limit: int | None, offset: int, tag: str | None) -> list:
    """The sessions tagged ``tag`` (all when None), ``limit`` after ``offset``."""
    if tag is not None:
        sessions = [s for s in sessions if s.tag == tag]
    return sessions[offset:None if limit is None else offset + limit]


def live_label(live: dict | None) -> str:
    """Who writes a live session, in a few cells: ``pid N``, or how long ago
    a program outside sessiond wrote it; empty when nobody does."""
    if not live:
        return ""
    if "pid" in live:
        return f"pid {live['pid']}"
    if "secondsAgo" in live:
        return f"written {live['secondsAgo']}s ago"
    return "live"


UNLIMITED = 1 << 20
TITLE_MIN = 16
BRANCH_MAX = 20
PROJECT_MAX = 28
"""On a terminal, the widest branch and project (cut from the left) a row shows."""
DROPPABLE = ("SIZE", "BRANCH", "CREATED", "TAG", "FORK", "TOKENS", "PROJECT", "COST", "ACTIVE")
"""Columns left out, in this order, when the terminal is too narrow for them
and a title of TITLE_MIN characters; the id (what resume takes) always stays."""


SHORT_ID = 8
"""Characters of an id a person is shown: a prefix every command takes."""


def short_ids(ids: list[str]) -> list[str]:
    """Each id cut to SHORT_ID characters, or longer where two listed ids
    share that prefix, so every shown prefix names one listed session."""
    n = SHORT_ID
    while n < 36 and len({i[:n] for i in ids}) < len(set(ids)):
        n += 1
    return [i[:n] for i in ids]


def session_table(sessions, *, show_project: bool, width: int, spend: dict | None = None) -> list[str]:
    """A header row and one row per session, fitting ``width`` columns: the
    title takes what the other columns leave and is what gets cut; on a narrow
    terminal the DROPPABLE columns go first. Times are the entries' own
    (created; active: ``listing.last_activity``, what the rows are sorted by),
    as every listing shows a time (``when``). The id is a unique prefix; a fork
    shows its origin's ("⑂ 1a2b3c4d"). ``spend`` (``session_spend``): TOKENS
    and COST columns, a ``?`` after a cost that leaves an unpriced model out."""
    from sessiond.store.listing import last_activity

    now = time.time()
    whole = width >= UNLIMITED  # piped: a program reads the rows, nothing is cut
    columns: dict[str, list[str]] = {
        "MSGS": ["-" if s.messageCount is None else str(s.messageCount) for s in sessions],
        "CREATED": [when(s.createdAt, now) for s in sessions],
        "ACTIVE": [when(last_activity(s), now) for s in sessions],
        "SIZE": [size(s.size) for s in sessions],
        **({} if spend is None else {
            "TOKENS": [_tokens(spend[s.sessionId].tokens) if s.sessionId in spend else "0" for s in sessions],
            "COST": [_cost(spend[s.sessionId]) if s.sessionId in spend else "$0.00" for s in sessions]}),
        "BRANCH": [clip(s.gitBranch or "-", UNLIMITED if whole else BRANCH_MAX) for s in sessions],
    }
    if show_project:
        columns["PROJECT"] = [clip_left(project_label(s.cwd, Path(s.path).parent.name), UNLIMITED if whole else PROJECT_MAX)
                              for s in sessions]
    if any(s.tag for s in sessions):
        columns["TAG"] = [clip(s.tag or "", UNLIMITED if whole else BRANCH_MAX) for s in sessions]
    if any(s.live for s in sessions):  # written by a client right now (SPEC 7), or by Claude Code itself: who
        columns["LIVE"] = [live_label(s.live) for s in sessions]
    ids = short_ids([s.sessionId for s in sessions])
    if any(s.forkedFrom for s in sessions):  # where a fork came from: its origin's id as listed
        columns["FORK"] = [f"⑂ {s.forkedFrom[:len(ids[0])]}" if s.forkedFrom else "" for s in sessions]
    columns["ID"] = ids
    widths = {name: max(cells(name), *map(cells, column)) for name, column in columns.items()}

    def others() -> int:
        return sum(widths[n] + 2 for n in columns)

    for name in DROPPABLE:
        if width - others() >= TITLE_MIN:
            break
        columns.pop(name, None)
    titles = [s.title or "(untitled)" for s in sessions]
    title_width = max(TITLE_MIN, min(width - others(), max(5, *(cells(" ".join(t.split())) for t in titles))))
    right = {"MSGS", "SIZE", "TOKENS", "COST"}  # numbers line up on the right

    def row(title: str, values: dict[str, str]) -> str:
        parts = [pad(title, title_width)] + [pad(c, widths[n], right=n in right) for n, c in values.items()]
        return "  ".join(parts).rstrip()

    out = [row("TITLE", {n: n for n in columns})]
    for i, title in enumerate(titles):
        out.append(row(clip(title, title_width), {n: column[i] for n, column in columns.items()}))
    return out


def _from_daemon(obj: Context, dirs: list[Path], all_projects: bool):
    """Every session of the scope from a running daemon's catalog, or None when none runs, or it
    serves another root, or it refused the List (the last two said on stderr:
    the files are read instead)."""
    from sessiond.wire import messages as m
    from sessiond.wire.errors import DaemonUnavailable, RemoteError

    from .daemon_source import fell_back, other_root, refused, serves

    if not all_projects and not dirs:
        return []
    try:
        with obj.client(autostart=False, other_root_ok=True) as client:
            if (root := other_root(obj, client)) is not None:
                fell_back(serves(obj, root), "listed from the files")
                return None
            resp = client.call(m.List(id=client.next_id(), dirs=[str(d) for d in dirs], all=all_projects))
    except DaemonUnavailable:
        return None
    except RemoteError as exc:
        fell_back(refused(exc), "listed from the files")
        return None
    return resp.sessions
