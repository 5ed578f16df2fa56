"""show, resume, continue and fork (SPEC 4).

``show`` reads the file itself and never needs a daemon. ``resume`` and
``continue`` first ask the daemon to flush the session (so everything already
acknowledged is in the file), load it, then have the daemon adopt the file:
later appends go to it and its metadata is re-appended at EOF. A session of
another repository is not resumed in place: the command to run there is printed.
``fork`` copies the resumed chain into a new session id; the old file is untouched.
A session id that is not local is pulled from the remote mirror first, when one
is configured (the same as ``sessiond pull``).
"""

from __future__ import annotations

import os
import sys
import uuid as uuidlib
from pathlib import Path

import click
import msgspec

from sessiond.protocol.locations import default_root
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import SessiondError, bad_request, not_found

from . import Context, cli
from .transcript_view import render


def _where(cwd: str | None) -> str:
    from sessiond.protocol.transcript.paths import check_cwd

    where = os.path.abspath(cwd) if cwd else os.getcwd()
    check_cwd(where)
    return where


def locate(obj: Context, target: str, cwd: str | None):
    """(path, location or None) for an id or a path."""
    from sessiond.protocol.transcript import lookup
    from sessiond.protocol.transcript.paths import check_session_id, is_session_id

    if not is_session_id(target) or os.sep in target or target.endswith(".jsonl"):
        path = Path(target)
        if not path.is_file():
            if path.exists():
                from sessiond.protocol.transcript.regular import describe

                raise bad_request(f"{target} is not a regular file ({describe(path.stat().st_mode)})")
            raise not_found(f"no transcript file {target}")
        return path.absolute(), None
    target = check_session_id(target)  # one canonical form: upper case or braces find the same file
    root = obj.root or default_root()
    loc = lookup.find_session(root, target, _where(cwd))
    if loc is None:
        from .mirror_cmds import hydrate_missing

        if hydrate_missing(obj, target) is not None:  # not local: pulled from the mirror
            loc = lookup.find_session(root, target, _where(cwd))
    if loc is None:
        raise not_found(f"no session {target} under {root}")
    return Path(loc.path), loc


def _print(result, as_json: bool) -> None:
    if as_json:
        click.echo(msgspec.json.encode(result))
    else:
        click.echo(render(result))


@cli.command()
@click.argument("target", metavar="ID|PATH")
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("--json", "as_json", is_flag=True, help="The resumed conversation as one JSON object.")
@click.pass_obj
def show(obj: Context, target: str, cwd: str | None, as_json: bool) -> None:
    """Show the conversation a resume would restore (never starts a daemon)."""
    from sessiond.protocol.transcript.resume import load_transcript

    path, loc = locate(obj, target, cwd)
    if loc is not None and not loc.same_repo:
        click.echo(f"sessiond: session of another project; to resume it: {loc.resume_hint()}", err=True)
    _print(load_transcript(path), as_json)


@cli.command()
@click.argument("session_id", metavar="ID")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def resume(obj: Context, session_id: str, cwd: str | None, as_json: bool) -> None:
    """Resume a session: show it and make the daemon adopt its file."""
    from sessiond.protocol.transcript.paths import check_session_id

    _resume(obj, check_session_id(session_id), cwd, as_json)


@cli.command("continue")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def continue_cmd(obj: Context, cwd: str | None, as_json: bool) -> None:
    """Resume the most recent session of the project."""
    from sessiond.protocol.transcript import listing, lookup

    where = _where(cwd)
    dirs = lookup.listing_dirs(obj.root or default_root(), where)
    latest = listing.list_sessions(dirs, limit=1) if dirs else []
    if not latest:
        raise not_found(f"no session to continue in {where}")
    _resume(obj, latest[0].sessionId, where, as_json)


def _resume(obj: Context, session_id: str, cwd: str | None, as_json: bool) -> None:
    from sessiond.protocol.transcript.resume import load_transcript

    with obj.client() as client:
        # Flush before the lookup: a session whose first entries were only just
        # acknowledged may not have its file yet (files are created off the loop).
        client.flush(session_id)  # everything acknowledged so far is in the file
        path, loc = locate(obj, session_id, cwd)
        if loc is not None and not loc.same_repo:
            hint = loc.resume_hint()
            click.echo(f"sessiond: session {session_id} belongs to another project; run:\n  {hint}", err=True)
            sys.exit(1)
        result = load_transcript(path)
        client.call(m.Adopt(id=client.next_id(), session=session_id, path=str(path)))
    _print(result, as_json)


@cli.command()
@click.argument("target", metavar="ID|PATH")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def fork(obj: Context, target: str, cwd: str | None, as_json: bool) -> None:
    """Start a new session seeded with the old one's chain; prints the new id."""
    from sessiond.protocol.transcript.resume import load_transcript

    path, loc = locate(obj, target, cwd)
    result = load_transcript(path)
    entries = fork_entries(path, result.chain)
    if not entries:
        raise SessiondError(f"{path} has no conversation to fork", code="bad_request")
    new_id = str(uuidlib.uuid4())
    for e in entries:
        e["sessionId"] = new_id
    session_cwd = (loc.cwd if loc is not None and loc.cwd else None) or entries[0].get("cwd") or _where(cwd)
    from sessiond.protocol.transcript.reencode import encode_entry

    lines = [encode_entry(e) for e in entries]
    with obj.client() as client:
        for i in range(0, len(lines), 256):
            client.call(m.Append(id=client.next_id(), session=new_id, cwd=session_cwd, entries=lines[i : i + 256], durability="written"))
        client.call(m.Close(id=client.next_id(), session=new_id))
    if as_json:
        click.echo(msgspec.json.encode({"sessionId": new_id, "forkedFrom": result.sessionId, "messages": len(entries), "cwd": session_cwd}))
    else:
        click.echo(new_id)


def fork_entries(path: Path, chain: list[str]) -> list[dict]:
    """The chain's original entries (last occurrence of each uuid, as the loader
    keeps), relinked one after the other so the fork resumes to the same chain."""
    from sessiond.protocol.transcript.entries import try_header
    from sessiond.protocol.transcript.jsonl import iter_lines
    from sessiond.protocol.transcript.reencode import decode_entry

    wanted = set(chain)
    raw: dict[str, bytes] = {}
    for line in iter_lines(path):
        h = try_header(line)
        if h is not None and h.uuid in wanted:
            raw[h.uuid] = line
    out = []
    parent = None
    for uid in chain:
        if uid not in raw:
            continue
        e = decode_entry(raw[uid])  # lone surrogates and out-of-range numbers kept as written
        e.pop("logicalParentUuid", None)
        e = {"parentUuid": parent, **{k: v for k, v in e.items() if k != "parentUuid"}}
        out.append(e)
        parent = uid
    return out


@cli.command()
@click.argument("target", metavar="ID|PATH")
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("-n", "--lines", "count", type=click.IntRange(min=0), default=10, show_default=True, help="Entries to show first.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing entries as they are written (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="Raw entries, one JSON object per line.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=0.2, hidden=True)
@click.pass_obj
def tail(obj: Context, target: str, cwd: str | None, count: int, follow: bool, as_json: bool, interval: float) -> None:
    """The last entries of a transcript, and with -f the new ones as they arrive.

    Reads the file (whole lines only: a line still being written is waited for),
    so it follows any writer, the daemon or not."""
    import time

    from sessiond.protocol.transcript.regular import open_regular

    path, _ = locate(obj, target, cwd)
    with os.fdopen(open_regular(path), "rb") as f:
        data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        offset = len(whole)
        for line in whole.splitlines()[-count:] if count else []:
            _print_entry(line, as_json)
        if not follow:
            return
        sys.stdout.flush()
        try:
            while True:
                f.seek(offset)
                more = f.read()
                end = more.rfind(b"\n") + 1
                if end:
                    for line in more[:end].splitlines():
                        _print_entry(line, as_json)
                    sys.stdout.flush()  # a pipe reader sees each entry as it comes
                    offset += end
                elif os.path.getsize(path) < offset:  # truncated or replaced: start over
                    offset = 0
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def _print_entry(line: bytes, as_json: bool) -> None:
    from .transcript_view import one_line, render_blocks

    if not line.strip():
        return
    if as_json:
        click.echo(line.decode("utf-8", "replace"))
        return
    from sessiond.protocol.transcript.entries import decode_object

    e = decode_object(line)  # a lone surrogate reads as U+FFFD, as everywhere
    if e is None:
        click.echo("?? (unreadable line)")
        return
    kind = e.get("type", "?")
    when = (e.get("timestamp") or "")[11:19].ljust(8)
    if kind in ("user", "assistant"):
        body = render_blocks((e.get("message") or {}).get("content"))
        first, *rest = body or [""]
        click.echo(f"{when} {kind:15} {one_line(first, 200)}")
        for extra in rest:
            click.echo(f"{'':24} {one_line(extra, 200)}")
    else:
        detail = next((e[k] for k in ("customTitle", "aiTitle", "lastPrompt", "summary", "tag", "mode", "subtype", "content") if e.get(k)), "")
        click.echo(f"{when} {kind:15} {one_line(str(detail), 160)}".rstrip())
