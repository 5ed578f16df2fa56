"""Commands that read: list, show, resume, continue, fork, check, repair.

Reading is not writing: these never start a daemon (resume and fork talk to one
only to flush and adopt, or to write the fork).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click
import msgspec

from sessiond.protocol.locations import default_root

from . import Context, cli
from .output import Progress, age, clip, size


@cli.command("list")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project.")
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
        click.echo(msgspec.json.encode(sessions))
        return
    if not sessions:
        click.echo("no sessions" + ("" if all_projects else f" for {cwd or os.getcwd()}"), err=True)
        return
    now = time.time()
    rows = [(clip(s.title or "(untitled)", 60), age(now, s.modifiedAt), size(s.size), clip(s.gitBranch or "-", 20), s.sessionId) for s in sessions]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:<{widths[3]}}  {r[4]}")


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

    Exit 0 when every file is healthy, 1 when any is not."""
    from sessiond.protocol.transcript.health import check_file
    from sessiond.protocol.transcript.regular import NotRegularFile

    files = _transcripts(paths or ((obj.root or default_root()) / "projects",))
    progress = Progress(len(files), "checking")
    unhealthy = skipped = 0
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
        if as_json:
            click.echo(msgspec.json.encode(h))
        elif not h.healthy or len(files) == 1:
            click.echo(_health_line(h))
    progress.done()
    if not as_json:
        note = f", {skipped} skipped (not regular files)" if skipped else ""
        click.echo(f"{len(files) - skipped} files checked, {unhealthy} unhealthy{note}")
    sys.exit(1 if unhealthy else 0)


def _health_line(h) -> str:
    problems = []
    if h.tornTail:
        problems.append("torn last line")
    if h.unparseableLines:
        problems.append(f"unparseable lines {', '.join(map(str, h.unparseableLines[:10]))}")
    if h.duplicateUuids:
        problems.append(f"{len(h.duplicateUuids)} duplicate uuids")
    if h.danglingParents:
        problems.append(f"{len(h.danglingParents)} dangling parents")
    info = f"{h.lines} lines"
    if h.unansweredToolUses:
        info += f", {len(h.unansweredToolUses)} unanswered tool uses"
    return f"{'ok  ' if h.healthy else 'BAD '} {h.path}: {info}" + (f"; {'; '.join(problems)}" if problems else "")


def _transcripts(paths) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.rglob("*.jsonl"))
        elif p.exists():
            out.append(p)
    return out


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_obj
def repair(obj: Context, as_json: bool, path: Path) -> None:
    """Fix what can be fixed without losing a byte (a torn tail goes to FILE.torn).

    Safe while the daemon runs (it takes the same lock). Exit 0 when the file is
    healthy afterwards, 1 when problems remain that repair cannot fix."""
    from sessiond.protocol.transcript.health import repair_file

    r = repair_file(path)
    if as_json:
        click.echo(msgspec.json.encode(r))
    else:
        if r.movedTornTail is not None:
            t = r.movedTornTail
            click.echo(f"moved a torn last line ({t.length} bytes at offset {t.offset}) to {path}.torn")
        elif r.completedLastLine:
            click.echo("added the missing newline after the last line")
        else:
            click.echo("nothing to repair")
        click.echo(_health_line(r.remaining))
    sys.exit(0 if r.remaining.healthy else 1)


