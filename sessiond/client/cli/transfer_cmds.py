"""Bringing sessions in and taking them out: import, export (SPEC 9)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import click

from sessiond.store.locations import default_root

from . import Context, cli
from .completion import complete_session
from .output import Progress, count, echo, echo_json, printable, printable_name, write_all


@cli.command("import")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: counts, sessions, skipped paths.")
@click.pass_obj
def import_cmd(obj: Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Copy existing sessions in, every file as it is (default ~/.claude/projects).

    PATH is a projects dir, a project dir or transcript .jsonl files of any
    name (chat.jsonl, an Entire checkpoint's full.jsonl: the session is the
    one their entries name, put in the project their cwd names). Running it
    again imports only what is new; a second copy of a session is merged by
    uuid (its entries the store lacks are appended), never over the store's;
    one with a line that is no entry is reported. Exit 1 when something could
    not be imported."""
    from sessiond.store import importer

    from ..lifecycle import Lifecycle

    sources = list(paths) or [Path.home() / ".claude" / "projects"]
    sessions, skipped = importer.plan(sources)
    counts = dict.fromkeys(importer.STATUSES, 0)
    counts["unreadable"] += len(skipped)
    report = []
    progress = Progress(len(sessions), "importing sessions")
    progress.THRESHOLD = 1  # an import copies whole files: worth a counter from the first
    with Lifecycle(obj.root or default_root(), obj.socket) as ops:
        for source, results in ops.import_sessions(sessions, progress.step):
            status = importer.session_status(results)
            counts[status] += 1
            report.append({"project": source.project, "session": source.session, "status": status, "files": results})
            if status in ("diverged", "unreadable", "busy") and not as_json:
                progress.done()
                for r in results:
                    if r.status == status:
                        echo(f"sessiond: {status}: {printable_name(f'{source.project}/{r.rel}')}: {r.error}", err=True)
    progress.done()
    for path, why in skipped.items():
        if not as_json:
            echo(f"sessiond: skipped: {printable_name(path)}: {why}", err=True)
    if as_json:
        echo_json({"counts": counts, "sessions": report, "skipped": list(skipped)})
    else:
        echo(", ".join(f"{n} {k}" for k, n in counts.items() if n or k != "busy") + f" ({count(len(sessions), 'session')})")
    if counts["diverged"] or counts["unreadable"] or counts["busy"]:
        raise SystemExit(1)


@cli.command()
@click.argument("session", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("--format", "fmt", type=click.Choice(["markdown", "html", "jsonl"]), default=None,
              help="Markdown or one self-contained HTML file of the conversation, or its original JSONL lines "
                   "(default: what -o FILE's extension names, .html/.md/.jsonl, else markdown).")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Write to FILE (default: stdout): a new regular file, or an existing one with --force.")
@click.option("--force", is_flag=True, help="Replace FILE when it exists (a regular file only).")
@click.option("--no-redact", is_flag=True,
              help="Keep the secrets it holds (by default each is [REDACTED:<kind>:<fingerprint>]).")
@click.pass_obj
def export(obj: Context, session: str, cwd: str | None, fmt: str | None, output: Path | None, force: bool,
           no_redact: bool) -> None:
    """The conversation as Markdown or one self-contained HTML page; jsonl: the
    transcript's original lines. `-o chat.html` picks the format from the
    name. Secrets (keys, tokens, private keys, passwords) are redacted unless
    --no-redact; stderr says how many.

    jsonl is the main transcript only: its subagents' files are not in it
    (copy the session's <id>/ dir, or import the project dir, to move them)."""
    from sessiond.store.appendfile import entries_end

    from .locate import locate

    fmt = export_format(fmt, output)
    if fmt == "html" and output is None and sys.stdout.isatty():
        _refuse("export: HTML is a page for a browser, not a terminal: write it with -o FILE.html, or pipe it")
    if output is not None:
        check_target(output, force)  # before any work: a refusal costs nothing
    redactions = 0
    path, _ = locate(obj, session, cwd)
    _flush(obj, path)
    if fmt == "jsonl":
        with open(path, "rb") as f:
            data = f.read()
            data = data[: entries_end(f.fileno(), len(data))]  # a last line with no newline is a line
        if not no_redact:
            data, redactions = _redact_lines(data)
    else:
        from sessiond.client import export as ex

        from .resume_cmds import refuse_unusable

        exported = ex.load_export(path)
        refuse_unusable(path, exported.main)  # empty, or no conversation: one line, as show says it
        if not no_redact:
            exported, redactions = ex.redacted(exported)
        # times local, with the date and the zone: a document is read on other days, maybe elsewhere
        document = ex.to_html(exported) if fmt == "html" else ex.to_markdown(exported)
        # A document for a person, often read in a terminal: its controls shown
        # as everywhere (the export's own markup has none; a bidi override
        # would reorder the page in a browser too).
        data = printable(document).encode()
    if redactions:
        echo(f"sessiond: redacted {count(redactions, 'secret')} (--no-redact keeps them)", err=True)
    if output is None:
        write_all(data)  # all of it, or a broken pipe (exit 141)
    else:
        write_new(output, data, force)
        echo(f"wrote {output} ({len(data)} bytes, {fmt})", err=True)
    if fmt != "jsonl":  # lines no reader could use are not in the document: said, exit 1, as show does
        from .resume_cmds import report_skipped

        report_skipped(path, exported.main.skippedLines)


FORMAT_OF_SUFFIX = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".jsonl": "jsonl"}
"""The export format a file name asks for (``-o chat.html``)."""


def _refuse(message: str) -> None:
    echo(f"sessiond: {message}", err=True)
    sys.exit(2)


def export_format(fmt: str | None, output: Path | None) -> str:
    """The format an export writes: ``--format``, else what ``-o``'s extension
    names, else Markdown; a ``--format`` that contradicts the extension is
    refused (exit 2) rather than writing HTML into ``chat.md``."""
    named = FORMAT_OF_SUFFIX.get(output.suffix.lower()) if output is not None else None
    if fmt is not None and named is not None and fmt != named:
        _refuse(f"export: --format {fmt} does not match {output.name if output else ''} "
                f"(a {named} file name): give one of them, or matching ones")
    return fmt or named or "markdown"


def _redact_lines(data: bytes) -> tuple[bytes, int]:
    """Whole JSONL lines with their secrets redacted (``secrets.redact_line``:
    each line stays valid JSON, ids and signatures as they were), and how many."""
    from sessiond.secrets import redact_line

    lines = data.split(b"\n")
    total = 0
    for i, line in enumerate(lines):
        lines[i], found = redact_line(line)
        total += len(found)
    return (b"\n".join(lines) if total else data), total


def check_target(output: Path, force: bool) -> None:
    """Refuse an output path that is not a regular file (a symlink, a directory,
    a FIFO, ``/dev/null`` or any device: replacing one by a rename would destroy
    it, and writing through one would write somewhere else), or an existing
    regular file without ``force``, or one in a directory that is not there."""
    from sessiond.store.regular import describe

    try:
        st = os.lstat(output)
    except FileNotFoundError:
        if not output.absolute().parent.is_dir():
            raise ValueError(f"cannot write {output}: no directory {output.absolute().parent}") from None
        return
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"refusing to write {output}: it is a symlink (give the file it points to, or another name)")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"refusing to write {output}: it is {describe(st.st_mode)}, not a regular file")
    if not force:
        raise ValueError(f"refusing to overwrite {output}: it exists (--force replaces it)")


def write_new(output: Path, data: bytes, force: bool) -> None:
    """``data`` as the file ``output``, whole or not at all: written to a temp
    file beside it (0600: transcripts are private), then linked into place
    (``link`` fails if something took the name meanwhile) or, with ``force``,
    renamed over the regular file ``check_target`` saw; a failure or a Ctrl-C
    removes the temp file and leaves ``output`` as it was."""
    check_target(output, force)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        # opened inside the ``try``: a Ctrl-C raised as the open returns (before
        # any later statement) still removes the file (the name is this process's)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if force:
            check_target(output, force)  # a symlink or a FIFO put there since is not replaced
            os.replace(tmp, output)
        else:
            try:
                os.link(tmp, output)
            except FileExistsError:
                raise ValueError(f"refusing to overwrite {output}: it exists (--force replaces it)") from None
            os.unlink(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _flush(obj: Context, path: Path) -> None:
    """Everything a running daemon accepted for the session is in the file
    before it is read (never starts a daemon); a daemon that cannot write it
    there is said on stderr, and the file is exported as it is."""
    from sessiond.store.paths import is_session_id
    from sessiond.wire.errors import DaemonUnavailable, RemoteError, WrongRoot

    from .daemon_source import fell_back, refused

    sid = path.name[:-6] if path.name.endswith(".jsonl") else ""
    if not is_session_id(sid):
        return
    try:
        with obj.client(autostart=False) as client:
            client.flush(sid)
    except DaemonUnavailable:
        pass
    except WrongRoot as exc:  # its queues are not this root's
        fell_back(str(exc), f"exporting {path} as it is")
    except RemoteError as exc:
        fell_back(refused(exc), f"exporting {path} as it is (what the daemon accepted but could not write is not in it)")
