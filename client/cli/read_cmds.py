"""Commands that read: list, show, resume, continue, fork, check, repair.

Reading is not writing: these never start a daemon (resume and fork talk to one
only to flush and adopt, or to write the fork).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import shutil
from datetime import datetime

import click

from sessiond.protocol.locations import default_root

from . import Context, cli
from .output import Progress, clip, echo_json, clip_left, home_relative, local_time, size


@cli.command("list")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project (with a PROJECT column).")
@click.option("--worktrees", is_flag=True, help="Include the sessions of the repository's other git worktrees.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N sessions (newest first).")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip the K newest sessions.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of session objects.")
@click.pass_obj
def list_cmd(obj: Context, cwd: str | None, all_projects: bool, worktrees: bool, limit: int | None, offset: int, as_json: bool) -> None:
    """List sessions, newest first, reading only what the page needs."""
    from sessiond.protocol.transcript import listing, lookup
    from sessiond.protocol.transcript.paths import check_cwd

    root = obj.root or default_root()
    if all_projects:
        dirs: list[Path] = []
    else:
        where = os.path.abspath(cwd) if cwd else os.getcwd()
        check_cwd(where)
        dirs = lookup.listing_dirs(root, where, worktrees=worktrees)
    sessions = _from_daemon(obj, dirs, all_projects, limit, offset)
    if sessions is None:  # no daemon: read the files (reading never starts one)
        progress = Progress.callback("reading sessions") if sys.stdout.isatty() else None
        if all_projects:
            sessions = listing.list_all_sessions(root, limit=limit, offset=offset, progress=progress)
        else:
            sessions = listing.list_sessions(dirs, limit=limit, offset=offset, progress=progress) if dirs else []
        if progress is not None:
            progress.finish()
    if as_json:
        echo_json(sessions)
        return
    if not sessions:
        click.echo("no sessions" + ("" if all_projects else f" for {cwd or os.getcwd()}"), err=True)
        return
    # The terminal's width (or COLUMNS); piped into another program, rows are whole.
    for row in session_table(sessions, show_project=all_projects, width=shutil.get_terminal_size((UNLIMITED, 24)).columns):
        click.echo(row)


UNLIMITED = 1 << 20
TITLE_MIN = 16
DROPPABLE = ("SIZE", "BRANCH", "CREATED", "PROJECT", "LAST ENTRY")
"""Columns left out, in this order, when the terminal is too narrow for them
and a title of TITLE_MIN characters; the id (what resume takes) always stays."""


def session_table(sessions, *, show_project: bool, width: int) -> list[str]:
    """A header row and one row per session, fitting ``width`` columns: the
    title takes what the other columns leave and is what gets cut; on a narrow
    terminal the DROPPABLE columns go first. Times are the entries' own
    (created, last entry), local, with the date when not today; the last entry
    falls back to the file's mtime."""
    today = datetime.now().astimezone().date()
    columns: dict[str, list[str]] = {
        "MSGS": ["-" if s.messageCount is None else str(s.messageCount) for s in sessions],
        "CREATED": [local_time(s.createdAt, today) for s in sessions],
        "LAST ENTRY": [local_time(s.lastEntryAt or s.modifiedAt, today) for s in sessions],
        "SIZE": [size(s.size) for s in sessions],
        "BRANCH": [clip(s.gitBranch or "-", 20) for s in sessions],
    }
    if show_project:
        columns["PROJECT"] = [clip_left(home_relative(s.cwd) if s.cwd else "?", 28) for s in sessions]
    if any(s.live for s in sessions):  # written by a client right now (SPEC 7): who
        columns["LIVE"] = [f"pid {s.live['pid']}" if s.live else "" for s in sessions]
    columns["ID"] = [s.sessionId for s in sessions]
    widths = {name: max(len(name), *map(len, cells)) for name, cells in columns.items()}

    def others() -> int:
        return sum(widths[n] + 2 for n in columns)

    for name in DROPPABLE:
        if width - others() >= TITLE_MIN:
            break
        columns.pop(name, None)
    titles = [s.title or "(untitled)" for s in sessions]
    title_width = max(TITLE_MIN, min(width - others(), max(5, *(len(" ".join(t.split())) for t in titles))))
    right = {"MSGS", "SIZE"}  # numbers line up on the right

    def row(title: str, cells: dict[str, str]) -> str:
        parts = [f"{title:<{title_width}}"]
        parts += [f"{c:>{widths[n]}}" if n in right else f"{c:<{widths[n]}}" for n, c in cells.items()]
        return "  ".join(parts).rstrip()

    out = [row("TITLE", {n: n for n in columns})]
    for i, title in enumerate(titles):
        out.append(row(clip(title, title_width), {n: cells[i] for n, cells in columns.items()}))
    return out


def _from_daemon(obj: Context, dirs: list[Path], all_projects: bool, limit: int | None, offset: int):
    """The page from a running daemon's catalog, or None when none runs (or it
    serves another root)."""
    from sessiond.protocol.wire import messages as m
    from sessiond.protocol.wire.errors import DaemonUnavailable, RemoteError

    if not all_projects and not dirs:
        return []
    try:
        with obj.client(autostart=False) as client:
            if obj.root is not None and os.path.realpath(client.status().root) != os.path.realpath(obj.root):
                return None
            resp = client.call(m.List(id=client.next_id(), dirs=[str(d) for d in dirs], all=all_projects, limit=limit, offset=offset))
    except (DaemonUnavailable, RemoteError):
        return None
    return resp.sessions  # type: ignore[union-attr]


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file, one per line.")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=True, path_type=Path))
@click.pass_obj
def check(obj: Context, as_json: bool, paths: tuple[Path, ...]) -> None:
    """Report damage in transcripts (default: every one under the root).

    Unhealthy (BAD) means data is lost or confused: a torn last line, unreadable
    lines, duplicate uuids. A warning (WARN) is what resume repairs on the fly
    (dangling parents, bridged). Exit 0 when every file is healthy, warnings
    included; 1 when any is not."""
    from sessiond.protocol.transcript.health import check_file
    from sessiond.protocol.transcript.regular import NotRegularFile

    files = _transcripts(paths or ((obj.root or default_root()) / "projects",))
    progress = Progress(len(files), "checking")
    unhealthy = warned = skipped = 0
    for path in files:
        progress.step()
        try:
            h = check_file(path)
        except NotRegularFile as exc:
            if path in paths:  # named on the command line: an error, not a skip
                click.echo(f"sessiond: {path}: {exc.strerror}", err=True)
                unhealthy += 1
            else:
                click.echo(f"sessiond: {path}: skipped, {exc.strerror}", err=True)
                skipped += 1
            continue
        except OSError as exc:
            click.echo(f"sessiond: {path}: {exc.strerror or exc}", err=True)
            unhealthy += 1
            continue
        unhealthy += not h.healthy
        warned += h.verdict == "warning"
        if as_json:
            echo_json(h)
        elif h.verdict != "ok" or len(files) == 1:
            click.echo(_health_line(h))
    progress.done()
    if not as_json:
        note = f", {skipped} skipped (not regular files)" if skipped else ""
        click.echo(f"{len(files) - skipped} files checked, {unhealthy} unhealthy{note}, {warned} with warnings")
    sys.exit(1 if unhealthy else 0)


def _health_line(h) -> str:
    """One line per file: the verdict, what was found, and what to do about it."""
    problems = []
    if h.tornTail:
        problems.append(f"torn last line (a writer died mid-line): run `sessiond repair {h.path}`, "
                        "which moves the fragment to a .torn file")
    if h.unparseableLines:
        more = ", …" if len(h.unparseableLines) > 5 else ""
        problems.append(f"unreadable lines {', '.join(map(str, h.unparseableLines[:5]))}{more} "
                        "(every reader skips them; repair cannot restore them)")
    if h.duplicateUuids:
        problems.append(f"{len(h.duplicateUuids)} duplicate uuids (two writers, or a bug; resume keeps the last of each)")
    if h.danglingParents:
        problems.append(f"{len(h.danglingParents)} dangling parents (resume bridges each to the nearest earlier "
                        "message; nothing is lost, nothing to do)")
    info = f"{h.lines} lines"
    if h.unansweredToolUses:
        info += f", {len(h.unansweredToolUses)} unanswered tool uses"
    tag = {"ok": "ok  ", "warning": "WARN"}.get(h.verdict, "BAD ")
    return f"{tag} {h.path}: {info}" + (f"; {'; '.join(problems)}" if problems else "")


def _transcripts(paths) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.rglob("*.jsonl"))
        elif p.exists():
            out.append(p)
    return out


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="What was done and what check says afterwards, as one JSON object.")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_obj
def repair(obj: Context, as_json: bool, path: Path) -> None:
    """Fix what can be fixed without losing a byte (a torn tail goes to FILE.torn).

    Safe while the daemon runs (it takes the same lock). Exit 0 when the file is
    healthy afterwards, 1 when problems remain that repair cannot fix."""
    from sessiond.protocol.transcript.health import repair_file

    r = repair_file(path)
    if as_json:
        echo_json(r)
    else:
        if r.movedTornTail is not None:
            t = r.movedTornTail
            click.echo(f"moved a torn last line ({t.length} bytes at offset {t.offset}) to {path}.torn")
        elif r.completedLastLine:
            click.echo("added the missing newline after the last line")
        elif r.remaining.healthy:
            click.echo("nothing to repair")
        else:
            click.echo("changed nothing: what is left cannot be fixed without losing or inventing bytes")
        click.echo(_health_line(r.remaining))
    sys.exit(0 if r.remaining.healthy else 1)


