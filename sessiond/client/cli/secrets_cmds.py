"""``sessiond secrets``: where the store's transcripts hold secrets, and
replacing a session's files by redacted copies (``--redact``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from sessiond.store.locations import default_root

from . import Context, cli
from .completion import complete_session
from .output import Progress, count, echo, echo_json


class EngineNotInstalled(click.ClickException):
    """``--engine kingfisher`` without the wheel: exit 2, since 1 says secrets were found."""

    exit_code = 2


def _scan(files: list, progress: Progress, engine: str = "builtin"):
    """(findings, files, bytes, seconds) over ``files`` (``search.files.Transcript``s),
    read through the same prefilter and rules as everything else (and
    Kingfisher's catalog too with ``engine="kingfisher"``)."""
    from sessiond.secrets import scan_line

    if engine == "kingfisher":
        from sessiond.secrets.kingfisher import EngineMissing, scan_line_extra

        try:
            scan_line_extra(b"{}")  # loads the wheel and compiles its rules once, before any file
        except EngineMissing as e:
            raise EngineNotInstalled(str(e)) from None
        scan_line = scan_line_extra

    progress.update(0, len(files))
    found = []
    size = 0
    start = time.perf_counter()
    for t in files:
        try:
            fd = os.open(t.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            progress.step()
            continue
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        size += len(data)
        for n, line in enumerate(data.split(b"\n"), 1):
            for finding in scan_line(line):
                found.append({"project": t.project, "session": t.session, "agent": t.agent, "path": t.path, "line": n,
                              "kind": finding.kind, "fingerprint": finding.fingerprint, "field": finding.field})
        progress.step()
    progress.done()
    return found, len(files), size, time.perf_counter() - start


@cli.command("secrets")
@click.argument("session", metavar="[ID|PATH]", required=False, shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Every project.")
@click.option("--redact", is_flag=True,
              help="Replace the session's transcripts by redacted copies; the originals go to the trash.")
@click.option("--engine", type=click.Choice(["builtin", "kingfisher"]), default="builtin", show_default=True,
              help="kingfisher: also Kingfisher's rule catalog, offline (the optional extra secrets-extra).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the findings and the scan's size and speed.")
@click.pass_obj
def secrets(obj: Context, session: str | None, cwd: str | None, all_projects: bool, redact: bool, engine: str,
            as_json: bool) -> None:
    """Where the transcripts hold secrets: session, line, kind and fingerprint,
    never the value (the project's sessions, or --all, or one session, or any
    transcript file by its PATH).

    --redact ID rewrites that session's transcripts with every secret replaced
    by [REDACTED:<kind>:<fingerprint>] (ids and signatures untouched, so it
    still resumes). Never in place: the originals stay in the trash until it is
    emptied. A live session is refused. Exit 1 when secrets are listed.

    --engine kingfisher lists what Kingfisher's few hundred rules find too
    (kinds kingfisher:<rule>), never validating a key; it needs
    pip install 'sessiond[secrets-extra]' (exit 2 without it). --redact uses
    the built-in rules."""
    from sessiond.search.files import transcripts

    root = obj.root or default_root()
    if redact:
        if session is None:
            raise click.UsageError("--redact needs the session: sessiond secrets --redact ID")
        if all_projects:
            raise click.UsageError("--redact takes one session, not --all")
        if engine != "builtin":
            raise click.UsageError("--redact uses the built-in rules: list with --engine kingfisher, then redact")
        _redact(obj, root, session, cwd, as_json)
        return
    if session is not None:
        if all_projects:
            raise click.UsageError("give a session or --all, not both")
        from sessiond.search.files import Transcript, describe

        from .locate import locate

        path, _ = locate(obj, session, cwd)
        where = describe(root, path)
        if where is None:  # a transcript elsewhere (Claude Code's own, a copy): that file alone, read only
            chosen = [Transcript(str(path), path.parent.name, path.name.removesuffix(".jsonl"), None, path.stat())]
        else:
            chosen = [t for t in transcripts(root, [where[0]]) if t.session == where[1]]
        found, files, size, seconds = _scan(chosen, Progress(0, "scanning transcripts"), engine)
    else:
        from .locate import project_scope

        dirs = project_scope(root, cwd, all_projects)
        projects = None if dirs is None else [d.name for d in dirs]
        found, files, size, seconds = _scan(list(transcripts(root, projects)), Progress(0, "scanning transcripts"), engine)
    speed = size / seconds / 1e6 if seconds > 0 else 0.0
    if as_json:
        for f in found:
            f.pop("path")
        echo_json({"findings": found, "files": files, "bytes": size, "seconds": round(seconds, 3),
                   "mbPerSecond": round(speed, 1)})
    else:
        from sessiond.secrets.scan import redact_text
        from sessiond.store.paths import projects_dir

        from .naming import line_title, named

        said = None
        for f in found:
            if f["session"] != said:  # each session once, by its title and project, as every listing names it
                said = f["session"]
                main = projects_dir(root) / f["project"] / f"{said}.jsonl" if f["agent"] else f["path"]
                name = named(main, f["project"])
                # the title is the first prompt, often where a pasted key is: never a value, there either
                echo(f"{said}  {line_title(redact_text(name.title))}  ({name.project})")
            who = f["session"] + (f" agent {f['agent']}" if f["agent"] else "")
            echo(f"{who}  line {f['line']}  {f['kind']}  {f['fingerprint']}")
        if not files and session is None:  # nothing to scan here: say what --all would
            from .hints import nothing_found

            echo(nothing_found(obj, "transcripts", cwd, all_projects, "--all scans"), err=True)
        sessions = {f["session"] for f in found}
        echo(f"{count(len(found), 'secret')} in {count(len(sessions), 'session')} "
             f"({count(files, 'file')}, {size / 1e6:.1f} MB scanned at {speed:.0f} MB/s)"
             + ("; sessiond secrets --redact ID rewrites one, sessiond export redacts by default" if found else ""),
             err=True)
    if found:
        raise SystemExit(1)


def _redact(obj: Context, root: Path, session: str, cwd: str | None, as_json: bool) -> None:
    """Through ``store.redaction`` under the lifecycle's rules: with a daemon
    serving the root, everything it accepted is written first and a live
    session (a client holds it) is refused; with none, the root's lock is held."""
    from sessiond.store.paths import is_session_id
    from sessiond.store.redaction import redact_session
    from sessiond.wire.errors import conflict

    from ..lifecycle import Lifecycle
    from .locate import locate

    path, _ = locate(obj, session, cwd)
    sid = path.name[:-6] if path.name.endswith(".jsonl") else ""
    if not is_session_id(sid):
        raise click.ClickException(f"{path} is not a session's transcript")
    with Lifecycle(root, obj.socket) as ops:
        if ops.client is not None:
            ops.client.flush(sid)
            holders = [h for h in ops.client.status().live if h.session == sid]
            if holders:
                raise conflict(f"session {sid} is live (pid {holders[0].pid}): redact it once its agent has stopped")
        done = redact_session(root, path)
    if as_json:
        echo_json(done)
    elif done.entry is None:
        echo(f"no secret in session {sid}: nothing rewritten", err=True)
    else:
        echo(f"redacted {count(done.secrets, 'secret')} in {count(len(done.files), 'file')} of session {sid}; "
             f"the originals are in the trash ({done.entry}) until it is emptied", err=True)
