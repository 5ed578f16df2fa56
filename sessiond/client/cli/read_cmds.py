"""Commands that read: list, check, repair.

Reading is not writing: these never start a daemon. ``list`` is a hot command
(a shell prompt runs it): its work is in ``session_list``, click-free.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sessiond.wire.frames import MAX_COUNT

from . import Context, cli
from .completion import complete_session
from .output import Progress, count, echo, echo_json, printable_name, shell_word


@cli.command("list")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project (with a PROJECT column).")
@click.option("--worktrees", is_flag=True, help="Include the sessions of the repository's other git worktrees.")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_COUNT), default=None, help="At most N sessions (most recently active first).")
@click.option("--offset", type=click.IntRange(min=0, max=MAX_COUNT), default=0, help="Skip the K most recently active sessions.")
@click.option("--tag", default=None, metavar="NAME", help="Only the sessions tagged NAME (sessiond tag).")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of session objects.")
@click.option("--no-pager", "no_pager", is_flag=True, help="Never page the output (default: $PAGER or less on a terminal).")
@click.pass_obj
def list_cmd(obj: Context, cwd: str | None, all_projects: bool, worktrees: bool, limit: int | None, offset: int,
             tag: str | None, as_json: bool, no_pager: bool) -> None:
    """List sessions, most recently active first (the newest entry's time),
    reading only what the page needs. For a person: an 8-character id prefix
    (what every command takes), the title in the terminal's width, the tag."""
    from .session_list import list_sessions

    list_sessions(obj, cwd, all_projects, worktrees, limit, offset, as_json, tag=tag, pager=not no_pager)


@cli.command()
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: healthy, checked, unhealthy, warnings, skipped, notTranscripts, files (one report each), errors.")
@click.argument("targets", nargs=-1, metavar="[ID|PATH]...", shell_complete=complete_session)
@click.pass_obj
def check(obj: Context, as_json: bool, targets: tuple[str, ...]) -> None:
    """Report damage in transcripts (default: every one under the root).

    Each argument is a session (id, id prefix), a transcript file or a
    directory (every transcript in it). A file that is no transcript at all
    (empty, or not one line is an entry) is NOT, and makes the exit 1 too.

    Unhealthy (BAD) means data is lost or confused: a torn last line, unreadable
    lines, duplicate uuids. A warning (WARN) is what resume repairs on the fly
    (dangling parents, bridged). Exit 0 when every file is healthy, warnings
    included; 1 when any is not."""
    from sessiond.client.health import check_file
    from sessiond.store.regular import NotRegularFile

    paths = tuple(_named(obj, t) for t in targets)
    files = _transcripts(paths) if paths else _store_transcripts(obj.store_root() / "projects")
    progress = Progress(len(files), "checking")
    unhealthy = warned = skipped = 0
    reports, errors, foreign = [], [], []
    for path in files:
        progress.step()
        try:
            h = check_file(path)
        except NotRegularFile as exc:
            if path in paths:  # named on the command line: an error, not a skip
                echo(f"sessiond: {printable_name(str(path))}: {exc.strerror}", err=True)
                unhealthy += 1
            else:
                echo(f"sessiond: {printable_name(str(path))}: skipped, {exc.strerror}", err=True)
                skipped += 1
            errors.append({"path": str(path), "error": exc.strerror, "skipped": path not in paths})
            continue
        except OSError as exc:
            echo(f"sessiond: {printable_name(str(path))}: {exc.strerror or exc}", err=True)
            unhealthy += 1
            errors.append({"path": str(path), "error": exc.strerror or str(exc), "skipped": False})
            continue
        alien = _not_transcript(h)
        if alien is not None:
            foreign.append(str(h.path))
        unhealthy += not h.healthy and alien is None
        warned += h.verdict == "warning"
        if as_json:
            reports.append(h)
        elif alien is not None:
            echo(f"NOT  {printable_name(str(h.path))}: not a transcript ({alien})")
        elif h.verdict != "ok" or len(files) == 1:
            echo(_health_line(h))
    progress.done()
    if as_json:  # one document, whatever the number of files: {healthy, counts, files, errors}
        echo_json({"healthy": not unhealthy and not foreign, "checked": len(files) - skipped, "unhealthy": unhealthy,
                   "warnings": warned, "skipped": skipped, "notTranscripts": foreign, "files": reports,
                   "errors": errors})
    else:
        note = f", {skipped} skipped (not regular files)" if skipped else ""
        note += f", {len(foreign)} not transcripts" if foreign else ""
        echo(f"{count(len(files) - skipped, 'file')} checked, {unhealthy} unhealthy{note}, "
             f"{warned} with warnings")
    sys.exit(1 if unhealthy or foreign else 0)


def _not_transcript(h) -> str | None:
    """Why a file is no transcript at all (empty, or not one line is an entry:
    ``/etc/passwd``), or None. Such a file is not a damaged transcript (BAD):
    repair has nothing to save in it."""
    if h.bytes == 0:
        return "empty"
    if h.lines and len(h.unparseableLines) >= h.lines:
        return f"none of its {count(h.lines, 'line')} is a transcript entry"
    return None


def _health_line(h) -> str:
    """One line per file: the verdict, what was found, and what to do about it."""
    problems = []
    if h.tornTail:
        problems.append(f"torn last line (a writer died mid-line): run `sessiond repair {shell_word(str(h.path))}`, "
                        "which moves the fragment to a .torn file")
    if h.unparseableLines:
        more = ", …" if len(h.unparseableLines) > 5 else ""
        problems.append(f"unreadable lines {', '.join(map(str, h.unparseableLines[:5]))}{more} "
                        "(every reader skips them; repair cannot restore them)")
    if h.duplicateUuids:
        problems.append(f"{count(len(h.duplicateUuids), 'duplicate uuid')} (two writers, or a bug; resume keeps the last of each)")
    if h.danglingParents:
        problems.append(f"{count(len(h.danglingParents), 'dangling parent')} (resume bridges each to a message at most "
                        "5 s older, as Claude Code does, else starts after it; `show --bridge` joins the rest)")
    if h.parentCycles:
        problems.append(f"{count(len(h.parentCycles), 'loop')} of parent links (a chain that never reaches its start: "
                        "resume cuts it there, as at a missing parent)")
    if h.otherSessions:
        problems.append(f"entries of {count(len(h.otherSessions), 'other session')} (two writers on one file, or files "
                        "joined; resume takes this session's own latest message; nothing to do)")
    info = count(h.lines, "line")
    if h.unansweredToolUses:
        info += f", {count(len(h.unansweredToolUses), 'unanswered tool use')}"
    if h.emptyMessages:
        info += f", {count(len(h.emptyMessages), 'empty message')} (resume leaves them out)"
    tag = {"ok": "ok  ", "warning": "WARN"}.get(h.verdict, "BAD ")
    return f"{tag} {printable_name(str(h.path))}: {info}" + (f"; {'; '.join(problems)}" if problems else "")


def _named(obj: Context, target: str) -> Path:
    """A file or directory as given, else the transcript a session id or prefix names."""
    import os

    from .locate import locate

    return Path(target) if os.path.lexists(target) else locate(obj, target, None)[0]


def _transcripts(paths) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.rglob("*.jsonl"))
        elif p.exists():
            out.append(p)
    return out


def _store_transcripts(projects: Path) -> list[Path]:
    """Every transcript of the store: each project dir as ``list --all`` finds
    it, a symlinked one included (pathlib's ``rglob`` does not follow a link
    below where it starts, so the projects dir is walked one level first)."""
    import os

    try:
        with os.scandir(projects) as it:
            dirs = sorted(Path(e.path) for e in it if e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return _transcripts(dirs)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="What was done and what check says afterwards, as one JSON object.")
@click.argument("target", metavar="ID|PATH", shell_complete=complete_session)
@click.pass_obj
def repair(obj: Context, as_json: bool, target: str) -> None:
    """Fix what can be fixed without losing a byte (a torn tail goes to FILE.torn).

    Safe while the daemon runs (it takes the same lock). Exit 0 when the file is
    healthy afterwards, 1 when problems remain that repair cannot fix."""
    from sessiond.client.health import repair_file

    from .locate import locate

    path, _ = locate(obj, target, None)
    r = repair_file(path)
    if as_json:
        echo_json(r)
    else:
        if r.movedTornTail is not None:
            t = r.movedTornTail
            echo(f"moved a torn last line ({t.length} bytes at offset {t.offset}) to {path}.torn")
        elif r.completedLastLine:
            echo("added the missing newline after the last line")
        elif r.remaining.healthy:
            echo("nothing to repair")
        else:
            echo("changed nothing: what is left cannot be fixed without losing or inventing bytes")
        echo(_health_line(r.remaining))
    sys.exit(0 if r.remaining.healthy else 1)


